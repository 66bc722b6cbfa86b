"""Every recorded point is visible, every label readable (issue 22), pytest-qt offscreen:
a 1-step run's points draw; no text is cut short, clipped or drawn over a plot's curves; empty
comparison plots number nothing; the Runs table needs no horizontal scrolling; the window fits
the screen it opens on, with the Export button and every plot inside it at 1280 x 720 and
1366 x 768; `llm-studio plot` draws only the plots."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtCore import QRect  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402
from PySide6.QtWidgets import QWidget  # noqa: E402

from tests.studio_helpers import configure, open_model, settle, train  # noqa: E402
from visibility import clipped_texts, inside, texts_inside_plots  # noqa: E402
from visibility import plain_text as plain  # noqa: E402

from opencl_llm_studio.engine.metrics import StepMetrics  # noqa: E402
from opencl_llm_studio.studio.ui.panels.plots import PALETTE, LivePlots  # noqa: E402

SCREENS = [(1280, 720), (1366, 768)]


def one_step(step=1, total=1, **kw) -> StepMetrics:
    values = dict(stage="pretrain", loss=5.1, grad_norm=0.8, lr=1e-3, tokens_per_s=900.0,
                  elapsed_s=1.5)
    values.update(kw)
    return StepMetrics(step, total, **values)


def colour_pixels(widget, colour: str, tolerance: int = 40) -> int:
    """Pixels of `colour` in the widget's picture."""
    img = widget.grab().toImage()
    want = QColor(colour)
    n = 0
    for y in range(0, img.height()):
        for x in range(0, img.width()):
            c = img.pixelColor(x, y)
            if (abs(c.red() - want.red()) + abs(c.green() - want.green())
                    + abs(c.blue() - want.blue())) <= tolerance:
                n += 1
    return n


def test_a_one_step_run_draws_its_points(qtbot):
    """A run of 1 step: its loss, grad-norm and lr points were held with a pen and no
    symbol, so they drew 0 pixels; now a lone point is a dot, and goes once a line can be
    drawn."""
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(700, 700)
    plots.show()
    qtbot.waitExposed(plots)
    plots.start_run(1, 1, 0, 64, 0.0)
    plots.add_metrics([one_step()])
    plots.redraw()
    for key, plot in (("loss", plots.loss_plot), ("grad", plots.grad_plot),
                      ("lr", plots.lr_plot)):
        assert colour_pixels(plot, PALETTE[key]) >= 9, key
    plots.add_metrics([one_step(2, 2, loss=4.0, grad_norm=0.5, lr=9e-4)])
    plots.redraw()
    assert plots.curves["loss"].opts["symbol"] is None   # a line now: no dots on every step


def test_no_text_is_drawn_inside_a_plot(qtbot, window):
    """ln(vocab), "clip at 1" and "◂ pretrain | tune ▸" were labels inside the plots: the
    curves ran under them and, on an empty plot, ln(vocab) covered the stage label. They are
    in the titles and on the top axis now, and say the same."""
    configure(window, pretrainStepsSpin=300, tuneStepsSpin=150)
    settle()
    assert texts_inside_plots(window) == []
    plots = window.plots
    assert "random guessing" in plots.reference_text("ref")
    assert plots.reference_text("ref") in plain(plots.loss_title)
    assert "clip at 1" in plain(plots.grad_title)
    assert plots.stage_label() == "◂ pretrain | tune ▸"
    plots.time_check.setChecked(True)           # wall time: no step boundary, no label
    assert plots.stage_label() is None
    plots.time_check.setChecked(False)
    configure(window, pretrainStepsSpin=300, tuneStepsSpin=0)
    assert plots.stage_label() is None


@pytest.mark.parametrize("size", SCREENS)
def test_no_text_is_cut_short_before_and_after_a_run(qtbot, window, size):
    """The status line under the run bar, the progress message and every other label, button
    and check box show their whole text at laptop sizes, before a run and after one."""
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    settle()
    assert clipped_texts(window) == []
    configure(window)
    result = train(qtbot, window)
    assert result.step == 30
    # step numbers, then the evaluations
    qtbot.waitUntil(lambda: "\n" in window.plots.summary.full_text())
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        settle()
        assert clipped_texts(window) == [], window.tabs.tabText(i)
    open_model(qtbot, window, result.run_dir)   # Continue mode: more in the run bar's row
    qtbot.waitUntil(window.run_bar.as_new_run_check.isVisible)
    settle()
    assert clipped_texts(window) == []


def test_the_end_of_a_run_fits_the_bar_and_says_what_next(qtbot, window):
    window.resize(1280, 720)
    configure(window, pretrainStepsSpin=2, tuneStepsSpin=0)
    train(qtbot, window)
    rb = window.run_bar
    assert rb.progress.format().startswith("Finished 2 steps")
    assert rb.note.isVisible() and "Chat with the model or export it" in rb.note.text()
    assert clipped_texts(window) == []


def test_an_empty_plot_numbers_nothing(qtbot, window):
    """Before a run the lr plot numbered pyqtgraph's 0..1, crowded in its 80 px; the loss and
    grad-norm plots are framed by their dashed lines and keep their numbers."""
    configure(window)
    settle()
    axis = {p: p.getPlotItem().getAxis("left").style["showValues"]
            for p in (window.plots.loss_plot, window.plots.grad_plot, window.plots.lr_plot)}
    assert list(axis.values()) == [True, True, False]
    window.plots.add_metrics([one_step()])
    window.plots.redraw()
    assert window.plots.lr_plot.getPlotItem().getAxis("left").style["showValues"]


def test_empty_comparison_plots_number_nothing(qtbot):
    from opencl_llm_studio.studio.ui.panels.compare_plot import ComparePlots
    w = ComparePlots()
    qtbot.addWidget(w)
    w.resize(900, 600)
    w.show()
    for p in (w.loss_plot, w.grad_plot, w.lr_plot, w.health_plot):
        for side in ("left", "bottom"):
            assert not p.getPlotItem().getAxis(side).style["showValues"], (p.objectName(), side)


def test_compare_plots_of_a_one_step_run_draw_it(qtbot, tmp_path):
    from runs_helpers import make_run
    from opencl_llm_studio.studio.runs import load_run
    from opencl_llm_studio.studio.ui.panels.compare_plot import ComparePlots, run_colour
    run = load_run(make_run(tmp_path, "one step", steps_done=1, total=1))
    w = ComparePlots()
    qtbot.addWidget(w)
    w.resize(900, 600)
    w.show()
    w.set_runs([run])
    settle()
    assert w.loss_plot.getPlotItem().getAxis("left").style["showValues"]
    assert colour_pixels(w.loss_plot, run_colour(0)) >= 9


def test_the_runs_table_needs_no_horizontal_scrolling(qtbot, tmp_path):
    from runs_helpers import make_run
    from opencl_llm_studio.studio.ui.panels.runs_panel import RunsPanel
    root = tmp_path.joinpath(*["a-rather-long-folder-name-for-runs"] * 8)
    for i in range(3):
        make_run(root, f"a run with a rather long name {i}", steps_done=4, total=4,
                 stamp=f"20261101-12000{i}")
    panel = RunsPanel(root)
    qtbot.addWidget(panel)
    panel.resize(1200, 700)
    panel.show()
    qtbot.waitExposed(panel)
    settle()
    t = panel.table
    assert t.rowCount() == 3
    assert panel.minimumSizeHint().width() < 900   # a long runs folder does not widen it
    assert t.horizontalScrollBar().maximum() == 0
    header = t.horizontalHeader()
    for col in range(t.columnCount()):   # every header readable
        text = t.horizontalHeaderItem(col).text()
        assert header.sectionSize(col) >= header.fontMetrics().horizontalAdvance(text), text


@pytest.mark.parametrize("size", SCREENS)
def test_the_window_fits_the_screen_it_opens_on(qtbot, settings, size):
    """The window opened at a fixed 1400 x 880: on a 1366 x 768 screen the Export button and
    the lr plot were off screen. It takes the screen's available area now, and at that size
    the Export button and every plot are inside it."""
    from opencl_llm_studio.studio.ui.window.main_window import PREFERRED_SIZE, MainWindow
    from opencl_llm_studio.studio.ui.widgets import TITLE_BAR, fit_to_screen
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    area = QRect(0, 0, *size)
    fit_to_screen(win, PREFERRED_SIZE, area)
    assert win.width() <= size[0] and win.height() <= size[1] - TITLE_BAR
    win.show()
    qtbot.waitExposed(win)
    settle()
    assert win.width() <= size[0] and win.height() <= size[1] - TITLE_BAR  # not its minimum
    for name in ("exportButton", "trainButton", "lossPlot", "gradNormPlot", "lrPlot"):
        assert inside(win.findChild(QWidget, name), win), name
    for p in (win.plots.loss_plot, win.plots.grad_plot, win.plots.lr_plot):
        assert p.height() >= p.minimumHeight(), p.objectName()
    column = win.centralWidget().widget(0)   # the settings: whole at 1366 x 768, and
    if size == (1366, 768):                  # reachable by scrolling below that
        assert column.verticalScrollBar().maximum() == 0
    column.ensureWidgetVisible(win.autosave_box, 0, 0)
    settle()
    box = win.autosave_box
    assert column.viewport().rect().contains(
        QRect(box.mapTo(column.viewport(), box.rect().topLeft()), box.size()))


def test_a_new_window_is_no_larger_than_its_screen(qtbot, settings):
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    area = win.screen().availableGeometry()
    assert win.width() <= area.width() and win.height() <= area.height()


def test_a_log_axis_labels_each_tick_once(qtbot):
    """pyqtgraph's minor log level repeats the decades (0.1, 0.01) of the major one: their
    labels were drawn twice, one over the other (the health and lr plots)."""
    from opencl_llm_studio.studio.ui.panels.log_axis import LogAxis
    axis = LogAxis("left")
    axis.setLogMode(False, True)
    levels = axis.tickValues(-3.2, -0.7, 300)   # log10 of 0.0006 .. 0.2
    values = [round(v, 9) for _, vs in levels for v in vs]
    assert len(values) == len(set(values)) and -1.0 in values and -2.0 in values


@pytest.mark.parametrize("pretrain, tune, name",
                         [(1000, 10, "◂ pretrain"), (5, 1000, "tune ▸")])
def test_a_short_stage_still_names_the_long_one(qtbot, pretrain, tune, name):
    """Centred on the line, "◂ pretrain | tune ▸" did not fit beside a boundary near the
    plot's edge and pyqtgraph drew no name at all; each name now sits on its own side, so the
    long stage's name fits inside the plot's width."""
    from PySide6.QtGui import QFontMetrics
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(500, 500)
    plots.show()
    qtbot.waitExposed(plots)
    plots.start_run(pretrain + tune, pretrain, tune, 300, 1.0, preview=True)
    settle()
    item = plots.loss_plot.getPlotItem()
    (x0, x1), width = item.getViewBox().viewRange()[0], item.getViewBox().width()
    pos = dict((text, x) for x, text in item.getAxis("top")._tickLevels[0])[name]
    half = QFontMetrics(plots.font()).horizontalAdvance(name) / 2 * (x1 - x0) / width
    assert x0 <= pos - half and pos + half <= x1
