"""The app's own exit: opening the window and closing it, as a person does, prints nothing on
stderr (the worker thread's clean-up once ran after Qt had deleted the thread and printed a
RuntimeError traceback at every exit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv)
from opencl_llm_studio.studio.ui.app import run_app
QTimer.singleShot(500, lambda: [w.close() for w in QApplication.topLevelWidgets()])
sys.exit(run_app())
"""


def test_closing_the_app_prints_no_traceback(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HOME=str(tmp_path),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
