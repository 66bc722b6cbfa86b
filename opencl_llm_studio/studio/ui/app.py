"""The application: name it, open the main window (studio.ui.window.main_window), run the event loop.
`llm-studio` with no command and `python -m opencl_llm_studio` come here (studio.cli)."""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from opencl_llm_studio.studio.app_settings import APP_NAME
from opencl_llm_studio.studio.ui.window.main_window import MainWindow


def configure_application(app: QApplication) -> None:
    """Name the application once, not as organization and application both: Qt puts its data
    under <organization>/<application>, which made the runs folder ".../OpenCL LLM Studio/OpenCL
    LLM Studio/runs". Settings go to <config>/OpenCL LLM Studio/studio.conf (MainWindow)."""
    app.setOrganizationName("")
    app.setApplicationName(APP_NAME)
    app.setStyle("Fusion")




def app_icon() -> QIcon:
    """The application's icon (package data: resources/icon.svg, icon.png for the desktop)."""
    from opencl_llm_studio import resources
    return QIcon(str(resources.path("icon.png")))


def run_app(pretrain_path=None, tune_path=None, device=None, screenshot=None) -> int:
    """Open the main window (the `llm-studio` command without a subcommand). screenshot: a
    .png path: the window saves a picture of itself there once shown (atomically) and closes,
    so a person or a test can see it without a display (QT_QPA_PLATFORM=offscreen). The
    picture is taken when the event loop is first idle with the window shown: the moment a
    person could use it (benchmarks/startup.sh times launch to that moment)."""
    app = QApplication.instance() or QApplication(sys.argv)
    configure_application(app)
    app.setWindowIcon(app_icon())
    window = MainWindow(pretrain_path=pretrain_path, tune_path=tune_path, device=device)
    window.show()
    if screenshot:
        QTimer.singleShot(0, lambda: _save_and_close(window, Path(screenshot)))
    return app.exec()


def _save_and_close(window, path: Path) -> None:
    from opencl_llm_studio.engine.fsutil import atomic_write
    image = window.grab()
    atomic_write(path, lambda tmp: image.save(str(tmp), "PNG") or _failed(tmp))
    window.close()


def _failed(path: Path) -> None:
    raise OSError(f"could not write a PNG to {path}")
