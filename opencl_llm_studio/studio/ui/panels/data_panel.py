"""Pretraining and tune files: Open buttons, drag and drop, statistics and a preview.

Files are read and checked by the engine (engine.data.textio.read_text, engine.data.dialogue); a file the
engine refuses is shown with its message and hint, and the previous text is kept.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QFileDialog, QFrame, QGridLayout, QGroupBox, QLabel,
                               QPlainTextEdit, QPushButton, QTabWidget, QVBoxLayout)

from opencl_llm_studio.engine.config import DEFAULT_TOKENIZER
from opencl_llm_studio.engine.errors import DataError, StudioError
from opencl_llm_studio.studio.ui.widgets import ElidedLabel, enable_with_reason

PREVIEW_CHARS = 20_000  # enough to read; a QPlainTextEdit with megabytes would slow the GUI
TEXT_FILTER = "Text files (*.txt *.md *.jsonl *.json);;All files (*)"


PEEK_BYTES = 20_000  # of a dropped file, to guess its slot
BUNDLED_TUNE_NOTE = ("the bundled sample dialogues: tuning teaches their facts; open your own "
                     "or set tuning steps to 0")


def looks_like_dialogue(path: Path, text: str) -> bool:
    """Guess which slot a dropped file belongs to: JSONL or User:/Assistant: turns -> tune."""
    if path.suffix.lower() in (".jsonl", ".json"):
        return True
    head = text[:PEEK_BYTES]
    return "User:" in head and "Assistant:" in head


def _split_documents(text: str) -> list[str]:
    try:
        from opencl_llm_studio.engine.data.textio import split_documents
    except ImportError:
        from opencl_llm_studio.engine.data.corpus import split_documents
    return split_documents(text)


class FileSlot(QFrame):
    """One row: title, file name, statistics, Open button; accepts a dropped file."""

    fileDropped = Signal(str)

    def __init__(self, title: str, button_name: str, parent=None):
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.setObjectName(button_name.replace("Button", "Slot"))
        self.setProperty("role", "fileSlot")
        bold, _, rest = title.partition(" (")
        if rest:  # the format hint, muted, kept on one line
            rest = f" <span style='color:#5f6b7a'>({rest.replace(' ', '&nbsp;')}</span>"
        self.title = QLabel(f"<b>{bold}</b>{rest}")
        self.title.setWordWrap(True)  # narrow side pane: the format hint goes to a second line
        self.name = ElidedLabel(min_width=60)  # a long file name never widens the window
        self.name.setText("none")
        self.name.setObjectName(button_name.replace("Button", "Name"))
        self.name.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.stats = QLabel("")
        self.stats.setObjectName(button_name.replace("Button", "Stats"))
        self.stats.setWordWrap(True)
        self.stats.setProperty("role", "muted")
        self.button = QPushButton("Open…")
        self.button.setObjectName(button_name)
        grid = QGridLayout(self)
        grid.setContentsMargins(8, 6, 8, 6)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.button, 0, 1, 2, 1, Qt.AlignVCenter)
        grid.addWidget(self.name, 1, 0)
        grid.addWidget(self.stats, 2, 0, 1, 2)
        grid.setColumnStretch(0, 1)

    def set_error(self, message: str) -> None:
        self.stats.setText(message)
        self.stats.setProperty("role", "error" if message else "muted")
        self.stats.style().unpolish(self.stats)
        self.stats.style().polish(self.stats)

    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event):
        urls = [u for u in event.mimeData().urls() if u.isLocalFile()]
        if urls:
            self.fileDropped.emit(urls[0].toLocalFile())
            event.acceptProposedAction()


def _count(n: int, noun: str) -> str:
    """'1 line', '5,000 lines': a one-line file said "1 lines · 1 documents"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


class DataPanel(QGroupBox):
    dataChanged = Signal()
    errorOccurred = Signal(str, str)  # title, message with hint
    fileLoaded = Signal(str)          # a status line: replaces an earlier file's "Cannot use"

    def __init__(self, parent=None):
        super().__init__("Training data", parent)
        self.pretrain_text = ""
        self.tune_text = ""
        self.pretrain_path: Path | None = None
        self.tune_path: Path | None = None
        self.n_dialogues = 0
        self._base_stats: dict[str, str] = {}  # statistics before token counts are known
        # engine.data.tokenizer.bpe_characters of each text loaded: the smallest BPE vocabulary
        self._chars: dict[str, frozenset[str]] = {"pretrain": frozenset(), "tune": frozenset()}
        self.pretrain = FileSlot("Pretraining text", "openPretrainButton")
        self.tune = FileSlot("Tune dialogues (User: … Assistant: …)", "openTuneButton")
        self.pretrain.button.clicked.connect(lambda: self._ask("pretrain"))
        self.tune.button.clicked.connect(lambda: self._ask("tune"))
        self.pretrain.fileDropped.connect(lambda p: self.load("pretrain", p))
        self.tune.fileDropped.connect(lambda p: self.load("tune", p))
        hint = QLabel("Open files or drop them here (or anywhere on the window). The "
                      "tokenizer is trained on these texts when you press Train.")
        hint.setWordWrap(True)
        hint.setProperty("role", "muted")
        lay = QVBoxLayout(self)
        lay.setSpacing(6)
        lay.addWidget(self.pretrain)
        lay.addWidget(self.tune)
        lay.addWidget(hint)

        self.preview = QTabWidget()
        self.preview.setObjectName("dataPreview")
        self.pretrain_preview = self._preview_box("pretrainPreview")
        self.tune_preview = self._preview_box("tunePreview")
        self.preview.addTab(self.pretrain_preview, "Pretraining text")
        self.preview.addTab(self.tune_preview, "Tune dialogues")

    @staticmethod
    def _preview_box(name: str) -> QPlainTextEdit:
        box = QPlainTextEdit()
        box.setObjectName(name)
        box.setReadOnly(True)
        box.setLineWrapMode(QPlainTextEdit.WidgetWidth)
        box.setPlaceholderText("No file loaded.")
        return box

    def _ask(self, which: str) -> None:
        start = str((self.pretrain_path if which == "pretrain" else self.tune_path) or "")
        title = "Open pretraining text" if which == "pretrain" else "Open tune dialogues"
        path, _ = QFileDialog.getOpenFileName(self, title, start, TEXT_FILTER)
        if path:
            self.load(which, path)

    def load(self, which: str, path) -> bool:
        """Read and check a file through the engine; on error keep the old text and explain."""
        from opencl_llm_studio.engine.data.textio import read_text
        path = Path(path)
        slot = self.pretrain if which == "pretrain" else self.tune
        notes: list[str] = []  # e.g. read as Latin-1: said in the statistics line
        try:
            if which == "pretrain":
                text = read_text(path, what="pretraining text", notes=notes)
                docs = _split_documents(text)
                stats = (f"{_count(len(text), 'character')} · "
                         f"{_count(text.count(chr(10)) + 1, 'line')} · "
                         f"{_count(len(docs), 'document')}")
            else:
                from opencl_llm_studio.engine.data.dialogue import read_dialogues
                text, dialogues = read_dialogues(path, notes)
                if not dialogues:
                    raise DataError(f"{path.name} contains no dialogues.",
                                    "Write turns as 'User: ...' and 'Assistant: ...' lines, "
                                    "dialogues separated by a blank line.")
                stats = (f"{_count(len(text), 'character')} · "
                         f"{_count(len(dialogues), 'dialogue')} · "
                         f"{_count(sum(len(d) for d in dialogues), 'turn')}")
        except StudioError as e:
            slot.set_error(f"{path.name}: {e.describe()}")
            self.errorOccurred.emit(f"Cannot use {path.name}", e.describe())
            return False
        stats += "".join(f" · {note}" for note in notes)
        from opencl_llm_studio.engine.data.tokenizer import bpe_characters
        self._chars[which] = bpe_characters(text)  # once per file: a big text takes a while
        slot.set_error("")
        slot.name.setText(path.name)
        slot.name.setToolTip(str(path))
        slot.stats.setText(stats)
        preview = self.pretrain_preview if which == "pretrain" else self.tune_preview
        preview.setPlainText(text[:PREVIEW_CHARS] + ("\n…" if len(text) > PREVIEW_CHARS else ""))
        if which == "pretrain":
            self.pretrain_text, self.pretrain_path = text, path
        else:
            self.tune_text, self.tune_path = text, path
            self.n_dialogues = len(dialogues)
        self._base_stats[which] = stats
        self._say_bundled_tune()
        self.dataChanged.emit()
        what = "pretraining text" if which == "pretrain" else "tune dialogues"
        self.fileLoaded.emit(f"Loaded {path.name} as the {what}")
        return True

    def _say_bundled_tune(self) -> None:
        """Your own pretraining text beside the bundled sample dialogues: the tune slot says,
        before training, that tuning on them teaches the sample's facts (the command line
        tunes only on a --tune file when the text is your own)."""
        from opencl_llm_studio.engine.data.textio import bundled_corpus

        def is_bundled(path, which):
            return path is not None and Path(path).resolve() == bundled_corpus(which).resolve()
        mixed = (self.pretrain_path is not None and not is_bundled(self.pretrain_path, "pretrain")
                 and is_bundled(self.tune_path, "tune"))
        if "tune" in self._base_stats:
            self.tune.stats.setText(self._base_stats["tune"]
                                    + (f" · {BUNDLED_TUNE_NOTE}" if mixed else ""))

    def load_dropped(self, path: str) -> bool:
        """A file dropped on the window: dialogue-looking files go to tune, others to pretrain.
        Only the file's start is peeked at; what cannot be read (a folder, no permission) goes
        to load(), whose reading (engine.data.textio) says what is wrong and what to do."""
        p = Path(path)
        try:
            with open(p, "rb") as f:
                head = f.read(PEEK_BYTES).decode("utf-8", errors="replace")
        except OSError:
            head = ""
        return self.load("tune" if looks_like_dialogue(p, head) else "pretrain", p)

    def set_token_counts(self, pretrain_tokens: int | None, tune_tokens: int | None) -> None:
        """Once the tokenizer is trained, add token counts to the statistics."""
        base = self._base_stats
        for which, slot, n in (("pretrain", self.pretrain, pretrain_tokens),
                               ("tune", self.tune, tune_tokens)):
            if n is not None and which in base:
                slot.stats.setText(f"{base[which]} · {n:,} tokens")

    def problem(self, tune_steps: int, vocab_size: int | None = None,
                tokenizer_kind: str = DEFAULT_TOKENIZER) -> str | None:
        """Why training cannot start with this data (and, when given, this vocabulary size for
        a BPE tokenizer: engine.data.tokenizer.min_bpe_vocab), or None."""
        if not self.pretrain_text:
            return "Open a pretraining text file (or drop one on the window)."
        if tune_steps > 0 and not self.tune_text:
            return "Open a tune dialogue file, or set Tuning steps to 0."
        if vocab_size is not None and tokenizer_kind == "bpe":
            from opencl_llm_studio.engine.data.tokenizer import MIN_VOCAB, min_bpe_vocab
            from opencl_llm_studio.engine.files.model_card import tokenizer_name
            sets = [self._chars["pretrain"]] + ([self._chars["tune"]] if tune_steps > 0 else [])
            need = min_bpe_vocab(sets)
            if vocab_size < need:
                return (f"Vocabulary size {vocab_size} is too small for BPE on these texts "
                        f"({need - MIN_VOCAB} distinct characters, each a token): use at least "
                        f"{need}, or the {tokenizer_name('char')} tokenizer.")
        return None

    def set_editable(self, on: bool, why: str = "", tune_on: bool | None = None) -> None:
        """why: the reason the Open buttons are off (in their tooltips); tune_on: the tune
        file's slot alone (None: as `on`)."""
        tune_on = on if tune_on is None else tune_on
        enable_with_reason(self.pretrain.button, on, why)
        enable_with_reason(self.tune.button, tune_on, why)
        self.pretrain.setAcceptDrops(on)
        self.tune.setAcceptDrops(tune_on)
