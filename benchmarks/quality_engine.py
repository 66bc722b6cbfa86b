"""The engine's side of benchmarks/quality.py: an engine.presets preset trained with the engine's
own training step (Model.train_step: forward, backward, clipping, AdamW on the device, dropout)
and its warmup + cosine schedule (TrainConfig.lr_at), on quality.CharData's split.

Characters map to ids 3 + their index in the sorted character set (ids 0-2 are the engine's
control tokens, which never occur), so one token is one character and the loss is per character,
as on nanoGPT's side; the model's vocabulary is the engine's minimum of 259.
TODO(coordinator, after merging branch `quality`): build the run through TrainingSession with
its character tokenizer and val_split="tail" / val_fraction=0.1 instead of CharData's ids, so the
benchmark runs exactly what `llm-studio train --preset cpu` runs; the split is the same.
"""

from __future__ import annotations

import time

import numpy as np

from engine.config import ModelConfig, TrainConfig
from engine.model import Model
from engine.presets import get_preset
from engine.runtime import Runtime

ID0 = 3  # first engine id used for characters


def with_overrides(mc: ModelConfig, tc: TrainConfig, overrides: list[str]):
    """mc, tc with "field=value" strings applied (the field's own type)."""
    for item in overrides:
        field, _, value = item.partition("=")
        cfg = mc if field in ModelConfig.__dataclass_fields__ else tc
        kind = type(getattr(cfg, field))
        cfg = cfg.replace(**{field: kind(float(value)) if kind is int else kind(value)})
        mc, tc = (cfg, tc) if isinstance(cfg, ModelConfig) else (mc, cfg)
    return mc, tc


def engine_train(preset: str, data, evaluator, device, seed: int, stop_below=None,
                 steps: int | None = None, overrides=(), evals: int = 16):
    """Yields (step, train_s, val_loss) at step 0, every steps // evals and the last step.
    train_s: seconds in train_step and batch making (the loss is read back each step, as the
    engine's loop does). overrides: "field=value" over the preset."""
    p = get_preset(preset)
    mc, tc = with_overrides(*p.configs(ModelConfig(vocab_size=259)), overrides)
    tc = tc.replace(seed=seed, **({"pretrain_steps": steps} if steps else {})).validate()
    steps = tc.pretrain_steps
    rt = Runtime(device)
    model = Model(rt, mc.validate(), seed=seed)
    rng = np.random.default_rng(seed)
    B, T = tc.batch_size, mc.context_length
    every = max(steps // evals, 1)

    def val_loss():
        return evaluator(lambda x, y: model.loss(x + ID0, y + ID0), as_torch=False)

    train_s = 0.0
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            v = val_loss()
            yield step, train_s, v
            if step == steps or (stop_below is not None and v <= stop_below):
                return
        t0 = time.perf_counter()  # batch making included, as on nanoGPT's side
        x, y = data.windows(data.train, rng.integers(0, len(data.train) - T, B), T)
        model.train_step(x + ID0, y + ID0, tc.lr_at(step, 0, steps, tc.learning_rate), tc)
        train_s += time.perf_counter() - t0
