"""One table of limits (issue 23): the command line, the studio's fields, ModelConfig /
TrainConfig.validate and the sampling check use the ranges of engine.limits.LIMITS, and say
the same numbers when they refuse; a settings error reaches its field by the field name it
carries."""

import argparse
import math

import pytest

from opencl_llm_studio.engine.config import (MAX_NEW_TOKENS, MODEL_LIMITED, TRAIN_LIMITED, ModelConfig,
                           SamplingParams, TrainConfig)
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.generation.generator import Generator
from opencl_llm_studio.engine.limits import LIMITS, MIN_VOCAB
from tests.source_helpers import PRODUCT, ROOT, files_matching, subcommand_actions

# option dest -> engine field, per subcommand
TRAIN_OPTIONS = {"d_model": "d_model", "n_layer": "n_layer", "n_head": "n_head",
                 "n_kv_head": "n_kv_head", "context_length": "context_length",
                 "vocab_size": "vocab_size", "lr": "learning_rate", "tune_lr": "tune_learning_rate",
                 "steps": "pretrain_steps",
                 "tune_steps": "tune_steps", "batch_size": "batch_size", "seed": "seed",
                 "replay": "replay_fraction", "dropout": "dropout",
                 "time_budget": "time_budget_s", "checkpoint_every": "checkpoint_every",
                 "lora_rank": "lora_rank", "lora_alpha": "lora_alpha",
                 "lora_dropout": "lora_dropout"}
GEN_OPTIONS = {"max_tokens": "max_new_tokens", "temperature": "temperature", "top_k": "top_k",
               "top_p": "top_p", "repeat_penalty": "repetition_penalty", "seed": "seed"}


def _step(lim) -> float:
    return 1 if lim.integer else max(abs(lim.lo), abs(lim.hi), 1.0) * 1e-6


def inside(lim) -> list:
    """The ends of the range (a step inside an open end)."""
    s = _step(lim)
    return [lim.lo + s if lim.lo_open else lim.lo, lim.hi - s if lim.hi_open else lim.hi]


def outside(lim) -> list:
    """The nearest values past each end (the end itself where it is open)."""
    s = _step(lim)
    return [lim.lo if lim.lo_open else lim.lo - s, lim.hi if lim.hi_open else lim.hi + s]


def _text(x) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


PLOT_OPTIONS = {"width": "plot_width", "height": "plot_height"}
COMMANDS = (("train", TRAIN_OPTIONS), ("sample", GEN_OPTIONS), ("chat", GEN_OPTIONS),
            ("plot", PLOT_OPTIONS))
CLI_CASES = [(cmd, dest, field) for cmd, table in COMMANDS for dest, field in table.items()]


@pytest.mark.parametrize("command,dest,field", CLI_CASES)
def test_cli_refuses_and_accepts_at_the_tables_ends(command, dest, field):
    lim, parse = LIMITS[field], subcommand_actions(command)[dest].type
    for value in inside(lim):
        assert parse(_text(value)) == pytest.approx(value)
    for value in outside(lim):
        with pytest.raises(argparse.ArgumentTypeError) as e:
            parse(_text(value))
        assert lim.range_text().removesuffix(f" {lim.unit}") in str(e.value)


def test_cli_covers_every_numeric_option():
    """No numeric option keeps a range of its own (or none: `plot --width -5`)."""
    for command, table in COMMANDS:
        numeric = {dest for dest, a in subcommand_actions(command).items()
                   if a.type in (int, float)
                   or getattr(a.type, "__name__", "") in ("whole number", "number")}
        assert numeric == set(table)


# -- validate() ----------------------------------------------------------------------------
# values the other settings need for a field's end to be valid (d_model / n_head even)
COMPANIONS = {("n_head", 1): dict(d_model=65536), ("n_kv_head", 1): dict(d_model=65536,
                                                                          n_head=32768),
              ("d_model", 0): dict(n_head=1)}


@pytest.mark.parametrize("field", MODEL_LIMITED)
def test_model_validate_uses_the_table(field):
    lim = LIMITS[field]
    for end, value in enumerate(inside(lim)):
        ModelConfig(**{field: value, **COMPANIONS.get((field, end), {})}).validate()
    for value in outside(lim):
        with pytest.raises(ConfigError) as e:
            ModelConfig(**{field: value}).validate()
        assert e.value.field == field and lim.range_text() in e.value.hint


@pytest.mark.parametrize("field", TRAIN_LIMITED)
def test_train_validate_uses_the_table(field):
    lim = LIMITS[field]
    for value in inside(lim):
        TrainConfig(**{field: value}).validate()
    for value in outside(lim) + [math.nan, math.inf]:
        with pytest.raises(ConfigError) as e:
            TrainConfig(**{field: value}).validate()
        assert e.value.field == field and lim.range_text() in e.value.hint


@pytest.mark.parametrize("field", ["lora_rank", "lora_alpha", "lora_dropout"])
def test_lora_validate_uses_the_table(field):
    """LoraConfig.validate refuses with the table's range, naming the CLI option's field."""
    from opencl_llm_studio.engine.config import LoraConfig
    lim, attr = LIMITS[field], field.removeprefix("lora_")
    for value in inside(lim):
        LoraConfig(**{attr: value}).validate()
    for value in outside(lim) + ([] if lim.integer else [math.nan, math.inf]):
        with pytest.raises(ConfigError) as e:
            LoraConfig(**{attr: value}).validate()
        assert e.value.field == field and lim.range_text() in e.value.hint


@pytest.mark.parametrize("field", ["temperature", "top_k", "top_p", "repetition_penalty"])
def test_sampling_check_uses_the_table(field):
    """TrainingSession.generate / chat check their settings with the same ranges."""
    lim = LIMITS[field]
    base = dict(temperature=0.8, top_k=40, top_p=0.95, repetition_penalty=1.0, greedy=False)
    for value in inside(lim):
        Generator._sampling(None, **{**base, field: value})
    for value in outside(lim):
        with pytest.raises(ConfigError) as e:
            Generator._sampling(None, **{**base, field: value})
        assert e.value.field == field


def test_minimum_vocabulary_is_the_tokenizers():
    from opencl_llm_studio.engine.data import tokenizer
    assert LIMITS["vocab_size"].lo == MIN_VOCAB == tokenizer.MIN_VOCAB == \
        tokenizer.N_SPECIAL + tokenizer.N_BYTES


# -- the studio ----------------------------------------------------------------------------
def _spin_bounds(spin):
    decimals = spin.decimals() if hasattr(spin, "decimals") else 0
    return decimals, (spin.minimum(), spin.maximum())


def test_settings_spin_boxes_are_the_table(qapp):
    from opencl_llm_studio.studio.ui.panels.settings_panel import SPIN_INT_MAX, SettingsPanel
    panel = SettingsPanel()
    fields = set()
    for name, spin in panel.spins.items():
        field = spin.property("field")
        lim, (decimals, (lo, hi)) = LIMITS[field], _spin_bounds(spin)
        fields.add(field)
        if name == "trainMinutesSpin":   # minutes of time_budget_s
            assert (lo, hi) == (math.ceil(lim.lo / 60), math.floor(lim.hi / 60))
            continue
        want = lim.bounds(10.0 ** -decimals)
        if not decimals:   # a QSpinBox holds an int32 (the seed: 2**31 - 1 of numpy's 2**32 - 1)
            want = (want[0], min(want[1], SPIN_INT_MAX))
        assert (lo, hi) == pytest.approx(want), name
    assert {"d_model", "learning_rate", "vocab_size", "dropout", "seed"} <= fields


def test_chat_and_autosave_spin_boxes_are_the_table(qapp):
    from opencl_llm_studio.studio.ui.panels.autosave_box import AutosaveBox
    from opencl_llm_studio.studio.ui.panels.chat_panel import ChatPanel
    chat, autosave = ChatPanel(), AutosaveBox()
    for spin, field in ((chat.temperature, "temperature"), (chat.top_k, "top_k"),
                        (chat.top_p, "top_p"), (chat.max_tokens, "max_new_tokens"),
                        (autosave.every_spin, "checkpoint_every")):
        decimals, bounds = _spin_bounds(spin)
        assert bounds == pytest.approx(LIMITS[field].bounds(10.0 ** -decimals)), field


def test_chat_request_defaults_are_the_engines():
    from opencl_llm_studio.studio.protocol import ChatRequest
    sp, req = SamplingParams(), ChatRequest(())
    assert (req.temperature, req.top_k, req.top_p, req.max_new_tokens) == \
        (sp.temperature, sp.top_k, sp.top_p, MAX_NEW_TOKENS)


# -- routing by field ----------------------------------------------------------------------
def _marked(panel) -> set:
    return {s.property("field") for s in panel.spins.values() if s.property("invalid")}


def _shown(panel) -> set:
    return {f for f, label in panel._errors.items() if label.text()}


def test_settings_error_goes_to_the_field_it_names_not_its_words(qapp):
    """The message mentions batch_size, the error is about the seed: the seed field shows it."""
    from opencl_llm_studio.studio.ui.panels.settings_panel import TRAIN_FIELDS, SettingsPanel
    panel = SettingsPanel()
    err = ConfigError("seed out of range, whatever batch_size is.", "Use another seed.",
                      field="seed")
    panel._show_error(err, [f[1] for f in TRAIN_FIELDS])
    assert _marked(panel) == {"seed"} and _shown(panel) == {"seed"}


def test_d_model_and_n_head_errors_mark_both(qapp):
    from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
    panel = SettingsPanel()
    panel.set_value("nHeadSpin", 4)
    panel.set_value("dModelSpin", 12)    # head_dim 3: odd
    assert _marked(panel) == {"d_model", "n_head"} and _shown(panel) == {"n_head"}
    panel.set_value("dModelSpin", 130)   # not divisible by 4
    assert _marked(panel) == {"d_model", "n_head"} and _shown(panel) == {"n_head"}
    assert not panel.is_valid()


def test_a_kept_preset_value_out_of_range_names_its_range(qapp):
    """A training value without a field (a preset's beta2) is refused in the table's words."""
    from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
    panel = SettingsPanel()
    panel._set_extra({"beta2": 1.5})
    panel._on_change()
    assert not panel.is_valid()
    assert LIMITS["beta2"].range_text() in panel.error_text()


def test_other_default_copies_are_the_engines():
    """OptimConfig's defaults are TrainConfig's; ExportRequest's dtype is the engine's."""
    from opencl_llm_studio.engine.config import OptimConfig
    from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE
    from opencl_llm_studio.studio.protocol import ExportRequest
    assert OptimConfig() == TrainConfig().optim()
    assert ExportRequest("x.gguf").dtype == DEFAULT_DTYPE
    config = (ROOT / "opencl_llm_studio" / "engine" / "config.py").read_text(encoding="utf-8")
    for literal in ("beta1: float = 0.9", "adam_eps: float = 1e-8", "seed: int = 1337",
                    "weight_decay: float = 0.1", "grad_clip: float = 1.0"):
        assert config.count(literal) == 1, literal   # TrainConfig's, not a second copy
    assert files_matching(r'dtype: str = "f32"', PRODUCT, exclude=__file__) == []


def test_a_training_setting_is_checked_once_on_the_cli_path_to_a_session(monkeypatch):
    """Issue 35: `--lr` was range-checked four times (the flag's type, options.configs,
    create_session, the session). Now the flag's type checks it at the CLI's edge and the
    engine once, where the session opens: TrainConfig.validate runs once from the parsed
    options to a session, and the flag's type still refuses an out-of-range value."""
    from opencl_llm_studio.engine.data.textio import read_text
    from opencl_llm_studio.engine.training.opening import create_session
    from opencl_llm_studio.studio.cli import build_parser
    from opencl_llm_studio.studio.cli.options import configs
    from tests.helpers import RESOURCES
    calls = []
    real = TrainConfig.validate
    monkeypatch.setattr(TrainConfig, "validate", lambda self: calls.append(self) or real(self))
    args = build_parser().parse_args(["train", "--out", "x", "--lr", "0.002", "--d-model", "32",
                                      "--n-layer", "1", "--n-head", "2", "--context-length", "32"])
    mc, tc = configs(args)
    assert calls == []                                  # the flag's type checked it
    s = create_session(mc, tc, read_text(RESOURCES / "pretrain.txt"), tokenizer_kind="char")
    assert len(calls) == 1 and s.train_config.learning_rate == 0.002
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--out", "x", "--lr", "5"])
