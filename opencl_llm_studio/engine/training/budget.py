"""Training by wall time: a pausable clock, the plan of a time budget, and the pacing of
evaluations.

A run with TrainConfig.time_budget_s > 0 is planned in seconds, not steps (engine.training.trainer):
- engine.progress.Clock: seconds of training (elapsed_s), carried into a continued run; time
  paused in the studio does not count, so a pause never shortens training.
- `TimePlan`: the stages split the budget by time share (pretraining gets
  the pretraining steps' share of both stages' steps, the user's step split); each stage ends
  its training steps early enough for its stage-end phases (validation, samples, recall: the
  `reserve`) to finish by its deadline. The learning rate follows the share of the stage's
  training time used (engine.training.schedule: warmup, stable, decay placed by progress), so a machine
  that gets slower or faster only moves where the steps fall, never the rate's shape.
- `EvalPacer`: periodic validation and samples take at most `eval_share` of the wall time
  (the first one always runs, so the curve starts early), so a budget buys training.

Every estimate is built from what the phase itself is capped at: validation from the windows
it scores, samples from the tokens they generate, recall from engine.training.evaluate's per-case caps,
each priced by measured speeds (seconds per training step, per validation token, per generated
token), and replaced by the phase's measured time once it has run.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

MEDIAN_OF = 50      # recent steps in the step-time estimate: follows a change of speed in ~25
MIN_MEASURED = 3    # steps measured (besides the first) before the plan ends a stage early or
#                     places a decay
EVAL_FORWARD = 0.5  # a validation token costs about this share of a training token until
#                     measured (forward only: ~1/3 of forward + backward + AdamW, rounded up)


@dataclass
class PhaseCosts:
    """What one stage end does, in the units its caps are stated in (known before training):
    eval_tokens (validation targets scored), sample_tokens (tokens one round of samples
    generates, prompts' prefill counted as one token each), recall_tokens (the same for the
    recall check, 0 when off)."""
    eval_tokens: int
    sample_tokens: int = 0
    recall_tokens: int = 0
    measured: dict = field(default_factory=dict)   # kind -> seconds, once run


class TimePlan:
    """The plan of a time-budgeted run (see the module docstring).

    budget_s: seconds of training for the whole run (elapsed_s at its end); tune_share: the
    tuning stage's share of the budget (0 without dialogues); tokens_per_step: B * T (to price
    validation tokens from training steps until an evaluation is measured); costs: per stage
    ("pretrain", "tune") the PhaseCosts of its end; per_token_s: a first measure of the decode
    speed (seconds per generated token)."""

    def __init__(self, budget_s: float, tune_share: float, tokens_per_step: int,
                 costs: dict[str, PhaseCosts], per_token_s: float = 0.0):
        self.budget_s = float(budget_s)
        self.tune_share = min(max(float(tune_share), 0.0), 1.0)
        self.tokens_per_step = max(int(tokens_per_step), 1)
        self.costs = costs
        self._steps: deque[float] = deque(maxlen=MEDIAN_OF)
        self._first_in = True   # the run's first step is still in _steps
        self._per_token: deque[float] = deque([per_token_s] if per_token_s > 0 else [],
                                              maxlen=MEDIAN_OF)
        self._eval_s_per_token: float | None = None
        self._pretrain_ended: float | None = None
        self._recall_s_per_token: float | None = None

    def end_pretrain(self, elapsed: float) -> None:
        """Pretraining is over at `elapsed`: tuning has the time from there to the budget."""
        self._pretrain_ended = elapsed

    # -- measurements ----------------------------------------------------------------------
    def step_done(self, seconds: float) -> None:
        """Wall seconds of one training step (batch, update; evaluations excluded)."""
        self._first_in = self._first_in and len(self._steps) < MEDIAN_OF
        self._steps.append(max(seconds, 0.0))

    def eval_done(self, seconds: float, tokens: int) -> None:
        """A validation pass over `tokens` scored targets took `seconds`."""
        if tokens > 0:
            self._eval_s_per_token = max(seconds, 0.0) / tokens

    def decode_done(self, seconds: float, tokens: int) -> None:
        """Generation (samples, recall) of `tokens` tokens took `seconds`."""
        if tokens > 0:
            self._per_token.append(max(seconds, 0.0) / tokens)

    def stage_end_done(self, stage: str, kind: str, seconds: float) -> None:
        """A stage-end phase ("eval", "samples", "recall") of `stage` was measured."""
        if stage in self.costs:
            self.costs[stage].measured[kind] = max(seconds, 0.0)
            tokens = self.costs[stage].recall_tokens
            if kind == "recall" and tokens:   # prices the next stage's recall at this rate
                self._recall_s_per_token = max(seconds, 0.0) / tokens

    # -- estimates -------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """MIN_MEASURED steps are measured besides the run's first (kernel builds): until then
        estimates from step times are not trusted to end a stage or place its decay."""
        n = len(self._steps) - (1 if self._first_in and len(self._steps) > 1 else 0)
        return n >= MIN_MEASURED

    @property
    def step_s(self) -> float | None:
        """Median seconds per training step (None before the first). The run's first step
        (kernel builds, buffer allocation: seconds where later ones take milliseconds) counts
        only until a second one is measured."""
        steps = list(self._steps)[1:] if self._first_in and len(self._steps) > 1 else self._steps
        return float(statistics.median(steps)) if steps else None

    @property
    def per_token_s(self) -> float:
        """Median decode seconds per token (a median: one slow round is not believed)."""
        return float(statistics.median(self._per_token)) if self._per_token else 0.0

    def eval_s(self, tokens: int) -> float:
        """Seconds to score `tokens` validation targets."""
        if self._eval_s_per_token is not None:
            return tokens * self._eval_s_per_token
        step = self.step_s or 0.0
        return tokens * step / self.tokens_per_step * EVAL_FORWARD

    def reserve(self, stage: str) -> float:
        """Seconds the end of `stage` needs (its validation, samples and recall)."""
        c = self.costs.get(stage)
        if c is None:
            return 0.0
        m = c.measured
        return (m.get("eval", self.eval_s(c.eval_tokens))
                + m.get("samples", c.sample_tokens * self.per_token_s)
                + m.get("recall", c.recall_tokens * (self._recall_s_per_token
                                                     or self.per_token_s)))

    def deadline(self, stage: str) -> float:
        """Elapsed seconds by which `stage` (its end phases included) is over."""
        if stage == "pretrain":
            if self._pretrain_ended is not None:
                return self._pretrain_ended
            return self.budget_s * (1.0 - self.tune_share)
        return self.budget_s

    def train_end(self, stage: str) -> float:
        """Elapsed seconds at which `stage`'s training steps stop."""
        return self.deadline(stage) - self.reserve(stage)

    def fits_step(self, stage: str, elapsed: float) -> bool:
        """Another training step of `stage` ends before its training time is up. Until
        MIN_MEASURED steps are measured, only a deadline already passed ends a stage (the
        reserve is priced from step times until an evaluation is measured, and a first step
        that built the kernels would price it many times too high)."""
        if not self.settled:
            return elapsed < self.deadline(stage)
        return elapsed + self.step_s <= self.train_end(stage)

    def progress(self, stage: str, stage_start: float, elapsed: float) -> float:
        """Share of `stage`'s training time used at `elapsed` (0..1), for the lr schedule; 0
        until the plan is settled (a first step that built kernels priced the stage's end at
        minutes, put the decay at its floor from step 2, and the no-rise rule kept it there)."""
        if not self.settled:
            return 0.0
        span = self.train_end(stage) - stage_start
        if span <= 0:
            return 1.0
        return min(max((elapsed - stage_start) / span, 0.0), 1.0)

    def steps_left(self, stage: str, elapsed: float, overhead: float = 0.0) -> int:
        """Training steps of `stage` that still fit from `elapsed` on; overhead: the share of
        wall time periodic evaluations add to a step (EvalPacer.share)."""
        step = self.step_s
        if step is None:
            return 1
        per = step * (1.0 + overhead)
        start = max(elapsed, self.deadline("pretrain")) if stage == "tune" else elapsed
        return max(0, int((self.train_end(stage) - start) / max(per, 1e-9)))


class EvalPacer:
    """Periodic phases (validation, samples) at their step intervals, skipped while they would
    take more than `max_share` of the wall time so far (0: never skipped). The first due one
    always runs."""

    def __init__(self, max_share: float):
        self.max_share = max_share
        self.spent = 0.0     # seconds of periodic phases so far
        self.runs = 0

    def allows(self, elapsed: float, cost_s: float) -> bool:
        if self.max_share <= 0 or self.runs == 0:
            return True
        return self.spent + cost_s <= self.max_share * max(elapsed, 1e-9)

    def done(self, seconds: float) -> None:
        self.spent += max(seconds, 0.0)
        self.runs += 1

    def share(self, elapsed: float) -> float:
        """Periodic phases' time per second of the rest (for planning step counts)."""
        rest = max(elapsed - self.spent, 1e-9)
        return self.spent / rest if self.runs else 0.0


def tune_time_share(train_config, has_tune: bool) -> float:
    """With a time budget, the tuning stage's share of it: the step split's, tune_steps of the
    run's total (both stages); 0 without dialogues."""
    if not has_tune:
        return 0.0
    return train_config.tune_steps / max(train_config.total_steps, 1)
