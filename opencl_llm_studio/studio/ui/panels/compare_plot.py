"""Runs side by side: loss, held-out loss, grad norm, learning rate and training health of the
ticked runs, one colour per run, against step, tokens seen or wall time.

House style 6 (studio.ui.panels.plots): each run's curves are created once, the first time it is shown,
and later fed with setData; a run that is unticked is hidden, not deleted.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QGridLayout, QHBoxLayout, QLabel, QSizePolicy,
                               QVBoxLayout, QWidget)

from opencl_llm_studio.studio.runs import (GROUP_LINES, GROUP_NAMES, HEALTH_GROUPS, X_AXES, RunInfo, curves,
                         run_colour)
from opencl_llm_studio.studio.ui import theme
from opencl_llm_studio.studio.ui.panels.log_axis import LogAxis
from opencl_llm_studio.studio.ui.panels.plot_parts import show_lone_point

_QT_LINES = {"solid": Qt.SolidLine, "dashed": Qt.DashLine, "dotted": Qt.DotLine,
             "dashdot": Qt.DashDotLine}
GROUP_STYLES = {g: _QT_LINES[line] for g, line in GROUP_LINES.items()}
HEALTH_MEASURES = {"update_ratio": "update / weight ratio", "grad_norm": "grad norm by group"}
TITLE = "font-size:10pt; color:#333333"


def _plot(name: str, y_label: str, log_y: bool = False) -> pg.PlotWidget:
    w = pg.PlotWidget(axisItems={"left": LogAxis("left")})
    w.setObjectName(name)
    item = w.getPlotItem()
    item.setLabel("left", y_label)
    item.setMenuEnabled(False)
    item.setClipToView(True)
    item.setDownsampling(auto=True, mode="peak")
    item.setLogMode(x=False, y=log_y)
    if log_y:  # decades read as 0.01, 0.1, 1; not as "x0.001" multiples
        item.getAxis("left").enableAutoSIPrefix(False)
    item.setContentsMargins(0, 6, 10, 0)
    w.setMinimumSize(160, 110)
    w.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)
    return w


def _titled(plot: pg.PlotWidget, text: str) -> QWidget:
    box = QWidget()
    lay = QVBoxLayout(box)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(0)
    label = QLabel(f"<span style='{TITLE}'>{text}</span>")
    label.setAlignment(Qt.AlignCenter)
    label.setObjectName(plot.objectName() + "Title")
    lay.addWidget(label)
    lay.addWidget(plot, 1)
    return box


class ComparePlots(QWidget):
    """Four plots (loss, grad norm, lr, health) for a list of RunInfo; see set_runs.
    (`llm-studio plot` draws the same four without Qt: studio.cli.plot.)"""

    def __init__(self, parent=None):
        super().__init__(parent)
        theme.apply_plot_theme()  # white plots, also when shown without the main window
        self.axis_combo = QComboBox()
        self.axis_combo.setObjectName("compareAxisCombo")
        for key, text in X_AXES.items():
            self.axis_combo.addItem(text, key)
        self.health_combo = QComboBox()
        self.health_combo.setObjectName("healthMeasureCombo")
        for key, text in HEALTH_MEASURES.items():
            self.health_combo.addItem(text, key)
        self.legend = QLabel()
        self.legend.setObjectName("compareLegend")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.RichText)
        self.loss_plot = _plot("compareLossPlot", "loss (nats)")
        self.grad_plot = _plot("compareGradPlot", "grad norm", log_y=True)
        self.lr_plot = _plot("compareLrPlot", "lr", log_y=True)  # runs' lr differ by decades
        self.health_plot = _plot("compareHealthPlot", "ratio", log_y=True)
        for p in (self.grad_plot, self.lr_plot, self.health_plot):
            p.setXLink(self.loss_plot)
        groups = " &nbsp; ".join(html.escape(GROUP_NAMES[g]) for g in HEALTH_GROUPS)
        grid = QGridLayout()
        grid.setSpacing(6)
        grid.addWidget(_titled(self.loss_plot, "Loss: ━ train &nbsp; ● held-out text"), 0, 0)
        grid.addWidget(_titled(self.grad_plot, "Gradient norm before clipping"), 0, 1)
        grid.addWidget(_titled(self.lr_plot, "Learning rate"), 1, 0)
        self._health_box = _titled(self.health_plot, f"Training health: {groups}")
        grid.addWidget(self._health_box, 1, 1)
        self.controls = QWidget()   # the boxes that choose what is drawn
        top = QHBoxLayout(self.controls)
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QLabel("x axis"))
        top.addWidget(self.axis_combo)
        top.addSpacing(12)
        top.addWidget(QLabel("health"))
        top.addWidget(self.health_combo)
        top.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.controls)
        lay.addWidget(self.legend)
        lay.addLayout(grid, 1)
        self._items: dict[str, dict[str, pg.PlotDataItem]] = {}  # run path -> curves
        self._runs: list[RunInfo] = []
        self.axis_combo.currentIndexChanged.connect(self.redraw)
        self.health_combo.currentIndexChanged.connect(self.redraw)
        self.set_runs([])

    # -- public ---------------------------------------------------------------------------
    def set_axis(self, axis: str) -> None:
        self.axis_combo.setCurrentIndex(max(self.axis_combo.findData(axis), 0))

    def set_runs(self, runs: list[RunInfo]) -> None:
        """Show these runs (in this order, colours by position), hide every other."""
        self._runs = list(runs)
        self.redraw()

    def visible_curves(self, key: str = "loss") -> list[pg.PlotDataItem]:
        """The shown curves of one kind ("loss", "val", "grad", "lr", "health.<group>")."""
        return [c[key] for c in self._items.values() if key in c and c[key].isVisible()]

    def colours(self) -> list[str]:
        return [run_colour(i) for i in range(len(self._runs))]

    # -- drawing --------------------------------------------------------------------------
    def _curves_of(self, key: str) -> dict[str, pg.PlotDataItem]:
        if key not in self._items:  # created once per run folder, reused when ticked again
            items = {"loss": self.loss_plot.plot(), "grad": self.grad_plot.plot(),
                     "lr": self.lr_plot.plot(),
                     "val": self.loss_plot.plot(symbol="o", symbolSize=5, symbolPen=None)}
            for g in HEALTH_GROUPS:
                items[f"health.{g}"] = self.health_plot.plot()
            self._items[key] = items
        return self._items[key]

    def redraw(self) -> None:
        axis = self.axis_combo.currentData() or "step"
        measure = self.health_combo.currentData() or "update_ratio"
        shown = set()
        for i, run in enumerate(self._runs):
            key = str(run.path)
            shown.add(key)
            items, data, colour = self._curves_of(key), curves(run, axis), run_colour(i)
            for k in ("loss", "grad", "lr"):
                self._feed(items[k], *data[k], pg.mkPen(colour, width=1.5), log=k != "loss")
            self._feed(items["val"], *data["val"], pg.mkPen(colour, width=2, style=Qt.DashLine),
                       brush=colour)
            for g in HEALTH_GROUPS:
                self._feed(items[f"health.{g}"], *data[f"health.{measure}.{g}"],
                           pg.mkPen(colour, width=1.6, style=GROUP_STYLES[g]), log=True)
            for k in ("loss", "grad", "lr", *(f"health.{g}" for g in HEALTH_GROUPS)):
                show_lone_point(items[k], len(items[k].xData if items[k].xData is not None
                                              else ()), colour)
        for key, items in self._items.items():
            if key not in shown:
                for c in items.values():
                    c.setData([], [])
                    c.setVisible(False)
        for p in (self.loss_plot, self.grad_plot, self.lr_plot, self.health_plot):
            p.getPlotItem().setLabel("bottom", X_AXES[axis])
            p.enableAutoRange()
            self._show_values(p)
        self.health_plot.getPlotItem().setLabel("left", "ratio" if measure == "update_ratio"
                                                else "grad norm")
        self._show_legend()

    @staticmethod
    def _feed(item: pg.PlotDataItem, x: np.ndarray, y: np.ndarray, pen, brush=None,
              log: bool = False) -> None:
        ok = np.isfinite(x) & np.isfinite(y) & ((y > 0) if log else True)  # log axes: y > 0
        item.setPen(pen)
        if brush is not None:
            item.setSymbolBrush(brush)
        item.setData(x[ok], y[ok])
        item.setVisible(bool(ok.any()))

    @staticmethod
    def _show_values(plot: pg.PlotWidget) -> None:
        """Tick values only on a plot that draws something: an empty plot's axes would number
        a range that means nothing (pyqtgraph's default 0..1)."""
        item = plot.getPlotItem()
        drawn = any(c.isVisible() for c in item.listDataItems())
        for side in ("left", "bottom"):
            item.getAxis(side).setStyle(showValues=drawn)

    def _show_legend(self) -> None:
        if not self._runs:
            self.legend.setText("<span style='color:#5f6b7a'>Tick runs in the table to compare "
                                "their curves.</span>")
            return
        parts = [f"<span style='color:{run_colour(i)}'>━&nbsp;{html.escape(r.name)}</span>"
                 for i, r in enumerate(self._runs)]
        self.legend.setText(" &nbsp; ".join(parts))
