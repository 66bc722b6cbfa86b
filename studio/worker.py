"""The training worker: a QObject that owns the TrainingSession, moved to its own QThread.

Everything that touches the session (create, train steps, chat, export, checkpoints) runs as a
slot on that one thread, so generation can never overlap a training step and no lock is needed.
Pause and stop are threading.Event flags checked between steps (DESIGN.md: never
QThread.terminate()). Pausing returns to the thread's event loop with the generator kept, which
is what lets chat and export run on the paused weights; Resume re-enters the loop.
The GUI talks to the worker only through queued signals (WorkerHost) and the two flags.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.errors import StudioError


log = logging.getLogger(__name__)
EMIT_INTERVAL_S = 0.05  # metrics are batched: at most ~20 signals a second reach the GUI


class Cancelled(Exception):
    """Raised from on_token to abandon a generation when the window closes."""


class TrainingWorker(QObject):
    preparing = Signal(str)        # status text while the tokenizer trains and kernels compile
    sessionReady = Signal(object)  # dict: model_config, train_config, device, token counts
    metrics = Signal(object)       # list of StepMetrics, oldest first
    paused = Signal(int)           # step
    finished = Signal(object)      # dict: stopped (bool), failed (bool), step, summary
    failed = Signal(str, str)      # title, message with what to do
    token = Signal(str)            # one streamed piece of a chat answer
    chatDone = Signal(object)      # the whole answer, or None when it failed
    exported = Signal(object)      # ExportResult
    saved = Signal(str)            # checkpoint directory
    loaded = Signal(object)        # dict like sessionReady

    def __init__(self):
        super().__init__()
        self.session = None
        self._steps = None          # the suspended session.train() generator
        self._stop = threading.Event()
        self._pause = threading.Event()

    # Flags: set from the GUI thread, read here between steps.
    def request_pause(self) -> None:
        self._pause.set()

    def request_stop(self) -> None:
        self._stop.set()

    def reset_flags(self) -> None:
        self._stop.clear()
        self._pause.clear()

    def _fail(self, title: str, exc: BaseException) -> None:
        if isinstance(exc, StudioError):
            self.failed.emit(title, exc.describe())
        else:  # a bug: say so, keep the app alive, log the traceback for the report
            log.error("%s\n%s", title, traceback.format_exc())
            self.failed.emit(title, f"{type(exc).__name__}: {exc}\n"
                                    "This is a bug in the studio; the details are in the log.")

    def _info(self, pretrain_text=None, tune_text=None) -> dict:
        s = self.session
        device = getattr(s, "device_info", None) or getattr(getattr(s, "rt", None), "info", None)
        info = {"model_config": s.model_config, "train_config": s.train_config,
                "device": device, "step": s.step, "pretrain_tokens": None,
                "tune_tokens": None}
        if pretrain_text:
            info["pretrain_tokens"] = len(s.tokenizer.encode(pretrain_text))
        if tune_text:
            info["tune_tokens"] = len(s.tokenizer.encode(tune_text))
        return info

    # -- training ----------------------------------------------------------------------------
    @Slot(object)
    def start(self, job: dict) -> None:
        """job: model_config, train_config, pretrain_text, tune_text, device, tokenizer_kind."""
        from engine.session import TrainingSession
        self._close_steps()
        self.session = None
        self.preparing.emit("Training the tokenizer and building the model…")
        try:
            self.session = TrainingSession.create(
                job["model_config"], job["train_config"], job["pretrain_text"],
                job.get("tune_text") or None, device=job.get("device"),
                tokenizer_kind=job.get("tokenizer_kind", "bpe"))
            self.sessionReady.emit(self._info(job["pretrain_text"], job.get("tune_text")))
        except Exception as e:
            self._fail("Could not start training", e)
            self.finished.emit({"stopped": False, "failed": True, "step": 0, "summary": None})
            return
        self._steps = self.session.train()
        self._run()

    @Slot()
    def resume(self) -> None:
        self._pause.clear()
        if self._steps is not None:
            self._run()

    @Slot()
    def finish(self) -> None:
        """Stop pressed while paused (or queued after a stop already handled by _run)."""
        if self._steps is not None and self._stop.is_set():
            self._close_steps()
            self._stop.clear()
            self.finished.emit({"stopped": True, "failed": False,
                                "step": self.session.step if self.session else 0,
                                "summary": None})

    def _run(self) -> None:
        batch, last_emit = [], time.monotonic()
        outcome, summary = None, None
        try:
            while True:
                if self._stop.is_set():
                    outcome = "stopped"
                    break
                if self._pause.is_set():
                    outcome = "paused"
                    break
                try:
                    record = next(self._steps)
                except StopIteration as done:
                    outcome, summary = "done", done.value
                    break
                batch.append(record)
                now = time.monotonic()
                if now - last_emit >= EMIT_INTERVAL_S or record.samples:
                    self.metrics.emit(batch)
                    batch, last_emit = [], now
        except Exception as e:
            if batch:
                self.metrics.emit(batch)
            self._close_steps()
            self._fail("Training stopped with an error", e)
            self.finished.emit({"stopped": True, "failed": True,
                                "step": self.session.step, "summary": None})
            return
        if batch:
            self.metrics.emit(batch)
        if outcome == "paused":
            self.paused.emit(self.session.step)
            return
        self._close_steps()
        if outcome == "stopped":
            self._stop.clear()
        self.finished.emit({"stopped": outcome == "stopped", "failed": False,
                            "step": self.session.step,
                            "summary": summary if outcome == "done" else None})

    def _close_steps(self) -> None:
        if self._steps is not None:
            try:
                self._steps.close()
            except Exception:  # closing must not raise into the GUI; log it
                log.exception("closing the training generator")
            self._steps = None

    # -- chat, export, checkpoints (all between steps, on this thread) -------------------
    @Slot(object, object)
    def chat(self, messages: list, knobs: dict) -> None:
        if self.session is None:
            self.chatDone.emit(None)
            return

        def on_token(*args):
            if self._stop.is_set():
                raise Cancelled()
            piece = next((a for a in args if isinstance(a, str)), None)
            if piece:
                self.token.emit(piece)

        try:
            answer = self.session.chat(_to_messages(messages), on_token=on_token, **knobs)
        except Cancelled:
            self.chatDone.emit(None)
            return
        except Exception as e:
            self._fail("The model could not answer", e)
            self.chatDone.emit(None)
            return
        self.chatDone.emit(answer)

    @Slot(str, str)
    def export(self, path: str, dtype: str) -> None:
        try:
            result = export_session(self.session, path, dtype)
        except Exception as e:
            self._fail("Export failed", e)
            return
        self.exported.emit(result)

    @Slot(str)
    def save(self, directory: str) -> None:
        try:
            path = self.session.save(directory)
        except Exception as e:
            self._fail("Could not save the checkpoint", e)
            return
        self.saved.emit(str(path))

    @Slot(str)
    def load(self, directory: str) -> None:
        from engine.session import TrainingSession
        self._close_steps()
        try:
            self.session = TrainingSession.load(Path(directory), device=None)
        except Exception as e:
            self._fail("Could not open the checkpoint", e)
            return
        self.loaded.emit(self._info())


def export_session(session, path: str, dtype: str):
    """session.export_gguf when the engine has it; else the same through engine.gguf_export."""
    if hasattr(session, "export_gguf"):
        return session.export_gguf(path, dtype=dtype, force=True)
    from engine.gguf_export import ModelBundle, export_gguf
    tc = session.train_config
    metadata = {"training": {k: v for k, v in vars(tc).items()
                             if isinstance(v, (int, float, str, bool))},
                "step": session.step, "final_loss": getattr(session, "last_loss", None)}
    if hasattr(session, "data_summary"):
        metadata["data"] = session.data_summary()
    bundle = ModelBundle(session.model_config, session.tokenizer, session.model.weights(),
                         metadata)
    return export_gguf(bundle, path, dtype=dtype, force=True)


def _to_messages(messages: list[dict]) -> list:
    """The engine's Message type when it has one (engine.dialogue), else the dicts as they are."""
    try:
        from engine.dialogue import Message
    except ImportError:
        return messages
    return [Message(role=m["role"], content=m["content"]) for m in messages]


class WorkerHost(QObject):
    """Lives in the GUI thread: starts the worker thread and forwards requests as queued calls."""

    _start = Signal(object)
    _resume = Signal()
    _finish = Signal()
    _chat = Signal(object, object)
    _export = Signal(str, str)
    _save = Signal(str)
    _load = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("trainingThread")
        self.worker = TrainingWorker()
        self.worker.moveToThread(self.thread)
        w = self.worker
        for sig, slot in ((self._start, w.start), (self._resume, w.resume),
                          (self._finish, w.finish), (self._chat, w.chat),
                          (self._export, w.export), (self._save, w.save), (self._load, w.load)):
            sig.connect(slot)
        self.thread.start()

    def start(self, job: dict) -> None:
        self.worker.reset_flags()
        self._start.emit(job)

    def pause(self) -> None:
        self.worker.request_pause()

    def resume(self) -> None:
        self._resume.emit()

    def stop(self) -> None:
        self.worker.request_stop()
        self._finish.emit()

    def chat(self, messages, knobs) -> None:
        self._chat.emit(messages, knobs)

    def export(self, path: str, dtype: str) -> None:
        self._export.emit(path, dtype)

    def save(self, directory: str) -> None:
        self._save.emit(directory)

    def load(self, directory: str) -> None:
        self._load.emit(directory)

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Stop after the current step (or token) and wait for the thread to end."""
        if not self.thread.isRunning():
            return True
        self.worker.request_stop()
        self.thread.quit()
        ended = self.thread.wait(timeout_ms)
        if ended:
            self.worker._close_steps()  # a paused run: the thread is gone, close it here
        return ended
