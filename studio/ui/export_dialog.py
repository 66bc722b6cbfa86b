"""Export to GGUF: where to write, which dtype (with its size), then the engine writes the GGUF
and an Ollama Modelfile beside it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton)

from studio.ui.settings_panel import export_bytes, human_bytes

DTYPES = [("f32", "F32: exact, largest"), ("f16", "F16: half the size, tiny rounding"),
          ("q8_0", "Q8_0: about a quarter, 8-bit blocks of 32")]


class ExportDialog(QDialog):
    def __init__(self, model_config, default_path: Path, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Export to GGUF")
        self.setMinimumWidth(520)
        self.path_edit = QLineEdit(str(default_path))
        self.path_edit.setObjectName("exportPathEdit")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.path_edit, 1)
        row.addWidget(browse)
        self.dtype_combo = QComboBox()
        self.dtype_combo.setObjectName("exportDtypeCombo")
        q8_ok = all(n % 32 == 0 for n in (model_config.d_model, model_config.hidden_dim))
        for key, text in DTYPES:
            size = human_bytes(export_bytes(model_config, key))
            self.dtype_combo.addItem(f"{text} (≈ {size})", key)
            if key == "q8_0" and not q8_ok:
                item = self.dtype_combo.model().item(self.dtype_combo.count() - 1)
                item.setEnabled(False)
                item.setToolTip("Q8_0 needs d_model and the feed-forward width to be "
                                "multiples of 32.")
        note = QLabel("An Ollama Modelfile is written beside the GGUF. The file loads in "
                      "llama.cpp, Ollama and LM Studio.")
        note.setWordWrap(True)
        note.setProperty("role", "muted")
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.export_button = buttons.button(QDialogButtonBox.Ok)
        self.export_button.setText("Export")
        self.path_edit.textChanged.connect(self._check_path)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("File", row)
        form.addRow("Weights", self.dtype_combo)
        form.addRow(note)
        form.addRow(buttons)
        self._check_path()

    def _check_path(self, *_) -> None:
        """Export only to a file name (not nothing, not a folder)."""
        text = self.path_edit.text().strip()
        why = ("Give the file to write." if not text else
               f"{text} is a folder: add a file name such as model.gguf." if Path(text).is_dir()
               else "")
        self.export_button.setEnabled(not why)
        self.export_button.setToolTip(why)

    def _browse(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export to GGUF", self.path_edit.text(),
                                              "GGUF models (*.gguf)")
        if path:
            self.path_edit.setText(path if path.endswith(".gguf") else path + ".gguf")

    def choice(self) -> tuple[str, str]:
        return self.path_edit.text().strip(), self.dtype_combo.currentData()
