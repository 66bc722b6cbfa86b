"""The per-step metrics record the training generator yields (one line of metrics.jsonl)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class StepMetrics:
    """One optimizer step. Losses are mean cross-entropy in nats; lr per step; tokens_per_s
    counts every input position of the batch; elapsed_s since this `train()` call began."""

    step: int                 # 1-based count of optimizer steps done, over both stages
    total_steps: int
    stage: str                # "pretrain" | "tune"
    loss: float
    grad_norm: float          # global L2 norm before clipping
    lr: float
    tokens_per_s: float
    elapsed_s: float
    val_loss: float | None = None           # pretrain: held-out text; tune: the dialogues
    pretrain_val_loss: float | None = None  # during tuning: forgetting monitor
    samples: list | None = None             # [(prompt, continuation)] when generated
    skipped: bool = False                   # NaN/Inf gradient: no update this step
    recall: dict | None = None              # fact recall at the end of a stage
    health: dict | None = None              # engine.health: per-group norms every N steps
    warnings: list | None = None            # engine.health: divergence / lr far too high
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v is not None and v != {} and v is not False}
        for k, v in list(d.items()):
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = str(v)  # JSON has no NaN
        return d
