"""The learning-rate schedule: warmup, a stable phase, and a decay placed by progress (WSD).

One stage (pretraining or tuning) runs at

    lr = peak * warmup(s) * decay(p)        s: steps into the stage, p: progress in [0, 1]

where warmup(s) = min(1, (s + 1) / warmup_steps) is linear from 0 (Goyal et al. 2017) and
decay(p) = 1 until p reaches 1 - decay_fraction, then falls to min_lr_ratio at p = 1 along
1 - sqrt (the "1-sqrt" cooldown of Hägele et al. 2024, "Scaling Laws and Compute-Optimal
Training Beyond Fixed Training Durations": warmup-stable-decay matches a cosine schedule of the
same length, and a run can end well wherever its decay is placed). Progress p is the share of
the stage's steps done (a run of fixed steps) or of the stage's training time used (a time
budget, engine.training.budget): both runs end at the floor, whatever the machine's speed.

A continued run whose learning rate had already decayed re-warms: for warmup_steps steps after
the continue point the rate rises linearly from where it stood to the schedule's value
(`Rewarm`), so the rate never jumps up in one step (Ibrahim et al. 2024, "Simple and Scalable
Strategies to Continually Pre-train Large Language Models").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opencl_llm_studio.engine.config import TrainConfig

DECAY_FRACTION = 0.2  # share of a stage spent decaying (Hägele et al. 2024: 20% matches cosine)


def decay_factor(progress: float, decay_fraction: float, min_ratio: float) -> float:
    """1 in the stable phase, then 1-sqrt down to min_ratio at progress 1 (clamped to [0, 1])."""
    p = min(max(progress, 0.0), 1.0)
    start = 1.0 - decay_fraction
    if decay_fraction <= 0 or p <= start:
        return 1.0
    q = (p - start) / decay_fraction
    return min_ratio + (1.0 - min_ratio) * (1.0 - math.sqrt(q))


@dataclass(frozen=True)
class Rewarm:
    """A continued run's ramp: from `from_lr` at global step `step` up to the schedule over
    `steps` steps (linear)."""
    step: int
    from_lr: float
    steps: int

    def cap(self, step: int, lr: float) -> float:
        """lr, held to the ramp while it lasts (never above the schedule's lr)."""
        s = step - self.step
        if s < 0 or s >= self.steps or lr <= self.from_lr:
            return lr
        return min(lr, self.from_lr + (lr - self.from_lr) * (s + 1) / self.steps)

    def to_list(self) -> list:
        return [self.step, self.from_lr, self.steps]

    @classmethod
    def from_list(cls, value) -> "Rewarm | None":
        """The checkpoint's form back (None for none or an unreadable value)."""
        try:
            step, from_lr, steps = value
            return cls(int(step), float(from_lr), int(steps))
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class StageSchedule:
    """The learning rate of one stage: peak (per step), warmup_steps, decay_fraction and
    min_ratio (the floor is peak * min_ratio)."""
    peak: float
    warmup_steps: int
    decay_fraction: float = DECAY_FRACTION
    min_ratio: float = 0.1

    def lr(self, steps_into_stage: int, progress: float) -> float:
        """The rate of the step `steps_into_stage` (0-based) at `progress` of the stage."""
        warm = min(1.0, (steps_into_stage + 1) / max(self.warmup_steps, 1))
        return self.peak * warm * decay_factor(progress, self.decay_fraction, self.min_ratio)


def stage_schedule(tc: TrainConfig, stage_steps: int, peak: float) -> StageSchedule:
    """The StageSchedule of a stage of `stage_steps` steps at `peak` under `tc`'s warmup
    (TrainConfig.warmup_for), decay share and floor."""
    return StageSchedule(peak, tc.warmup_for(stage_steps), tc.decay_fraction, tc.min_lr_ratio)


def lr_at(tc: TrainConfig, step: int, stage_start: int, stage_steps: int, peak: float) -> float:
    """Learning rate for global `step` inside a stage of `stage_steps` steps starting at
    `stage_start`: warmup, stable, then decay to peak * min_lr_ratio at the stage's last step
    (progress = steps done / stage_steps)."""
    s = step - stage_start
    return stage_schedule(tc, stage_steps, peak).lr(s, (s + 1) / max(stage_steps, 1))


def last_lr(history: list[dict]) -> float | None:
    """The learning rate of a run's last step with a finite one in `history` (None: none yet),
    where a continued run's re-warm starts."""
    for record in reversed(history):
        lr = record.get("lr")
        if isinstance(lr, (int, float)) and math.isfinite(lr):
            return float(lr)
    return None
