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

from opencl_llm_studio.engine.config import TrainConfig, run_steps

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


# ------------------------------------------------------------------ a run's rate, step by step
@dataclass(frozen=True)
class StageSteps:
    """Where a run's stages end, in optimizer steps: `pretrain` steps of pretraining, then
    `tune` steps of tuning (totals, not additions). A run planned in steps takes them from its
    settings (TrainConfig.pretrain_steps / tune_steps); with a time budget they are the time
    plan's estimate (engine.training.trainer re-makes them each step), so the person's
    settings stay as given (issue 35: the time plan lives in its own object)."""
    pretrain: int
    tune: int

    @classmethod
    def of(cls, tc: TrainConfig) -> "StageSteps":
        """The step totals `tc` sets."""
        return cls(int(tc.pretrain_steps), int(tc.tune_steps))

    def total(self, has_tune: bool) -> int:
        """Steps of the whole run (engine.config.run_steps: tuning only with dialogues)."""
        return run_steps(self.pretrain, self.tune, has_tune)

    def on(self, tc: TrainConfig) -> TrainConfig:
        """`tc` with these totals: what a checkpoint records and a front end shows as the
        run's settings."""
        return tc.replace(pretrain_steps=self.pretrain, tune_steps=self.tune)


def stage_of(steps: StageSteps, has_tune: bool, step: int) -> str:
    """The stage global `step` is in: "pretrain" before steps.pretrain (or always, for a run
    without dialogues to tune on), else "tune"."""
    return "pretrain" if step < steps.pretrain or not has_tune else "tune"


def stage_peak(tc: TrainConfig, stage: str) -> float:
    """A stage's peak rate: learning_rate while pretraining, TrainConfig.tune_peak while tuning."""
    return tc.learning_rate if stage == "pretrain" else tc.tune_peak


def stage_start(steps: StageSteps, stage: str) -> int:
    """The global step a stage begins at: 0 for pretraining, steps.pretrain for tuning."""
    return 0 if stage == "pretrain" else steps.pretrain


def planned_lr(tc: TrainConfig, steps: StageSteps, has_tune: bool, step: int) -> float:
    """The rate of global `step` under the step plan `steps`: its stage's lr_at at its peak."""
    stage = stage_of(steps, has_tune, step)
    n = steps.pretrain if stage == "pretrain" else steps.tune
    return lr_at(tc, step, stage_start(steps, stage), n, stage_peak(tc, stage))


def rewarm_cap(rewarm: Rewarm | None, steps: StageSteps, has_tune: bool, step: int,
               lr: float) -> float:
    """lr held to a continued run's re-warm ramp, within the stage it was continued in (the
    next stage warms up on its own)."""
    if rewarm is None or stage_of(steps, has_tune, step) != stage_of(steps, has_tune, rewarm.step):
        return lr
    return rewarm.cap(step, lr)


def run_lr(tc: TrainConfig, steps: StageSteps, has_tune: bool, rewarm: Rewarm | None,
           step: int) -> float:
    """The learning rate of global `step` of a run planned in steps: planned_lr, held to its
    re-warm ramp."""
    return rewarm_cap(rewarm, steps, has_tune, step, planned_lr(tc, steps, has_tune, step))


def rewarm_on_continue(tc: TrainConfig, steps: StageSteps, has_tune: bool, step: int,
                       history: list[dict], budget_given: bool) -> tuple[Rewarm | None, str | None]:
    """The re-warm of a run continued at `step` under its new settings `tc` and stage totals
    `steps` (budget_given: a time budget was set, which plans the rate anew): none when nothing was trained or the step
    plan's rate goes on where the run's last rate stood; else a ramp from that rate over
    warmup_steps, and a note for the person when the rate had decayed below the stage's peak."""
    last = last_lr(history)
    same = (not budget_given and last is not None and step > 0
            and abs(planned_lr(tc, steps, has_tune, step - 1) - last) <= 1e-6 * last)
    if last is None or step == 0 or same:   # nothing done, or the schedule goes on
        return None, None
    rewarm = Rewarm(step, last, max(tc.warmup_steps, 1))
    peak = stage_peak(tc, stage_of(steps, has_tune, step))
    if last >= 0.999 * peak:
        return rewarm, None
    return rewarm, (f"The learning rate was {last:.2e} at step {step}; it re-warms from there "
                    f"over {rewarm.steps} steps, then follows the schedule (peak {peak:.2e}).")


class BudgetRate:
    """The learning rate of a run with a time budget (engine.training.budget.TimePlan gives the
    progress): each stage's StageSchedule at the share of its time used, its warmup fixed once
    the plan's estimates have settled (TrainConfig.warmup_for of the steps then planned), held
    to a re-warm ramp, and after warmup never rising (an estimate that moves must not raise the
    rate: the no-rise rule)."""

    def __init__(self):
        self.warmup: dict[str, int] = {}   # stage -> its warmup steps, once fixed
        self._last: tuple[str, float] | None = None   # (stage, the last rate given)

    def lr(self, tc: TrainConfig, steps: StageSteps, has_tune: bool, rewarm: Rewarm | None,
           stage: str, step: int, progress: float, planned_steps: int | None = None) -> float:
        """The rate of global `step` in `stage` at `progress` (0-1) of the stage's time
        (steps: the plan's stage totals now).
        planned_steps: the steps the stage will have by the plan's settled estimate (None
        before it settles); the first one given fixes the stage's warmup."""
        into = step - stage_start(steps, stage)
        if stage not in self.warmup and planned_steps is not None:
            self.warmup[stage] = tc.warmup_for(max(planned_steps, 1))
        warm = self.warmup.get(stage, tc.warmup_steps)
        rate = StageSchedule(stage_peak(tc, stage), warm, tc.decay_fraction,
                             tc.min_lr_ratio).lr(into, progress)
        capped = rewarm_cap(rewarm, steps, has_tune, step, rate)
        rewarming, rate = capped < rate, capped
        if self._last and self._last[0] == stage and into + 1 > warm and not rewarming:
            rate = min(rate, self._last[1])
        self._last = (stage, rate)
        return rate

