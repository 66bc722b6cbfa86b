"""The GUI thread's handle on the training worker: starts its QThread and forwards requests as
queued signals, so every slot of studio.ui.run.worker.TrainingWorker runs on the worker's thread. The
requests are studio.protocol's frozen jobs; studio.ui.run.run_controller decides when to send them."""

from __future__ import annotations

import logging

from PySide6.QtCore import QMetaObject, QObject, Qt, QThread, Signal
from shiboken6 import isValid

from opencl_llm_studio.studio.protocol import (ChatRequest, ContinueJob, ExportRequest, LoadJob, SaveRequest,
                             TrainJob, TuneJob)
from opencl_llm_studio.studio.ui.run.worker import TrainingWorker

log = logging.getLogger(__name__)


class WorkerHost(QObject):
    """Lives in the GUI thread: starts the worker thread and forwards requests as queued calls."""

    _start = Signal(object)
    _proceed = Signal(object)
    _resume = Signal()
    _finish = Signal()
    _chat = Signal(object)
    _export = Signal(object)
    _save = Signal(object)
    _load = Signal(object)
    _tune = Signal(object)
    _speed = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("trainingThread")
        self.worker = TrainingWorker()
        self.worker.moveToThread(self.thread)
        w = self.worker
        for sig, slot in ((self._start, w.start), (self._proceed, w.proceed),
                          (self._resume, w.resume), (self._finish, w.finish),
                          (self._chat, w.chat), (self._export, w.export), (self._save, w.save),
                          (self._load, w.load), (self._tune, w.tune_kernels),
                          (self._speed, w.measure_speed)):
            sig.connect(slot)
        # A window dropped without being closed (a test; an error while it was built) is
        # destroyed by the garbage collector with its thread still running, which Qt answers
        # with abort(): end the thread first. The closure holds the thread, not the host.
        self.destroyed.connect(lambda *_, t=self.thread, w=w: _end_thread(t, w))
        self.thread.start()

    def start(self, job: TrainJob) -> None:
        self.worker.reset_flags()
        self._start.emit(job)

    def proceed(self, job: ContinueJob) -> None:
        """Continue the worker's session (session.continue_training to the job's step counts)."""
        self.worker.reset_flags()
        self._proceed.emit(job)

    def pause(self) -> None:
        self.worker.request_pause()

    def resume(self) -> None:
        self.worker.cancel_pause()
        self._resume.emit()

    def stop(self) -> None:
        self.worker.request_stop()
        self._finish.emit()

    def chat(self, request: ChatRequest) -> None:
        self._chat.emit(request)

    def export(self, request: ExportRequest) -> None:
        self._export.emit(request)

    def save(self, request: SaveRequest) -> None:
        self._save.emit(request)

    def load(self, job: LoadJob) -> None:
        self._load.emit(job)

    def tune(self, job: TuneJob) -> None:
        self.worker.reset_flags()
        self._tune.emit(job)

    def measure_speed(self, job) -> None:
        self._speed.emit(job)

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Stop after the current step (or token); the worker then saves the run's checkpoint
        on its own thread and ends the thread; wait for that. False: it did not end in time."""
        return _end_thread(self.thread, self.worker, timeout_ms)


def _end_thread(thread: QThread, worker: TrainingWorker, timeout_ms: int = 60_000) -> bool:
    """WorkerHost.shutdown, also for a host being destroyed: stop after the current step, let
    the worker save and end its thread (its queued shutdown slot), wait for that. At the
    interpreter's exit the thread (or worker) may already be deleted: nothing is left to end."""
    if not (isValid(thread) and isValid(worker)) or not thread.isRunning():
        return True
    worker.request_stop()
    QMetaObject.invokeMethod(worker, "shutdown", Qt.QueuedConnection)
    ended = thread.wait(timeout_ms)
    if not ended:
        log.error("the training thread did not end within %d ms", timeout_ms)
    return ended
