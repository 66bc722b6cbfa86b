"""The Runs panel driven as a person would: list, sort, tick two runs (curves overlay, settings
diff), rename, delete to the trash (the trash call is replaced and checked), Open/Continue."""

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from opencl_llm_studio.studio.ui.panels import runs_panel as rp
from tests.runs_helpers import make_run


@pytest.fixture
def runs_root(tmp_path):
    make_run(tmp_path, "lr 1e-2", lr=1e-2, stamp="20261103-100000", bpb=True)
    make_run(tmp_path, "lr 1e-3", lr=1e-3, d_model=64, stamp="20261102-100000")
    make_run(tmp_path, "stopped early", steps_done=20, saved_step=20, stamp="20261101-100000")
    return tmp_path


@pytest.fixture
def panel(qtbot, runs_root):
    p = rp.RunsPanel(runs_root)
    qtbot.addWidget(p)
    p.resize(1200, 800)
    p.show()
    return p


def names(panel):
    return [panel.table.item(r, rp.NAME_COL).text() for r in range(panel.table.rowCount())]


def test_lists_runs_with_status_and_sorts(panel):
    assert sorted(names(panel)) == ["lr 1e-2", "lr 1e-3", "stopped early"]
    statuses = {panel.table.item(r, rp.NAME_COL).text(): panel.table.item(r, rp.STATUS_COL).text()
                for r in range(panel.table.rowCount())}
    assert statuses == {"lr 1e-2": "finished", "lr 1e-3": "finished", "stopped early": "stopped"}
    loss_col = rp.COLUMNS.index("Loss")
    panel.table.sortItems(loss_col, Qt.AscendingOrder)
    losses = [float(panel.table.item(r, loss_col).text()) for r in range(3)]
    assert losses == sorted(losses)
    panel.table.sortItems(rp.COLUMNS.index("Params"), Qt.DescendingOrder)
    assert names(panel)[0] == "lr 1e-3"  # d_model 64: the most parameters, numeric sort


def test_tick_two_runs_overlays_curves_and_shows_the_diff(panel, runs_root):
    a, b = (str(p) for p in sorted(runs_root.iterdir())[1:])
    panel.set_ticked(a)
    panel.set_ticked(b)
    loss_curves = panel.compare.visible_curves("loss")
    assert len(loss_curves) == 2
    pens = {c.opts["pen"].color().name() for c in loss_curves}
    assert pens == {"#1f77b4", "#ff7f0e"}  # one colour per run
    assert all(len(c.getData()[0]) == 40 for c in loss_curves)
    assert len(panel.compare.visible_curves("val")) == 2
    assert len(panel.compare.visible_curves("health.norms")) == 2
    legend = panel.compare.legend.text()
    assert "lr 1e-2" in legend and "lr 1e-3" in legend
    diff = panel.diff_table
    cols = [diff.horizontalHeaderItem(c).text() for c in range(diff.columnCount())]
    rows = {diff.verticalHeaderItem(r).text(): {cols[c]: diff.item(r, c).text()
                                                for c in range(2)}
            for r in range(diff.rowCount())}
    assert rows == {"model.d_model": {"lr 1e-3": "64", "lr 1e-2": "32"},
                    "train.learning_rate": {"lr 1e-3": "0.001", "lr 1e-2": "0.01"}}
    panel.compare.set_axis("tokens")
    x = panel.compare.visible_curves("loss")[0].getData()[0]
    assert x[0] == 16  # 1 step x batch 2 x context 8
    panel.set_ticked(a, False)
    assert len(panel.compare.visible_curves("loss")) == 1


def test_rename_in_the_table_writes_run_json(panel, runs_root):
    row = names(panel).index("stopped early")
    panel.table.item(row, rp.NAME_COL).setText("baseline")
    assert "baseline" in names(panel)
    assert '"baseline"' in (runs_root / "20261101-100000" / "run.json").read_text()


def test_delete_asks_then_moves_the_folder_to_the_trash(panel, runs_root, monkeypatch):
    asked, trashed = [], []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: asked.append(a[2]) or QMessageBox.Cancel)
    monkeypatch.setattr(rp, "move_to_trash", lambda p: trashed.append(p) or True)
    target = runs_root / "20261101-100000"
    panel.select(str(target))
    panel.buttons["delete"].click()
    assert asked and "stopped early" in asked[0] and trashed == []  # Cancel: nothing moved
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.Yes)
    panel.buttons["delete"].click()
    assert trashed == [Path(str(target))]


def test_open_continue_export_emit_the_selected_folder(panel, runs_root, qtbot):
    target = str(runs_root / "20261102-100000")
    panel.select(target)
    for key, signal in (("open", panel.openRequested), ("continue", panel.continueRequested),
                        ("export", panel.exportRequested)):
        with qtbot.waitSignal(signal) as blocker:
            panel.buttons[key].click()
        assert blocker.args == [target]
    panel.set_busy(True)
    assert not panel.buttons["open"].isEnabled()


def test_added_folder_is_listed(qtbot, tmp_path):
    other = tmp_path / "elsewhere"
    make_run(other, "outside", stamp="20261001-000000")
    p = rp.RunsPanel(tmp_path / "empty-root")
    qtbot.addWidget(p)
    assert p.table.rowCount() == 0
    p.add_folder(other / "20261001-000000")
    assert names(p) == ["outside"]


def test_main_window_view_runs_and_health_warning(qtbot, runs_root, tmp_path):
    from PySide6.QtCore import QSettings

    from opencl_llm_studio.engine.metrics import StepMetrics
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.autosave_box.set_runs_root(runs_root)
    win.runs.action.trigger()
    assert win.runs.panel.isVisible() and win.runs.panel.table.rowCount() == 3
    m = StepMetrics(100, 600, "pretrain", 4.4, 1.0, 0.5, 1.0, 1.0,
                    warnings=["the learning rate 5.00e-01 is far too high"])
    win.controller.host.worker.metrics.emit([m])
    qtbot.waitUntil(lambda: "far too high" in win.statusBar().currentMessage(), timeout=3000)
    win.close()


def test_runs_screenshot(qtbot, tmp_path):
    """STUDIO_SCREENSHOTS=1 writes docs/screenshots/06-runs.png, of the runs in
    RUNS_SCREENSHOT_ROOT when set (real runs), else of made-up ones."""
    import os
    root = os.environ.get("RUNS_SCREENSHOT_ROOT")
    if not root:
        root = tmp_path / "runs"
        make_run(root, "lr 3e-3", lr=3e-3, stamp="20261128-101500")
        make_run(root, "lr 3e-2", lr=3e-2, d_model=64, stamp="20261128-103000")
    docs = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
    out = (docs if os.environ.get("STUDIO_SCREENSHOTS") == "1" else tmp_path) / "06-runs.png"
    p = rp.RunsPanel(root)
    qtbot.addWidget(p)
    p.setWindowTitle("Runs")
    p.resize(1280, 800)
    p.show()
    for r in range(p.table.rowCount()):
        p.set_ticked(p.table.item(r, 0).data(Qt.UserRole))
    p.table.selectRow(0)
    qtbot.wait(200)
    assert p.grab().save(str(out))
    assert out.stat().st_size > 10_000


def test_open_buttons_follow_the_studio_while_the_runs_window_is_open(qtbot, runs_root,
                                                                       tmp_path):
    """Train pressed with the Runs window already open turns Open / Continue / Export off (with
    the reason as tooltip) until the run ends; they were left on, and clicking did nothing."""
    import os

    from PySide6.QtCore import QSettings

    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    from opencl_llm_studio.studio.protocol import RunState
    win = MainWindow(device=os.environ.get("LLM_STUDIO_TEST_DEVICE") or None,
                     settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.autosave_box.set_runs_root(runs_root)
    for name, value in dict(dModelSpin=32, nLayerSpin=1, nHeadSpin=2, contextLengthSpin=16,
                            vocabSizeSpin=512, pretrainStepsSpin=100_000, tuneStepsSpin=0,
                            batchSizeSpin=2, warmupSpin=2).items():
        win.settings_panel.set_value(name, value)
    win.runs.action.trigger()
    panel = win.runs.panel
    panel.select(str(runs_root / "20261102-100000"))
    opens = [panel.buttons[k] for k in ("open", "continue", "export")]
    assert all(b.isEnabled() for b in opens)
    win.run_bar.train_button.click()
    assert not any(b.isEnabled() for b in opens)
    assert "Stop it" in opens[0].toolTip()
    qtbot.waitUntil(lambda: win.controller.state is not RunState.PREPARING, timeout=120_000)
    assert win.controller.state is RunState.RUNNING, win.last_error
    assert not any(b.isEnabled() for b in opens)
    with qtbot.waitSignal(win.trainingFinished, timeout=120_000):
        win.run_bar.stop_button.click()
    panel.select(str(runs_root / "20261102-100000"))
    assert all(b.isEnabled() for b in opens) and opens[0].toolTip().startswith("Open the")
    win.close()


def test_continue_from_the_runs_window_names_the_button_to_press(qtbot, tmp_path):
    """Runs › Continue said "then press Train to continue this run", but the button then
    reads "Continue" (an opened run); the status line names the button as it reads."""
    import os

    from PySide6.QtCore import QSettings

    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(device=os.environ.get("LLM_STUDIO_TEST_DEVICE") or None,
                     settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.autosave_box.set_runs_root(tmp_path / "runs")
    for name, value in dict(dModelSpin=32, nLayerSpin=1, nHeadSpin=2, contextLengthSpin=16,
                            vocabSizeSpin=512, pretrainStepsSpin=4, tuneStepsSpin=0,
                            batchSizeSpin=2, warmupSpin=1, sampleIntervalSpin=0).items():
        win.settings_panel.set_value(name, value)
    with qtbot.waitSignal(win.trainingFinished, timeout=120_000) as blocker:
        win.run_bar.train_button.click()
    win.runs.action.trigger()
    win.runs.panel.select(blocker.args[0].run_dir)
    with qtbot.waitSignal(win.modelOpened, timeout=60_000):
        win.runs.panel.buttons["continue"].click()
    label = win.run_bar.train_button.text().lstrip("▶ ")
    assert label == "Continue"
    assert f"press {label} " in win.statusBar().currentMessage()
    assert "press Train" not in win.statusBar().currentMessage()
    win.close()


def test_a_failed_open_from_the_runs_window_leaves_no_action_behind(qtbot, tmp_path):
    """Runs › Continue on a damaged run failed to open; its follow-up (the 'raise the step
    counts' prompt) stayed hooked and fired on the next, unrelated File › Open."""
    import os

    from PySide6.QtCore import QSettings

    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(device=os.environ.get("LLM_STUDIO_TEST_DEVICE") or None,
                     settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.autosave_box.set_runs_root(tmp_path / "runs")
    for name, value in dict(dModelSpin=32, nLayerSpin=1, nHeadSpin=2, contextLengthSpin=16,
                            vocabSizeSpin=512, pretrainStepsSpin=2, tuneStepsSpin=0,
                            batchSizeSpin=2, warmupSpin=1, sampleIntervalSpin=0).items():
        win.settings_panel.set_value(name, value)
    with qtbot.waitSignal(win.trainingFinished, timeout=120_000) as blocker:
        win.run_bar.train_button.click()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "checkpoint.npz").write_bytes(b"not a checkpoint")
    called = []
    with qtbot.waitSignal(win.controller.loaded, timeout=60_000) as failed:
        win.runs.open(str(broken), then=lambda: called.append("broken"))
    assert failed.args[0] is None and not called
    with qtbot.waitSignal(win.modelOpened, timeout=60_000):
        win.files.open_checkpoint(blocker.args[0].run_dir)
    assert not called
    win.close()
