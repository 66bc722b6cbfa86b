"""Live training plots: loss, grad norm, learning rate.

House style 6: every curve is created once and fed with setData from growing numpy arrays; a
~15 Hz timer redraws only when new points arrived, with peak downsampling and clip-to-view, so
thousands of steps cost the GUI thread next to nothing.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (QCheckBox, QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout,
                               QWhatsThis, QWidget)

from opencl_llm_studio.engine.config import run_steps
from opencl_llm_studio.studio.ui.panels.log_axis import LogAxis
from opencl_llm_studio.studio.ui.panels.plot_parts import (LINE_ONLY, LOSS_HELP, PALETTE, STAGE_NAMES, TITLE_STYLE,
                                  VAL_ON_TRAINING_TEXT, Series, grad_title, loss_title,
                                  show_lone_point, stage_ticks)
from opencl_llm_studio.studio.ui.widgets import ElidedLabel

REDRAW_MS = 66  # ~15 Hz

def _clock(seconds: float) -> str:
    """Wall time as m:ss ('' when unknown)."""
    if not math.isfinite(seconds):
        return ""
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def _plot_widget(name: str, y_label: str, min_height: int) -> pg.PlotWidget:
    w = pg.PlotWidget(axisItems={"left": LogAxis("left")})
    w.setObjectName(name)
    item = w.getPlotItem()
    item.setLabel("bottom", "step")
    item.setLabel("left", y_label)
    # No grid: pyqtgraph draws it with the axes on every repaint (~3x the frame cost, measured);
    # the dashed reference lines give the eye its bearings instead.
    item.setClipToView(True)
    item.setDownsampling(auto=True, mode="peak")
    # No legend box inside the plot: wherever it sits, some run's curve passes under it. The
    # loss plot names its curves in its title, in their colours (see LivePlots).
    item.setMenuEnabled(False)
    item.setContentsMargins(0, 10, 12, 0)  # room for the top tick label and the last step
    w.setMinimumSize(120, min_height)
    # Sized by the stretch factors (LivePlots) down to this minimum, not by a QGraphicsView's
    # large size hint, which left the loss plot no taller than the others.
    w.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)
    return w


def _titled(plot: pg.PlotWidget, title: str) -> tuple[QFrame, QLabel]:
    """The plot under a title that wraps when the plot is narrow (pyqtgraph's own title is one
    line that is clipped, and the loss plot's legend is long)."""
    frame = QFrame()
    frame.setProperty("role", "plot")
    label = QLabel(title)
    label.setObjectName(plot.objectName() + "Title")
    label.setAlignment(Qt.AlignCenter)
    label.setWordWrap(True)
    label.setTextFormat(Qt.RichText)
    lay = QVBoxLayout(frame)
    lay.setContentsMargins(4, 4, 0, 0)
    lay.setSpacing(0)
    lay.addWidget(label)
    lay.addWidget(plot, 1)
    return frame, label


def _pen(color: str, width: float = 1.6, style=Qt.SolidLine) -> pg.QtGui.QPen:
    return pg.mkPen(color=color, width=width, style=style)


def _plus_minus(err: float) -> str:
    """' ± 0.004' for a sample's standard error, '' when the whole text was scored."""
    return f" ± {err:.3f}" if err else ""


class LivePlots(QWidget):
    """Three stacked plots with a shared x axis; feed with add_metrics(), reset with start_run()."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.loss_plot = _plot_widget("lossPlot", "loss (nats)", 140)
        self.grad_plot = _plot_widget("gradNormPlot", "grad norm", 100)
        self.lr_plot = _plot_widget("lrPlot", "lr", 80)
        for p in (self.grad_plot, self.lr_plot):
            p.setXLink(self.loss_plot)
        vb = self.loss_plot.getPlotItem().getViewBox()   # the stage names follow the line
        vb.sigXRangeChanged.connect(self._show_stage_axis)
        vb.sigResized.connect(self._show_stage_axis)
        loss_frame, self.loss_title = _titled(self.loss_plot, loss_title())
        grad_frame, self.grad_title = _titled(self.grad_plot, grad_title())
        lr_frame, _ = _titled(self.lr_plot, f"<span style='{TITLE_STYLE}'>Learning rate</span>")
        self.loss_title.setToolTip(LOSS_HELP)
        self.loss_title.linkActivated.connect(self.show_loss_help)

        # "val" is the loss on held-out pretraining text over the whole run (during tuning it
        # shows forgetting); "tune_val" the loss on the tune dialogues while tuning.
        self.series = {k: Series() for k in ("loss", "val", "tune_val", "grad", "lr")}
        lp, gp = self.loss_plot, self.grad_plot
        self.curves = {
            "loss": lp.plot(name="train loss", pen=_pen(PALETTE["loss"], 1.3)),
            "val": lp.plot(name="held-out loss", pen=_pen(PALETTE["val"], 2),
                           symbol="o", symbolSize=5, symbolBrush=PALETTE["val"],
                           symbolPen=None),
            "tune_val": lp.plot(name="tune loss (training dialogues)",
                                pen=_pen(PALETTE["tune_val"], 2, Qt.DashLine), symbol="t",
                                symbolSize=6, symbolBrush=PALETTE["tune_val"], symbolPen=None),
            "grad": gp.plot(name="grad norm", pen=_pen(PALETTE["grad"], 1.3)),
            "lr": self.lr_plot.plot(name="learning rate", pen=_pen(PALETTE["lr"], 1.6)),
        }
        # Reference lines: y values kept so the log-scale toggle can re-place them. Their labels
        # are in the plots' titles, never inside a plot, where a curve would pass under them.
        self._ref_values: dict[pg.InfiniteLine, float] = {}
        self._ref_text = {"ref": "", "clip": ""}
        self.ref_line = self._hline(lp, PALETTE["ref"])
        self.clip_line = self._hline(gp, PALETTE["clip"])
        self._stage_lines: list[tuple[pg.PlotWidget, pg.InfiniteLine]] = []
        self._plan: tuple[int, int | None] = (0, None)  # (total steps, stage boundary) framed
        self._stage_x: float | None = None   # where tuning starts (mark_stage)
        self.val_bpb: float | None = None
        self.val_bpb_stderr = 0.0   # the sample's standard error (0: the whole text scored)
        self._dirty = False

        self.log_check = QCheckBox("Log scale")
        self.log_check.setObjectName("logScaleCheck")
        self.log_check.setToolTip("Logarithmic y axis for the loss and gradient-norm plots")
        self.log_check.toggled.connect(self.set_log_scale)
        self.time_check = QCheckBox("Wall time")
        self.time_check.setObjectName("wallTimeCheck")
        self.time_check.setToolTip("Plot against wall-clock seconds of training (evaluations "
                                   "included) instead of steps: quality per minute")
        self.time_check.toggled.connect(self.set_time_axis)
        self.val_source = "held-out"   # StepMetrics.val_source of the "val" curve
        # Two lines (the step's numbers, then the held-out ones), each shortened with "…" only
        # where even that does not fit; never wrapped and always two lines high: a line that
        # changes every step must not resize the plots.
        self.summary = ElidedLabel(mode=Qt.ElideRight, min_width=60)
        self.summary.setObjectName("plotSummary")
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.summary.setMinimumHeight(2 * self.summary.fontMetrics().lineSpacing() + 2)
        self.summary.setAlignment(Qt.AlignLeft | Qt.AlignVCenter)
        self.summary.setText("No run yet. Press Train to start.")

        checks = QVBoxLayout()   # stacked: the summary keeps the row's width
        checks.setSpacing(0)
        checks.addWidget(self.time_check)
        checks.addWidget(self.log_check)
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addLayout(checks)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        lay.addLayout(top)
        lay.addWidget(loss_frame, 5)
        lay.addWidget(grad_frame, 3)
        lay.addWidget(lr_frame, 2)

        self.setMinimumWidth(300)  # narrower, the axes leave no room for the curves

        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.redraw)
        self.timer.start()

    def show_loss_help(self, *_) -> None:
        """The "Why does the held-out loss rise?" link: the help note, until the next click."""
        QWhatsThis.showText(self.loss_title.mapToGlobal(self.loss_title.rect().bottomLeft()),
                            LOSS_HELP, self.loss_title)

    # -- reference lines -----------------------------------------------------------------
    def _hline(self, plot: pg.PlotWidget, color: str) -> pg.InfiniteLine:
        """A dashed reference line; what it means is said in the plot's title."""
        line = pg.InfiniteLine(angle=0, movable=False, pen=_pen(color, 1.2, Qt.DashLine))
        line.setZValue(5)
        line.setVisible(False)
        plot.addItem(line)  # in the bounds: the y range always shows the reference
        return line

    def _place(self, line: pg.InfiniteLine, value: float) -> None:
        self._ref_values[line] = value
        log = self.log_check.isChecked()
        line.setPos(math.log10(value) if log and value > 0 else value)
        line.setVisible(value > 0)

    def set_reference(self, vocab_size: int) -> None:
        """Loss of a uniform guess over the vocabulary: where training starts."""
        value = math.log(max(vocab_size, 2))
        self._place(self.ref_line, value)
        self._ref_text["ref"] = f"ln(vocab) = {value:.2f}: random guessing"
        self._retitle()

    def set_clip(self, grad_clip: float) -> None:
        self._place(self.clip_line, grad_clip)
        self._ref_text["clip"] = f"clip at {grad_clip:g}" if grad_clip > 0 else ""
        self._retitle()

    def reference_text(self, key: str) -> str:
        """The label of a dashed line ("ref": ln(vocab), "clip": the clip threshold) as the
        title shows it; "" when the line is not shown."""
        return self._ref_text[key]

    def _retitle(self) -> None:
        held = self.val_source != "training text"
        self.loss_title.setText(loss_title(None if held else VAL_ON_TRAINING_TEXT,
                                            self._ref_text["ref"]))
        self.grad_title.setText(grad_title(self._ref_text["clip"]))

    def set_log_scale(self, on: bool) -> None:
        for p in (self.loss_plot, self.grad_plot):
            p.getPlotItem().setLogMode(x=False, y=on)
        for line, value in self._ref_values.items():
            self._place(line, value)

    def set_time_axis(self, on: bool) -> None:
        """x = wall seconds (elapsed_s) instead of steps; the stage line is hidden then."""
        for p in (self.loss_plot, self.grad_plot, self.lr_plot):
            p.getPlotItem().setLabel("bottom", "wall time (s)" if on else "step")
            p.enableAutoRange(axis="x")
        for _, line in self._stage_lines:
            line.setVisible(not on)
        self._show_stage_axis()
        self._dirty = True
        self.redraw()

    def set_val_source(self, source: str) -> None:
        """Name the "val" curve for where its text comes from (engine.data.corpus val_source)."""
        if source == self.val_source:
            return
        self.val_source = source
        held = source != "training text"
        self._retitle()
        self.curves["val"].opts["name"] = ("held-out loss" if held
                                           else "loss on the training text (nothing held out)")

    # -- runs ------------------------------------------------------------------------------
    def start_run(self, total_steps: int, pretrain_steps: int, tune_steps: int,
                  vocab_size: int, grad_clip: float, preview: bool = False,
                  time_budget_s: float = 0.0) -> None:
        """Clear the curves and frame the run: x from 0 to its last step, the stage boundary,
        ln(vocab) and the clip threshold. preview: only show the planned run's frame.
        time_budget_s > 0: the steps are not known ahead (engine.training.budget re-plans them as the
        run goes): x follows the live plan that each record carries (follow_plan)."""
        for s in self.series.values():
            s.clear()
        for plot, line in self._stage_lines:
            plot.removeItem(line)
        self._stage_lines.clear()
        # the frame the records' live plan is compared with (a budget's: none yet)
        self._plan = (0, None) if time_budget_s else (total_steps, pretrain_steps if tune_steps
                                                      else None)
        self._stage_x = None
        self._show_stage_axis()
        if pretrain_steps and tune_steps and not time_budget_s:   # a budget's is not known yet
            self.mark_stage(pretrain_steps + 0.5)
        self.val_bpb, self.val_bpb_stderr = None, 0.0
        self.set_val_source("held-out")   # until a record says otherwise
        for p in (self.loss_plot, self.grad_plot, self.lr_plot):
            if self.time_check.isChecked() or time_budget_s > 0:  # not known ahead
                p.enableAutoRange(axis="x")
            else:
                p.setXRange(0, max(total_steps, 1), padding=0.02)
            p.enableAutoRange(axis="y")
        self.set_reference(vocab_size)
        self.set_clip(grad_clip)
        if preview and not self.log_check.isChecked():  # frame where the curves will be
            self.loss_plot.setYRange(0, 1.15 * math.log(max(vocab_size, 2)), padding=0)
            self.grad_plot.setYRange(0, 2 * grad_clip if grad_clip > 0 else 2, padding=0)
        verb = "Planned run" if preview else "Run"
        if time_budget_s > 0:
            share = pretrain_steps / max(run_steps(pretrain_steps, tune_steps, True), 1)
            split = f", {share:.0%} pretraining + {1 - share:.0%} tuning" if tune_steps else ""
            self.summary.setText(f"{verb}: {_clock(time_budget_s)} of training{split}")
            self.summary.setToolTip("With a time budget the step counts follow the measured "
                                    "speed: the plots take the live plan as the run goes.")
        else:
            self.summary.setText(f"{verb}: {total_steps} steps ({pretrain_steps} pretraining + "
                                 f"{tune_steps} tuning)")
        self._dirty = True
        self.redraw()

    def follow_plan(self, total_steps: int, pretrain_steps: int | None) -> None:
        """Frame the run the records describe: a time-budgeted run re-plans its step counts
        after every step, so x goes to the live total and the stage line moves with the
        planned boundary (None: no tuning stage)."""
        if (total_steps, pretrain_steps) == self._plan:
            return
        self._plan = (total_steps, pretrain_steps)
        if not self.time_check.isChecked():
            for p in (self.loss_plot, self.grad_plot, self.lr_plot):
                p.setXRange(0, max(total_steps, 1), padding=0.02)
        if pretrain_steps:
            if not self._stage_lines:
                self.mark_stage(pretrain_steps + 0.5)
            for _, line in self._stage_lines:
                line.setValue(pretrain_steps + 0.5)
            self._stage_x = pretrain_steps + 0.5
            self._show_stage_axis()

    def mark_stage(self, x: float) -> None:
        """Vertical line where tuning starts, on every plot; on the loss plot the stages are
        named above the plot, on its top axis, one each side of the line: "◂ pretrain | tune ▸".
        Outside the plot area, no curve runs under the words and no other label covers them."""
        for p in (self.loss_plot, self.grad_plot, self.lr_plot):
            line = pg.InfiniteLine(pos=x, angle=90, movable=False,
                                   pen=_pen("#555555", 1, Qt.DotLine))
            p.addItem(line, ignoreBounds=True)
            line.setVisible(not self.time_check.isChecked())   # a step, not a time
            self._stage_lines.append((p, line))
        self._stage_x = x
        self._show_stage_axis()

    def _show_stage_axis(self, *_) -> None:
        """The loss plot's top axis holds the stage names while a boundary is shown. Each name
        is a tick label placed so that its near end is STAGE_GAP_PX from the line (pyqtgraph
        centres tick labels), recomputed when the view moves or resizes; a name that does not
        fit between the line and the plot's edge is left out by pyqtgraph (a 10-step tuning
        stage after 1000 steps shows "◂ pretrain" only)."""
        item = self.loss_plot.getPlotItem()
        x = self._stage_x
        if x is None or self.time_check.isChecked():
            item.hideAxis("top")
            return
        item.showAxis("top")
        axis = item.getAxis("top")
        font = self.font()   # set, so that the width measured is the width drawn
        axis.setStyle(tickLength=0, showValues=True, tickFont=font)
        axis.setTextPen("#555555")
        ticks = stage_ticks(item.getViewBox(), x, font)
        axis.setTicks([ticks, []])

    def stage_label(self) -> str | None:
        """The stage names shown above the loss plot ("◂ pretrain | tune ▸"), or None."""
        shown = self.loss_plot.getPlotItem().getAxis("top").isVisible()
        return " | ".join(STAGE_NAMES) if shown and self._stage_x is not None else None

    def add_metrics(self, records) -> None:
        """Append a batch of StepMetrics (engine.metrics), oldest first."""
        s = self.series
        for m in records:
            t = m.elapsed_s
            s["loss"].append(m.step, m.loss, t)
            s["grad"].append(m.step, m.grad_norm, t)
            s["lr"].append(m.step, m.lr, t)
            if m.val_source:
                self.set_val_source(m.val_source)
            if m.val_bpb is not None:
                self.val_bpb, self.val_bpb_stderr = m.val_bpb, m.val_bpb_stderr or 0.0
            if m.stage == "pretrain" and m.val_loss is not None:
                s["val"].append(m.step, m.val_loss, t)
            elif m.stage != "pretrain":
                if m.pretrain_val_loss is not None:
                    s["val"].append(m.step, m.pretrain_val_loss, t)
                if m.val_loss is not None:
                    s["tune_val"].append(m.step, m.val_loss, t)
        if records:
            last = records[-1]
            self.follow_plan(last.total_steps, last.pretrain_steps)
            text = (f"step {last.step} · {_clock(last.elapsed_s)} · loss {last.loss:.3f}"
                    f" · grad norm {last.grad_norm:.3g}")
            scores = []   # the second line: the evaluations
            if s["val"].n:
                name = "held-out" if self.val_source != "training text" else "training text"
                scores.append(f"{name} {s['val'].y[-1]:.3f}" + (
                    f" ({self.val_bpb:.3f}{_plus_minus(self.val_bpb_stderr)} bits/byte)"
                    if self.val_bpb is not None else ""))
            if s["tune_val"].n:
                scores.append(f"tune {s['tune_val'].y[-1]:.3f}")
            text += "\n" + " · ".join(scores)
            self.summary.setText(text)  # the lr has its own plot; the tooltip has it too
            self.summary.setToolTip(f"{text.replace(chr(10), ' · ')} · learning rate "
                                    f"{last.lr:.2e}")
        self._dirty = True

    def redraw(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        timed = self.time_check.isChecked()
        for key, curve in self.curves.items():
            s = self.series[key]
            if key in LINE_ONLY:
                show_lone_point(curve, s.n, PALETTE[key])
            curve.setData(s.t if timed else s.x, s.y)
        # y values only where they mean something: the plot has points, or its dashed line
        # (ln(vocab), the clip threshold) frames it. An empty lr plot numbered 0..1, crowded.
        framed = {self.loss_plot: self.ref_line.isVisible(),
                  self.grad_plot: self.clip_line.isVisible(), self.lr_plot: False}
        for plot, ref in framed.items():
            has = any(c.xData is not None and len(c.xData)
                      for c in plot.getPlotItem().listDataItems())
            plot.getPlotItem().getAxis("left").setStyle(showValues=has or ref)

    def point_count(self, key: str = "loss") -> int:
        return self.series[key].n
