"""Sample generations for fixed prompts every N steps, newest first, each with its step; and the
text recall (training documents continued word for word) measured at the end of each stage, in
the stream and in a line above it."""

from __future__ import annotations

import html
import re

from PySide6.QtWidgets import QLabel, QTextBrowser, QVBoxLayout, QWidget

from opencl_llm_studio.studio.run_folder import recall_text

MODEL_COLOUR = "#2d6a3a"  # what the model wrote, apart from the prompt
MAX_ENTRIES = 60  # older samples are dropped; the point is to watch recent progress
RECALL_COLOUR = "#6a3d9a"
MUTED_COLOUR = "#888888"
BLANK_RUN = re.compile(r"(?:[ \t]*\n){3,}")   # 3 or more line breaks (blank lines between)


def continuation_html(cont: str) -> str:
    """The model's text as HTML (for white-space:pre-wrap), a run of 3 or more line breaks
    shown as one muted "↵ × N" line: a small model often writes nothing but line breaks, which
    left a blank half-screen between the prompt and the next sample."""
    parts, at = [], 0
    for m in BLANK_RUN.finditer(cont):
        parts.append(f"<span style='color:{MODEL_COLOUR}'>{html.escape(cont[at:m.start()])}</span>")
        after = "\n" if m.end() < len(cont) else ""   # pre-wrap: a last one is an empty line
        parts.append(f"\n<span style='color:{MUTED_COLOUR}'>↵ × {m.group().count(chr(10))}"
                     f"</span>{after}")
        at = m.end()
    parts.append(f"<span style='color:{MODEL_COLOUR}'>{html.escape(cont[at:])}</span>")
    return "".join(parts)


class SamplesPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.view = QTextBrowser()
        self.view.setObjectName("samplesView")
        self.view.setOpenLinks(False)
        self.view.setPlaceholderText("Samples appear here, newest first.")  # one line: unwrapped
        # (step, stage, samples, recall line or None), newest first
        self.entries: list[tuple[int, str, list[tuple[str, str]], str | None]] = []
        self.recall: dict[str, str] = {}  # stage -> its recall line
        self.recall_label = QLabel("")
        self.recall_label.setObjectName("recallLabel")
        self.recall_label.setWordWrap(True)
        self.recall_label.setProperty("role", "estimate")
        self.recall_label.setToolTip("Measured at the end of each stage: a training document "
                                     "counts when the greedy continuation of its first words "
                                     "reproduces the rest (on a text of facts: the facts "
                                     "recalled; on prose: text learnt by heart); an answer "
                                     "when the greedy reply equals the trained one.")
        self.recall_label.hide()
        note = QLabel("Every few steps the model continues the same prompts, so you can watch "
                      "it learn. “Samples every” in the Training settings sets how often. "
                      "Prompts are in bold, the model's text in green; “↵ × 5” is 5 line "
                      "breaks in a row.")
        note.setWordWrap(True)
        note.setProperty("role", "muted")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(note)
        lay.addWidget(self.recall_label)
        lay.addWidget(self.view)

    def add(self, step: int, stage: str, samples) -> None:
        self.entries.insert(0, (step, stage, list(samples), None))
        del self.entries[MAX_ENTRIES:]
        self._render()

    def add_recall(self, step: int, recall: dict, render: bool = True) -> str:
        """A stage-end recall record (StepMetrics.recall) -> a line here and above the stream."""
        line = recall_text(recall)
        stage = recall.get("stage", "pretrain")
        self.recall[stage] = line.replace(":", f" (step {step}):", 1)
        if stage == "pretrain":  # a new pretraining result makes an older tuning one stale
            self.recall.pop("tune", None)
        self.recall_label.setText("\n".join(self.recall[k] for k in ("pretrain", "tune")
                                            if k in self.recall))
        self.recall_label.show()
        self.entries.insert(0, (step, stage, [], line))
        del self.entries[MAX_ENTRIES:]
        if render:
            self._render()
        return line

    def clear(self) -> None:
        self.entries.clear()
        self.recall.clear()
        self.recall_label.hide()
        self.view.clear()

    def text(self) -> str:
        return self.view.toPlainText()

    def _render(self) -> None:
        parts, latest = [], " · latest"
        for step, stage, samples, recall in self.entries:
            if recall is not None:
                parts.append(f"<p style='margin-top:10px; color:{RECALL_COLOUR}'><b>Step {step}"
                             f"</b> · {html.escape(recall)}</p><hr>")
                continue
            colour = "#1f5fa8" if stage == "pretrain" else "#a8551f"
            parts.append(f"<p style='margin-top:10px; margin-bottom:2px; color:{colour}'>"
                         f"<b>Step {step}</b> · {html.escape(stage)}{latest}</p>")
            latest = ""
            for prompt, text in samples:
                cont = text[len(prompt):] if text.startswith(prompt) else text
                if prompt.rstrip()[-1:] in "?!" and not cont[:1].isspace():
                    cont = " " + cont  # a question answered (tune samples): not glued on
                parts.append(
                    "<p style='margin:2px 0 2px 12px; white-space:pre-wrap'>"
                    f"<b>{html.escape(prompt)}</b>{continuation_html(cont)}</p>")
            parts.append("<hr>")
        self.view.setHtml("".join(parts))
