"""Where the studio keeps its settings and its runs: one answer for the window and for the
command line (`llm-studio runs` / `plot` list the runs the studio wrote).

Settings: QSettings(APP_NAME, "studio"), i.e. <config>/OpenCL LLM Studio/studio.conf on Linux.
Runs: the folder saved under RUNS_DIR_KEY (Autosave › Runs folder), else
<generic data>/OpenCL LLM Studio/runs: ~/.local/share/... on Linux, ~/Library/Application
Support/... on macOS, AppData/Local/... on Windows (local, not roaming: checkpoints are big).
Neither depends on how the running QApplication is named (the command line has none).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths

APP_NAME = "OpenCL LLM Studio"
RUNS_DIR_KEY = "autosave/runs_dir"


def open_settings() -> QSettings:
    """The studio's settings store."""
    return QSettings(APP_NAME, "studio")


def default_runs_root() -> Path:
    """The runs folder when none was chosen."""
    base = QStandardPaths.writableLocation(QStandardPaths.GenericDataLocation)
    return (Path(base) / APP_NAME if base else Path.home() / ".opencl-llm-studio") / "runs"


def runs_root(settings: QSettings | None = None) -> Path:
    """The runs folder the studio uses: the one chosen in Autosave (saved in `settings`,
    default open_settings()), else default_runs_root()."""
    value = (settings or open_settings()).value(RUNS_DIR_KEY)
    return Path(str(value)) if value else default_runs_root()
