"""A time budget for training: how many steps fit in the seconds left, re-planned every step.

TrainConfig.time_budget_s > 0 makes TrainingSession.train() end when elapsed_s (wall seconds
of train(), carried into a continued run) reaches the budget, with the cosine schedule ending there
too: after every step the step count is re-planned from what was measured so far, so a machine
that gets slower or faster mid-run is followed (the schedule shifts by a step or two, which
moves the learning rate by a fraction of a percent).

The plan: remaining steps n such that
    elapsed + n * (t_step + t_eval / eval_interval + t_samples / sample_interval)
            + stage_ends * (t_eval + t_samples + t_recall) <= budget,
where t_step is the median wall time of the last MEDIAN_OF training steps (batch, update and
whatever the caller does between steps, such as saving a checkpoint), t_eval / t_samples /
t_recall the last measured evaluation, sample and stage-end recall times (until measured:
t_eval from the step time, the others from the tokens they generate times the measured decode
speed), and stage_ends the stage ends still ahead (the evaluation, samples and recall that
close a stage).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

MEDIAN_OF = 50      # recent steps in the step-time estimate: follows a change of speed in ~25
EVAL_FORWARD = 0.5  # a validation batch costs about this share of a training step until
#                     measured (forward only: ~1/3 of forward + backward + AdamW, rounded up)


def _median(values) -> float:
    return float(statistics.median(values))


@dataclass
class Costs:
    """Seconds per event; None until measured (then estimated, see TimeBudget)."""
    step: float | None = None
    eval: float | None = None
    samples: float | None = None
    recall: float | None = None


class TimeBudget:
    """Plans the remaining steps of a run that must end `budget_s` seconds into elapsed_s.

    eval_batches: batches per validation pass (for the estimate before one is measured);
    eval_interval / sample_interval: as TrainConfig (sample_interval 0 = no samples);
    sample_tokens: tokens one round of samples generates; recall_tokens: tokens the stage-end
    recall check reads and writes (prompts included: prefill costs about as much per token
    as decoding here); per_token_s: a first measure of the decode speed, refined from every
    round of samples until the recall itself is measured.
    """

    def __init__(self, budget_s: float, eval_batches: int, eval_interval: int,
                 sample_interval: int, sample_tokens: int = 0, recall_tokens: int = 0,
                 per_token_s: float = 0.0):
        self.budget_s = float(budget_s)
        self.eval_batches, self.eval_interval = eval_batches, eval_interval
        self.sample_interval, self.sample_tokens = sample_interval, sample_tokens
        self.recall_tokens = recall_tokens
        self._steps: deque[float] = deque(maxlen=MEDIAN_OF)
        self._per_token: deque[float] = deque([per_token_s] if per_token_s > 0 else [],
                                              maxlen=MEDIAN_OF)
        self.costs = Costs()

    def step_done(self, seconds: float) -> None:
        """Wall seconds of one training step, evaluations excluded."""
        self._steps.append(max(seconds, 0.0))
        self.costs.step = _median(self._steps)

    def measured(self, kind: str, seconds: float) -> None:
        """kind: "eval" (one validation pass, or both while tuning), "samples", "recall"."""
        setattr(self.costs, kind, max(seconds, 0.0))
        if kind == "samples" and self.sample_tokens:
            self._per_token.append(seconds / self.sample_tokens)

    @property
    def per_token_s(self) -> float:
        """Median decode seconds per token: the first measure and one per round of samples
        (a median, because one round slowed by a busy machine must not end the run early)."""
        return _median(self._per_token) if self._per_token else 0.0

    def _cost(self, kind: str) -> float:
        c = self.costs
        if kind == "eval":
            return c.eval if c.eval is not None else self.eval_batches * c.step * EVAL_FORWARD
        if kind == "samples":
            if not self.sample_interval:
                return 0.0
            return c.samples if c.samples is not None else self.sample_tokens * self.per_token_s
        return c.recall if c.recall is not None else self.recall_tokens * self.per_token_s

    def remaining_steps(self, elapsed_s: float, stage_ends: int) -> int:
        """Steps that still fit (>= 0) with `stage_ends` stage ends (1 or 2) still ahead.
        Raises ValueError before the first step_done()."""
        if self.costs.step is None:
            raise ValueError("remaining_steps() needs one measured step")
        t_eval, t_samples = self._cost("eval"), self._cost("samples")
        per_step = self.costs.step + t_eval / self.eval_interval
        if self.sample_interval:
            per_step += t_samples / self.sample_interval
        end = stage_ends * (t_eval + t_samples + self._cost("recall"))
        left = self.budget_s - elapsed_s - end
        return max(0, math.floor(left / max(per_step, 1e-9)))
