"""Export: a GGUF (where to write, which dtype with its size; an Ollama Modelfile is written
beside it) or a Hugging Face transformers folder (float32; engine/files/hf); for a LoRA run
also its adapters alone, as a GGUF LoRA adapter or a PEFT folder (studio.adapter_files), while
the GGUF and Hugging Face exports merge them into the model."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton)

from opencl_llm_studio.engine.config import LoraConfig
from opencl_llm_studio.engine.files.export_types import DTYPE_NAMES, TRANSFORMERS_NOTE, estimated_bytes, q8_0_fits
from opencl_llm_studio.studio.lora_estimate import adapter_parameters
from opencl_llm_studio.studio.ui.panels.settings_panel import human_bytes

FORMATS = [("gguf", "GGUF file: llama.cpp, Ollama, LM Studio"),
           ("hf", "Hugging Face folder: transformers, PyTorch, torchrun")]
# a LoRA run's: the model with its adapters merged in, or the adapters alone
LORA_FORMATS = [("gguf", "GGUF file, adapters merged in: llama.cpp, Ollama, LM Studio"),
                ("adapter", "Adapter only (GGUF for llama.cpp --lora / Ollama ADAPTER)"),
                ("peft", "PEFT folder (the adapters for transformers + peft)"),
                ("hf", "Hugging Face folder, adapters merged in: transformers, PyTorch")]
FOLDER_FORMATS = ("hf", "peft")   # written as a new folder; the others as one .gguf file
NOTES = {
    "hf": "A folder that transformers' LlamaForCausalLM.from_pretrained and AutoTokenizer load "
          "as is (float32 weights, the same token ids, the chat template).",
    "gguf": "An Ollama Modelfile is written beside the GGUF. The file loads in llama.cpp, "
            "Ollama and LM Studio. " + TRANSFORMERS_NOTE,
    "adapter": "The adapters alone (float32), to load over the base GGUF they were tuned on: "
               "`llama-cli -m BASE.gguf --lora FILE`. An Ollama Modelfile (FROM the base, "
               "ADAPTER this file) is written beside it.",
    "peft": "adapter_config.json and adapter_model.safetensors: PeftModel.from_pretrained("
            "base, folder) over the base model in transformers.",
}
# what each of the engine's export types (engine.files.export_types.DTYPE_NAMES) means to a person
DTYPE_TEXT = {"f32": "F32: exact, largest", "f16": "F16: half the size, tiny rounding",
              "q8_0": "Q8_0: about a quarter, 8-bit blocks of 32"}


class ExportDialog(QDialog):
    """lora: a LoRA run's LoraConfig.to_dict() (its adapters can be written alone), or None."""

    def __init__(self, model_config, default_path: Path, parent=None, lora: dict | None = None):
        super().__init__(parent)
        self.setWindowTitle("Export the model")
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
        for key in DTYPE_NAMES:
            size = human_bytes(estimated_bytes(model_config, key))
            self.dtype_combo.addItem(f"{DTYPE_TEXT[key]} (≈ {size})", key)
            if key == "q8_0" and not q8_0_fits(model_config):
                item = self.dtype_combo.model().item(self.dtype_combo.count() - 1)
                item.setEnabled(False)
                item.setToolTip("Q8_0 needs d_model and the feed-forward width to be "
                                "multiples of 32.")
        self.format_combo = QComboBox()
        self.format_combo.setObjectName("exportFormatCombo")
        for key, text in LORA_FORMATS if lora else FORMATS:
            if key == "adapter":   # float32 A and B of every target
                size = 4 * adapter_parameters(model_config, LoraConfig.from_dict(lora))
                text = f"{text} (≈ {human_bytes(size)})"
            self.format_combo.addItem(text, key)
        self.format_combo.currentIndexChanged.connect(self._format_changed)
        note = QLabel()
        self.note = note
        note.setWordWrap(True)
        note.setProperty("role", "muted")
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.export_button = buttons.button(QDialogButtonBox.Ok)
        self.export_button.setText("Export")
        self.path_edit.textChanged.connect(self._check_path)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Format", self.format_combo)
        form.addRow("Write to", row)
        form.addRow("Weights", self.dtype_combo)
        form.addRow(note)
        form.addRow(buttons)
        self._format_changed()

    def format(self) -> str:
        return self.format_combo.currentData()

    def _format_changed(self, *_) -> None:
        """GGUF: a file and a weight type; HF and PEFT: a new (or empty) folder, float32; an
        adapter GGUF: a file, float32."""
        folder = self.format() in FOLDER_FORMATS
        self.dtype_combo.setEnabled(self.format() == "gguf")
        path = Path(self.path_edit.text().strip() or "model")
        self.path_edit.setText(str(path.with_suffix("") if folder else path.with_suffix(".gguf")))
        self.note.setText(NOTES[self.format()])
        self._check_path()

    def _check_path(self, *_) -> None:
        """GGUF: a file name (not nothing, not a folder). HF: a folder that is new or empty."""
        text = self.path_edit.text().strip()
        p = Path(text)
        if self.format() in FOLDER_FORMATS:
            why = ("Give the folder to write." if not text else
                   f"{text} is a file: give a folder name." if p.is_file() else
                   f"{text} is a folder that is not empty: give a new folder." if
                   p.is_dir() and any(p.iterdir()) else "")
        else:
            why = ("Give the file to write." if not text else
                   f"{text} is a folder: add a file name such as model.gguf." if p.is_dir()
                   else "")
        self.export_button.setEnabled(not why)
        self.export_button.setToolTip(why)

    def _browse(self) -> None:
        if self.format() in FOLDER_FORMATS:
            path = QFileDialog.getExistingDirectory(self, "Export a folder into",
                                                    str(Path(self.path_edit.text()).parent))
            if path:
                self.path_edit.setText(str(Path(path) / "model"))
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export to GGUF", self.path_edit.text(),
                                              "GGUF models (*.gguf)")
        if path:
            self.path_edit.setText(path if path.endswith(".gguf") else path + ".gguf")

    def preset(self, path: str, dtype: str) -> None:
        """Open on an earlier choice (path, dtype as `choice` gives it), e.g. one whose export
        failed, so that nothing the person chose is lost (an adapter form where this run has
        none: a GGUF)."""
        form = dtype if self.format_combo.findData(dtype) >= 0 else "gguf"
        self.format_combo.setCurrentIndex(self.format_combo.findData(form))
        k = self.dtype_combo.findData(dtype)
        if form == "gguf" and k >= 0 and self.dtype_combo.model().item(k).isEnabled():
            self.dtype_combo.setCurrentIndex(k)
        self.path_edit.setText(path)
        self._check_path()

    def choice(self) -> tuple[str, str]:
        """(path, dtype): dtype "hf" means a Hugging Face folder, "adapter" and "peft" a LoRA
        run's adapters (studio.protocol.ExportRequest.dtype)."""
        return (self.path_edit.text().strip(),
                self.dtype_combo.currentData() if self.format() == "gguf" else self.format())
