"""The training loop over a TrainingSession: one StepMetrics per optimizer step.

`Trainer(session).run()` is the generator the CLI and the studio drive (docs/DESIGN.md): the
session holds the state (model, data, step, history); the trainer decides each step's stage and
learning rate (engine.training.schedule), draws its batch, takes it, guards against NaN/Inf, and runs the
checks due after it (validation, samples, the stage-end recall). A run of fixed steps moves by
step counts; a run with a time budget (TrainConfig.time_budget_s) by seconds of training
(engine.training.budget): stages by time share, the lr by the share of the stage's time used, the
session's step counts re-estimated after each step so that plots and ETAs follow the plan.

Stopping: `session.monitor.cancel()` lands between steps, inside a long phase, and inside a step
between two blocks of the model (Runtime.stop_point): an abandoned step is a step not taken
(weights, moments, step and batch RNG as before it). The trainer's `clock` is paused by a
caller that holds the generator (the studio's Pause), so a pause never counts as training.
"""

from __future__ import annotations

import time
from typing import Iterator

import numpy as np
import pyopencl as cl

from opencl_llm_studio.engine.training.best_weights import BestWeights
from opencl_llm_studio.engine.training.budget import EvalPacer, PhaseCosts, TimePlan, tune_time_share
from opencl_llm_studio.engine.data.corpus import FINAL_VAL_TOKENS
from opencl_llm_studio.engine.progress import Cancelled, Clock
from opencl_llm_studio.engine.errors import DeviceError, TrainingDiverged
from opencl_llm_studio.engine.training.evaluate import (answer_accuracy, fact_recall, pretrain_eval_tokens,
                                                        recall_tokens, tune_eval_tokens, tune_val_loss)
from opencl_llm_studio.engine.training.health import HealthMonitor
from opencl_llm_studio.engine.metrics import StepMetrics
from opencl_llm_studio.engine.generation.sampling import SamplingParams
from opencl_llm_studio.engine.training import schedule
from opencl_llm_studio.engine.training.schedule import BudgetRate, StageSteps
from opencl_llm_studio.engine.training.snapshot import Snapshot

MAX_BAD_STEPS = 3          # consecutive NaN/Inf steps before the run is stopped and restored
SAMPLE_PROMPT_CHARS = 200  # sample prompts come from the start of a document / question
STOP_POINTS_FROM_S = 0.25  # steps slower than this can be stopped between blocks (faster ones
#                            end soon anyway; the per-block wait costs GPUs a little)


class Trainer:
    """Runs a session's training (see the module docstring). clock: seconds of training,
    starting from what the run already had (tests inject one with their own time function)."""

    def __init__(self, session, clock: Clock | None = None):
        """Raises ConfigError when training at the session's batch size would not fit the
        device (an opened model was checked for itself only)."""
        session.check_training_fits()
        self.session = session
        self.clock = clock or Clock(session.elapsed_s())
        tc = session.train_config
        self.plan: TimePlan | None = None
        self.pacer = EvalPacer(tc.eval_share if tc.time_budget_s > 0 else 0.0)
        self._good: Snapshot | None = None   # last finite state, for the NaN guard
        self._best = BestWeights()           # pretraining's lowest validation (best_weights)
        self._step_s: float | None = None
        self.rate = BudgetRate()   # the learning rate with a time budget (engine.training.schedule)
        self._tunes = False
        self._bad = 0                     # steps in a row with a non-finite loss or gradient
        self._eval_tokens = 0             # targets the last validation scored
        self._periodic_eval_tokens = 0    # targets a periodic validation scores

    # ------------------------------------------------------------------ the loop
    def run(self) -> Iterator[StepMetrics]:
        """Train from session.step to the end of the plan, one StepMetrics per step. Stops when
        the caller stops iterating; call session.save after a stop to keep the work.

        When the monitor is cancelled during a step's validation, samples or recall, that
        step's record is still yielded with what was computed (extra["interrupted"] names the
        phase); a cancel inside a step abandons it and raises Cancelled, as does asking for a
        step after a cancel."""
        s = self.session
        tc = s.train_config
        self._tunes = s.has_tune and s.steps.tune > 0   # a tuning stage follows pretraining
        if tc.time_budget_s > 0:
            self.plan = self._time_plan()
        elif s.step >= s.total_steps:
            return
        self._snapshot()
        self._bad = 0
        health = HealthMonitor(s.model, tc, s.pretrain.train_stream, steps=s.steps)  # engine/training/health.py
        stage = s.stage_at(s.step)
        stage_start = self._stage_start_s(stage)
        t_mark = self.clock.now()
        while True:
            m, stage_end, done = self._one_step(stage, stage_start, t_mark, health)
            if stage_end and not done:
                stage, stage_start = "tune", self.clock.now()
                if self.plan:
                    self.plan.end_pretrain(stage_start)
            t_mark = self.clock.now()
            yield m
            if done:
                return

    def _one_step(self, stage: str, stage_start: float, t_mark: float,
                  health: HealthMonitor) -> tuple[StepMetrics, bool, bool]:
        """One step of run() with its checks and record: (its StepMetrics, whether it ended
        its stage, whether it ended the run). t_mark: the clock when the step began."""
        s = self.session
        s.monitor.check()
        lr = self._lr(stage, stage_start)
        health.before_step(s.step + 1)
        x, y, loss, gnorm, skipped, dt = self._step(stage, lr)
        s.step += 1
        self._check_diverged(skipped, loss, lr)
        if not skipped and np.isfinite(loss):
            s.last_loss = loss
        now = self.clock.now()
        self._step_s = now - t_mark
        if self.plan:
            self.plan.step_done(now - t_mark)
        due = self._periodic_due()
        stage_end = self._stage_ends(stage, now + sum(due.values()))
        if self.plan:
            self._replan(stage, stage_end, now)
        done = (s.step >= s.total_steps if self.plan is None
                else stage_end and (stage == "tune" or not self._tunes))
        m = StepMetrics(s.step, s.total_steps, stage, loss, gnorm, lr,
                        x.size / max(dt, 1e-9), now, skipped=skipped)
        health.after_step(m)
        try:
            self._step_checks(m, stage, stage_end, due, final=done)
        except Cancelled:  # keep the step and what was measured; the caller saves
            m.extra["interrupted"] = s.monitor.phase or "checks"
        self._record(m)
        return m, stage_end, done

    def _check_diverged(self, skipped: bool, loss: float, lr: float) -> None:
        """Count steps in a row whose loss or gradient was not finite; at MAX_BAD_STEPS restore
        the last good weights and raise TrainingDiverged."""
        self._bad = self._bad + 1 if skipped or not np.isfinite(loss) else 0
        if self._bad >= MAX_BAD_STEPS:
            self._restore()
            raise TrainingDiverged(
                f"The loss or gradient was NaN/Inf for {self._bad} steps in a row (learning rate "
                f"{lr:.2e}); training stopped and the last good weights (step "
                f"{self.session.step}) were restored.",
                "Lower the learning rate (e.g. by 3x) and train again.")

    def _record(self, m: StepMetrics) -> None:
        """Complete a step's record (its evaluations' time included, the plan's totals), add it
        to the session's history, and keep a snapshot of a validated healthy state."""
        s = self.session
        m.elapsed_s = self.clock.now()   # evaluations of this step included
        m.total_steps = s.total_steps
        if self._tunes:
            m.pretrain_steps = s.steps.pretrain
        if self.plan:
            m.time_left_s = max(self.plan.budget_s - m.elapsed_s, 0.0)
        s.history.append({k: v for k, v in m.to_dict().items() if k != "samples"})
        if m.val_loss is not None and self._bad == 0 and "interrupted" not in m.extra:
            self._snapshot()

    def _step(self, stage: str, lr: float):
        """One optimizer step: (inputs, targets, loss, grad norm, skipped, seconds). A stop
        inside it restores the batch RNG (the step is not taken) and raises Cancelled."""
        s = self.session
        rng_state = s.rng.bit_generator.state
        x, y = self._batch(stage)
        slow = self._step_s is None or self._step_s >= STOP_POINTS_FROM_S   # first: unknown
        check = s.monitor.check if slow else None
        t0 = time.perf_counter()
        try:
            loss, gnorm, skipped = s.model.train_step(x, y, lr, s.train_config.optim(), check)
        except Cancelled:
            s.rng.bit_generator.state = rng_state
            raise
        except cl.Error as e:
            raise DeviceError(f"The OpenCL device failed during step {s.step + 1}: {e}",
                              "It may have run out of memory: use a smaller batch size, "
                              "context length or model, or another device. The last "
                              "checkpoint is intact.") from e
        return x, y, loss, gnorm, skipped, time.perf_counter() - t0

    def _batch(self, stage: str):
        s = self.session
        B = s.train_config.batch_size
        if stage == "pretrain":
            return s.pretrain.train_batch(s.rng, B)
        n_replay = int(round(B * s.train_config.replay_fraction))
        x, y = s.tune.train_batch(s.rng, B - n_replay)
        if n_replay:   # general text in the dialogues' window: one (B, W) batch
            rx, ry = s.pretrain.train_batch(s.rng, n_replay, s.window("tune"))
            x, y = np.concatenate([x, rx]), np.concatenate([y, ry])
        return x, y

    # ------------------------------------------------------------------ stages and lr
    def _stage_ends(self, stage: str, now: float) -> bool:
        """The step just taken was the last of its stage."""
        s = self.session
        if self.plan is None:
            return s.step == s.total_steps or s.stage_at(s.step) != stage
        return not self.plan.fits_step(stage, now)

    def _stage_start_s(self, stage: str) -> float:
        """Seconds of training at which `stage` began (for the time plan's progress): 0 for
        pretraining; for tuning, the end of the last pretraining record (or now)."""
        if stage == "pretrain":
            return 0.0
        for record in reversed(self.session.history):
            if record.get("stage") == "pretrain":
                return float(record.get("elapsed_s", 0.0))
        return self.clock.now()

    def _lr(self, stage: str, stage_start: float) -> float:
        """This step's learning rate (engine.training.schedule): the session's step plan, or
        with a time budget the stage schedule at the share of the stage's time used."""
        s = self.session
        if self.plan is None:
            return s.lr_at(s.step)
        now = self.clock.now()
        planned = None
        if stage not in self.rate.warmup and self.plan.settled:   # frozen once estimates hold
            into = s.step - schedule.stage_start(s.steps, stage)
            planned = into + self.plan.steps_left(stage, now, self.pacer.share(now))
        # progress at the step's end, as a step plan's (s + 1) / n: the last step is at the floor
        progress = self.plan.progress(stage, stage_start, now + (self.plan.step_s or 0.0))
        return self.rate.lr(s.train_config, s.steps, s.has_tune, s.rewarm, stage, s.step,
                            progress, planned)

    # ------------------------------------------------------------------ the time plan
    def _time_plan(self) -> TimePlan:
        """The TimePlan of train_config.time_budget_s: the tuning share from the step split,
        each stage end priced by what it will score and generate, the decode speed measured
        on 24 tokens (only when samples or recall will need it)."""
        s = self.session
        tc = s.train_config
        share = tune_time_share(s.train_config, s.has_tune)
        prompts = len(sample_prompts(s, "pretrain"))
        samples = prompts * (tc.sample_tokens + 1) if tc.sample_interval else 0
        eval_tokens = pretrain_eval_tokens(s)
        final = pretrain_eval_tokens(s, FINAL_VAL_TOKENS,   # the run's end scores all of it
                                     "tune" if self._tunes else "pretrain")
        costs = {"pretrain": PhaseCosts(eval_tokens if self._tunes else final, samples,
                                        recall_tokens(s, "pretrain") if tc.evaluate_recall else 0)}
        if self._tunes:
            costs["tune"] = PhaseCosts(final + tune_eval_tokens(s), samples,
                                       recall_tokens(s, "tune") if tc.evaluate_recall else 0)
        self._periodic_eval_tokens = eval_tokens
        per_token = 0.0
        if samples or tc.evaluate_recall:
            stamps: list[float] = []
            s.generate_ids([s.tokenizer.bos_id], 24, SamplingParams(greedy=True),
                           on_token=lambda _: stamps.append(self.clock.now()))  # the plan's time
            per_token = float(np.median(np.diff(stamps[4:]))) if len(stamps) > 5 else 0.0
        plan = TimePlan(tc.time_budget_s, share,
                        tc.batch_size * s.window(s.stage_at(s.step)), costs, per_token)
        if s.has_tune and s.stage_at(s.step) == "tune":   # a continued run, already tuning
            plan.end_pretrain(self._stage_start_s("tune"))
        return plan

    def _replan(self, stage: str, stage_end: bool, now: float) -> None:
        """The session's stage totals (session.steps): the steps done and the plan's estimate
        of those to come, the stage boundary fixed once pretraining is over. The settings
        (session.train_config) are not touched."""
        s, plan = self.session, self.plan
        overhead = self.pacer.share(now)
        if stage == "pretrain":
            pre = s.step if stage_end else s.step + max(plan.steps_left("pretrain", now, overhead), 1)
            tune = max(plan.steps_left("tune", now, overhead), 1) if self._tunes else 0
        else:
            pre = s.steps.pretrain
            left = 0 if stage_end else max(plan.steps_left("tune", now, overhead), 1)
            tune = s.step - pre + left
        s.steps = StageSteps(pre, tune)

    # ------------------------------------------------------------------ checks after a step
    def _periodic_due(self) -> dict[str, float]:
        """The periodic phases due after the step just taken ("eval", "samples"), each with its
        estimated seconds (0 without a time budget); with one, those the pacer allows."""
        s = self.session
        tc = s.train_config
        due = {}
        if s.step % tc.eval_interval == 0:
            due["eval"] = 0.0
        if tc.sample_interval and s.step % tc.sample_interval == 0:
            due["samples"] = 0.0
        if self.plan is None:
            return due
        cost = self.plan.costs["pretrain"]
        for kind in list(due):
            due[kind] = (self.plan.eval_s(self._periodic_eval_tokens) if kind == "eval"
                         else cost.sample_tokens * self.plan.per_token_s)
            if not self.pacer.allows(self.clock.now(), due[kind]):
                del due[kind]
        return due

    def _step_checks(self, m: StepMetrics, stage: str, stage_end: bool, due: dict,
                     final: bool = False) -> None:
        """Validation, samples and the stage-end recall after step m.step, into m: the periodic
        ones in `due`, every one at a stage end; at the run's end (final) the validation scores
        the whole held-out text (engine.data.corpus.FINAL_VAL_TOKENS). Each is measured for the plan."""
        s = self.session
        if final:   # no step follows: the checks' forward-only sets take the training set's place
            s.model.release_training_sets()
        if stage_end or "eval" in due:
            self._timed(stage, stage_end, "eval", self._evaluate, m, stage, final)
            if stage == "pretrain" and s.pretrain.val_source == "held-out":
                self._keep_best(m, stage, stage_end, final)
        if s.train_config.sample_interval and (stage_end or "samples" in due):
            m.samples = self._timed(stage, stage_end, "samples", samples, s, stage)
        if stage_end and s.train_config.evaluate_recall:
            m.recall = self._timed(stage, stage_end, "recall", recall, s, stage)

    def _timed(self, stage: str, stage_end: bool, kind: str, fn, *args):
        """fn(*args), its seconds told to the plan and the pacer."""
        t0 = self.clock.now()
        result = fn(*args)
        dt = self.clock.now() - t0
        if self.plan is not None:
            if stage_end:
                self.plan.stage_end_done(stage, kind, dt)
            else:
                self.pacer.done(dt)
            if kind == "eval":
                self.plan.eval_done(dt, self._eval_tokens)
            elif kind == "samples":
                self.plan.decode_done(dt, self.plan.costs[stage].sample_tokens)
        return result

    def _evaluate(self, m: StepMetrics, stage: str, final: bool = False) -> None:
        """Validation numbers into m: the pretraining text (val_loss while pretraining,
        pretrain_val_loss while tuning; val_bpb, val_source and val_tokens with it) and, while
        tuning, val_loss on the tune dialogues. final: the whole held-out text."""
        s = self.session
        score = s.pretrain_val(FINAL_VAL_TOKENS if final else None, stage)
        m.val_bpb, m.val_source, m.val_tokens = score.bpb, s.pretrain.val_source, score.tokens
        m.val_bpb_stderr = score.bpb_stderr
        self._eval_tokens = score.tokens
        if stage == "pretrain":
            m.val_loss = score.loss
        else:
            m.val_loss = tune_val_loss(s)
            m.pretrain_val_loss = score.loss
            self._eval_tokens += tune_eval_tokens(s)

    def _keep_best(self, m: StepMetrics, stage: str, stage_end: bool, final: bool) -> None:
        """Pretraining's validation reading m.val_loss offered to the best-weights copy; at
        the stage's end, the copy's weights kept when they score lower on the stage end's set
        (engine.training.best_weights), m's validation numbers then the kept weights', with a
        warning that names the step."""
        s, best = self.session, self._best
        periodic = None if final else m.val_loss   # the whole text is not the periodic windows
        if not stage_end:
            best.offer(s.model, s.step, m.val_loss)
            return
        if best.worth_trying(s.step, periodic):
            tokens = FINAL_VAL_TOKENS if final else None
            last_bpb = m.val_bpb
            k = best.choose(s.model, s.step, m.val_loss, lambda: s.pretrain_val(tokens, stage))
            if k.kept:
                m.val_loss, m.val_bpb = k.score.loss, k.score.bpb
                m.val_bpb_stderr, m.val_tokens = k.score.bpb_stderr, k.score.tokens
                m.extra.update(kept_step=k.step, last_step_bpb=last_bpb)
                m.warnings = (m.warnings or []) + [
                    f"The held-out validation was lowest at step {k.step} and rose after it: "
                    f"the model began to memorize its text. The weights of step {k.step} are "
                    f"kept ({k.score.bpb:.3f} bits per byte on the held-out text, against "
                    f"{last_bpb:.3f} for step {s.step}'s). A smaller model, a larger text or "
                    "fewer minutes would use the time better (Auto sizes the model for them)."]
        best.close()

    # ------------------------------------------------------------------ NaN guard
    def _snapshot(self) -> None:
        """Copy of the last good state (weights, AdamW, step, RNG) for the NaN guard; taken
        only when the weights are finite (engine.training.snapshot: in memory, or for a large
        model in a temporary file)."""
        s = self.session
        if self._good is None:
            self._good = Snapshot(s.model)
        self._good.take(s.model, (s.step, s.rng.bit_generator.state, len(s.history),
                                  s.steps))

    def _restore(self) -> None:
        s = self.session
        if self._good is None or not self._good.restore(s.model):
            return
        step, rng, n_hist, steps = self._good.extra
        s.step = step
        s.rng.bit_generator.state = rng
        s.steps = steps
        del s.history[n_hist:]


def sample_prompts(session, stage: str) -> list[str]:
    """Up to three prompts: the first words of documents spread through the text; while
    tuning, the first question of the dialogues first."""
    docs = session.pretrain.documents
    prompts = [" ".join(d[:SAMPLE_PROMPT_CHARS].split()[:3])
               for d in docs[:: max(len(docs) // 3, 1)][:3]]
    if stage == "tune" and session.has_tune:
        q = session.tune.questions()[0][0]
        prompts = [q[-1].content[:SAMPLE_PROMPT_CHARS]] + prompts[:2]
    return prompts


def samples(session, stage: str) -> list[tuple[str, str]]:
    """[(prompt, greedy continuation)] for sample_prompts; while tuning the question is
    answered in the chat format."""
    from opencl_llm_studio.engine.data.dialogue import Message
    out = []
    n = session.train_config.sample_tokens
    prompts = sample_prompts(session, stage)
    for i, p in enumerate(prompts):
        session.monitor.tick("generating samples", i, len(prompts))
        if stage == "tune" and i == 0:
            text = session.chat([Message("user", p)], max_new_tokens=n, greedy=True)
        else:
            text = session.generate(p, max_new_tokens=n, greedy=True)
        out.append((p, text))
    return out


def recall(session, stage: str) -> dict:
    """The stage-end check: fact recall, and while tuning the answers to the dialogues."""
    result = {"stage": stage, "facts": fact_recall(session).to_dict()}
    if stage == "tune":
        result["answers"] = answer_accuracy(session).to_dict()
    return result
