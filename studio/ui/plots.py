"""Live training plots: loss, grad norm, learning rate.

House style 6: every curve is created once and fed with setData from growing numpy arrays; a
~15 Hz timer redraws only when new points arrived, with peak downsampling and clip-to-view, so
thousands of steps cost the GUI thread next to nothing.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

REDRAW_MS = 66  # ~15 Hz

PALETTE = {
    "loss": "#1f77b4", "val": "#d62728", "tune_val": "#ff7f0e",
    "grad": "#2ca02c", "clip": "#7f7f7f", "lr": "#9467bd", "ref": "#8c8c8c",
}


class Series:
    """A growing (x, y) pair of float arrays; capacity doubles so appends are amortised O(1)."""

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self.n = 0

    def append(self, x: float, y: float) -> None:
        if self.n == len(self._x):
            self._x = np.concatenate([self._x, np.empty_like(self._x)])
            self._y = np.concatenate([self._y, np.empty_like(self._y)])
        self._x[self.n] = x
        self._y[self.n] = y
        self.n += 1

    def clear(self) -> None:
        self.n = 0

    @property
    def x(self) -> np.ndarray:
        return self._x[: self.n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self.n]


def _plot_widget(name: str, title: str, y_label: str) -> pg.PlotWidget:
    w = pg.PlotWidget(title=title)
    w.setObjectName(name)
    item = w.getPlotItem()
    item.setLabel("bottom", "step")
    item.setLabel("left", y_label)
    # No grid: pyqtgraph draws it with the axes on every repaint (~3x the frame cost, measured);
    # the dashed reference lines give the eye its bearings instead.
    item.setClipToView(True)
    item.setDownsampling(auto=True, mode="peak")
    # No legend box inside the plot: wherever it sits, some run's curve passes under it. The
    # loss plot names its curves in the title, in their colours (see LivePlots).
    item.setMenuEnabled(False)
    w.setMinimumHeight(150)
    return w


def _loss_title() -> str:
    def key(color, mark, text):
        return f"<span style='color:{color}'>{mark} {text}</span>"
    return ("Loss (cross-entropy) &nbsp; <span style='font-size:9pt'>"
            + " &nbsp; ".join((key(PALETTE["loss"], "━", "train"),
                               key(PALETTE["val"], "●", "validation: pretraining text"),
                               key(PALETTE["tune_val"], "▼", "validation: dialogues")))
            + "</span>")


def _pen(color: str, width: float = 1.6, style=Qt.SolidLine) -> pg.QtGui.QPen:
    return pg.mkPen(color=color, width=width, style=style)


class LivePlots(QWidget):
    """Three stacked plots with a shared x axis; feed with add_metrics(), reset with start_run()."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.loss_plot = _plot_widget("lossPlot", _loss_title(), "loss (nats)")
        self.grad_plot = _plot_widget("gradNormPlot", "Gradient norm before clipping", "grad norm")
        self.lr_plot = _plot_widget("lrPlot", "Learning rate", "lr")
        for p in (self.grad_plot, self.lr_plot):
            p.setXLink(self.loss_plot)

        # "val" is the pretraining validation loss over the whole run (during tuning it shows
        # forgetting); "tune_val" the loss on the dialogues while tuning.
        self.series = {k: Series() for k in ("loss", "val", "tune_val", "grad", "lr")}
        lp, gp = self.loss_plot, self.grad_plot
        self.curves = {
            "loss": lp.plot(name="train loss", pen=_pen(PALETTE["loss"], 1.3)),
            "val": lp.plot(name="validation loss (pretraining text)", pen=_pen(PALETTE["val"], 2),
                           symbol="o", symbolSize=5, symbolBrush=PALETTE["val"],
                           symbolPen=None),
            "tune_val": lp.plot(name="validation loss (dialogues)",
                                pen=_pen(PALETTE["tune_val"], 2, Qt.DashLine), symbol="t",
                                symbolSize=6, symbolBrush=PALETTE["tune_val"], symbolPen=None),
            "grad": gp.plot(name="grad norm", pen=_pen(PALETTE["grad"], 1.3)),
            "lr": self.lr_plot.plot(name="learning rate", pen=_pen(PALETTE["lr"], 1.6)),
        }
        # Reference lines: y values kept so the log-scale toggle can re-place them.
        self._ref_values: dict[pg.InfiniteLine, float] = {}
        self.ref_line = self._hline(lp, PALETTE["ref"], "ln(vocab) = {value:.2f}: random guessing",
                                    at=0.35)  # the right end is where the stage label sits
        self.clip_line = self._hline(gp, PALETTE["clip"], "clip at {value:g}")
        self._stage_lines: list[tuple[pg.PlotWidget, pg.InfiniteLine]] = []
        self._dirty = False

        self.log_check = QCheckBox("Log scale (loss and grad norm)")
        self.log_check.setObjectName("logScaleCheck")
        self.log_check.toggled.connect(self.set_log_scale)
        self.summary = QLabel("No run yet. Press Train to start.")
        self.summary.setObjectName("plotSummary")
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)

        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.log_check)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        lay.addLayout(top)
        lay.addWidget(self.loss_plot, 5)
        lay.addWidget(self.grad_plot, 3)
        lay.addWidget(self.lr_plot, 2)

        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.redraw)
        self.timer.start()

    # -- reference lines -----------------------------------------------------------------
    def _hline(self, plot: pg.PlotWidget, color: str, fmt: str,
               at: float = 0.98) -> pg.InfiniteLine:
        anchor = (1, 1) if at > 0.9 else (0, 1)  # text above the line, inside the plot
        line = pg.InfiniteLine(angle=0, movable=False, pen=_pen(color, 1.2, Qt.DashLine),
                               label="", labelOpts={"position": at, "color": color,
                                                    "anchors": [anchor, anchor]})
        line.template = fmt  # the label shows the true value, also in log mode
        line.setVisible(False)
        plot.addItem(line)  # in the bounds: the y range always shows the reference
        return line

    def _place(self, line: pg.InfiniteLine, value: float) -> None:
        self._ref_values[line] = value
        log = self.log_check.isChecked()
        line.setPos(math.log10(value) if log and value > 0 else value)
        line.label.setFormat(line.template.format(value=value))
        line.setVisible(value > 0)

    def set_reference(self, vocab_size: int) -> None:
        """Loss of a uniform guess over the vocabulary: where training starts."""
        self._place(self.ref_line, math.log(max(vocab_size, 2)))

    def set_clip(self, grad_clip: float) -> None:
        self._place(self.clip_line, grad_clip)

    def set_log_scale(self, on: bool) -> None:
        for p in (self.loss_plot, self.grad_plot):
            p.getPlotItem().setLogMode(x=False, y=on)
        for line, value in self._ref_values.items():
            self._place(line, value)

    # -- runs ------------------------------------------------------------------------------
    def start_run(self, total_steps: int, pretrain_steps: int, tune_steps: int,
                  vocab_size: int, grad_clip: float, preview: bool = False) -> None:
        """Clear the curves and frame the run: x from 0 to its last step, the stage boundary,
        ln(vocab) and the clip threshold. preview: only show the planned run's frame."""
        for s in self.series.values():
            s.clear()
        for plot, line in self._stage_lines:
            plot.removeItem(line)
        self._stage_lines.clear()
        if pretrain_steps and tune_steps:
            self.mark_stage(pretrain_steps + 0.5)
        for p in (self.loss_plot, self.grad_plot, self.lr_plot):
            p.setXRange(0, max(total_steps, 1), padding=0.02)
            p.enableAutoRange(axis="y")
        self.set_reference(vocab_size)
        self.set_clip(grad_clip)
        if preview and not self.log_check.isChecked():  # frame where the curves will be
            self.loss_plot.setYRange(0, 1.15 * math.log(max(vocab_size, 2)), padding=0)
            self.grad_plot.setYRange(0, 2 * grad_clip if grad_clip > 0 else 2, padding=0)
        verb = "Planned run" if preview else "Run"
        self.summary.setText(f"{verb}: {total_steps} steps, {pretrain_steps} pretraining + "
                             f"{tune_steps} tuning." + (" Press Train to start." if preview else ""))
        self._dirty = True
        self.redraw()

    def mark_stage(self, x: float) -> None:
        """Vertical line where tuning starts, on every plot; labelled on the loss plot."""
        for p in (self.loss_plot, self.grad_plot, self.lr_plot):
            label = "pretrain ◂ ▸ tune" if p is self.loss_plot else None
            line = pg.InfiniteLine(pos=x, angle=90, movable=False,
                                   pen=_pen("#555555", 1, Qt.DotLine), label=label,
                                   labelOpts={"position": 0.55, "color": "#555555",
                                              "fill": (255, 255, 255, 220)})
            p.addItem(line, ignoreBounds=True)
            self._stage_lines.append((p, line))

    def add_metrics(self, records) -> None:
        """Append a batch of StepMetrics (or anything with the same attributes)."""
        s = self.series
        for m in records:
            s["loss"].append(m.step, m.loss)
            s["grad"].append(m.step, m.grad_norm)
            s["lr"].append(m.step, m.lr)
            if m.stage == "pretrain" and m.val_loss is not None:
                s["val"].append(m.step, m.val_loss)
            elif m.stage != "pretrain":
                if m.pretrain_val_loss is not None:
                    s["val"].append(m.step, m.pretrain_val_loss)
                if m.val_loss is not None:
                    s["tune_val"].append(m.step, m.val_loss)
        if records:
            last = records[-1]
            text = f"step {last.step}: loss {last.loss:.3f}"
            if s["val"].n:
                text += f" · validation {s['val'].y[-1]:.3f}"
            if s["tune_val"].n:
                text += f" · dialogues {s['tune_val'].y[-1]:.3f}"
            text += f" · grad norm {last.grad_norm:.3g} · lr {last.lr:.2e}"
            self.summary.setText(text)
        self._dirty = True

    def redraw(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        for key, curve in self.curves.items():
            s = self.series[key]
            curve.setData(s.x, s.y)

    def point_count(self, key: str = "loss") -> int:
        return self.series[key].n
