"""Screenshots of the window before, during and after training (and chatting), on a 1366 x 768
and a 1920 x 1080 screen; at each shot no text is cut short or drawn inside a plot
(tests/visibility.py) and the Export button and every plot are inside the window.

STUDIO_SCREENSHOTS=1 writes them to docs/screenshots/ (the README shows the 1366 x 768 ones;
the 1920 x 1080 ones are named wide-*); otherwise they go to a temporary folder, so the test
still checks that every stage renders.
"""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtCore import QRect, QSettings  # noqa: E402
from PySide6.QtWidgets import QWidget  # noqa: E402

from opencl_llm_studio.studio.ui.window.main_window import PREFERRED_SIZE, MainWindow  # noqa: E402
from opencl_llm_studio.studio.ui.widgets import fit_to_screen  # noqa: E402
from tests.helpers import TEST_DEVICE  # noqa: E402
from visibility import clipped_texts, inside, texts_inside_plots  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
SCREENS = {(1366, 768): "", (1920, 1080): "wide-"}  # a common laptop, a common desktop


@pytest.fixture
def out_dir(tmp_path):
    if os.environ.get("STUDIO_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        return DOCS
    return tmp_path


def shoot(qtbot, win, path: Path) -> None:
    qtbot.wait(150)  # let the 15 Hz plot timer draw the latest points
    win.plots.redraw()
    assert win.grab().save(str(path)), path
    assert path.stat().st_size > 10_000
    assert clipped_texts(win) == [], path.name
    assert texts_inside_plots(win) == [], path.name
    for name in ("exportButton", "lossPlot", "gradNormPlot", "lrPlot"):
        assert inside(win.findChild(QWidget, name), win), (path.name, name)


@pytest.mark.parametrize("screen", list(SCREENS))
def test_screenshots(qtbot, tmp_path, out_dir, screen):
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat)
    settings.setValue("autosave/runs_dir", str(tmp_path / "runs"))
    win = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(win)
    fit_to_screen(win, PREFERRED_SIZE, QRect(0, 0, *screen))   # as it opens on that screen
    prefix = SCREENS[screen]
    win.show()
    qtbot.waitExposed(win)
    for name, value in dict(dModelSpin=64, nLayerSpin=2, nHeadSpin=4, contextLengthSpin=64,
                            vocabSizeSpin=512, batchSizeSpin=16, pretrainStepsSpin=300,
                            tuneStepsSpin=150, warmupSpin=20, evalIntervalSpin=25,
                            sampleIntervalSpin=50, learningRateSpin=0.003).items():
        win.settings_panel.set_value(name, value)
    shoot(qtbot, win, out_dir / f"{prefix}01-before-training.png")

    win.settings_panel.set_value("nHeadSpin", 3)
    shoot(qtbot, win, out_dir / f"{prefix}02-invalid-setting.png")
    win.settings_panel.set_value("nHeadSpin", 4)

    with qtbot.waitSignal(win.trainingFinished, timeout=600_000):
        win.run_bar.train_button.click()
        qtbot.waitUntil(lambda: win.plots.point_count() >= 200, timeout=600_000)
        shoot(qtbot, win, out_dir / f"{prefix}03-during-training.png")
    shoot(qtbot, win, out_dir / f"{prefix}04-after-training.png")

    for question in ("What is the capital of France?", "Which river flows through Egypt?"):
        win.chat_panel.input.setText(question)
        with qtbot.waitSignal(win.chatFinished, timeout=60_000):
            win.chat_panel.send_button.click()
    win.tabs.setCurrentWidget(win.chat_panel)
    shoot(qtbot, win, out_dir / f"{prefix}05-chat.png")
