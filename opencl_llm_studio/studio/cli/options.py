"""What `llm-studio train` options mean for a new run: the option -> ModelConfig / TrainConfig
field table, the defaults (the engine's own, never a copy) and the configs built from the
options, a --preset and the defaults. Qt-free."""

from __future__ import annotations

import os
import shlex
import subprocess

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig


# Options that define a new run; None means "not given" (defaults in TRAIN_DEFAULTS).
MODEL_OPTIONS = ("pretrain", "tune", "d_model", "n_layer", "n_head", "n_kv_head", "context_length",
                 "vocab_size", "lr", "tune_lr", "batch_size", "seed", "replay", "val_split",
                 "dropout", "preset", "adam_moments")
# options a continued run takes (engine.training.session.TrainingSession.retrain_with): option
# -> TrainConfig field; the others define the model and its data, which a run keeps
CONTINUE_OPTIONS = {"batch_size": "batch_size", "lr": "learning_rate",
                    "tune_lr": "tune_learning_rate",
                    "replay": "replay_fraction", "dropout": "dropout"}
# option -> (ModelConfig or TrainConfig, field)
_FIELDS = dict(d_model=("model", "d_model"), n_layer=("model", "n_layer"),
               n_head=("model", "n_head"), n_kv_head=("model", "n_kv_head"),
               context_length=("model", "context_length"),
               vocab_size=("model", "vocab_size"), lr=("train", "learning_rate"),
               tune_lr=("train", "tune_learning_rate"),
               steps=("train", "pretrain_steps"), tune_steps=("train", "tune_steps"),
               batch_size=("train", "batch_size"), seed=("train", "seed"),
               replay=("train", "replay_fraction"), dropout=("train", "dropout"),
               time_budget=("train", "time_budget_s"),
               adam_moments=("train", "adam_moments"))


def _train_defaults() -> dict:
    """option -> default: the engine's ModelConfig and TrainConfig defaults, never a copy."""
    parts = {"model": ModelConfig(), "train": TrainConfig()}
    out = {option: getattr(parts[part], field) for option, (part, field) in _FIELDS.items()}
    out["val_split"] = f"{parts['train'].val_split}:{parts['train'].val_fraction:g}"
    return out


TRAIN_DEFAULTS = _train_defaults()


def _opt(args, name):
    value = getattr(args, name)
    return TRAIN_DEFAULTS[name] if value is None else value


def configs(args, auto=None) -> tuple[ModelConfig, TrainConfig]:
    """ModelConfig, TrainConfig: explicit options, else the --preset's values (engine.training.presets;
    `auto`: the AutoChoice of --preset auto, engine.training.auto_size, whose planned seconds
    end the run where they are fewer than --time-budget's), else TRAIN_DEFAULTS. --val-split
    KIND:SHARE sets val_split and val_fraction. The model is
    checked here, before the tokenizer trains (d_model / n_head: no one flag's range says it);
    each training setting was range-checked by its flag's type (studio.cli.inputs.limited) and
    the engine checks the TrainConfig once more where a session opens, so it is not checked
    here a third time."""
    from opencl_llm_studio.engine.config import parse_val_split
    from opencl_llm_studio.engine.training.presets import get_preset
    preset = auto if auto is not None else get_preset(args.preset) if args.preset else None
    parts = {"model": dict(preset.model), "train": dict(preset.train)} if preset else \
        {"model": {}, "train": {}}
    for option, (part, field) in _FIELDS.items():
        value = getattr(args, option)
        if value is not None:
            parts[part][field] = value
        else:
            parts[part].setdefault(field, TRAIN_DEFAULTS[option])
    if auto is not None:   # a text that cannot use the time: Auto ends the run sooner
        parts["train"]["time_budget_s"] = min(parts["train"]["time_budget_s"],
                                              auto.train["time_budget_s"])
    if args.val_split is not None or "val_split" not in parts["train"]:
        split, fraction = parse_val_split(_opt(args, "val_split"))
        parts["train"].update(val_split=split, val_fraction=fraction)
    return ModelConfig(**parts["model"]).validate(), TrainConfig(**parts["train"])


def tokenizer_kind(args, auto=None) -> str:
    """The tokenizer a new run trains: --tokenizer, else Auto's choice (`auto`), else the
    engine's DEFAULT_TOKENIZER."""
    from opencl_llm_studio.engine.config import DEFAULT_TOKENIZER
    return args.tokenizer or (auto.tokenizer if auto is not None else DEFAULT_TOKENIZER)


def given_options(args) -> list[str]:
    """The flags (--d-model, ...) of the model and training fields given explicitly in `args`."""
    return [f"--{option.replace('_', '-')}" for option in _FIELDS
            if getattr(args, option) is not None]


def shell_arg(value) -> str:
    """`value` (a path) as one argument of a command a user can paste into their shell: quoted
    when it holds spaces or shell characters ("~/My Runs/run 1" was printed bare and split in
    two), as the platform's shell reads it (shlex on POSIX, the MS C runtime's rules on Windows)."""
    text = str(value)
    return subprocess.list2cmdline([text]) if os.name == "nt" else shlex.quote(text)
