"""The range of every number a person can set, written once.

`LIMITS` maps a setting's name (its engine.config field: ModelConfig, TrainConfig,
SamplingParams, plus max_new_tokens, checkpoint_every, the plot command's image size and the kernel tuner's time) to a
`Limit`: the lowest and highest value, whether an end is open, its unit and a hint.
ModelConfig.validate and TrainConfig.validate, the sampling check (engine.generation.generator), the
command line's argument types (studio.cli.inputs.limited) and the studio's spin boxes
(studio.ui.panels.settings_panel, chat_panel, autosave_box) all read it, and a refusal states the same
numbers wherever it comes from.
Defaults stay in the engine.config dataclasses (one place each).

The ranges are the widest the engine can run: the upper bounds keep a typo (an extra zero)
from asking for terabytes or years, and still admit the pretrained models the engine opens
(Llama 3.x: vocabulary 128,256, context length 131,072). The device memory check
(engine.model.memory.check_fits) still applies inside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opencl_llm_studio.engine.errors import ConfigError

N_SPECIAL = 3            # <unk>, <s>, </s> (engine.data.tokenizer)
N_BYTES = 256            # <0x00>..<0xFF>: byte fallback tokens
MIN_VOCAB = N_SPECIAL + N_BYTES   # 259: below this the fixed ids do not fit

MAX_STEPS = 10**9        # a billion optimizer steps: years on any device
MAX_SEED = 2**32 - 1     # numpy's legacy seed range (the studio's field holds up to 2**31 - 1)
MAX_WIDTH = 65_536       # d_model, batch_size
MAX_CONTEXT = 2**20      # tokens per window: 8x Llama 3.1's 131,072
MAX_VOCAB = 1_000_000    # SentencePiece vocabularies stay far below this (Gemma: 256,000)
MAX_LORA_RANK = 256      # past this an adapter costs as much as the weight it adapts (d 576)


@dataclass(frozen=True)
class Limit:
    """The allowed values of one setting: lo..hi (an end excluded where lo_open / hi_open),
    whole numbers when `integer`; `unit` is said after the numbers ("steps", "s", ...),
    `hint` after the range in a refusal (a typical value, or why the bound is there)."""
    field: str
    lo: float
    hi: float
    unit: str = ""
    hint: str = ""
    integer: bool = True
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, value) -> bool:
        """Whether value is allowed (a finite number in the range; a whole one if integer)."""
        try:
            v = float(value)
        except (TypeError, ValueError):
            return False
        if not math.isfinite(v) or (self.integer and v != int(v)):
            return False
        low_ok = v > self.lo if self.lo_open else v >= self.lo
        return low_ok and (v < self.hi if self.hi_open else v <= self.hi)

    def bounds(self, step: float = 1) -> tuple[float, float]:
        """The closed range a field showing multiples of `step` (1 for whole numbers, 10**-d
        for d decimals) may hold: an open end moved in by one step."""
        return (self.lo + step if self.lo_open else self.lo,
                self.hi - step if self.hi_open else self.hi)

    def range_text(self) -> str:
        """The range in words, e.g. "from 2 to 65,536" or "above 0 and at most 1"."""
        lo = ("above " if self.lo_open else "from ") + _num(self.lo)
        if self.lo_open:
            hi = (" and below " if self.hi_open else " and at most ") + _num(self.hi)
        else:
            hi = (" to below " if self.hi_open else " to ") + _num(self.hi)
        return lo + hi + (f" {self.unit}" if self.unit else "")

    def refusal(self, value) -> ConfigError:
        """The ConfigError for `value` out of range (its .field is this setting)."""
        hint = f"Use a {'whole ' if self.integer else ''}number {self.range_text()}" + \
            (f"; {self.hint}" if self.hint else ".")
        return ConfigError(f"{self.field} {self._what(value)}.", hint, field=self.field)

    def _what(self, value) -> str:
        """What is wrong with value, e.g. "258 is below 259"."""
        try:
            v = float(value)
        except (TypeError, ValueError):
            return f"{value!r} is not a number"
        if not math.isfinite(v):
            return f"{value} is not a finite number"
        if v < self.lo or (self.lo_open and v == self.lo):
            return f"{_num(value)} is {'not above' if self.lo_open else 'below'} {_num(self.lo)}"
        if v > self.hi or (self.hi_open and v == self.hi):
            return f"{_num(value)} is {'not below' if self.hi_open else 'above'} {_num(self.hi)}"
        return f"{value} is not a whole number"

    def check(self, value):
        """Return value when allowed, else raise refusal(value)."""
        if not self.contains(value):
            raise self.refusal(value)
        return value


def _num(x) -> str:
    """1,000,000 for whole numbers, 1e-06 / 0.5 style for the rest."""
    if isinstance(x, float) and not x.is_integer():
        return f"{x:g}"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{int(x):,}"


def _table(*limits: Limit) -> dict[str, Limit]:
    return {lim.field: lim for lim in limits}


_FLOAT = dict(integer=False)
LIMITS: dict[str, Limit] = _table(
    # the model (ModelConfig)
    Limit("vocab_size", MIN_VOCAB, MAX_VOCAB, "tokens",
          f"below {MIN_VOCAB} the 3 control tokens and 256 byte tokens do not fit; 512 or "
          "1024 suit a small text."),
    Limit("d_model", 2, MAX_WIDTH, hint="it must be divisible by n_head."),
    Limit("n_layer", 1, 1024),
    Limit("n_head", 1, MAX_WIDTH // 2, hint="d_model / n_head must be even (RoPE)."),
    Limit("n_kv_head", 0, MAX_WIDTH // 2, hint="0 = one per query head (n_head)."),
    Limit("context_length", 1, MAX_CONTEXT, "tokens"),
    Limit("ffn_dim", 0, 4 * MAX_WIDTH, hint="0 = the SwiGLU default width."),
    # training (TrainConfig)
    Limit("pretrain_steps", 0, MAX_STEPS, "steps"),
    Limit("tune_steps", 0, MAX_STEPS, "steps"),
    Limit("batch_size", 1, MAX_WIDTH, "windows"),
    Limit("learning_rate", 0.0, 1.0, hint="1e-3 to 3e-3 suits small models.", lo_open=True,
          hi_open=True, **_FLOAT),
    Limit("tune_learning_rate", 0.0, 1.0, hint="0 = learning_rate / 3 after pretraining, else learning_rate.", hi_open=True,
          **_FLOAT),
    Limit("min_lr_ratio", 0.0, 1.0, **_FLOAT),
    Limit("warmup_steps", 0, MAX_STEPS, "steps"),
    Limit("decay_fraction", 0.0, 1.0, hint="e.g. 0.2.", **_FLOAT),
    Limit("weight_decay", 0.0, 1.0, hint="0.1 is usual.", **_FLOAT),
    Limit("beta1", 0.0, 1.0, hi_open=True, hint="0.9 is usual.", **_FLOAT),
    Limit("beta2", 0.0, 1.0, hi_open=True, hint="0.95 or 0.99 is usual.", **_FLOAT),
    Limit("adam_eps", 0.0, 1.0, lo_open=True, hint="1e-8 is usual.", **_FLOAT),
    Limit("grad_clip", 0.0, 1e6, hint="0 = off; 1 is usual.", **_FLOAT),
    Limit("dropout", 0.0, 1.0, hi_open=True,
          hint="0 = off; 0.1-0.2 suits small texts that overfit.", **_FLOAT),
    Limit("seed", 0, MAX_SEED),
    Limit("eval_interval", 1, MAX_STEPS, "steps"),
    Limit("eval_tokens", 1, MAX_STEPS, "tokens"),
    Limit("sample_interval", 0, MAX_STEPS, "steps", "0 = no samples."),
    Limit("sample_tokens", 1, 1_000_000, "tokens"),
    Limit("replay_fraction", 0.0, 1.0, **_FLOAT),
    Limit("val_fraction", 0.0, 1.0, hi_open=True, hint="e.g. 0.1.", **_FLOAT),
    Limit("time_budget_s", 0.0, 1e9, "s", "0 = off (train by steps).", **_FLOAT),
    Limit("eval_share", 0.0, 1.0, hi_open=True, hint="e.g. 0.05.", **_FLOAT),
    # generation (SamplingParams, engine.config.MAX_NEW_TOKENS)
    Limit("temperature", 0.0, 100.0, hint="0 = always the most likely token.", **_FLOAT),
    Limit("top_k", 0, MAX_VOCAB, hint="0 = off."),
    Limit("top_p", 0.0, 1.0, lo_open=True, hint="1 = off.", **_FLOAT),
    Limit("repetition_penalty", 0.0, 100.0, lo_open=True, hint="1 = off.", **_FLOAT),
    Limit("max_new_tokens", 1, 1_000_000, "tokens"),
    # LoRA adapters (engine.config.LoraConfig)
    Limit("lora_rank", 1, MAX_LORA_RANK, hint="8-16 is enough for small data (LoRA without regret)."),
    Limit("lora_alpha", 0.0, 1e6, lo_open=True, hint="twice the rank is usual (16 for rank 8).",
          **_FLOAT),
    Limit("lora_dropout", 0.0, 1.0, hi_open=True, hint="0 or a small value such as 0.05.",
          **_FLOAT),
    # the run folder, and `llm-studio plot`'s image
    Limit("checkpoint_every", 0, MAX_STEPS, "steps", "0 = only at the end."),
    Limit("plot_width", 64, 16_384, "pixels"),
    Limit("plot_height", 64, 16_384, "pixels"),
    # `llm-studio tune-kernels` (engine.model.gemm_tune)
    Limit("tune_seconds", 0.0, 3600.0, "s", "e.g. 30.", lo_open=True, **_FLOAT),
)


def limit(field: str) -> Limit:
    """LIMITS[field]; KeyError names a field without one."""
    return LIMITS[field]


def check_fields(obj, fields, prefix: str = "") -> None:
    """Raise the first ConfigError of obj's `fields` (attribute names) out of range; the
    setting of attribute `name` is LIMITS[prefix + name] (LoraConfig.rank: "lora_rank")."""
    for name in fields:
        LIMITS[prefix + name].check(getattr(obj, name))
