"""File › Open model…: pick a GGUF file or a transformers folder and read its model card before
opening it (issue 21).

The card (engine.files.model_card.model_card) is read on a background thread from the model's
metadata alone (studio.open_import.read_model(weights=False): no tensor is read or dequantized; the
open reads them once), so a large model does not freeze the window: name, parameters, file type,
layers, heads / key-value heads, context, vocabulary, tokenizer
(engine.files.model_card.tokenizer_name: byte-level BPE with its pre-tokenizer, or SentencePiece),
the chat template's first lines, RoPE base and scaling, tied embeddings, and the memory a tuning
step needs (engine.model.memory.training_bytes at the imported run's batch, for short dialogues
and for the longest training window, engine.files.open_run.tuning_config), with how much of
that fits the device (all, or dialogues up to a length). A
model the engine cannot run shows the reason (the ModelImportError's message and hint) and Open
stays off. The dialog only chooses: studio.ui.window.open_model_action opens the choice.
"""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPushButton, QVBoxLayout)

from opencl_llm_studio.engine.config import PRETRAINED_BATCH

# card rows: object name -> label (the values are set by _show)
ROWS = (("name", "Name"), ("parameters", "Parameters"), ("file_type", "File type"),
        ("layers", "Layers"), ("heads", "Heads / key-value heads"),
        ("context", "Context"), ("vocabulary", "Vocabulary"), ("tokenizer", "Tokenizer"),
        ("template", "Chat template"), ("rope", "RoPE"), ("embeddings", "Embeddings"),
        ("memory", "Tuning step memory"))
GIB = 2 ** 30
SHORT_DIALOGUE = 128   # tokens: a question and a short answer in a chat template (the memory row)


def read_card(path, batch_size: int, device=None) -> dict:
    """What the dialog shows for the model at `path`: {"card": engine.files.model_card.model_card,
    "rows": {row name: text}, "open": whether it is a pretrained open model (else one this app
    wrote), "fits": "" or what of tuning does not fit `device` (engine.opencl.device.DeviceInfo or
    None): all of it, or windows longer than a length it names}. Raises StudioError (ModelImportError: a model the engine cannot run)."""
    from opencl_llm_studio.engine.errors import ConfigError
    from opencl_llm_studio.engine.files.gguf_export import is_open
    from opencl_llm_studio.engine.data.dialogue import WINDOW_STEP
    from opencl_llm_studio.engine.model.memory import check_fits, fits as fits_device, training_bytes
    from opencl_llm_studio.engine.files.model_card import model_card, parameters_text
    from opencl_llm_studio.engine.files.open_run import tuning_config
    from opencl_llm_studio.studio.open_import import read_model
    bundle = read_model(path, weights=False)   # metadata only: the open reads the tensors
    card = model_card(bundle)
    cfg = tuning_config(bundle.config)
    # dialogues tune in windows cut to their lengths (engine.data.dialogue.tune_window): a
    # short one and the longest window bound what a step needs
    short = min(SHORT_DIALOGUE, cfg.context_length)
    need_short = training_bytes(cfg, batch_size, device, window=short)[0]
    need = training_bytes(cfg, batch_size, device)[0]
    fits = ""
    if device is not None:
        try:
            check_fits(cfg, batch_size, device, window=short)
            if not fits_device(cfg, batch_size, device, window=cfg.context_length):
                longest = max(w for w in range(short, cfg.context_length + 1, WINDOW_STEP)
                              if fits_device(cfg, batch_size, device, window=w))
                fits = (f"dialogues of up to {longest:,} tokens tune at batch {batch_size} "
                        f"(a step at {cfg.context_length:,} tokens needs {need / GIB:.1f} GiB)")
        except ConfigError as e:
            fits = "tuning will not fit: " + e.describe()
    rope = f"base {card['rope_base']:g}" + (f", {card['rope_scaling']} scaling"
                                            if card["rope_scaling"] else ", no scaling")
    p = card["parameters"]
    rows = {
        "name": card["name"], "parameters": f"{parameters_text(p)} ({p:,})",
        "file_type": card["file_type"] or "unknown",
        "layers": f"{card['layers']} (d_model {card['d_model']}, feed-forward {card['ffn_dim']})",
        "heads": f"{card['heads']} / {card['kv_heads']}" + (
            " (grouped-query attention)" if card["kv_heads"] < card["heads"] else ""),
        "context": f"{card['context_length']:,} tokens (tuned in windows of up to "
                   f"{cfg.context_length:,})",
        "vocabulary": f"{card['vocab_size']:,} tokens", "tokenizer": card["tokenizer"],
        "template": card["template_head"] or "none",
        "rope": rope, "embeddings": "tied" if card["tied_embeddings"] else "untied",
        "memory": f"{need_short / GIB:.2f} GiB at batch {batch_size} × {short} tokens "
                  f"(short dialogues), {need / GIB:.2f} GiB × {cfg.context_length:,}"
                  + (f" on {device.name}" if device is not None else ""),
    }
    return {"card": card, "rows": rows, "open": is_open(bundle), "fits": fits}


class OpenModelDialog(QDialog):
    """Choose a model and see its card (module docstring). path() is the choice; is_open()
    whether it is a pretrained open model (imported into a new run) or one this app wrote."""

    cardRead = Signal(int, object)   # (read number, read_card's dict or the StudioError)

    def __init__(self, parent=None, batch_size: int | None = None, device=None,
                 start_dir: str = ""):
        super().__init__(parent)
        self.setObjectName("openModelDialog")
        self.setWindowTitle("Open model")
        self.batch_size = batch_size or PRETRAINED_BATCH   # what an imported run trains at
        self.device = device
        self.start_dir = start_dir or str(Path.home())
        self._path = ""
        self._reads = 0          # the latest read's number: older reads are ignored
        self._result: dict | None = None
        self.reason = ""         # why the chosen model cannot be opened ("" when it can)
        self.cardRead.connect(self._on_read)
        self._build()

    def _build(self) -> None:
        lay = QVBoxLayout(self)
        intro = QLabel("A pretrained model (a GGUF file, or a Hugging Face transformers folder "
                       "with config.json, *.safetensors and tokenizer.json) opens as a new run: "
                       "chat with it, tune it on your dialogues, export it.")
        intro.setWordWrap(True)
        intro.setProperty("role", "muted")
        lay.addWidget(intro)
        row = QHBoxLayout()
        self.path_edit = QLineEdit()
        self.path_edit.setObjectName("modelPathEdit")
        self.path_edit.setReadOnly(True)
        self.path_edit.setPlaceholderText("No model chosen")
        row.addWidget(self.path_edit, 1)
        for text, name, slot in (("GGUF file…", "chooseGgufButton", self._choose_file),
                                 ("Model folder…", "chooseFolderButton", self._choose_folder)):
            b = QPushButton(text)
            b.setObjectName(name)
            b.clicked.connect(slot)
            row.addWidget(b)
        lay.addLayout(row)
        self.status = QLabel("Choose a GGUF file or a model folder.")
        self.status.setObjectName("cardStatus")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        form = QFormLayout()
        self.values: dict[str, QLabel] = {}
        for name, label in ROWS:
            v = QLabel("–")
            v.setObjectName(f"card_{name}")
            v.setWordWrap(True)
            v.setTextFormat(Qt.PlainText)   # a model's name or template is not markup
            if name == "template":
                v.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
            form.addRow(label, v)
            self.values[name] = v
        lay.addLayout(form)
        self.refusal = QLabel()
        self.refusal.setObjectName("refusalLabel")
        self.refusal.setProperty("role", "error")
        self.refusal.setWordWrap(True)
        self.refusal.setVisible(False)
        lay.addWidget(self.refusal)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Open | QDialogButtonBox.Cancel)
        self.open_button = self.buttons.button(QDialogButtonBox.Open)
        self.open_button.setEnabled(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay.addWidget(self.buttons)
        self.setMinimumWidth(560)

    # -- choosing
    def _choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", self.start_dir,
                                              "GGUF models (*.gguf)")
        if path:
            self.set_path(path)

    def _choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a Hugging Face model folder",
                                                self.start_dir)
        if path:
            self.set_path(path)

    def set_path(self, path) -> None:
        """Show `path` and read its card on a background thread (cardRead brings it back)."""
        self._path, self._result, self.reason = str(path), None, ""
        self._reads += 1
        self.path_edit.setText(self._path)
        self.open_button.setEnabled(False)
        self.refusal.setVisible(False)
        for v in self.values.values():
            v.setText("–")
        self.status.setText(f"Reading {Path(path).name}…")
        n, batch, device = self._reads, self.batch_size, self.device
        threading.Thread(target=self._read, args=(n, self._path, batch, device),
                         name="model-card", daemon=True).start()

    def _read(self, n: int, path: str, batch: int, device) -> None:
        from opencl_llm_studio.engine.errors import StudioError
        try:
            result = read_card(path, batch, device)
        except StudioError as e:
            result = e
        except Exception as e:   # a damaged file: its reader's own error, still a reason
            result = StudioError(f"{Path(path).name} could not be read: {e}",
                                 "Choose a GGUF file or a transformers model folder.")
        try:
            self.cardRead.emit(n, result)   # queued to the dialog's thread
        except RuntimeError:   # the dialog was closed and deleted meanwhile
            pass

    def _on_read(self, n: int, result) -> None:
        if n != self._reads:
            return   # a model chosen since
        if isinstance(result, Exception):
            self.reason = result.describe()
            self.status.setText("The engine cannot open this model.")
            self.refusal.setText(self.reason)
            self.refusal.setVisible(True)
            self._fit_height()
            return
        self._result = result
        for name, text in result["rows"].items():
            self.values[name].setText(text)
        self.status.setText("A pretrained model: it opens as a new run." if result["open"]
                            else "A model this app trained: it opens as it was exported.")
        if result["fits"]:
            self.refusal.setText("Chat works; " + result["fits"])
            self.refusal.setVisible(True)
        self.open_button.setEnabled(True)
        self._fit_height()

    def _fit_height(self) -> None:
        """Grow to the filled card's height at this width (the dialog was sized empty, "–" in
        every row: without this the template's lines and wrapped rows are cut off)."""
        lay = self.layout()
        lay.activate()
        need = lay.totalHeightForWidth(self.width())
        screen = self.screen()
        if screen is not None:
            need = min(need, screen.availableGeometry().height())
        if need > self.height():
            self.resize(self.width(), need)

    # -- the choice
    def path(self) -> str:
        return self._path

    def card(self) -> dict | None:
        """The model card read (engine.files.model_card.model_card), None before or on a refusal."""
        return self._result["card"] if self._result else None

    def is_open(self) -> bool:
        return bool(self._result and self._result["open"])

    def row_text(self, name: str) -> str:
        """The text the card shows in row `name` (ROWS)."""
        return self.values[name].text()
