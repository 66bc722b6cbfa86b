"""The studio's layout (pytest-qt, offscreen): the window fits 1280 x 720 and 1366 x 768 laptop
screens on every tab, before, during and after a run, and never grows by itself; long paths and
file names do not widen it; the loss plot's labels say what each curve measures."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtCore import QObject, QTimer  # noqa: E402

from tests.studio_helpers import configure, settle, train  # noqa: E402
from opencl_llm_studio.studio.protocol import Outcome  # noqa: E402

MAX_MIN_WIDTH = 1200  # leaves room on a 1280 px screen for the window frame and other fonts


def min_width(win) -> int:
    return win.minimumSizeHint().width()


def check_every_tab(win) -> None:
    for i in range(win.tabs.count()):
        win.tabs.setCurrentIndex(i)
        assert min_width(win) <= MAX_MIN_WIDTH, (win.tabs.tabText(i), min_width(win))


@pytest.mark.parametrize("size", [(1280, 720), (1366, 768)])
def test_window_fits_a_laptop_screen_and_never_grows(qtbot, window, size):
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    settle()
    assert min_width(window) <= MAX_MIN_WIDTH
    assert window.minimumSizeHint().height() <= size[1]
    check_every_tab(window)

    configure(window)
    widths, sizes = [], []

    def sample():
        widths.append(min_width(window))
        sizes.append((window.width(), window.height()))
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(sample)
    timer.start()
    result = train(qtbot, window)
    timer.stop()
    sample()
    assert result.outcome is Outcome.FINISHED and result.step == 30
    assert max(widths) <= MAX_MIN_WIDTH, max(widths)
    assert set(sizes) == {size}, set(sizes)  # the run never resized the window
    check_every_tab(window)
    assert (window.width(), window.height()) == size
    assert window.chat_panel.send_button.isEnabled()  # a model to chat with: the Chat tab's
    window.tabs.setCurrentWidget(window.chat_panel)   # state after a run is the one checked
    assert min_width(window) <= MAX_MIN_WIDTH


def test_long_paths_and_file_names_do_not_widen_the_window(qtbot, window, tmp_path):
    before = min_width(window)
    deep = tmp_path.joinpath(*["a-rather-long-folder-name-for-runs"] * 6)
    window.autosave_box.set_runs_root(deep)
    long_name = tmp_path / ("my pretraining text with a very long descriptive file name " * 3
                            ).replace(" ", "_").rstrip("_")
    long_name = long_name.with_suffix(".txt")
    long_name.write_text("Rain falls from clouds.\n\nSnow is frozen rain.\n", encoding="utf-8")
    assert window.data_panel.load("pretrain", long_name)
    window.run_bar.show_run_folder(deep / "20260101-120000", None)
    window.run_bar.set_hint("A very long explanation of why training cannot start yet, " * 5)
    window.run_bar.show_text("A very long progress text that goes on and on " * 5)
    window.chat_panel.set_available(False, "A very long reason why chat is not available " * 5)
    window.plots.summary.setText("step 123456: loss 1.234 · " * 10)
    settle()
    check_every_tab(window)
    assert min_width(window) <= max(before, 900)
    assert window.run_bar.folder_label.full_text().startswith("Autosave:")
    assert str(long_name) == window.data_panel.pretrain.name.toolTip()


def test_window_can_be_made_narrow(qtbot, window):
    """At its minimum width every part is still there: the settings wrap long labels above
    their fields, texts are shortened with "…", nothing is pushed out of the window."""
    width = min_width(window)
    window.resize(width, 700)
    qtbot.waitUntil(lambda: window.width() == width)
    settle()
    column = window.centralWidget().widget(0)
    assert column.width() >= column.minimumSizeHint().width()
    assert column.widget().width() >= column.widget().minimumSizeHint().width()
    for name in ("trainButton", "exportButton", "lossPlot", "chatInput", "progressBar"):
        w = window.findChild(QObject, name)
        assert w is not None and w.width() >= 0, name


def test_loss_plot_labels_explain_the_curves(qtbot, window):
    from PySide6.QtGui import QTextDocument
    plots = window.plots
    doc = QTextDocument()
    doc.setHtml(plots.loss_title.text())
    title = doc.toPlainText().replace("\u00a0", " ").replace("\u2011", "-")  # nbsp, nb hyphen
    assert "held-out text" in title       # the red curve: never trained on
    assert "facts" not in title           # true of any text, Shakespeare too
    assert "tune dialogues (training set)" in title      # the orange one: trained on
    assert "validation" not in title
    help_text = plots.loss_title.toolTip()
    assert "never trains on" in help_text and "memorisation" in help_text
    assert "ln(vocab)" in help_text
    plots.show_loss_help()  # the help link: a note that stays until the next click
    from PySide6.QtWidgets import QWhatsThis
    QWhatsThis.hideText()


def test_reference_line_is_labelled_before_training(qtbot, window):
    """The dashed ln(vocab) line is named from the start, not only once a run moved it (in
    the title: tests/test_studio_visibility.py)."""
    qtbot.waitUntil(window.plots.ref_line.isVisible)
    assert "random guessing" in window.plots.reference_text("ref")
    assert window.plots.reference_text("clip").startswith("clip at")


def test_stage_marker_is_named_above_the_line(qtbot, window):
    configure(window, pretrainStepsSpin=300, tuneStepsSpin=150)
    qtbot.waitUntil(lambda: bool(window.plots._stage_lines))
    plot, line = window.plots._stage_lines[0]
    assert plot is window.plots.loss_plot and line.value() == 300.5
    axis = plot.getPlotItem().getAxis("top")
    assert axis.isVisible() and window.plots.stage_label() == "◂ pretrain | tune ▸"
    (left, pretrain), (right, tune) = axis._tickLevels[0]   # one each side of the line
    assert (pretrain, tune) == ("◂ pretrain", "tune ▸")
    assert left < line.value() < right


def test_samples_caption_is_a_plain_sentence(window):
    from PySide6.QtWidgets import QLabel
    texts = [label.text() for label in window.samples_panel.findChildren(QLabel)]
    caption = next(t for t in texts if "prompts" in t)
    assert "›" not in caption and "(" not in caption
