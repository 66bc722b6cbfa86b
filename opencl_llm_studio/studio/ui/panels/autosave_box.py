"""Autosave settings: how often a run checkpoints, and where run folders go.

Each run gets <runs folder>/<YYYYmmdd-HHMMSS>/ with checkpoint.npz and metrics.jsonl (see
studio.run_folder); the default runs folder is studio.app_settings.default_runs_root().
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QPushButton,
                               QSpinBox, QWidget)

from opencl_llm_studio.engine.limits import LIMITS
from opencl_llm_studio.studio.app_settings import RUNS_DIR_KEY, default_runs_root
from opencl_llm_studio.studio.run_folder import DEFAULT_EVERY
from opencl_llm_studio.studio.ui.widgets import ElidedLabel, enable_with_reason


class AutosaveBox(QGroupBox):
    def __init__(self, parent=None):
        super().__init__("Autosave", parent)
        self._root = default_runs_root()
        self.every_spin = QSpinBox()
        self.every_spin.setObjectName("checkpointEverySpin")
        self.every_spin.setRange(*map(int, LIMITS["checkpoint_every"].bounds(1)))
        self.every_spin.setSingleStep(50)
        self.every_spin.setValue(DEFAULT_EVERY)
        self.every_spin.setSuffix(" steps")
        self.every_spin.setSpecialValueText("only on stop / end")
        self.every_spin.setMinimumWidth(96)  # not its special text's width: a narrow column
        self.every_spin.setToolTip("Write a checkpoint into the run folder every N steps. "
                                   "One is also written on Pause, Stop, at the end and when "
                                   "the window closes during training.")
        self.root_label = ElidedLabel(min_width=60)  # a long path never widens the column
        self.root_label.setObjectName("runsRootLabel")
        self.root_label.setProperty("role", "muted")
        self.root_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.change_button = QPushButton("Change…")
        self.change_button.setObjectName("changeRunsRootButton")
        self.change_button.clicked.connect(self._ask_root)
        root_row = QWidget()
        rl = QHBoxLayout(root_row)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.root_label, 1)
        rl.addWidget(self.change_button)
        self.setToolTip("Every run gets its own folder in the runs folder, holding "
                        "checkpoint.npz and metrics.jsonl; File › Open checkpoint continues it.")
        form = QFormLayout(self)
        form.setLabelAlignment(Qt.AlignRight | Qt.AlignVCenter)
        form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        form.setContentsMargins(6, 6, 6, 6)
        form.addRow("Checkpoint every", self.every_spin)
        form.addRow("Runs folder", root_row)
        self._show_root()

    def every(self) -> int:
        return self.every_spin.value()

    def runs_root(self) -> Path:
        return self._root

    def set_runs_root(self, path) -> None:
        self._root = Path(path)
        self._show_root()

    def _show_root(self) -> None:
        self.root_label.setText(str(self._root))  # elided to its width, whole in the tooltip

    def _ask_root(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder for training runs", str(self._root))
        if path:
            self.set_runs_root(path)

    def set_editable(self, on: bool, why: str = "") -> None:
        """why: the reason the autosave settings are off (in their tooltips)."""
        enable_with_reason(self.every_spin, on, why)
        enable_with_reason(self.change_button, on, why)

    def save(self, s: QSettings) -> None:
        s.setValue("autosave/every", self.every())
        s.setValue(RUNS_DIR_KEY, str(self._root))

    def restore(self, s: QSettings) -> None:
        try:
            self.every_spin.setValue(int(float(s.value("autosave/every", DEFAULT_EVERY))))
        except (TypeError, ValueError):
            pass
        root = s.value(RUNS_DIR_KEY)
        if root:
            self.set_runs_root(root)
