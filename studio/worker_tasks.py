"""What the training worker does with a model between steps: chat, export, save, open.

A mixin of studio.worker.TrainingWorker (which declares the signals these emit: token,
chatDone, exported, saved, loaded, error) so that each runs as a slot on the worker's thread,
never beside a training step. The worker provides session, recorder, monitor, _stop, _fail,
_info, _close_steps and _end_run.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Slot

from engine.progress import Cancelled
from engine.run_lock import ensure_free
from studio.protocol import ChatRequest, ExportRequest, LoadJob, ModelSource, SaveRequest
from studio.run_folder import remove_if_empty


class ModelTasks:
    """chat / export / save / load slots of the training worker (see the module)."""

    @Slot(object)
    def chat(self, request: ChatRequest) -> None:
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
            answer = self.session.chat(list(request.messages), on_token=on_token,
                                       **request.sampling())
        except Cancelled:
            answer = None
        except Exception as e:
            self._fail("The model could not answer", e)
            answer = None
        self.chatDone.emit(answer)

    @Slot(object)
    def export(self, request: ExportRequest) -> None:
        """A GGUF of `dtype`, or a Hugging Face folder when dtype is "hf" (engine/hf)."""
        try:
            if request.dtype == "hf":
                from engine.hf.export import export_result, export_session
                result = export_result(export_session(self.session, request.path, force=True))
            else:
                result = self.session.export_gguf(request.path, dtype=request.dtype, force=True)
        except Exception as e:
            self._fail("Export failed", e)
            result = None
        self.exported.emit(result)

    @Slot(object)
    def save(self, request: SaveRequest) -> None:
        directory = request.directory
        try:
            if self.recorder is None or Path(directory) != self.recorder.folder:
                ensure_free(directory)  # not into a folder another process is training in
            path = self.session.save(directory)
        except Exception as e:
            self._fail("Could not save the checkpoint", e)
            path = ""
        self.saved.emit(str(path))

    @Slot(object)
    def load(self, job: LoadJob) -> None:
        """Open the job's model (a GGUF or a folder without texts is trained further on the
        job's texts and train_config); loaded carries its SessionInfo, or None."""
        from engine.session import TrainingSession
        self._close_steps()
        self._end_run()
        path = Path(job.path)
        from engine.hf.load import has_texts, is_model_folder, session_from_hf
        guess = job.source is None  # Open checkpoint: the path tells
        hf = job.source is ModelSource.HF or (guess and is_model_folder(path))
        gguf = job.source is ModelSource.GGUF or (guess and path.suffix.lower() == ".gguf")
        try:
            if job.import_to:   # File › Open model…: a pretrained model becomes a run first
                path = self._import(job)
                hf = gguf = False
            if hf:   # a transformers folder: its own texts if it has them, else those loaded
                texts = () if has_texts(path) else (job.pretrain_text, job.tune_text or None)
                session = session_from_hf(path, *texts, device=job.device)
            elif gguf:
                session = TrainingSession.from_gguf(
                    path, job.pretrain_text, job.tune_text or None, train_cfg=job.train_config,
                    device=job.device, monitor=self.monitor)   # at its exported step
            else:
                session = TrainingSession.load(path, device=job.device, monitor=self.monitor)
        except Cancelled:  # the window closes while a large checkpoint is read
            self.loaded.emit(None)
            return
        except Exception as e:
            self._fail("Could not open the model" if job.import_to else
                       "Could not open the GGUF" if gguf else "Could not open the Hugging Face "
                       "folder" if hf else "Could not open the checkpoint", e)
            self.loaded.emit(None)
            return
        self.session = session
        source = ModelSource.HF if hf else ModelSource.GGUF if gguf else ModelSource.CHECKPOINT
        self.loaded.emit(self._info(history=True, path=str(path), source=source))

    def _import(self, job: LoadJob) -> Path:
        """Import the open model at job.path into the run folder job.import_to (studio.
        open_import), on its texts (the bundled corpus when none is loaded); returns the
        folder. A claimed empty folder is given back when the import fails."""
        from engine.open_run import read_model
        from engine.textio import bundled_corpus, read_text
        from studio.open_import import import_open_model
        self.preparing.emit(f"Importing {Path(job.path).name}…")
        pretrain = job.pretrain_text or read_text(bundled_corpus("pretrain"))
        try:
            return import_open_model(read_model(job.path), job.import_to, pretrain,
                                     job.tune_text or None)
        except BaseException:
            remove_if_empty(job.import_to)   # claimed by new_run_dir, never written
            raise
