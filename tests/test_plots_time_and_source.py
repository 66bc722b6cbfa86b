"""The loss plots against wall time, bits per byte in the summary, and a validation curve
named for where its text comes from (issue 11 "Honest numbers", issue 12 items 1 and 6)."""

import numpy as np

from opencl_llm_studio.engine.metrics import StepMetrics
from opencl_llm_studio.studio.ui.panels.plots import VAL_ON_TRAINING_TEXT, LivePlots


def _records(source):
    out = []
    for step in range(1, 11):
        m = StepMetrics(step, 10, "pretrain", 3.0 - 0.1 * step, 1.0, 1e-3, 1000.0, 0.5 * step)
        if step % 5 == 0:
            m.val_loss, m.val_bpb, m.val_source = 2.5, 3.6, source
        out.append(m)
    return out


def test_val_on_training_text_is_named_so(qtbot):
    w = LivePlots()
    qtbot.addWidget(w)
    w.start_run(10, 10, 0, 300, 1.0)
    w.add_metrics(_records("training text"))
    assert VAL_ON_TRAINING_TEXT.split()[0] in w.loss_title.text()
    assert "held&#8209;out&nbsp;text" not in w.loss_title.text()
    assert "training text 2.500 (3.600 bits/byte)" in w.summary.text()
    w.start_run(10, 10, 0, 300, 1.0)
    w.add_metrics(_records("held-out"))
    assert "held&#8209;out&nbsp;text" in w.loss_title.text()
    assert "held-out 2.500 (3.600 bits/byte)" in w.summary.text()


def test_wall_time_axis(qtbot):
    w = LivePlots()
    qtbot.addWidget(w)
    w.start_run(10, 6, 4, 300, 1.0)
    w.add_metrics(_records("held-out"))
    w.redraw()
    x, _ = w.curves["loss"].getData()
    assert np.allclose(x, np.arange(1, 11))
    w.time_check.setChecked(True)
    x, _ = w.curves["loss"].getData()
    assert np.allclose(x, 0.5 * np.arange(1, 11))
    xv, _ = w.curves["val"].getData()
    assert np.allclose(xv, [2.5, 5.0])
    assert w.loss_plot.getPlotItem().getAxis("bottom").labelText == "wall time (s)"
    assert all(not line.isVisible() for _, line in w._stage_lines)
    w.time_check.setChecked(False)
    assert np.allclose(w.curves["loss"].getData()[0], np.arange(1, 11))


def _label_gaps(axis, lo: float, hi: float, height: int) -> list[float]:
    """Pixel gaps between the labelled ticks of a log axis `height` px high showing lo..hi."""
    import math
    a, b = math.log10(lo), math.log10(hi)
    placed = set()  # a decade can be in two tick levels: one label
    for spacing, values in axis.tickValues(a, b, height):
        for v, text in zip(values, axis.tickStrings(values, 1.0, spacing)):
            if text and a <= v <= b:
                placed.add(round((v - a) / (b - a) * height, 6))
    placed = sorted(placed)
    return [q - p for p, q in zip(placed, placed[1:])]


def test_log_axis_labels_never_overlap(qapp):
    """The Runs window's learning-rate plot (lr 8e-5 .. 3e-3, ~150 px high) drew "0.001 0.0009
    0.0008 ..." on top of each other: pyqtgraph labels every minor tick of a log axis. The
    studio's axis labels the 1-2-5 series, each label at least a text line from the next."""
    import pyqtgraph as pg
    from PySide6.QtGui import QFontMetrics

    from opencl_llm_studio.studio.ui.panels.compare_plot import ComparePlots
    from opencl_llm_studio.studio.ui.panels.log_axis import LogAxis
    from opencl_llm_studio.studio.ui.panels.plots import LivePlots
    for axis_class, expect_ok in ((pg.AxisItem, False), (LogAxis, True)):
        axis = axis_class("left")
        axis.setLogMode(False, True)
        line = QFontMetrics(axis.style.get("tickFont") or qapp.font()).height()
        gaps = [g for lo, hi, h in ((8e-5, 3e-3, 150), (0.3, 4.0, 120), (1e-4, 0.1, 150))
                for g in _label_gaps(axis, lo, hi, h)]
        assert (min(gaps) >= line) == expect_ok, (axis_class, line, gaps)
    compare, live = ComparePlots(), LivePlots()
    for plot in (compare.lr_plot, compare.grad_plot, live.loss_plot, live.grad_plot):
        assert isinstance(plot.getPlotItem().getAxis("left"), LogAxis)
