"""Sample generations for fixed prompts every N steps, newest first, each with its step."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QLabel, QTextBrowser, QVBoxLayout, QWidget

MODEL_COLOUR = "#2d6a3a"  # what the model wrote, apart from the prompt
MAX_ENTRIES = 60  # older samples are dropped; the point is to watch recent progress


class SamplesPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.view = QTextBrowser()
        self.view.setObjectName("samplesView")
        self.view.setOpenLinks(False)
        self.view.setPlaceholderText("Samples appear here during training, newest first.")
        self.entries: list[tuple[int, str, list[tuple[str, str]]]] = []
        note = QLabel("Generations for fixed prompts every few steps (Training › Samples every). "
                      "The prompt is in bold; the model's continuation is in green.")
        note.setWordWrap(True)
        note.setProperty("role", "muted")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(note)
        lay.addWidget(self.view)

    def add(self, step: int, stage: str, samples) -> None:
        self.entries.insert(0, (step, stage, list(samples)))
        del self.entries[MAX_ENTRIES:]
        self._render()

    def clear(self) -> None:
        self.entries.clear()
        self.view.clear()

    def text(self) -> str:
        return self.view.toPlainText()

    def _render(self) -> None:
        parts = []
        for i, (step, stage, samples) in enumerate(self.entries):
            colour = "#1f5fa8" if stage == "pretrain" else "#a8551f"
            latest = " · latest" if i == 0 else ""
            parts.append(f"<p style='margin-top:10px; margin-bottom:2px; color:{colour}'>"
                         f"<b>Step {step}</b> · {html.escape(stage)}{latest}</p>")
            for prompt, text in samples:
                cont = text[len(prompt):] if text.startswith(prompt) else text
                if prompt.rstrip()[-1:] in "?!" and not cont[:1].isspace():
                    cont = " " + cont  # a question answered (tune samples): not glued on
                parts.append(
                    "<p style='margin:2px 0 2px 12px; white-space:pre-wrap'>"
                    f"<b>{html.escape(prompt)}</b>"
                    f"<span style='color:{MODEL_COLOUR}'>{html.escape(cont)}</span></p>")
            parts.append("<hr>")
        self.view.setHtml("".join(parts))
