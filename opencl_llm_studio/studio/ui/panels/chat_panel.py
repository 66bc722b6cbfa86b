"""Chat with the current weights: conversation view, input, sampling knobs, streamed answers.

The panel only keeps the conversation and shows it; generation runs on the training worker's
thread (studio.ui.run.worker), so it never overlaps a training step.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (QDoubleSpinBox, QGridLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QSpinBox, QTextBrowser, QVBoxLayout, QWidget)

from opencl_llm_studio.engine.config import MAX_NEW_TOKENS, SamplingParams
from opencl_llm_studio.engine.limits import LIMITS

USER_COLOUR, MODEL_COLOUR, NOTE_COLOUR = "#1f5fa8", "#2d7a3a", "#7a7a7a"


CLEARED_NOTE = "A new model: the chat with the previous one was cleared."


class ChatPanel(QWidget):
    sendRequested = Signal(object, object)  # messages [{"role", "content"}], sampling knobs dict

    def __init__(self, parent=None):
        super().__init__(parent)
        self.messages: list[dict] = []
        self.answer = ""          # the assistant reply being streamed
        self.generating = False
        self._available = False
        self._plain = QTextCharFormat()  # answers in the normal font, not the bold speaker's

        self.view = QTextBrowser()
        self.view.setObjectName("chatView")
        # One short line: Qt draws the placeholder unwrapped, cut at the pane's edge.
        self.view.setPlaceholderText("The conversation appears here.")
        self.input = QLineEdit()
        self.input.setObjectName("chatInput")
        self.input.setPlaceholderText("Type a message and press Enter")
        self.input.setToolTip("The model answers in the tune format it learned: "
                              "User: … Assistant: …")
        self.input.returnPressed.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("chatSendButton")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self.send)
        self.clear_button = QPushButton("Clear")
        self.clear_button.setObjectName("chatClearButton")
        self.clear_button.setToolTip("Start a new conversation")
        self.clear_button.clicked.connect(self.clear)

        sp = SamplingParams()  # the engine's defaults
        self.temperature = self._dspin("temperatureSpin", "temperature", 0.05, sp.temperature,
                                       "0 = always the most likely token")
        self.top_k = self._ispin("topKSpin", "top_k", sp.top_k, "0 = no top-k limit")
        self.top_p = self._dspin("topPSpin", "top_p", 0.05, sp.top_p, "Nucleus sampling mass")
        self.max_tokens = self._ispin("maxTokensSpin", "max_new_tokens", MAX_NEW_TOKENS,
                                      "Longest answer in tokens")
        knobs = QGridLayout()
        knobs.setHorizontalSpacing(6)
        for i, (label, w) in enumerate((("Temperature", self.temperature), ("Top-k", self.top_k),
                                        ("Max tokens", self.max_tokens), ("Top-p", self.top_p))):
            knobs.addWidget(QLabel(label), i // 2, 3 * (i % 2), Qt.AlignRight)
            knobs.addWidget(w, i // 2, 3 * (i % 2) + 1)
        for w in (self.temperature, self.top_k, self.top_p, self.max_tokens):
            w.setMinimumWidth(60)  # not the widest value's width: the side pane can be narrow
        knobs.setColumnMinimumWidth(2, 10)
        knobs.setColumnStretch(1, 1)
        knobs.setColumnStretch(4, 1)

        self.status = QLabel("")
        self.status.setObjectName("chatStatus")
        self.status.setProperty("role", "muted")
        self.status.setWordWrap(True)  # a long reason wraps instead of widening the window
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.clear_button)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addWidget(self.send_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addLayout(knobs)
        lay.addWidget(self.view, 1)
        lay.addLayout(status_row)
        lay.addLayout(row)
        self.set_available(False, "No model yet: train one or open a checkpoint.")

    @staticmethod
    def _dspin(name, field, step, value, tip) -> QDoubleSpinBox:
        """Two decimals; the range: engine.limits.LIMITS[field]."""
        s = QDoubleSpinBox()
        s.setObjectName(name)
        s.setDecimals(2)
        s.setRange(*LIMITS[field].bounds(0.01))
        s.setSingleStep(step)
        s.setValue(value)
        s.setToolTip(tip)
        return s

    @staticmethod
    def _ispin(name, field, value, tip) -> QSpinBox:
        """The range: engine.limits.LIMITS[field]."""
        s = QSpinBox()
        s.setObjectName(name)
        s.setRange(*map(int, LIMITS[field].bounds(1)))
        s.setValue(value)
        s.setToolTip(tip)
        return s

    def knobs(self) -> dict:
        return {"temperature": self.temperature.value(), "top_k": self.top_k.value(),
                "top_p": self.top_p.value(), "max_new_tokens": self.max_tokens.value()}

    # -- state -----------------------------------------------------------------------------
    def set_available(self, on: bool, reason: str = "") -> None:
        """Chat works on the current weights: after training, while paused, after loading."""
        self._available = on
        self._update_enabled()
        self.status.setText(reason if not on else "Chatting with the current weights.")

    def _update_enabled(self) -> None:
        ok = self._available and not self.generating
        self.send_button.setEnabled(ok)
        self.input.setEnabled(self._available)

    # -- conversation ----------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.text().strip()
        if not text or not self.send_button.isEnabled():
            return
        self.input.clear()
        self.messages.append({"role": "user", "content": text})
        self._append_block("You", USER_COLOUR, text)
        self._append_block("Model", MODEL_COLOUR, "")
        self.answer = ""
        self.generating = True
        self._update_enabled()
        self.sendRequested.emit(list(self.messages), self.knobs())

    def append_token(self, piece: str) -> None:
        """One streamed piece of the answer, inserted at the end without re-rendering. Shown
        as the engine gives it: the same characters llama.cpp answers with (engine.data.dialogue)."""
        if not piece:
            return
        self.answer += piece
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.End)
        cursor.insertText(piece, self._plain)
        self.view.setTextCursor(cursor)
        self.view.ensureCursorVisible()

    def finish_answer(self, text: str | None) -> None:
        """The answer is complete (text: a str, or an engine.generation.chat.ChatReply whose notes say
        which turns were left out of the prompt) or failed (None: the user turn is withdrawn)."""
        self.generating = False
        if text is None:
            if self.messages and self.messages[-1]["role"] == "user":
                self.messages.pop()
            self.append_token(" [no answer]")
        else:
            if not self.answer and text:
                self.append_token(text)  # the engine did not stream: show the whole answer
            if not text.strip():
                self.append_token("(empty answer: the model produced </s> straight away)")
            # the history is sent back as tune turns are written: stripped
            self.messages.append({"role": "assistant", "content": text.strip()})
            notes = text.notes() if hasattr(text, "notes") else []
            if notes:
                self._append_note(" ".join(notes))
            self.status.setText(" ".join(notes) or "Chatting with the current weights.")
        self._update_enabled()

    def _append_note(self, text: str) -> None:
        """A muted line under the answer (turns left out, an answer cut by the window)."""
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.End)
        cursor.insertBlock(QTextBlockFormat())
        note = QTextCharFormat()
        note.setFontItalic(True)
        note.setForeground(QColor(NOTE_COLOUR))
        cursor.insertText(f"({text})", note)
        self.view.setTextCursor(cursor)

    def clear(self) -> None:
        self.messages.clear()
        self.view.clear()
        self.answer = ""

    def start_over(self) -> bool:
        """Another model is at hand: the chat starts empty, since every turn is sent back as
        context and the earlier ones were another model's. Says so in the view; returns
        whether there was a chat to clear."""
        had = bool(self.messages)
        self.clear()
        if had:
            self._append_note(CLEARED_NOTE)
        return had

    def _append_block(self, who: str, colour: str, text: str) -> None:
        cursor = self.view.textCursor()
        cursor.movePosition(QTextCursor.End)
        if not self.view.document().isEmpty():
            spaced = QTextBlockFormat()
            spaced.setTopMargin(8 if who == "You" else 2)  # a gap between exchanges
            cursor.insertBlock(spaced)
        speaker = QTextCharFormat()
        speaker.setFontWeight(700)
        speaker.setForeground(QColor(colour))
        cursor.insertText(f"{who}: ", speaker)
        cursor.insertText(text, self._plain)
        self.view.setTextCursor(cursor)

    def save(self, s: QSettings) -> None:
        for key, value in self.knobs().items():
            s.setValue(f"chat/{key}", value)

    def restore(self, s: QSettings) -> None:
        for key, w in (("temperature", self.temperature), ("top_k", self.top_k),
                       ("top_p", self.top_p), ("max_new_tokens", self.max_tokens)):
            v = s.value(f"chat/{key}")
            if v is not None:
                try:
                    w.setValue(type(w.value())(float(v)))
                except (TypeError, ValueError):
                    pass

