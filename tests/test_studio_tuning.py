"""Kernel tuning from the studio (issue 24 goal 4: "with progress in the CLI and the studio,
cancellable"): Device › Tune kernels for this model… (studio.ui.window.tune_actions, on the worker:
studio.ui.run.worker_tune), its progress, Stop, the menu bar's tuned label, and the setting that
tunes before training. The tuner's time bound is made short; the cache is the test's own."""

import pytest

from opencl_llm_studio.engine.model import gemm_tune
from opencl_llm_studio.engine.opencl import tune_cache
from opencl_llm_studio.studio.protocol import FileTask
from opencl_llm_studio.studio.ui.window import tune_actions
from opencl_llm_studio.studio.ui.panels.run_bar import STOP_TIP, STOP_TUNING_TIP
from opencl_llm_studio.studio.ui.window.reasons import TASK_WHY
from tests.studio_helpers import configure, train

TUNE_TIMEOUT_MS = 300_000   # a bound for hangs on a loaded machine, not a speed test


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(tune_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / tune_cache.FILE_NAME


def _entries(cache) -> dict:
    import json
    return json.loads(cache.read_text(encoding="utf-8"))["entries"]


def test_the_menu_action_tunes_shows_progress_and_stores_the_winners(qtbot, window, cache,
                                                                     tmp_path):
    configure(window)
    window.tuning.seconds = 5.0
    action = window.device_menu.tune_action
    assert action.isEnabled()
    assert window.tuning.label.text() == "Kernels: built-in table"
    progress, shots = [], []

    def seen(p):
        progress.append((p, window.run_bar.progress.format()))
        if p.total and not shots:   # the window while it tunes
            shots.append(tmp_path / "tuning.png")
            window.grab().save(str(shots[-1]))
    window.controller.tuneProgress.connect(seen)
    with qtbot.waitSignal(window.controller.tuned, timeout=TUNE_TIMEOUT_MS) as done:
        action.trigger()
        # while it runs: no second tuning, no training; Stop cancels it
        assert window.controller.task is FileTask.TUNE and not action.isEnabled()
        assert tune_actions.TUNING_WHY in action.toolTip()
        assert not window.run_bar.train_button.isEnabled()
        assert window.run_bar.stop_button.isEnabled()
        assert window.run_bar.stop_button.toolTip() == STOP_TUNING_TIP
    window.grab().save(str(tmp_path / "tuned.png"))
    report = done.args[0]
    assert report is not None and not report.cancelled and report.measured > 0
    # progress named the products and counted them, the attention path last
    products = {label for label, _ in gemm_tune.model_products(
        window.settings_panel.model_config(), 8)}
    named = [p.what for p, _ in progress if p.total]
    assert named and set(named) <= products | {"attention path"}
    assert any("s of 5 s" in text for _, text in progress), progress[-1]
    assert shots and shots[0].stat().st_size > 0
    # stored for this device and the shape on screen; the window says so
    cfg, batch = window.tuning.shape()
    key = tune_cache.device_key_of(window.device_panel.current())
    assert tune_cache.shape_key(cfg, batch) in _entries(cache)[key]
    assert report.saved_to == str(cache)
    assert window.tuning.label.text().startswith("Kernels tuned for this model")
    assert window.run_bar.note.text() == tune_actions.report_text(report)
    assert window.run_bar.note.text().startswith(f"Tuned on {report.device} in ")
    assert action.isEnabled() and window.run_bar.train_button.isEnabled()
    assert not window.run_bar.stop_button.isEnabled()
    assert window.run_bar.stop_button.toolTip() == STOP_TIP


def test_the_report_says_what_tuning_found():
    from opencl_llm_studio.studio.protocol import TuneReport
    faster = TuneReport("GPU X", 28.2, 1.07, 3, 13, True, False, "/c.json")
    assert tune_actions.report_text(faster) == (
        "Tuned on GPU X in 28 s: the step's products 1.07x faster than the built-in table (3 of "
        "13 products changed); training this shape on this device uses it.")
    same = TuneReport("GPU X", 9.0, 1.0, 0, 13, False, False, "/c.json")
    text = tune_actions.report_text(same)
    assert "the built-in table was already the fastest for all 13" in text
    assert "Time ran out before every product was measured" in text


def test_stop_cancels_tuning_and_stores_nothing(qtbot, window, cache):
    configure(window)
    window.tuning.seconds = 120.0   # it would run on; Stop must end it

    def stop_at_first(p):
        if p.total and window.run_bar.stop_button.isEnabled():
            window.run_bar.stop_button.click()
    window.controller.tuneProgress.connect(stop_at_first)
    with qtbot.waitSignal(window.controller.tuned, timeout=TUNE_TIMEOUT_MS) as done:
        window.device_menu.tune_action.trigger()
    report = done.args[0]
    assert report.cancelled and report.saved_to is None and report.seconds < 60
    assert not cache.exists()
    assert window.run_bar.progress.format() == "Tuning cancelled"
    assert window.tuning.label.text() == "Kernels: built-in table"
    # the stop flag was cleared: the next job (a chat, a run) is not cancelled by it
    assert not window.controller.worker._stop.is_set()


def test_the_setting_tunes_before_training_and_is_kept(qtbot, window, cache, settings,
                                                       monkeypatch):
    """"Tune kernels before training…" makes Train tune first (as LLM_STUDIO_AUTOTUNE=1, which
    is not set: the choice travels in the TrainJob); the action is off while training."""
    monkeypatch.setattr(gemm_tune, "TUNE_SECONDS", 3.0)
    configure(window, pretrainStepsSpin=3, tuneStepsSpin=1)
    auto = window.device_menu.autotune_action
    auto.setChecked(True)
    assert str(settings.value(tune_actions.AUTOTUNE_KEY)).lower() == "true"
    states = []
    window.controller.sessionReady.connect(lambda _: states.append(
        (window.device_menu.tune_action.isEnabled(), window.device_menu.tune_action.toolTip(),
         auto.isEnabled())))
    result = train(qtbot, window)
    assert result.step == 4
    # a model at hand: while the next tuning runs, chat says why it waits (not "no model")
    window.tuning.seconds = 120.0
    window.device_menu.tune_action.trigger()
    assert window.chat_panel.status.text() == TASK_WHY
    with qtbot.waitSignal(window.controller.tuned, timeout=TUNE_TIMEOUT_MS):
        window.run_bar.stop_button.click()
    assert states and states[0][0] is False and tune_actions.RUN_WHY in states[0][1]
    assert states[0][2] is False
    assert _entries(cache), "training did not tune first"
    assert window.tuning.label.text().startswith("Kernels tuned for this model")


def test_the_setting_comes_back_and_off_means_no_tuning(qtbot, settings, cache, monkeypatch):
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    from tests.helpers import TEST_DEVICE
    settings.setValue(tune_actions.AUTOTUNE_KEY, True)
    win = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(win)
    assert win.device_menu.autotune_action.isChecked() and win.tuning.autotune()
    win.device_menu.autotune_action.setChecked(False)
    calls = []
    monkeypatch.setattr(gemm_tune, "tune", lambda *a, **k: calls.append(a))
    configure(win, pretrainStepsSpin=1, tuneStepsSpin=0)
    train(qtbot, win)
    assert calls == [] and not cache.exists()
    win.close()


def test_closing_the_window_while_tuning_ends_it_and_stores_nothing(qtbot, settings, cache):
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    from tests.helpers import TEST_DEVICE
    win = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(win)
    configure(win)
    win.tuning.seconds = 120.0
    with qtbot.waitSignal(win.controller.tuneProgress, timeout=TUNE_TIMEOUT_MS,
                          check_params_cb=lambda p: p.total > 0):
        win.device_menu.tune_action.trigger()
    win.close()   # stops the worker and joins its thread (WorkerHost.shutdown)
    assert not win.controller.host.thread.isRunning()
    assert not cache.exists()


def test_the_menu_bar_label_is_not_cut_when_its_text_grows(qtbot, window, cache, monkeypatch):
    """The menu bar's corner label kept the width of its first text: "Kernels tuned for this
    model (2026-12-02)" after tuning showed as "Kernels tuned for this" (seen at 1400 x 880)."""
    from tests.studio_helpers import settle
    label = window.tuning.label
    assert label.text() == "Kernels: built-in table"
    settle()
    monkeypatch.setattr(tune_cache, "lookup", lambda *a: {"measured": "2026-12-02T03:20:00"})
    window.tuning.show_status()
    settle()
    assert label.text() == "Kernels tuned for this model (2026-12-02)"
    assert label.width() >= label.sizeHint().width()
    assert label.geometry().right() <= window.menuBar().width()
