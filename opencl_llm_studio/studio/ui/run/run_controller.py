"""The run's owner on the GUI thread: the worker host, the RunState, the model at hand.

The window's parts turn clicks into intents here (train, continue_run, pause, resume, stop, load,
chat, export, save, tune_kernels, cancel_tuning): window -> controller -> WorkerHost -> worker.
Everything the worker reports comes back the same way, worker -> controller -> window: the
controller is the only receiver of the worker's signals and re-emits each as its own typed signal
of the same name (those that move the state after moving it). The controller moves the RunState
(studio.protocol.RunState) and emits `changed` whenever the state, the file task or the opened
model moves, so the window re-applies studio.protocol.CONTROLS. An intent the current state does
not allow is ignored (a double click, or a click queued behind a state change), as the disabled
control would.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QObject, Qt, Signal, Slot

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.studio.protocol import (CONTROLS, ChatRequest, ContinueJob, ContinuePoint, ExportRequest,
                             FileTask, LoadJob, Outcome, RunPoint, RunResult, RunState, SaveRequest,
                             SessionInfo, TrainJob, TuneJob)
from opencl_llm_studio.studio.ui.run.worker_host import WorkerHost


class RunController(QObject):
    changed = Signal()               # state, file task or opened model moved: re-apply CONTROLS
    sessionReady = Signal(object)    # SessionInfo: the run takes its first step next
    paused = Signal(object)          # RunPoint: paused; chat, export and save work
    resumed = Signal(object)         # RunPoint: the worker went on after a pause
    # One of these ends every run, after the state went back to IDLE; then `ended`, for any:
    finished = Signal(object)        # RunResult
    stopped = Signal(object)         # RunResult
    failed = Signal(object)          # RunResult
    ended = Signal(object)           # RunResult, whatever the outcome
    loaded = Signal(object)          # SessionInfo of an opened model, or None (error says why)
    exported = Signal(object)        # ExportResult, or None
    saved = Signal(str)              # checkpoint path, or ""
    tuned = Signal(object)           # TuneReport of kernel tuning, or None (error says why)
    speedMeasured = Signal(object)   # SpeedReport for Auto, or None (error says why)
    # Passed on as the worker sent them (they move no state):
    preparing = Signal(str)          # status text of a long phase
    metrics = Signal(object)         # list of StepMetrics, oldest first
    error = Signal(str, str)         # title, message with what to do (any job)
    autosaved = Signal(str, int)     # run folder, step of the checkpoint just written
    token = Signal(str)              # one streamed piece of a chat answer
    chatDone = Signal(object)        # the whole answer (ChatReply), or None
    tuneProgress = Signal(object)    # TuneProgress of kernel tuning

    def __init__(self, parent=None):
        super().__init__(parent)
        self.state = RunState.IDLE
        self.task = FileTask.NONE                 # export / save / load in progress
        self.continue_from: ContinuePoint | None = None  # an opened model that Train continues
        self.has_model = False                    # the worker holds weights to chat / export
        self.model_config: ModelConfig | None = None  # of that model (real vocabulary size)
        self.lora: dict | None = None             # its LoraConfig.to_dict() if a LoRA run
        self.host = WorkerHost(self)
        w = self.host.worker
        # Explicitly queued: these run in the GUI thread whatever PySide guesses.
        for signal, slot in ((w.sessionReady, self._on_session), (w.paused, self._on_paused),
                             (w.resumed, self._on_resumed), (w.finished, self._on_ended),
                             (w.stopped, self._on_ended), (w.failed, self._on_ended),
                             (w.loaded, self._on_loaded), (w.exported, self._on_exported),
                             (w.saved, self._on_saved), (w.tuned, self._on_tuned),
                             (w.speedMeasured, self._on_speed)):
            signal.connect(slot, Qt.QueuedConnection)
        # Passed on unchanged, each by a queued signal-to-signal connection (emitted here, in
        # the GUI thread); the controller is the only receiver of the worker's signals.
        for signal, own in ((w.preparing, self.preparing), (w.metrics, self.metrics),
                            (w.error, self.error), (w.autosaved, self.autosaved),
                            (w.token, self.token), (w.chatDone, self.chatDone),
                            (w.tuneProgress, self.tuneProgress)):
            signal.connect(own, Qt.QueuedConnection)

    @property
    def worker(self):
        return self.host.worker

    @property
    def controls(self):
        """CONTROLS of the current state."""
        return CONTROLS[self.state]

    @property
    def free(self) -> bool:
        """Idle with no file task: a model can be opened, a run started."""
        return self.state is RunState.IDLE and self.task is FileTask.NONE

    def _set_state(self, state: RunState) -> None:
        self.state = state
        self.changed.emit()

    # -- intents ------------------------------------------------------------------------------
    def train(self, job: TrainJob) -> None:
        if self.free:
            self.has_model = False
            self._set_state(RunState.PREPARING)
            self.host.start(job)

    def continue_run(self, job: ContinueJob) -> None:
        if self.free and self.continue_from is not None:
            self._set_state(RunState.PREPARING)
            self.host.proceed(job)  # the plots are reframed when sessionReady comes

    def pause(self) -> None:
        if self.state is RunState.RUNNING:
            self.host.pause()
            self._set_state(RunState.PAUSING)

    def resume(self) -> None:
        if self.state is RunState.PAUSED:
            self._set_state(RunState.RUNNING)
            self.host.resume()

    def stop(self) -> None:
        if CONTROLS[self.state].stop:
            self._set_state(RunState.STOPPING)  # no Pause/Resume/Stop until the run ended
            self.host.stop()

    def forget_model(self) -> None:
        """Leave continue mode: Train builds a new model from the settings and data."""
        if self.state is RunState.IDLE and self.continue_from is not None:
            self.continue_from = None
            self.changed.emit()

    def load(self, job: LoadJob) -> None:
        if self.free:
            self._start_task(FileTask.LOAD)
            self.host.load(job)

    def export(self, request: ExportRequest) -> None:
        if self._model_usable():
            self._start_task(FileTask.EXPORT)
            self.host.export(request)

    def save(self, request: SaveRequest) -> None:
        if self._model_usable():
            self._start_task(FileTask.SAVE)
            self.host.save(request)

    def tune_kernels(self, job: TuneJob) -> None:
        """Tune the kernels (a file task: the controls wait for it; Stop cancels it)."""
        if self.free:
            self._start_task(FileTask.TUNE)
            self.host.tune(job)

    def measure_speed(self, job) -> bool:
        """Auto's measure of a device's speed (a task: the controls wait for it, about a
        second once the kernels are built); False when the worker is busy."""
        if not self.free:
            return False
        self._start_task(FileTask.SPEED)
        self.host.measure_speed(job)
        return True

    def cancel_tuning(self) -> None:
        """Stop pressed while tuning: the worker stops at its next candidate, stores nothing."""
        if self.task is FileTask.TUNE:
            self.host.stop()

    def chat(self, request: ChatRequest) -> None:
        self.host.chat(request)  # the chat panel sends only while chat is available

    def shutdown(self) -> bool:
        """The window closes: stop, save, and end the worker's thread (WorkerHost.shutdown)."""
        return self.host.shutdown()

    def _model_usable(self) -> bool:
        return self.has_model and CONTROLS[self.state].use_model and self.task is FileTask.NONE

    def _start_task(self, task: FileTask) -> None:
        self.task = task
        self.changed.emit()

    def _end_task(self) -> None:
        self.task = FileTask.NONE
        self.changed.emit()

    # -- what the worker reports ------------------------------------------------------------
    def _adopt(self, info: SessionInfo) -> None:
        self.model_config = info.model_config
        self.lora = info.lora.config if info.lora else None   # a LoRA run's: export adapters
        self.has_model = True

    @Slot(object)
    def _on_session(self, info: SessionInfo) -> None:
        self._adopt(info)
        self.sessionReady.emit(info)
        if self.state is RunState.PREPARING:
            self._set_state(RunState.RUNNING)

    @Slot(object)
    def _on_paused(self, point: RunPoint) -> None:
        if self.state is RunState.STOPPING:  # Stop came while pausing: stopped follows
            return
        self._set_state(RunState.PAUSED)
        self.paused.emit(point)

    @Slot(object)
    def _on_resumed(self, point: RunPoint) -> None:
        self.resumed.emit(point)

    @Slot(object)
    def _on_ended(self, result: RunResult) -> None:
        tc = result.train_config
        if self.continue_from is not None and tc is not None:  # Continue goes on from here
            self.continue_from = dataclasses.replace(
                self.continue_from, step=result.step, pretrain_steps=tc.pretrain_steps,
                tune_steps=tc.tune_steps,
                run_dir=result.run_dir or self.continue_from.run_dir)  # where it is saved now
        self._set_state(RunState.IDLE)
        {Outcome.FINISHED: self.finished, Outcome.STOPPED: self.stopped,
         Outcome.FAILED: self.failed}[result.outcome].emit(result)
        self.ended.emit(result)

    @Slot(object)
    def _on_loaded(self, info: SessionInfo | None) -> None:
        self.task = FileTask.NONE
        if info is not None:
            self.continue_from = ContinuePoint.of(info)
            self._adopt(info)
        self.changed.emit()
        self.loaded.emit(info)

    @Slot(object)
    def _on_exported(self, result) -> None:
        self._end_task()
        self.exported.emit(result)

    @Slot(str)
    def _on_saved(self, path: str) -> None:
        self._end_task()
        self.saved.emit(path)

    @Slot(object)
    def _on_tuned(self, report) -> None:
        self._end_task()
        self.tuned.emit(report)

    @Slot(object)
    def _on_speed(self, report) -> None:
        self._end_task()
        self.speedMeasured.emit(report)
