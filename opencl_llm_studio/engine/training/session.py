"""A training session: tokenizer, data, model and optimizer state on one device, as state:
create, load, save, continue, its data and its validation scores, the GGUF bundle.

The loop lives in engine.training.trainer.Trainer; `session.train()` is `Trainer(session).run()`, the
generator the CLI and the studio drive (docs/DESIGN.md). Long phases (encoding the text,
validation, samples, recall) tick `session.monitor` (engine.progress): progress for the caller,
and `Cancelled` within a fraction of a second of `monitor.cancel()`.
"""

from __future__ import annotations

import functools
import math
import warnings
from functools import partial
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.config import LoraConfig, ModelConfig, TrainConfig, run_steps
from opencl_llm_studio.engine.data.corpus import PretrainData
from opencl_llm_studio.engine.opencl.device import DeviceInfo
from opencl_llm_studio.engine.data.dialogue import CHAT_FORMAT, TuneData, check_chat_format
from opencl_llm_studio.engine.errors import CheckpointError, ConfigError, NothingToTrain
from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE
from opencl_llm_studio.engine.generation.generator import Generator, delegate
from opencl_llm_studio.engine.model.memory import check_chat_fits, check_fits
from opencl_llm_studio.engine.metrics import ValScore
from opencl_llm_studio.engine.model.activations import model_bytes
from opencl_llm_studio.engine.model.lora import LoraModel
from opencl_llm_studio.engine.model.moments import resolve as resolve_moments
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.progress import Monitor
from opencl_llm_studio.engine.opencl.runtime import Runtime
from opencl_llm_studio.engine.training import schedule
from opencl_llm_studio.engine.training.schedule import Rewarm, StageSteps
from opencl_llm_studio.engine.data.tokenizer import Tokenizer
from opencl_llm_studio.engine.data.textio import sha256_text
from opencl_llm_studio.engine.model.gemm_tune import runtime_for_model




def check_continuation(step: int, pretrain_steps: int, tune_steps: int, has_tune: bool,
                       new_pretrain: int, new_tune: int, require_more: bool = False) -> None:
    """Whether a run at optimizer step `step` (stage totals `pretrain_steps` and `tune_steps`,
    with dialogues to tune on or not) can be continued to the new totals; the one rule for
    TrainingSession.continue_training, `llm-studio train --continue` and the studio's Continue.

    Steps done cannot be undone; pretraining cannot grow once tuning has begun (the stages run
    in order), but tuning can, before or after; a run without dialogues has no tuning stage.
    require_more: also refuse totals that leave nothing to train. Raises ConfigError."""
    if new_pretrain < 0 or new_tune < 0:
        raise ConfigError("Step counts cannot be negative.", "Give totals of 0 or more.")
    if not has_tune and new_tune != tune_steps:
        raise ConfigError("This run has no dialogues, so it has no tuning stage.",
                          "Give it dialogues to tune on (`llm-studio train --continue --tune "
                          "FILE`; in the studio, open a tune file), or change the pretraining "
                          "steps only.")
    if has_tune and step > pretrain_steps and new_pretrain != pretrain_steps:
        raise ConfigError(
            f"This run is already tuning (step {step}); its pretraining stage "
            f"({pretrain_steps} steps) is over: keep pretraining steps at {pretrain_steps}.",
            f"Raise the tuning steps instead (now {tune_steps}).")
    total = run_steps(new_pretrain, new_tune, has_tune)
    if new_pretrain < min(step, pretrain_steps) or total < step:
        raise ConfigError(
            f"This run has already done {step} steps; the new totals ({new_pretrain} "
            f"pretraining + {new_tune if has_tune else 0} tuning) are fewer.",
            "Step counts are totals per stage: give larger numbers.")
    if require_more and total == step:
        # the totals are per stage, and pretraining cannot grow once tuning has begun
        what = [f"the pretraining steps above {pretrain_steps}"] * (
            not has_tune or step <= pretrain_steps)
        what += [f"the tuning steps above {tune_steps}"] * has_tune
        raise NothingToTrain(f"This run has done all of its {step} steps.",
                          f"Raise {' or '.join(what)} to train further.")


def last_validation(history: list[dict]) -> dict:
    """The newest pretraining-text validation numbers in a run's history: {"val_loss" (nats per
    token), "val_bpb", "val_source"} ({} before the first evaluation)."""
    for r in reversed(history):
        loss = r.get("val_loss") if r.get("stage") == "pretrain" else r.get("pretrain_val_loss")
        if loss is not None and "val_bpb" in r:
            return {"val_loss": loss, "val_bpb": r["val_bpb"], "val_source": r["val_source"]}
    return {}


class TrainingSession:
    """Everything one training run needs. Build with `create` or `load`."""

    def __init__(self, rt: Runtime, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 tokenizer: Tokenizer, pretrain_text: str, tune_text: str | None,
                 flat_weights: np.ndarray | None = None, chat_format: int = CHAT_FORMAT,
                 monitor: Monitor | None = None, autotune: bool | None = None,
                 short_text_ok: bool = False, opened: bool = False,
                 lora: LoraConfig | None = None, base=None, base_ref: dict | None = None):
        """autotune: tune the kernels for this device and shape first when none are cached
        (engine.model.gemm_tune.runtime_for_model; None: as LLM_STUDIO_AUTOTUNE says).
        short_text_ok: a pretraining text shorter than one window is used as it is, padded
        (PretrainData short_ok): for a model whose window the text did not choose (opened,
        imported); a new run refuses it with a context length that fits. opened: a model
        opened to chat, export or train on: only chatting is checked before anything is
        allocated (check_chat_fits); its training is checked when it trains (check_training_fits).
        lora: tune LoRA adapters (engine.model.lora.LoraModel) on `base`, the frozen model
        (engine.model.quant_base.QuantBase or lora_base.FlatBase) that base_ref names in the
        checkpoint; flat_weights are then the adapters (None: new ones)."""
        self.chat_format = check_chat_format(chat_format)  # engine.data.dialogue: how turns render
        self.monitor = monitor or Monitor()
        # the kernel tuner's cached plan for this device and shape (engine/model/gemm_tune.py)
        rt = runtime_for_model(rt, model_cfg, train_cfg.batch_size, self.monitor, autotune)
        self.rt, self.tokenizer = rt, tokenizer
        self.model_config, self.train_config = model_cfg.validate(), train_cfg.validate()
        self.pretrain_text, self.tune_text = pretrain_text, tune_text
        T = model_cfg.context_length
        self.pretrain = PretrainData(tokenizer, pretrain_text, T, train_cfg.val_fraction,
                                     train_cfg.seed, train_cfg.val_split, monitor=self.monitor,
                                     short_ok=short_text_ok)
        self.monitor.tick("encoding the dialogues", 0, 1)
        self.tune = TuneData(tokenizer, tune_text, T, train_cfg.seed,
                             chat_format) if tune_text else None
        if not opened:
            check_fits(model_cfg, train_cfg.batch_size, rt.info, rt.plan.attention_path, rt,
                       model_part=model_bytes(model_cfg, moments=train_cfg.adam_moments))
        else:   # opened to chat or export: its weights and a generation window; gradients
            #     and moments are made (and training's need checked) when it trains
            check_chat_fits(model_cfg, rt.info, rt.plan.attention_path,
                            None if lora is None else LoraModel.chat_bytes(model_cfg, base, lora))
        self.monitor.tick("building the model", 0, 1)
        self.lora, self.base_ref = lora, base_ref
        if lora is None:
            self.model = Model(rt, model_cfg, flat_weights, seed=train_cfg.seed,
                               moments=resolve_moments(train_cfg.adam_moments, model_cfg))
        else:
            self.model = LoraModel(rt, model_cfg, base, lora, flat_weights, seed=train_cfg.seed)
        self.rng = np.random.default_rng(train_cfg.seed + 1)
        self.step = 0
        self.last_loss: float | None = None
        self.history: list[dict] = []  # compact per-step records (for plots after a reload)
        self.generator = Generator(self.model, tokenizer, self.chat_format, self.monitor)
        self.rewarm: Rewarm | None = None  # a continued run's lr ramp (engine.training.schedule)
        self.loaded_from_previous = False  # load() fell back to checkpoint.prev.npz
        # an imported model's card (engine.files.model_card): kept across saves, and its own
        # context_length is what an export says (the run trains in a shorter window)
        self.source: dict | None = None

    # generation (engine.generation.generator.Generator, composed)
    generate = delegate("generate")
    generate_ids = delegate("generate_ids")
    chat = delegate("chat")
    fit_messages = delegate("fit_messages")

    last_finish = property(lambda self: self.generator.last_finish,
                           doc='Why the last generation ended: "stop", "length" or "context".')

    def adopt_progress(self, step: int, pretrain_steps: int | None = None,
                       tune_steps: int | None = None) -> None:
        """Start at `step` with the stage totals the model was trained to (an exported GGUF's
        metadata, a transformers folder's studio.json), not at step 0 with the settings'
        totals; a model trained past its recorded totals gets totals that cover its steps
        (the pretraining total without dialogues, else the tuning one)."""
        pre = self.steps.pretrain if pretrain_steps is None else int(pretrain_steps)
        tune = self.steps.tune if tune_steps is None else int(tune_steps)
        self.step = int(step)
        if self.step > StageSteps(pre, tune).total(self.has_tune):
            pre, tune = (pre if self.has_tune else max(pre, self.step),
                         max(tune, self.step - pre))
        self.train_config = StageSteps(pre, tune).on(self.train_config)   # as the run stands

    @property
    def train_config(self) -> TrainConfig:
        """The person's settings, never replaced while a run trains: where its stages end is
        self.steps (schedule.StageSteps), which a time budget's plan re-makes each step."""
        return self._settings

    @train_config.setter
    def train_config(self, tc: TrainConfig) -> None:
        """New settings: the stages end where they say (self.steps = their totals)."""
        self._settings, self.steps = tc, StageSteps.of(tc)

    def run_config(self) -> TrainConfig:
        """The settings with the stage totals in force (self.steps): what the checkpoint
        records and a front end shows as the run's (a time budget's estimated totals included)."""
        return self.steps.on(self.train_config)

    def save(self, path) -> Path:
        """Write the checkpoint atomically into folder `path` (made if missing) as
        checkpoint.npz, whatever the folder's name looks like; returns the file. Raises
        CheckpointError when `path` is a file (never overwritten) or cannot be written."""
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise CheckpointError(
                f"{folder} is a file, not a folder: a checkpoint is saved into a folder, as "
                f"{checkpoint.FILENAME}.",
                "Choose a new folder name or a run folder to save into; the file is unchanged.",
                cli_hint="Give a new folder or a run folder to save into; the file is unchanged.")
        header = {
            "model_config": self.model_config.__dict__, "train_config": self.run_config().__dict__,
            "step": self.step, "adam_t": self.model.adam_t, "last_loss": self.last_loss,
            "rng_state": self.rng.bit_generator.state, "history": self.history,
            "tokenizer_kind": self.tokenizer.kind, "data": self.data_summary(),
            "chat_format": self.chat_format,
            "device": self.rt.info.name,  # shown by the Runs panel (studio.runs)
            "rewarm": self.rewarm.to_list() if self.rewarm else None,
        }
        if self.source is not None:
            header["source"] = self.source
        if self.lora is not None:   # params, m and v are then the adapters'
            header["lora"] = {**self.lora.to_dict(), "base": self.base_ref}
        m = self.model
        trained = m.adam_t > 0   # before the first step the moments are zeros: not stored
        size = m.table.size   # each array read from the device piece by piece as it is written
        return checkpoint.save(folder / checkpoint.FILENAME, header,
                               checkpoint.Stream(size, partial(m.read_piece, "params")),
                               checkpoint.Stream(size, partial(m.read_piece, "m")) if trained
                               else None,
                               checkpoint.Stream(size, partial(m.read_piece, "v")) if trained
                               else None,
                               self.tokenizer.to_bytes(),
                               self.pretrain_text, self.tune_text)

    def use_tuned_kernels(self, autotune: bool = True) -> bool:
        """Launch by the tuned kernels for this device and shape from now on: the cached ones,
        else (autotune) tuned now (engine.model.gemm_tune.runtime_for_model: progress and
        Cancelled through self.monitor). For an opened model before it trains on (the studio's
        Continue). Returns whether a tuned plan is in use."""
        rt = runtime_for_model(self.rt, self.model_config, self.train_config.batch_size,
                               self.monitor, autotune)
        if rt is self.rt:
            return False
        self.rt = self.model.rt = rt   # the same context and buffers, another plan
        self.generator.reset_decoder()
        return True

    def set_dialogues(self, tune_text: str) -> None:
        """Tune on `tune_text` from now on (User:/Assistant: turns or JSON/JSONL, rendered as the
        run's chat format, engine.data.dialogue): a run without dialogues (a pretrained model
        imported without --tune, a run trained on text alone) gains a tuning stage after its
        pretraining; a run with dialogues tunes on these instead. The checkpoint keeps them.
        Give the tuning steps with continue_training afterwards. Raises DataError when the text
        holds no dialogue."""
        self.tune = TuneData(self.tokenizer, tune_text, self.model_config.context_length,
                             self.train_config.seed, self.chat_format)
        self.tune_text = tune_text

    def continue_training(self, pretrain_steps: int | None = None,
                          tune_steps: int | None = None,
                          more_seconds: float | None = None) -> str | None:
        """Continue a saved run: set new step totals per stage (or, with more_seconds, a time
        budget that many seconds past the training it had), then train() goes on to them.

        "Continue" is this (more steps of a run, in this or a later process; the CLI's
        `train --continue`, the studio's Continue); "resume" is only the studio's going on
        after Pause. Step counts are totals, not additions; the rule is `check_continuation`.
        The schedule carries on where the run stood: when its learning rate had decayed below
        what the new plan gives, it re-warms from there over warmup_steps (engine.training.schedule.
        Rewarm) instead of jumping. Returns a note for the person about that re-warm (None when
        there is none). Raises ConfigError."""
        tc, now = self.train_config, self.steps
        pre = now.pretrain if pretrain_steps is None else pretrain_steps
        tune = now.tune if tune_steps is None else tune_steps
        if more_seconds is None:
            check_continuation(self.step, now.pretrain, now.tune, self.has_tune, pre, tune)
            given = pretrain_steps is not None or tune_steps is not None
            budget = 0.0 if given else tc.time_budget_s  # step totals replace a time budget
        else:
            if not (more_seconds > 0 and math.isfinite(more_seconds)):
                raise ConfigError(f"A time budget must be a positive number of seconds, got "
                                  f"{more_seconds}.", "Give e.g. 60 for one more minute.")
            budget = self.elapsed_s() + more_seconds
        self.train_config = tc.replace(pretrain_steps=pre, tune_steps=tune,
                                       time_budget_s=budget).validate()
        self.rewarm, note = schedule.rewarm_on_continue(
            self.train_config, self.steps, self.has_tune, self.step, self.history,
            more_seconds is not None)
        return note

    # TrainConfig fields a continued run may change: how it trains from here, not what the
    # model or its data are (those stay the run's own)
    CONTINUE_FIELDS = ("batch_size", "learning_rate", "tune_learning_rate", "replay_fraction",
                       "dropout", "eval_interval", "eval_tokens")

    def retrain_with(self, **fields) -> None:
        """Train on from here with other CONTINUE_FIELDS (e.g. batch_size=4 for an imported
        model whose run kept batch 16): checked against engine.limits and against the device's
        memory (engine.model.memory.check_fits) before anything is allocated. Raises
        ConfigError; the settings are then as they were."""
        unknown = set(fields) - set(self.CONTINUE_FIELDS)
        if unknown:
            raise ConfigError(f"A continued run keeps its {', '.join(sorted(unknown))}.",
                              "Start a new run to change it.")
        tc = self.train_config.replace(**fields).validate()
        old, self._settings = self._settings, tc   # not step totals: self.steps stays
        try:
            self.check_training_fits()
        except ConfigError:
            self._settings = old
            raise

    def check_training_fits(self) -> None:
        """Raise ConfigError (naming the largest batch size and window that fit) when training
        on from this run's step at its batch size would not fit the device; the Trainer asks
        before a step. The window counted is the largest the run will still use
        (training_window)."""
        window = self.training_window()
        tc = self.train_config
        own = (self.model.own_bytes(tc.batch_size * window) if self.lora is not None
               else model_bytes(self.model_config, moments=tc.adam_moments))
        check_fits(self.model_config, self.train_config.batch_size, self.rt.info,
                   self.rt.plan.attention_path, self.rt, window=window, model_part=own)

    def training_window(self) -> int:
        """The largest T of the batches training from session.step on will run: the model's
        context_length while pretraining is ahead, else the tuning stage's windows (the
        dialogues', tune_window, and the general text's, general_window)."""
        if self.stage_at(self.step) == "pretrain" and self.steps.pretrain:
            return self.model_config.context_length
        return max(self.window("tune"), self.general_window("tune"))

    def window(self, stage: str) -> int:
        """T of a training batch in `stage`: the model's context_length while pretraining; the
        dialogues' own window while tuning (engine.data.dialogue.tune_window: the longest
        dialogue rounded up, never a fixed pad), which the replayed general text follows."""
        if stage == "tune" and self.has_tune:
            return self.tune.window
        return self.model_config.context_length

    def general_window(self, stage: str) -> int:
        """T at which the general (pretraining) text is scored in `stage`: the model's
        context_length for a run that pretrains on it (its validation curve keeps one
        window); a run with no pretraining stage of its own (an opened or imported model, whose
        general text only shows what tuning keeps) scores it in the tuning window, so that a
        tuning step and its evaluations share one activation set."""
        if stage == "tune" and self.has_tune and not self.steps.pretrain:
            return self.tune.window
        return self.model_config.context_length

    def extend(self, pretrain_steps: int | None = None, tune_steps: int | None = None) -> None:
        """Deprecated name of continue_training (kept so older scripts run)."""
        warnings.warn("TrainingSession.extend is now continue_training", DeprecationWarning,
                      stacklevel=2)
        self.continue_training(pretrain_steps, tune_steps)

    def data_summary(self) -> dict:
        """What the run trains on and scores (the checkpoint header, the GGUF metadata): the
        texts' sizes and hashes, PretrainData.summary() and the validation split."""
        return {"pretrain_chars": len(self.pretrain_text),
                "pretrain_sha256": sha256_text(self.pretrain_text),
                "tune_chars": len(self.tune_text or ""), "tune_sha256": sha256_text(self.tune_text),
                "tune_dialogues": len(self.tune.dialogues) if self.has_tune else 0,
                "val_split": f"{self.pretrain.val_split}:{self.pretrain.val_fraction:g}",
                **self.pretrain.summary()}

    @property
    def device_info(self) -> DeviceInfo:
        """The OpenCL device this session runs on (name, memory limits)."""
        return self.rt.info

    @property
    def has_tune(self) -> bool:
        """The session has tune dialogues, so a tuning stage follows pretraining."""
        return self.tune is not None

    @property
    def tune_tokens(self) -> int:
        """Tokens in the encoded tune dialogues (0 without them)."""
        return sum(len(ids) for ids, _ in self.tune.encoded) if self.has_tune else 0

    # ------------------------------------------------------------------ training
    def stage_at(self, step: int) -> str:
        """"pretrain" or "tune" (engine.training.schedule.stage_of)."""
        return schedule.stage_of(self.steps, self.has_tune, step)

    @property
    def total_steps(self) -> int:
        """Steps of the whole run as it stands (StageSteps.total of self.steps)."""
        return self.steps.total(self.has_tune)

    def lr_at(self, step: int) -> float:
        """The learning rate of global `step` under the step plan, held to a continued run's
        re-warm ramp (engine.training.schedule.run_lr)."""
        return schedule.run_lr(self.train_config, self.steps, self.has_tune, self.rewarm, step)

    def pretrain_val(self, max_tokens: int | None = None, stage: str | None = None) -> ValScore:
        """The pretraining validation text scored: loss (nats per token), bits per byte and
        how much text (PretrainData.score): at most max_tokens targets (None: train_config.
        eval_tokens, the periodic evaluation; engine.data.corpus.FINAL_VAL_TOKENS: the whole
        held-out text at a run's end), the same windows every call. The text is held out
        unless pretrain.val_source says "training text". stage: scored in its window
        (general_window; None: the stage at session.step). A sample of the text is drawn by
        the run's seed (PretrainData.val_batches) and carries its standard error."""
        tc = self.train_config
        tokens = tc.eval_tokens if max_tokens is None else max_tokens
        phase = "validation" if max_tokens is None else "final validation"
        window = self.general_window(stage or self.stage_at(self.step))
        return self.pretrain.score(functools.partial(self.model.loss, per_row=True),
                                   tc.batch_size, tokens, self.monitor, phase, window, tc.seed)

    def pretrain_val_loss(self) -> float:
        """pretrain_val().loss: mean cross-entropy in nats per token."""
        return self.pretrain_val().loss

    def train(self, clock=None):
        """The training generator: engine.training.trainer.Trainer(self, clock).run() (see there)."""
        from opencl_llm_studio.engine.training.trainer import Trainer
        return Trainer(self, clock).run()

    def elapsed_s(self) -> float:
        """Wall seconds of training this run has had (the last record's elapsed_s; 0 new)."""
        for record in reversed(self.history):
            value = record.get("elapsed_s")
            if isinstance(value, (int, float)) and math.isfinite(value):
                return float(value)
        return 0.0

    def bundle(self):
        """The model as an engine.files.gguf_export.ModelBundle (weights copied from the device)."""
        from opencl_llm_studio.engine.files.gguf_export import ModelBundle
        tc = self.train_config
        meta = {"learning_rate": tc.learning_rate, "pretrain_steps": self.steps.pretrain,
                "tune_steps": self.steps.tune, "batch_size": tc.batch_size, "seed": tc.seed,
                "steps_done": self.step, "final_loss": self.last_loss, **self.data_summary(),
                "chat_format": self.chat_format, **last_validation(self.history)}
        meta = {k: v for k, v in meta.items() if v is not None}
        return ModelBundle(self.export_config(), self.tokenizer, self.model.weights(), meta)

    def export_config(self) -> ModelConfig:
        """The ModelConfig an export writes: the model's own context_length for an imported
        model (8,192 for SmolLM2), not the shorter window the run trains and chats in
        (engine.files.open_run.tuning_config); RoPE positions are the same up to there."""
        native = (self.source or {}).get("context_length") or 0
        c = self.model_config
        return c.replace(context_length=native) if native > c.context_length else c

    def export_gguf(self, path, dtype: str = DEFAULT_DTYPE, force: bool = False):
        """Write the GGUF (and an Ollama Modelfile beside it). Returns ExportResult."""
        from opencl_llm_studio.engine.files.gguf_export import export_gguf
        return export_gguf(self.bundle(), path, dtype=dtype, force=force)
