"""What the training worker does with a model between steps: chat, export, save, open.

A part of studio.ui.run.worker.TrainingWorker, composed (not a base class): the worker's chat /
export / save / load slots call these on the worker's thread, never beside a training step, and
emit what they return (chatDone, exported, saved, loaded). ModelTasks holds only what it is given:
the run's engine.progress.Monitor (long phases, and Stop ends them), the stop flag (Stop ends a
chat answer) and the worker's error reporter (title, exception).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.progress import Cancelled, Monitor
from opencl_llm_studio.engine.training.run_lock import ensure_free
from opencl_llm_studio.studio.adapter_files import ADAPTER_FORMS, export_adapters
from opencl_llm_studio.studio.protocol import ChatRequest, ExportRequest, LoadJob, ModelSource, SaveRequest
from opencl_llm_studio.studio.run_folder import remove_if_empty


class ModelTasks:
    """chat / export / save / load with a session (see the module); errors go to report_error
    and the call returns None (or "" for save), as the worker's signals carry a failure."""

    def __init__(self, monitor: Monitor, stop: threading.Event,
                 report_error: Callable[[str, BaseException], None],
                 preparing: Callable[[str], None]):
        self.monitor = monitor
        self.stop = stop
        self.report_error = report_error
        self.preparing = preparing   # a phase the run bar shows (an import before its open)

    def chat(self, session, request: ChatRequest, on_piece: Callable[[str], None]):
        """The answer (ChatReply) streamed piece by piece to on_piece; None without a model,
        when Stop or closing cancelled it, or when it failed."""
        if session is None:
            return None

        def on_token(*args):
            if self.stop.is_set():
                raise Cancelled()
            piece = next((a for a in args if isinstance(a, str)), None)
            if piece:
                on_piece(piece)

        try:
            return session.chat(list(request.messages), on_token=on_token, **request.sampling())
        except Cancelled:
            return None
        except Exception as e:
            self.report_error("The model could not answer", e)
            return None

    def export(self, session, request: ExportRequest):
        """A GGUF of `dtype`, a Hugging Face folder when dtype is "hf" (engine/files/hf), or a
        LoRA run's adapters alone ("adapter", "peft": studio.adapter_files): its ExportResult
        (AdapterExport), or None."""
        try:
            if request.dtype in ADAPTER_FORMS:
                return export_adapters(session, request.path, request.dtype, force=True)
            if request.dtype == "hf":
                from opencl_llm_studio.engine.files.hf.export import export_result, export_session
                return export_result(export_session(session, request.path, force=True))
            return session.export_gguf(request.path, dtype=request.dtype, force=True)
        except Exception as e:
            self.report_error("Export failed", e)
            return None

    def save(self, session, request: SaveRequest, run_folder: Path | None) -> str:
        """The checkpoint file written, or "". run_folder: the run in progress's own folder
        (this process holds its lock; any other folder must be free)."""
        directory = request.directory
        try:
            if run_folder is None or Path(directory) != run_folder:
                ensure_free(directory)  # not into a folder another process is training in
            return str(session.save(directory))
        except Exception as e:
            self.report_error("Could not save the checkpoint", e)
            return ""

    def load(self, job: LoadJob):
        """Open the job's model (a GGUF or a folder without texts is trained further on the
        job's texts and train_config): (session, ModelSource, the path opened: the new run
        folder of an import), or None."""
        from opencl_llm_studio.engine.training.opening import ModelPathKind, open_session
        # the opener of what the person asked to open, whatever the path holds
        opens = {ModelSource.CHECKPOINT: ModelPathKind.RUN_FOLDER, ModelSource.GGUF:
                 ModelPathKind.GGUF, ModelSource.HF: ModelPathKind.HF_FOLDER}
        path = Path(job.path)
        try:   # Open checkpoint (no source): the path's kind tells
            source = ModelSource.CHECKPOINT if job.import_to else job.source or ModelSource.of(path)
        except StudioError as e:
            self.report_error("Could not open the model", e)
            return None
        hf, gguf = source is ModelSource.HF, source is ModelSource.GGUF
        try:
            if job.import_to:   # File › Open model…: a pretrained model becomes a run first
                path = self._import(job)
            # a run: its own texts; a GGUF (at its exported step) or a transformers folder
            # without texts of its own: those loaded, and the job's train_config for a GGUF
            session = open_session(path, job.pretrain_text, job.tune_text or None,
                                   train_cfg=job.train_config, device=job.device,
                                   monitor=self.monitor, kind=opens[source])
        except Cancelled:  # the window closes while a large checkpoint is read
            return None
        except Exception as e:
            self.report_error("Could not open the model" if job.import_to else
                              "Could not open the GGUF" if gguf else "Could not open the Hugging "
                              "Face folder" if hf else "Could not open the checkpoint", e)
            return None
        return session, source, path

    def _import(self, job: LoadJob) -> Path:
        """Import the open model at job.path into the run folder job.import_to
        (studio.open_import), on its texts (the bundled corpus when none is loaded); returns the
        folder. A claimed empty folder is given back when the import fails."""
        from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
        from opencl_llm_studio.studio.open_import import import_open_model, read_model
        self.preparing(f"Importing {Path(job.path).name}…")
        pretrain = job.pretrain_text or read_text(bundled_corpus("pretrain"))
        try:
            return import_open_model(read_model(job.path), job.import_to, pretrain,
                                     job.tune_text or None)
        except BaseException:
            remove_if_empty(job.import_to)   # claimed by new_run_dir, never written
            raise
