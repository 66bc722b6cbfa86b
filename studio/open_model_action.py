"""File › Open model…: the main window shows studio.ui.open_model_dialog.OpenModelDialog and
opens the choice with what it has for opening runs (RunController.load on the worker thread).

A pretrained open model is imported into a new run folder under the runs folder (LoadJob.
import_to: studio.open_import, as `llm-studio import` does), with the pretraining text loaded
now as its general text (the bundled corpus when none is) and the dialogues loaded now; that run
becomes the current session for chat and tuning. A model this app wrote opens as File › Open
exported GGUF / Hugging Face folder open it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from studio.protocol import LoadJob, ModelSource
from studio.run_folder import new_run_dir
from studio.ui.open_model_dialog import OpenModelDialog


def open_model(window, path: str | None = None) -> OpenModelDialog | None:
    """Show the dialog (non-modal to the event loop: dialog.open()), reading `path`'s card at
    once when given; returns the dialog, or None while the window is busy."""
    if not window.controller.free:
        return None
    sp = window.settings_panel
    dialog = OpenModelDialog(window, batch_size=sp.train_config().batch_size
                             if sp.is_valid() else None, device=window.device_panel.current(),
                             start_dir=str(window.settings.value("export/dir", str(Path.home()))))
    dialog.setAttribute(Qt.WA_DeleteOnClose)   # one dialog per File › Open model…
    dialog.accepted.connect(lambda: _open(window, dialog))
    if path:
        dialog.set_path(path)
    dialog.open()
    return dialog


def _open(window, dialog: OpenModelDialog) -> None:
    path = dialog.path()
    if not dialog.is_open():   # exported by this app: it carries its own format and progress
        window._open_model(path, ModelSource.HF if Path(path).is_dir() else ModelSource.GGUF)
        return
    if not window.controller.free:
        return
    run_dir = new_run_dir(window.autosave_box.runs_root())
    job = LoadJob(path, device=window.device_panel.spec(), import_to=str(run_dir),
                  pretrain_text=window.data_panel.pretrain_text or None,
                  tune_text=window.data_panel.tune_text or None)
    window.statusBar().showMessage(f"Importing {Path(path).name} into {run_dir}…")
    window.controller.load(job)
