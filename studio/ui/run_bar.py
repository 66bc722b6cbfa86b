"""Train / Pause / Stop, the progress bar (step, stage, tokens/s, ETA) and Export."""

from __future__ import annotations

import time
from collections import deque

from PySide6.QtWidgets import (QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout,
                               QWidget)

PACE_WINDOW_S = 20.0  # ETA from the steps of the last 20 s: follows speed changes, not noise


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
        self._pace: deque[tuple[float, int]] = deque()

    def set_hint(self, text: str | None) -> None:
        self.hint.setText(text or "")
        self.hint.setVisible(bool(text))

    def reset_pace(self) -> None:
        """Forget the pace (a new run, or resuming: paused time must not count)."""
        self._pace.clear()

    def show_step(self, m) -> None:
        """Progress from one StepMetrics: step, stage, tokens/s, ETA from the recent pace."""
        self.progress.setRange(0, max(m.total_steps, 1))
        self.progress.setValue(min(m.step, m.total_steps))
        now = time.monotonic()
        self._pace.append((now, m.step))
        while len(self._pace) > 2 and now - self._pace[0][0] > PACE_WINDOW_S:
            self._pace.popleft()
        (t0, s0), (t1, s1) = self._pace[0], self._pace[-1]
        eta = "…"
        if s1 > s0 and t1 > t0:
            eta = format_eta((t1 - t0) / (s1 - s0) * max(m.total_steps - m.step, 0))
        self.progress.setFormat(f"step {m.step} / {m.total_steps} · {m.stage} · "
                                f"{m.tokens_per_s:,.0f} tok/s · ETA {eta}")

    def show_text(self, text: str, reset: bool = False) -> None:
        if reset:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.progress.setFormat(text)
