"""The training worker: a QObject that owns the TrainingSession, moved to its own QThread.

Everything that touches the session (create, train steps, autosave, chat, export, checkpoints)
runs as a slot on that one thread, so nothing can overlap a training step and no lock is needed.
Pause and stop are threading.Event flags checked between steps (docs/DESIGN.md: never
QThread.terminate()); the stop flag is also the session's engine.progress.Monitor flag, so Stop
and closing the window end a long phase (encoding a large text, validation, samples, recall,
a chat answer) within a fraction of a second, and the phase's progress is shown meanwhile.
Pausing returns to the thread's event loop with the generator kept, which
is what lets chat and export run on the paused weights; Resume re-enters the loop.
Every run writes into its run folder (studio.run_folder): metrics.jsonl each step, a checkpoint
every N steps, on pause, on stop, at the end and when the window closes, all between steps.
The GUI talks to the worker only through queued signals (WorkerHost) and the two flags; jobs
and results are the frozen dataclasses of studio.protocol, and a run ends with exactly one of
finished / stopped / failed (paused and resumed mark a hold in between).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback

from PySide6.QtCore import QObject, Signal, Slot

from opencl_llm_studio.engine.errors import DeviceError, StudioError, TrainingDiverged
from opencl_llm_studio.engine.extras import missing_extra
from opencl_llm_studio.engine.progress import Cancelled, Monitor
from opencl_llm_studio.studio.protocol import (ChatRequest, ContinueJob, ExportRequest, LoadJob, Outcome, RunPoint,
                             RunResult, SaveRequest, SessionInfo, SpeedJob, TrainJob, TuneJob)
from opencl_llm_studio.engine.files.model_card import tokenizer_name
from opencl_llm_studio.studio.run_driver import RunDriver
from opencl_llm_studio.studio.run_folder import RunRecorder, metrics_from_dict, remove_if_empty
from opencl_llm_studio.studio.ui.run.worker_lora import LoraTuning
from opencl_llm_studio.studio.ui.run.worker_tasks import ModelTasks
from opencl_llm_studio.studio.ui.run.worker_tune import KernelTuning, measure_speed

log = logging.getLogger(__name__)
EMIT_INTERVAL_S = 0.05  # metrics are batched: at most ~20 signals a second reach the GUI


def _is_device_failure(exc: BaseException) -> bool:
    """DeviceError, or a raw OpenCL error from a path the engine does not wrap (validation,
    samples, recall, reading weights back)."""
    if isinstance(exc, DeviceError):
        return True
    try:
        import pyopencl as cl
    except ImportError:
        return False
    return isinstance(exc, cl.Error)


class TrainingWorker(QObject):
    preparing = Signal(str)        # status text of a long phase (tokenizer, encoding, recall…)
    sessionReady = Signal(object)  # SessionInfo: the run takes its first step next
    metrics = Signal(object)       # list of StepMetrics, oldest first
    # A run ends with exactly one of these three, each with its RunResult:
    finished = Signal(object)      # every planned step trained
    stopped = Signal(object)       # Stop or close (also while preparing)
    failed = Signal(object)        # an error ended it or it could not start (error says why)
    paused = Signal(object)        # RunPoint: the worker waits in its event loop
    resumed = Signal(object)       # RunPoint: steps go on after a pause
    error = Signal(str, str)       # title, message with what to do (any job)
    autosaved = Signal(str, int)   # run folder, step of the checkpoint just written
    token = Signal(str)            # one streamed piece of a chat answer
    chatDone = Signal(object)      # the whole answer (ChatReply), or None when it failed
    exported = Signal(object)      # ExportResult, or None when it failed (error says why)
    saved = Signal(str)            # checkpoint file, or "" when it failed (error says why)
    loaded = Signal(object)        # SessionInfo with path and source, or None when it failed
    tuneProgress = Signal(object)  # TuneProgress of a kernel tuning job
    tuned = Signal(object)         # its TuneReport, or None when it failed (error says why)
    speedMeasured = Signal(object)  # SpeedReport for Auto, or None when it failed (error says)

    def __init__(self):
        super().__init__()
        self.session = None
        self.recorder: RunRecorder | None = None  # the run folder of the run in progress
        self.driver: RunDriver | None = None   # the run's steps (studio.run_driver), kept while paused
        self._stop = threading.Event()
        self._pause = threading.Event()
        self.monitor = Monitor(on_phase=self._on_phase, event=self._stop)
        # chat, export, save, open
        self.tasks = ModelTasks(self.monitor, self._stop, self._fail, self.preparing.emit)
        self.tuning = KernelTuning(self._stop, self._fail)   # Device › Tune kernels…
        self.lora = LoraTuning(self.monitor, self.preparing.emit)   # Tuning method LoRA

    # Flags: set from the GUI thread, read here between steps.
    def request_pause(self) -> None:
        self._pause.set()

    def request_stop(self) -> None:
        self._stop.set()

    def cancel_pause(self) -> None:
        """Resume pressed: cleared here, on the GUI thread, before the queued resume() runs, so
        a Pause pressed after it (while the worker still answers a chat) is not lost."""
        self._pause.clear()

    def reset_flags(self) -> None:
        self._stop.clear()
        self._pause.clear()

    def _on_phase(self, phase: str, done: int, total: int) -> None:
        pct = f" {100 * done // total}%" if total > 1 else ""
        count = f" {done}/{total}" if 1 < total < 10_000 else ""
        self.preparing.emit(f"{phase[:1].upper()}{phase[1:]}{count or pct}…")

    def _fail(self, title: str, exc: BaseException, note: str = "") -> None:
        exc = missing_extra(exc) or exc   # an optional extra not installed: the pip command
        if isinstance(exc, StudioError):
            text = exc.describe()
        else:  # a bug: say so, keep the app alive, log the traceback for the report
            log.error("%s\n%s", title, "".join(traceback.format_exception(exc)))
            text = (f"{type(exc).__name__}: {exc}\n"
                    "This is a bug in the studio; the details are in the log.")
        self.error.emit(title, text + (f"\n\n{note}" if note else ""))

    def _info(self, encoded: bool = False, history: bool = False, **opened) -> SessionInfo:
        """encoded: the session just encoded its texts (token counts are known, not counted
        again: 16 MB); history: with its StepMetrics; opened: path and source of a load."""
        s = self.session
        return SessionInfo(
            model_config=s.model_config, train_config=s.run_config(), device=s.device_info,
            step=s.step, total_steps=s.total_steps, has_tune=s.has_tune,
            run_dir=str(self.recorder.folder) if self.recorder else None,
            pretrain_tokens=s.pretrain.n_tokens if encoded else None,
            tune_tokens=s.tune_tokens if encoded and s.has_tune else None,
            # StepMetrics built here, not on the GUI thread (a long run has many)
            history=tuple(metrics_from_dict(d) for d in s.history) if history else None,
            tokenizer=tokenizer_name(s.tokenizer.kind, s.tokenizer.pre),
            lora=self.lora.option(s), **opened)

    # -- a model between steps (studio.ui.run.worker_tasks.ModelTasks) ---------------------------
    @Slot(object)
    def chat(self, request: ChatRequest) -> None:
        self.chatDone.emit(self.tasks.chat(self.session, request, self.token.emit))

    @Slot(object)
    def export(self, request: ExportRequest) -> None:
        self.exported.emit(self.tasks.export(self.session, request))

    @Slot(object)
    def save(self, request: SaveRequest) -> None:
        folder = self.recorder.folder if self.recorder is not None else None
        self.saved.emit(self.tasks.save(self.session, request, folder))

    @Slot(object)
    def load(self, job: LoadJob) -> None:
        """Open the job's model; loaded carries its SessionInfo, or None."""
        self._close_run()
        opened = self.tasks.load(job)
        if opened is None:
            self.loaded.emit(None)
            return
        self.session, source, path = opened
        self.lora.opened(source, path)
        self.loaded.emit(self._info(history=True, path=str(path), source=source))

    @Slot(object)
    def tune_kernels(self, job: TuneJob) -> None:
        """Tune the kernels for the job's device and shape; tuneProgress, then tuned. Stop
        cancels it; the flag is cleared before tuned, so whatever the window does next is not
        cancelled by it (finish(), queued behind this slot, cleared it only after the window
        had heard the result)."""
        report = self.tuning.tune(job, self.tuneProgress.emit)
        self._stop.clear()
        self.tuned.emit(report)

    @Slot(object)
    def measure_speed(self, job: SpeedJob) -> None:
        """Auto's measure of the job's device (worker_tune.measure_speed); speedMeasured."""
        self.speedMeasured.emit(measure_speed(job, self._fail))

    # -- training ----------------------------------------------------------------------------
    @Slot(object)
    def start(self, job: TrainJob) -> None:
        """Train a new model; sessionReady, metrics, then one of finished/stopped/failed."""
        from opencl_llm_studio.engine.training.opening import create_session
        self._close_run()
        self.session = None
        self.lora.opened(None, None)
        self.preparing.emit("Training the tokenizer and building the model…")
        try:
            recorder = RunRecorder(job.run_dir, job.checkpoint_every)
        except Exception as e:
            remove_if_empty(job.run_dir)   # claimed by new_run_dir, never written
            return self._not_started("Could not start training", e)
        try:
            self.session = create_session(
                job.model_config, job.train_config, job.pretrain_text, job.tune_text or None,
                device=job.device, tokenizer_kind=job.tokenizer_kind, monitor=self.monitor,
                autotune=job.autotune or None)   # off: as LLM_STUDIO_AUTOTUNE says
        except Cancelled:  # Stop or window close while preparing: nothing to save
            recorder.discard()
            self.stopped.emit(RunResult(Outcome.STOPPED, step=0))
            return
        except Exception as e:
            recorder.discard()
            return self._not_started("Could not start training", e)
        self.recorder = recorder
        self.sessionReady.emit(self._info(encoded=True))
        self.driver = RunDriver(self.session, recorder, self._saved, self._autosave_failed)
        self._run()

    @Slot(object)
    def proceed(self, job: ContinueJob) -> None:
        """Continue the loaded (or last) session to the job's step totals (session.continue_training)."""
        self._close_run()
        if self.session is None:
            remove_if_empty(job.run_dir)
            return self._not_started("Nothing to continue",
                                     StudioError("No model is loaded.",
                                                 "Open a checkpoint or a GGUF first."))
        self.preparing.emit(f"Continuing from step {self.session.step}…")
        try:
            if job.lora is not None:   # Tuning method LoRA: the session becomes a LoRA one
                self.lora.adopt(self, job.lora)
            s = self.session
            if job.tune_text and not s.has_tune and job.tune_steps > 0:
                s.set_dialogues(job.tune_text)   # a run without dialogues gains a tuning stage
                self.preparing.emit("Tuning on the open dialogue file (the model had none)")
            changed = {k: v for k, v in job.retrain if getattr(s.train_config, k) != v}
            if changed:   # batch size, learning rate chosen for the rest of the run
                s.retrain_with(**changed)
            if job.more_seconds > 0:
                note = s.continue_training(more_seconds=job.more_seconds)
            else:
                note = s.continue_training(job.pretrain_steps, job.tune_steps)
            if note:
                self.preparing.emit(note)
            if job.autotune:   # the opened model's session was built on the table's plan
                s.use_tuned_kernels()
            self.recorder = RunRecorder(job.run_dir, job.checkpoint_every, history=s.history)
        except Cancelled:   # Stop while the kernels were tuned: nothing trained or stored
            remove_if_empty(job.run_dir)
            self.stopped.emit(RunResult(Outcome.STOPPED, step=self.session.step))
            return
        except Exception as e:
            remove_if_empty(job.run_dir)
            return self._not_started("Could not continue training", e)
        self.sessionReady.emit(self._info(history=True))
        self.driver = RunDriver(self.session, self.recorder, self._saved, self._autosave_failed)
        self._run()

    def _not_started(self, title: str, exc: BaseException) -> None:
        self._fail(title, exc)
        s = self.session
        self.failed.emit(RunResult(Outcome.FAILED, step=s.step if s else 0))

    def _point(self) -> RunPoint:
        rec = self.recorder
        return RunPoint(self.session.step, str(rec.folder) if rec else None,
                        rec.saved_step if rec else None)

    @Slot()
    def resume(self) -> None:
        """Go on after a pause (the flag was cleared by cancel_pause; set again, the run holds
        again after one step's check: paused follows resumed)."""
        if self.driver is not None and self.driver.running:
            self.driver.resume()   # a pause never counts as training time (a time budget)
            self.resumed.emit(self._point())
            self._run()

    @Slot()
    def finish(self) -> None:
        """Stop pressed while paused (or queued after a stop already handled by _run, or after
        the run ended on its own: then the flag must not linger and cancel the next chat)."""
        if self.driver is not None and self.driver.running and self._stop.is_set():
            self._close_steps()
            self.stopped.emit(self._result(Outcome.STOPPED))
        self._stop.clear()

    @Slot()
    def shutdown(self) -> None:
        """The window closes: end a paused run, save what is not saved, end the thread."""
        self._close_run()
        self.thread().quit()

    def _run(self) -> None:
        """Take steps until the run ends (one of finished / stopped / failed) or holds: on a
        pause this returns to the thread's event loop with the generator kept (resume())."""
        try:
            outcome = self._take_steps()
        except Exception as e:
            self._close_steps()
            self._training_error(e)
            return
        if outcome is None:
            self._autosave()  # the moment a person walks away from the laptop
            self.paused.emit(self._point())
            return
        self._close_steps()
        if outcome is Outcome.STOPPED:
            self._stop.clear()
            self.stopped.emit(self._result(Outcome.STOPPED))
        else:
            self.finished.emit(self._result(Outcome.FINISHED))

    def _take_steps(self) -> Outcome | None:
        """Steps until Stop (STOPPED), Pause (None) or the last step (FINISHED); metrics are
        emitted in batches, all of them before this returns or raises."""
        batch, last_emit = [], time.monotonic()
        try:
            while not self._stop.is_set():
                if self._pause.is_set():
                    self.driver.pause()
                    return None
                try:
                    record = self.driver.step()   # recorded; a checkpoint when due
                except Cancelled:  # Stop landed between the flag check and the step
                    break
                if record is None:
                    return Outcome.FINISHED
                batch.append(record)
                now = time.monotonic()
                if now - last_emit >= EMIT_INTERVAL_S or record.samples or record.recall:
                    self.metrics.emit(batch)
                    batch, last_emit = [], now
            return Outcome.STOPPED
        finally:
            if batch:
                self.metrics.emit(batch)

    def _result(self, outcome: Outcome, save: bool = True) -> RunResult:
        """Save (unless told not to), close the run folder, and describe the run's end."""
        rec, s = self.recorder, self.session
        if save:
            self._autosave()
        self._end_run(save=False)
        return RunResult(outcome, step=s.step, run_dir=str(rec.folder) if rec else None,
                         saved_step=rec.saved_step if rec else None,
                         train_config=s.run_config(), lora=self.lora.option(s))

    def _training_error(self, exc: BaseException) -> None:
        """Non-fatal for the app: say what happened and where the last good checkpoint is."""
        rec, s = self.recorder, self.session
        device_failed = _is_device_failure(exc)
        if isinstance(exc, TrainingDiverged):
            title = "Training diverged"
            if self.driver is not None:  # the engine restored the last good state: save that
                self.driver.diverged()
        elif device_failed:
            title = "The OpenCL device failed"
        else:
            title = "Training stopped with an error"
        # After a device failure the device's buffers cannot be trusted: keep the last
        # checkpoint on disk as it is instead of overwriting it with what the device returns.
        result = self._result(Outcome.FAILED, save=not device_failed)
        note = ""
        if rec is not None and result.saved_step is not None:
            note = (f"The last checkpoint (step {result.saved_step}) is in {rec.folder}; "
                    "File › Open checkpoint continues from it.")
        elif rec is not None:
            note = f"No checkpoint was written in this run ({rec.folder})."
        if device_failed and not isinstance(exc, DeviceError):
            exc = DeviceError(f"The OpenCL device failed during step {s.step + 1}: {exc}",
                              "It may have run out of memory: use a smaller batch size, "
                              "context length or model, or another device.")
        self._fail(title, exc, note)
        self.failed.emit(result)

    def _autosave(self) -> bool:
        """Checkpoint into the run folder if the session moved since the last one
        (studio.run_driver.RunDriver.autosave); a failure is reported once, training goes on."""
        return self.driver is not None and self.driver.autosave()

    def _saved(self, step: int) -> None:
        self.autosaved.emit(str(self.recorder.folder), step)

    def _autosave_failed(self, exc: BaseException) -> None:
        """A checkpoint could not be written (full disk, unwritable folder): said once a run."""
        rec = self.recorder
        if rec is None or rec.warned:
            return
        rec.warned = True
        where = (f"The checkpoint of step {rec.saved_step} is unchanged."
                 if rec.saved_step is not None else "No checkpoint was written yet.")
        self._fail("Autosave failed", exc, f"{where} Training goes on; use File › Save "
                                           "checkpoint to save elsewhere.")

    def _end_run(self, save: bool = True) -> None:
        if self.recorder is not None:
            if save:
                self._autosave()
            self.recorder.close()
            self.recorder = None
        self.driver = None

    def _close_run(self) -> None:
        """End the run in progress, if any: its generator, then its folder (saved)."""
        self._close_steps()
        self._end_run()

    def _close_steps(self) -> None:
        if self.driver is not None:
            self.driver.close()
