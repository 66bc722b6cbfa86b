"""The application: name it, open the main window (studio.ui.main_window), run the event loop.
`llm-studio` with no command and `python -m opencl_llm_studio` come here (studio.cli)."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from opencl_llm_studio.studio.app_settings import APP_NAME
from opencl_llm_studio.studio.ui.main_window import MainWindow


def configure_application(app: QApplication) -> None:
    """Name the application once, not as organization and application both: Qt puts its data
    under <organization>/<application>, which made the runs folder ".../OpenCL LLM Studio/OpenCL
    LLM Studio/runs". Settings go to <config>/OpenCL LLM Studio/studio.conf (MainWindow)."""
    app.setOrganizationName("")
    app.setApplicationName(APP_NAME)
    app.setStyle("Fusion")


def run_app(pretrain_path=None, tune_path=None, device=None) -> int:
    """Open the main window (the `llm-studio` command without a subcommand)."""
    app = QApplication.instance() or QApplication(sys.argv)
    configure_application(app)
    window = MainWindow(pretrain_path=pretrain_path, tune_path=tune_path, device=device)
    window.show()
    return app.exec()
