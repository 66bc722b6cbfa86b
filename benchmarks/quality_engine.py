"""The engine's side of benchmarks/quality_nanogpt.py: an engine.training.presets preset trained with the engine's
own training step (Model.train_step: forward, backward, clipping, AdamW on the device, dropout)
and its WSD schedule (engine.training.schedule.lr_at), on quality_nanogpt.CharData's split.

Ids come from the engine's own character tokenizer (`llm-studio train --tokenizer char`: one
token per character, "\n" the byte token <0x0A>), trained on the whole text as the CLI does, so
the model's vocabulary is the studio's (engine.limits.MIN_VOCAB fixed + the characters).
nanoGPT's ids (the sorted characters) map to the engine's through one lookup table: both sides
see the same windows of the same 90/10 split by position (the studio's `--val-split tail:0.1`)
and score the same validation windows.
"""

from __future__ import annotations

import time

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.training.presets import get_preset
from opencl_llm_studio.engine.training.schedule import lr_at
from opencl_llm_studio.engine.opencl.runtime import Runtime
from opencl_llm_studio.engine.data.tokenizer import Tokenizer


def engine_ids(chars: list[str]) -> tuple[np.ndarray, int]:
    """(lookup nanoGPT id -> engine id, vocab_size) from the engine's char tokenizer trained on
    the text's characters (every character is one token)."""
    tok = Tokenizer.train(["".join(chars)], 512, "char")
    lut = [tok.encode(ch) for ch in chars]
    assert all(len(i) == 1 for i in lut), "the char tokenizer must give one token a character"
    return np.array([i[0] for i in lut], np.int32), tok.vocab_size


def with_overrides(mc: ModelConfig, tc: TrainConfig, overrides: list[str]):
    """mc, tc with "field=value" strings applied (the field's own type)."""
    for item in overrides:
        field, _, value = item.partition("=")
        cfg = mc if field in ModelConfig.__dataclass_fields__ else tc
        kind = type(getattr(cfg, field))
        if kind is bool:   # bool("False") is True
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(f"{field}={value}: give true or false")
            parsed = value.lower() in ("1", "true", "yes")
        else:
            parsed = kind(float(value)) if kind is int else kind(value)
        cfg = cfg.replace(**{field: parsed})
        mc, tc = (cfg, tc) if isinstance(cfg, ModelConfig) else (mc, cfg)
    return mc, tc


def engine_train(preset: str, data, evaluator, device, seed: int, stop_below=None,
                 steps: int | None = None, overrides=(), evals: int = 16):
    """Yields (step, train_s, val_loss) at step 0, every steps // evals and the last step.
    train_s: seconds in train_step and batch making (the loss is read back each step, as the
    engine's loop does). overrides: "field=value" over the preset."""
    p = get_preset(preset)
    lut, vocab = engine_ids(data.chars)
    mc, tc = with_overrides(*p.configs(ModelConfig(vocab_size=vocab)), overrides)
    tc = tc.replace(seed=seed, **({"pretrain_steps": steps} if steps else {})).validate()
    steps = tc.pretrain_steps
    rt = Runtime(device)
    model = Model(rt, mc.validate(), seed=seed)
    rng = np.random.default_rng(seed)
    B, T = tc.batch_size, mc.context_length
    every = max(steps // evals, 1)

    def val_loss():
        return evaluator(lambda x, y: model.loss(lut[x], lut[y]), as_torch=False)

    train_s = 0.0
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            v = val_loss()
            yield step, train_s, v
            if step == steps or (stop_below is not None and v <= stop_below):
                return
        t0 = time.perf_counter()  # batch making included, as on nanoGPT's side
        x, y = data.windows(data.train, rng.integers(0, len(data.train) - T, B), T)
        model.train_step(lut[x], lut[y], lr_at(tc, step, 0, steps, tc.learning_rate), tc)
        train_s += time.perf_counter() - t0
