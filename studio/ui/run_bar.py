"""Train / Pause / Stop, the progress bar (step, stage, tokens/s, ETA) and Export."""

from __future__ import annotations

from PySide6.QtWidgets import (QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout,
                               QWidget)


def format_eta(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunBar(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.train_button = QPushButton("▶  Train")
        self.train_button.setObjectName("trainButton")
        self.train_button.setToolTip("Train a new model from scratch with these settings")
        self.pause_button = QPushButton("Pause")
        self.pause_button.setObjectName("pauseButton")
        self.pause_button.setToolTip("Pause between steps; chat and export work while paused")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop after the current step; the weights are kept")
        self.export_button = QPushButton("Export GGUF…")
        self.export_button.setObjectName("exportButton")
        self.export_button.setToolTip("Write the model as a GGUF file (llama.cpp, Ollama, "
                                      "LM Studio) plus an Ollama Modelfile")
        self.progress = QProgressBar()
        self.progress.setObjectName("progressBar")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("Ready")
        self.progress.setMinimumWidth(260)
        self.hint = QLabel("")
        self.hint.setObjectName("trainHint")
        self.hint.setWordWrap(True)
        self.hint.setProperty("role", "error")

        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.train_button)
        row.addWidget(self.pause_button)
        row.addWidget(self.stop_button)
        row.addWidget(self.progress, 1)
        row.addSpacing(12)
        row.addWidget(self.export_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(row)
        lay.addWidget(self.hint)
        self.hint.hide()

    def set_hint(self, text: str | None) -> None:
        self.hint.setText(text or "")
        self.hint.setVisible(bool(text))

    def show_step(self, m, t0_step: int = 0) -> None:
        """Progress from one StepMetrics: step, stage, tokens/s and ETA from the mean pace."""
        self.progress.setRange(0, max(m.total_steps, 1))
        self.progress.setValue(min(m.step, m.total_steps))
        done = max(m.step - t0_step, 1)
        eta = m.elapsed_s / done * max(m.total_steps - m.step, 0)
        self.progress.setFormat(f"step {m.step} / {m.total_steps} · {m.stage} · "
                                f"{m.tokens_per_s:,.0f} tok/s · ETA {format_eta(eta)}")

    def show_text(self, text: str, reset: bool = False) -> None:
        if reset:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.progress.setFormat(text)
