"""One run's loop without a window: the Trainer's steps, each recorded in the run folder's
metrics.jsonl, a checkpoint every N steps and at the end, the folder's lock held
(studio.run_folder.RunRecorder). `llm-studio train` (studio.cli.train) and the studio's worker
(studio.ui.run.worker) both drive a run through it; what each adds is its own: a progress line
and Ctrl-C for the one, pause, chat between steps and signals for the other. Qt-free (an
import-linter contract in pyproject.toml)."""

from __future__ import annotations

import logging
import time
from typing import Callable

from opencl_llm_studio.engine.metrics import StepMetrics
from opencl_llm_studio.studio.run_folder import RunRecorder

log = logging.getLogger(__name__)


class RunDriver:
    """The steps of `session` from where it stands to the end of its plan.

    recorder: the run folder (None: nothing is written, e.g. a test's session). on_saved: called
    with the step after each checkpoint. on_save_error: called with the exception when a
    checkpoint cannot be written, and training goes on (the studio says it once); None: the
    exception is raised (the command line ends, saying why). clock: the Trainer's clock (tests
    give a fake one)."""

    def __init__(self, session, recorder: RunRecorder | None,
                 on_saved: Callable[[int], None] | None = None,
                 on_save_error: Callable[[BaseException], None] | None = None, clock=None):
        self.session, self.recorder = session, recorder
        self.on_saved, self.on_save_error = on_saved, on_save_error
        from opencl_llm_studio.engine.training.trainer import Trainer   # when a run starts
        self.trainer = Trainer(session, clock)   # its clock stops while a run is paused
        self._steps = self.trainer.run()
        self.save_s: float | None = None   # seconds the last checkpoint took

    @property
    def running(self) -> bool:
        """Whether steps are left to take (False after the last one or close())."""
        return self._steps is not None

    def step(self) -> StepMetrics | None:
        """The next step, its line written to metrics.jsonl and a checkpoint saved when one is
        due; None after the last step. Raises engine.progress.Cancelled on a stop (a stop
        inside a step does not take it) and what the engine raises (TrainingDiverged: the
        last good state was restored, see diverged())."""
        try:
            m = next(self._steps)
        except StopIteration:
            self._steps = None
            return None
        if self.recorder is not None:   # between steps: the generator is suspended
            self.recorder.record(m)
            if self.recorder.due(m.step):
                self.autosave()
        return m

    def autosave(self) -> bool:
        """Checkpoint into the run folder if the session moved since the last one; whether the
        folder now holds this step. A failure goes to on_save_error (or is raised)."""
        rec, s = self.recorder, self.session
        if rec is None or not rec.dirty(s):
            return rec is not None
        t0 = time.perf_counter()
        try:
            rec.save(s)
        except Exception as e:
            if self.on_save_error is None:
                raise
            self.on_save_error(e)
            return False
        self.save_s = time.perf_counter() - t0
        if self.on_saved is not None:
            self.on_saved(s.step)
        return True

    def diverged(self) -> None:
        """After TrainingDiverged (the engine restored the last good state): metrics.jsonl keeps
        the lines up to that step, so the folder and the next checkpoint agree."""
        if self.recorder is not None:
            self.recorder.truncate(self.session.step)

    def pause(self) -> None:
        self.trainer.clock.pause()   # a pause is never training time (a time budget)

    def resume(self) -> None:
        self.trainer.clock.resume()

    def close(self) -> None:
        """End the steps (the Trainer's generator closed; nothing is saved here)."""
        if self._steps is not None:
            try:
                self._steps.close()
            except Exception:   # closing must not raise into the caller; log it
                log.exception("closing the training generator")
            self._steps = None
