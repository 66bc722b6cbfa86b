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
The GUI talks to the worker only through queued signals (WorkerHost) and the two flags.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from engine.errors import DeviceError, StudioError, TrainingDiverged
from engine.progress import Cancelled, Monitor
from engine.run_lock import ensure_free
from studio.run_folder import RunRecorder, metrics_from_dict

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
    sessionReady = Signal(object)  # dict: model_config, train_config, device, history, ...
    metrics = Signal(object)       # list of StepMetrics, oldest first
    paused = Signal(int)           # step
    finished = Signal(object)      # dict: stopped, failed, step, summary, run_dir, saved_step
    failed = Signal(str, str)      # title, message with what to do
    autosaved = Signal(str, int)   # run folder, step of the checkpoint just written
    token = Signal(str)            # one streamed piece of a chat answer
    chatDone = Signal(object)      # the whole answer, or None when it failed
    exported = Signal(object)      # ExportResult, or None when it failed
    saved = Signal(str)            # checkpoint file, or "" when it failed
    loaded = Signal(object)        # dict like sessionReady (+ path, source), or None

    def __init__(self):
        super().__init__()
        self.session = None
        self.recorder: RunRecorder | None = None  # the run folder of the run in progress
        self._steps = None          # the suspended session.train() generator
        self._stop = threading.Event()
        self._pause = threading.Event()
        self.monitor = Monitor(on_phase=self._on_phase, event=self._stop)

    # Flags: set from the GUI thread, read here between steps.
    def request_pause(self) -> None:
        self._pause.set()

    def request_stop(self) -> None:
        self._stop.set()

    def reset_flags(self) -> None:
        self._stop.clear()
        self._pause.clear()

    def _on_phase(self, phase: str, done: int, total: int) -> None:
        pct = f" {100 * done // total}%" if total > 1 else ""
        count = f" {done}/{total}" if 1 < total < 10_000 else ""
        self.preparing.emit(f"{phase[:1].upper()}{phase[1:]}{count or pct}…")

    def _fail(self, title: str, exc: BaseException, note: str = "") -> None:
        if isinstance(exc, StudioError):
            text = exc.describe()
        else:  # a bug: say so, keep the app alive, log the traceback for the report
            log.error("%s\n%s", title, "".join(traceback.format_exception(exc)))
            text = (f"{type(exc).__name__}: {exc}\n"
                    "This is a bug in the studio; the details are in the log.")
        self.failed.emit(title, text + (f"\n\n{note}" if note else ""))

    def _info(self, pretrain_text=None, tune_text=None, history=False) -> dict:
        s = self.session
        device = getattr(s, "device_info", None) or getattr(getattr(s, "rt", None), "info", None)
        info = {"model_config": s.model_config, "train_config": s.train_config,
                "device": device, "step": s.step, "total_steps": s.total_steps,
                "has_tune": getattr(s, "tune", None) is not None,
                "pretrain_tokens": None, "tune_tokens": None,
                "run_dir": str(self.recorder.folder) if self.recorder else None,
                # StepMetrics built here, not on the GUI thread (a long run has many)
                "history": ([metrics_from_dict(d) for d in getattr(s, "history", [])]
                            if history else None)}
        if pretrain_text:  # counted while the session encoded the texts (not again: 16 MB)
            info["pretrain_tokens"] = s.pretrain.n_tokens
        if tune_text and s.tune is not None:
            info["tune_tokens"] = sum(len(ids) for ids, _ in s.tune.encoded)
        return info

    # -- training ----------------------------------------------------------------------------
    @Slot(object)
    def start(self, job: dict) -> None:
        """job: model_config, train_config, pretrain_text, tune_text, device, tokenizer_kind,
        run_dir, checkpoint_every."""
        from engine.session import TrainingSession
        self._close_steps()
        self._end_run()
        self.session = None
        self.preparing.emit("Training the tokenizer and building the model…")
        try:
            recorder = RunRecorder(job["run_dir"], job.get("checkpoint_every", 100))
        except Exception as e:
            return self._not_started("Could not start training", e)
        try:
            self.session = TrainingSession.create(
                job["model_config"], job["train_config"], job["pretrain_text"],
                job.get("tune_text") or None, device=job.get("device"),
                tokenizer_kind=job.get("tokenizer_kind", "bpe"), monitor=self.monitor)
        except Cancelled:  # Stop or window close while preparing: nothing to save
            recorder.discard()
            self.finished.emit({"stopped": True, "failed": False, "summary": None, "step": 0,
                                "run_dir": None, "saved_step": None})
            return
        except Exception as e:
            recorder.discard()
            return self._not_started("Could not start training", e)
        self.recorder = recorder
        self.sessionReady.emit(self._info(job["pretrain_text"], job.get("tune_text")))
        self._steps = self.session.train()
        self._run()

    @Slot(object)
    def proceed(self, job: dict) -> None:
        """Continue the loaded (or last) session. job: pretrain_steps, tune_steps (new totals,
        given to session.extend), run_dir, checkpoint_every."""
        self._close_steps()
        self._end_run()
        if self.session is None:
            return self._not_started("Nothing to continue",
                                     StudioError("No model is loaded.",
                                                 "Open a checkpoint or a GGUF first."))
        s = self.session
        self.preparing.emit(f"Continuing from step {s.step}…")
        try:
            s.extend(job.get("pretrain_steps"), job.get("tune_steps"))
            self.recorder = RunRecorder(job["run_dir"], job.get("checkpoint_every", 100),
                                        history=s.history)
        except Exception as e:
            return self._not_started("Could not continue training", e)
        self.sessionReady.emit(self._info(history=True))
        self._steps = s.train()
        self._run()

    def _not_started(self, title: str, exc: BaseException) -> None:
        self._fail(title, exc)
        self.finished.emit({"stopped": False, "failed": True, "summary": None,
                            "step": self.session.step if self.session else 0,
                            "run_dir": None, "saved_step": None})

    @Slot()
    def resume(self) -> None:
        self._pause.clear()
        if self._steps is not None:
            self._run()

    @Slot()
    def finish(self) -> None:
        """Stop pressed while paused (or queued after a stop already handled by _run, or after
        the run ended on its own: then the flag must not linger and cancel the next chat)."""
        if self._steps is not None and self._stop.is_set():
            self._close_steps()
            self.finished.emit(self._result(stopped=True))
        self._stop.clear()

    @Slot()
    def shutdown(self) -> None:
        """The window closes: end a paused run, save what is not saved, end the thread."""
        self._close_steps()
        self._end_run()
        self.thread().quit()

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
                except Cancelled:  # Stop landed between the flag check and the step
                    outcome = "stopped"
                    break
                batch.append(record)
                if self.recorder is not None:  # between steps: the generator is suspended
                    self.recorder.record(record)
                    if self.recorder.due(record.step):
                        self._autosave()
                now = time.monotonic()
                if now - last_emit >= EMIT_INTERVAL_S or record.samples or record.recall:
                    self.metrics.emit(batch)
                    batch, last_emit = [], now
        except Exception as e:
            if batch:
                self.metrics.emit(batch)
            self._close_steps()
            self._training_error(e)
            return
        if batch:
            self.metrics.emit(batch)
        if outcome == "paused":
            self._autosave()  # the moment a person walks away from the laptop
            self.paused.emit(self.session.step)
            return
        self._close_steps()
        if outcome == "stopped":
            self._stop.clear()
        self.finished.emit(self._result(stopped=outcome == "stopped",
                                        summary=summary if outcome == "done" else None))

    def _result(self, stopped: bool, failed: bool = False, summary=None, save=True) -> dict:
        """Save (unless told not to), close the run folder, and describe the run's end."""
        rec = self.recorder
        if save:
            self._autosave()
        self._end_run(save=False)
        s = self.session
        return {"stopped": stopped, "failed": failed, "summary": summary,
                "step": s.step if s else 0, "train_config": getattr(s, "train_config", None),
                "has_tune": getattr(s, "tune", None) is not None,
                "run_dir": str(rec.folder) if rec else None,
                "saved_step": rec.saved_step if rec else None}

    def _training_error(self, exc: BaseException) -> None:
        """Non-fatal for the app: say what happened and where the last good checkpoint is."""
        rec, s = self.recorder, self.session
        device_failed = _is_device_failure(exc)
        if isinstance(exc, TrainingDiverged):
            title = "Training diverged"
            if rec is not None:  # the engine restored the last good state: save exactly that
                rec.truncate(s.step)
        elif device_failed:
            title = "The OpenCL device failed"
        else:
            title = "Training stopped with an error"
        # After a device failure the device's buffers cannot be trusted: keep the last
        # checkpoint on disk as it is instead of overwriting it with what the device returns.
        result = self._result(stopped=True, failed=True, save=not device_failed)
        note = ""
        if rec is not None and result["saved_step"] is not None:
            note = (f"The last checkpoint (step {result['saved_step']}) is in {rec.folder}; "
                    "File › Open checkpoint continues from it.")
        elif rec is not None:
            note = f"No checkpoint was written in this run ({rec.folder})."
        if device_failed and not isinstance(exc, DeviceError):
            exc = DeviceError(f"The OpenCL device failed during step {s.step + 1}: {exc}",
                              "It may have run out of memory: use a smaller batch size, "
                              "context length or model, or another device.")
        self._fail(title, exc, note)
        self.finished.emit(result)

    def _autosave(self) -> bool:
        """Checkpoint into the run folder if the session moved since the last one. A failure
        (full disk, unwritable folder) is reported once and training goes on."""
        rec, s = self.recorder, self.session
        if rec is None or not rec.dirty(s):
            return rec is not None
        try:
            rec.save(s)
        except Exception as e:
            if not rec.warned:
                rec.warned = True
                where = (f"The checkpoint of step {rec.saved_step} is unchanged."
                         if rec.saved_step is not None else "No checkpoint was written yet.")
                self._fail("Autosave failed", e, f"{where} Training goes on; use File › Save "
                                                 "checkpoint to save elsewhere.")
            return False
        self.autosaved.emit(str(rec.folder), s.step)
        return True

    def _end_run(self, save: bool = True) -> None:
        if self.recorder is not None:
            if save:
                self._autosave()
            self.recorder.close()
            self.recorder = None

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
        from engine.dialogue import Message
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
            answer = self.session.chat([Message(role=m["role"], content=m["content"])
                                        for m in messages], on_token=on_token, **knobs)
        except Cancelled:
            answer = None
        except Exception as e:
            self._fail("The model could not answer", e)
            answer = None
        self.chatDone.emit(answer)

    @Slot(str, str)
    def export(self, path: str, dtype: str) -> None:
        """A GGUF of `dtype`, or a Hugging Face folder when dtype is "hf" (engine/hf)."""
        try:
            if dtype == "hf":
                from engine.hf.export import export_result, export_session
                result = export_result(export_session(self.session, path, force=True))
            else:
                result = self.session.export_gguf(path, dtype=dtype, force=True)
        except Exception as e:
            self._fail("Export failed", e)
            result = None
        self.exported.emit(result)

    @Slot(str)
    def save(self, directory: str) -> None:
        try:
            if self.recorder is None or Path(directory) != self.recorder.folder:
                ensure_free(directory)  # not into a folder another process is training in
            path = self.session.save(directory)
        except Exception as e:
            self._fail("Could not save the checkpoint", e)
            path = ""
        self.saved.emit(str(path))

    @Slot(object)
    def load(self, job: dict) -> None:
        """job: path (a run folder, checkpoint file or exported .gguf), device; for a GGUF also
        pretrain_text, tune_text, train_config (its weights are trained further on those)."""
        from engine.session import TrainingSession
        self._close_steps()
        self._end_run()
        path = Path(job["path"])
        gguf = path.suffix.lower() == ".gguf"
        from engine.hf.load import has_texts, is_model_folder, session_from_hf
        hf = is_model_folder(path)
        try:
            if hf:   # a transformers folder: its own texts if it has them, else those loaded
                texts = () if has_texts(path) else (
                    job.get("pretrain_text"), job.get("tune_text") or None)
                session = session_from_hf(path, *texts, device=job.get("device"))
            elif gguf:
                session = TrainingSession.from_gguf(
                    path, job["pretrain_text"], job.get("tune_text") or None,
                    train_cfg=job.get("train_config"), device=job.get("device"),
                    monitor=self.monitor)
            else:
                session = TrainingSession.load(path, device=job.get("device"),
                                               monitor=self.monitor)
        except Cancelled:  # the window closes while a large checkpoint is read
            self.loaded.emit(None)
            return
        except Exception as e:
            self._fail("Could not open the GGUF" if gguf else "Could not open the checkpoint", e)
            self.loaded.emit(None)
            return
        self.session = session
        info = self._info(history=True)
        info.update(path=str(path), source="hf" if hf else "gguf" if gguf else "checkpoint")
        self.loaded.emit(info)
