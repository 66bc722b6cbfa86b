"""File › Open model…: the window shows studio.ui.dialogs.open_model_dialog.OpenModelDialog and opens the
choice with what it has for opening runs (RunController.load on the worker thread).

A pretrained open model is imported into a new run folder under the runs folder (LoadJob.
import_to: studio.open_import, as `llm-studio import` does), with the pretraining text loaded
now as its general text (the bundled corpus when none is) and the dialogues loaded now; that run
becomes the current session for chat and tuning. A model this app wrote opens as File › Open
exported GGUF / Hugging Face folder open it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QSettings, Qt

from opencl_llm_studio.studio.protocol import LoadJob, ModelSource
from opencl_llm_studio.studio.run_folder import new_run_dir
from opencl_llm_studio.studio.ui.dialogs.open_model_dialog import OpenModelDialog
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.window.window_face import WindowFace
from opencl_llm_studio.studio.ui.window.window_layout import Panels


class OpenModelAction:
    """The File › Open model… part: open_model (a path, or None to ask) opens the dialog;
    open_app_model(path, source) is the window's own open for a model this app exported."""

    def __init__(self, window: WindowFace, panels: Panels, controller: RunController,
                 settings: QSettings, open_app_model: Callable[[str, ModelSource], None]):
        self.window = window
        self.panels = panels
        self.controller = controller
        self.settings = settings            # the folder the dialog starts in
        self.open_app_model = open_app_model

    def ask(self) -> None:
        """File › Open model…: the dialog, empty (a bound method, so the menu's connection
        keeps no reference to the window alive)."""
        self.open_model()

    def open_model(self, path: str | None = None) -> OpenModelDialog | None:
        """Show the dialog (non-modal to the event loop: dialog.open()), reading `path`'s card
        at once when given; returns the dialog, or None while the window is busy."""
        if not self.controller.free:
            return None
        dialog = OpenModelDialog(self.window.widget(),   # its memory at the imported run's batch
                                 device=self.panels.device_panel.current(),
                                 start_dir=str(self.settings.value("export/dir", str(Path.home()))))
        dialog.setAttribute(Qt.WA_DeleteOnClose)   # one dialog per File › Open model…
        dialog.accepted.connect(lambda: self._open(dialog))   # the dialog's own: dies with it
        if path:
            dialog.set_path(path)
        dialog.open()
        return dialog

    def _open(self, dialog: OpenModelDialog) -> None:
        path = dialog.path()
        if not dialog.is_open():   # exported by this app: it carries its own format and progress
            self.open_app_model(path, ModelSource.HF if Path(path).is_dir() else ModelSource.GGUF)
            return
        if not self.controller.free:
            return
        run_dir = new_run_dir(self.panels.autosave_box.runs_root())
        data = self.panels.data_panel
        job = LoadJob(path, device=self.panels.device_panel.spec(), import_to=str(run_dir),
                      pretrain_text=data.pretrain_text or None, tune_text=data.tune_text or None)
        self.window.status(f"Importing {Path(path).name} into {run_dir}…")
        self.controller.load(job)
