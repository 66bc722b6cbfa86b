"""The studio end to end (pytest-qt, offscreen): bundled corpora -> tiny model -> train -> plots,
samples, chat, export; pause/resume/stop; closing mid-run; the event loop never stalls."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import time  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtCore import QObject, QTimer  # noqa: E402

from benchmarks.gui_busy import GuiBusyMeter  # noqa: E402
from opencl_llm_studio.studio.ui.window.main_window import MainWindow  # noqa: E402
from opencl_llm_studio.studio.protocol import Outcome, RunState  # noqa: E402
from opencl_llm_studio.engine.model.params import param_count
from tests.helpers import TEST_DEVICE  # noqa: E402
from tests.studio_helpers import (RUN_TIMEOUT_MS, assert_answered, chat, configure,  # noqa: E402
                                  curve_x, train)


def test_required_object_names(window):
    for name in ("deviceCombo", "dModelSpin", "nLayerSpin", "nHeadSpin", "contextLengthSpin",
                 "learningRateSpin", "pretrainStepsSpin", "tuneStepsSpin", "trainButton",
                 "pauseButton", "stopButton", "progressBar", "lossPlot", "gradNormPlot",
                 "samplesView", "chatInput", "chatSendButton", "chatView", "exportButton"):
        assert window.findChild(QObject, name) is not None, name


def test_opens_with_bundled_corpora(window):
    dp = window.data_panel
    assert dp.pretrain_path.name == "pretrain.txt" and dp.tune_path.name == "tune.txt"
    assert dp.pretrain_text and dp.tune_text and dp.n_dialogues > 0
    assert "documents" in dp.pretrain.stats.text() and "dialogues" in dp.tune.stats.text()
    assert window.device_panel.spec() is not None
    assert window.run_bar.train_button.isEnabled()
    assert not window.run_bar.export_button.isEnabled()  # no model yet


def test_invalid_heads_disable_train_with_explanation(window):
    configure(window, dModelSpin=130, nHeadSpin=4)
    assert not window.run_bar.train_button.isEnabled()
    error = window.findChild(QObject, "nHeadError")
    assert error.isVisible() and "not divisible" in error.text() and "130" in error.text()
    assert "Fix the setting" in window.run_bar.hint.text()
    configure(window, dModelSpin=128, nHeadSpin=4)
    assert window.run_bar.train_button.isEnabled() and not error.isVisible()
    configure(window, dModelSpin=36, nHeadSpin=4)  # head_dim 9 is odd: RoPE needs pairs
    assert not window.run_bar.train_button.isEnabled()
    assert "odd" in window.settings_panel.error_text()


def test_live_estimates_follow_settings(window):
    from opencl_llm_studio.engine.config import ModelConfig
    configure(window)
    expected = param_count(ModelConfig(vocab_size=512, d_model=32, n_layer=1, n_head=2,
                                       context_length=32))
    assert f"{expected / 1e3:.1f} K" in window.settings_panel.estimate_label.text()
    configure(window, nLayerSpin=2)
    assert f"{expected / 1e3:.1f} K" not in window.settings_panel.estimate_label.text()


def test_whole_flow_train_samples_chat_export(qtbot, window, tmp_path, monkeypatch):
    configure(window)
    result = train(qtbot, window)
    assert result.outcome is Outcome.FINISHED and result.step == 30
    steps = list(curve_x(window, "lossPlot", "train loss"))
    assert steps == list(range(1, 31))                      # one point per step
    assert len(curve_x(window, "gradNormPlot", "grad norm")) == 30
    assert len(curve_x(window, "lossPlot", "held-out loss")) >= 4
    assert window.plots.ref_line.isVisible()                # ln(vocab) reference
    samples = window.findChild(QObject, "samplesView").toPlainText()
    assert "Step 30" in samples and "Step 10" in samples
    assert samples.index("Step 30") < samples.index("Step 10")  # newest first
    assert "tokens" in window.data_panel.pretrain.stats.text()  # counted once trained

    answer = chat(qtbot, window, "What is the capital of France?")
    assert_answered(window, answer)
    view = window.findChild(QObject, "chatView").toPlainText()
    assert "You: What is the capital of France?" in view

    path = tmp_path / "tiny.gguf"
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog

    def accept(dialog):  # the person picks a file and F32 in the (modal) export dialog
        dialog.path_edit.setText(str(path))
        dialog.dtype_combo.setCurrentIndex(dialog.dtype_combo.findData("f32"))
        return ExportDialog.Accepted
    monkeypatch.setattr(ExportDialog, "exec", accept)
    with qtbot.waitSignal(window.exportFinished, timeout=60_000) as blocker:
        window.findChild(QObject, "exportButton").click()
    assert path.is_file() and blocker.args[0].size_bytes == path.stat().st_size
    assert path.with_suffix(".Modelfile").is_file()
    gguf_import = pytest.importorskip("opencl_llm_studio.engine.files.gguf_import")
    bundle = gguf_import.import_gguf(path)
    assert bundle.config == window.controller.model_config
    assert window.last_error is None


def test_pause_chat_resume_stop(qtbot, window):
    configure(window, dModelSpin=64, nLayerSpin=2, pretrainStepsSpin=400, tuneStepsSpin=0,
              sampleIntervalSpin=0, evalIntervalSpin=50)
    window.run_bar.train_button.click()
    qtbot.waitUntil(lambda: window.plots.point_count() >= 3, timeout=RUN_TIMEOUT_MS)
    window.run_bar.pause_button.click()
    qtbot.waitUntil(lambda: window.controller.state is RunState.PAUSED, timeout=30_000)
    assert window.run_bar.pause_button.text() == "Resume"
    assert window.run_bar.export_button.isEnabled() and window.chat_panel.send_button.isEnabled()
    paused_at = window.plots.point_count()
    session = window.controller.worker.session
    step = session.step
    # no step while paused: the chat is answered on the worker's thread, after any step it
    # would take, so no metrics during it and the same step after it prove it (no fixed wait)
    with qtbot.assertNotEmitted(window.controller.worker.metrics):
        assert_answered(window, chat(qtbot, window, "Hello"))  # on the paused weights
    assert session.step == step and window.plots.point_count() == paused_at
    window.run_bar.pause_button.click()                    # resume
    qtbot.waitUntil(lambda: window.plots.point_count() > paused_at + 2, timeout=60_000)
    with qtbot.waitSignal(window.trainingFinished, timeout=60_000) as blocker:
        window.run_bar.stop_button.click()
    result = blocker.args[0]
    assert result.outcome is Outcome.STOPPED and result.step < 400
    window.plots.redraw()
    assert len(curve_x(window, "lossPlot", "train loss")) == result.step
    assert window.run_bar.train_button.isEnabled() and window.run_bar.export_button.isEnabled()


# Bounds per busy stretch of the GUI thread (benchmarks/gui_busy.py); the 200 ms aim is a
# benchmark figure (benchmarks/gui_latency.py). Work is load-proof; waits are not fully (the GIL
# held by a training thread that waits for a core), hence the wider bound: it catches a hang; the
# worst measured under load ~10 on 2 cores was 2.1 s.
GUI_WORK_LIMIT_S = 1.0   # the GUI thread's own CPU time
GUI_WAIT_LIMIT_S = 5.0   # wall time minus its time on the run queue


def assert_gui_never_blocked(meter):
    """No busy stretch of the GUI thread does GUI_WORK_LIMIT_S of work or is held
    GUI_WAIT_LIMIT_S (sleeping, waiting for the device or a lock) by its own doing."""
    print(f"\nGUI thread: {len(meter.cpu)} busy stretches; most work: {meter.describe('cpu')}; "
          f"longest held: {meter.describe('held')}; largest 10 ms-timer gap "
          f"{max(meter.timer_gaps, default=0) * 1000:.0f} ms wall")
    # every limit crossed is named (a wait injected on a loaded machine is followed by a burst
    # of catch-up work, which must not hide the wait from the report)
    crossed = []
    if meter.worst("cpu") >= GUI_WORK_LIMIT_S:
        crossed.append(f"the GUI thread worked: {meter.describe('cpu')}")
    if meter.worst("held") >= GUI_WAIT_LIMIT_S:
        crossed.append(f"the GUI thread waited: {meter.describe('held')}")
    assert not crossed, "; ".join(crossed)


def test_the_block_check_names_every_limit_crossed():
    """A wait followed by a burst of work (what a loaded machine made of the injected sleep
    below) is reported as both, so the wait is never hidden behind the work."""
    class Meter:
        cpu, timer_gaps = [1.0], []

        def worst(self, kind):
            return 10.0

        def describe(self, kind):
            return kind

    with pytest.raises(AssertionError, match="worked: cpu; the GUI thread waited: held"):
        assert_gui_never_blocked(Meter())


@pytest.mark.parametrize("checkpoint_every", [100, 5])
def test_event_loop_never_blocks_while_training(qtbot, window, checkpoint_every):
    """While a default-size model trains (~0.1 s a step here, samples ~0.4 s), also while the
    worker autosaves every 5 steps, the GUI thread never blocks: measured as its own work and
    its own waits per wake-up, so a loaded machine does not fail it."""
    configure(window, dModelSpin=128, nLayerSpin=4, nHeadSpin=4, contextLengthSpin=64,
              batchSizeSpin=16, pretrainStepsSpin=40, tuneStepsSpin=20, evalIntervalSpin=10,
              sampleIntervalSpin=20, warmupSpin=5)
    window.autosave_box.every_spin.setValue(checkpoint_every)
    with GuiBusyMeter() as meter:
        result = train(qtbot, window)
    assert result.outcome is Outcome.FINISHED and result.step == 60, (result, window.last_error)
    assert_gui_never_blocked(meter)


@pytest.mark.parametrize("block, seconds, kind", [("compute", 1.5, "worked"),
                                                  ("sleep", 6.0, "waited")])
def test_a_blocked_gui_thread_is_still_caught(qtbot, window, block, seconds, kind):
    """The measure is not blind: a block injected into the GUI thread mid-run fails the check
    above, be it work (1.5 s of its own CPU, as a slot crunching data would) or a wait (as a
    slot waiting on the device or a file would)."""
    stalled = []

    def stall():
        if block == "sleep":
            time.sleep(seconds)
        end = time.thread_time() + seconds
        while block == "compute" and time.thread_time() < end:
            pass
        stalled.append(True)
    # the measure that must cross its limit (the stall goes well past it: the kernel's run-queue
    # clock, read at a wake-up, may trim a few ms off a sleep's held time)
    metric, limit = ("cpu", GUI_WORK_LIMIT_S) if block == "compute" else ("held", GUI_WAIT_LIMIT_S)
    configure(window, pretrainStepsSpin=10_000, tuneStepsSpin=0)  # still running after the block
    with GuiBusyMeter() as meter:
        window.run_bar.train_button.click()
        qtbot.waitUntil(lambda: window.plots.point_count() >= 2, timeout=RUN_TIMEOUT_MS)
        QTimer.singleShot(0, stall)  # mid-run, in the GUI thread
        qtbot.waitUntil(lambda: bool(stalled), timeout=120_000)
        with qtbot.waitSignal(window.trainingFinished, timeout=120_000):
            window.run_bar.stop_button.click()
        # the stall's busy stretch ends when the event loop next waits; with the run stopped, no
        # stream of worker signals on a loaded machine keeps the loop from waiting
        qtbot.waitUntil(lambda: meter.worst(metric) >= limit, timeout=60_000)
    with pytest.raises(AssertionError, match=f"the GUI thread {kind}"):
        assert_gui_never_blocked(meter)


def test_close_during_training_stops_cleanly(qtbot, settings):
    win = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(win)   # deleted at this test's end, not by a later test's garbage collection
    win.show()
    configure(win, dModelSpin=128, nLayerSpin=4, nHeadSpin=4, contextLengthSpin=64,
              batchSizeSpin=16, pretrainStepsSpin=10_000, tuneStepsSpin=0)
    win.run_bar.train_button.click()
    qtbot.waitUntil(lambda: win.plots.point_count() >= 2, timeout=RUN_TIMEOUT_MS)
    t0 = time.perf_counter()
    win.close()
    assert not win.controller.host.thread.isRunning()
    assert time.perf_counter() - t0 < 10
    assert win.plots.point_count() < 10_000


def test_every_window_a_test_makes_is_deleted_by_that_test():
    """A MainWindow a test makes but does not give to qtbot lives until Python's cycle
    collector finds it, inside whichever later test allocates then: a full CI run crashed
    (SIGSEGV) building the window of a test two after the one whose window was left so.
    Windows made at a script's top level (run as a process of their own) are exempt."""
    from pathlib import Path
    loose = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            made = "MainWindow(" in line and "=" in line.split("MainWindow(")[0]
            if made and line.startswith(" ") and not any(
                    "qtbot.addWidget(" in nxt for nxt in lines[i + 1:i + 4]):
                loose.append(f"{path.name}:{i + 1}")
    assert loose == [], f"windows not given to qtbot.addWidget: {loose}"


def test_errors_are_shown_and_the_app_keeps_running(qtbot, window, tmp_path, monkeypatch):
    blob = tmp_path / "image.bin"
    blob.write_bytes(bytes(range(256)) * 64)
    before = window.data_panel.pretrain_text
    assert not window.data_panel.load("pretrain", blob)
    assert window.last_error is not None and blob.name in window.last_error[0]
    assert window.data_panel.pretrain_text == before         # the old text is kept
    # a good file next: the status bar stops saying "Cannot use image.bin" (it stayed)
    good = tmp_path / "good.txt"
    good.write_text("Cats sleep a lot.\n\nDogs bark at night.\n")
    assert window.data_panel.load("pretrain", good)
    assert window.statusBar().currentMessage() == "Loaded good.txt as the pretraining text"
    one = tmp_path / "one.txt"
    one.write_text("x" * 5000)
    assert window.data_panel.load("pretrain", one)   # was "1 lines · 1 documents"
    assert window.data_panel.pretrain.stats.text() == "5,000 characters · 1 line · 1 document"

    from opencl_llm_studio.engine.training import opening
    from opencl_llm_studio.engine.errors import DeviceError

    def broken(*args, **kwargs):
        raise DeviceError("The device ran out of memory.", "Choose a smaller model.")
    monkeypatch.setattr(opening, "create_session", broken)
    configure(window)
    result = train(qtbot, window)
    assert result.outcome is Outcome.FAILED
    assert "ran out of memory" in window.last_error[1] and "smaller model" in window.last_error[1]
    assert window.controller.state is RunState.IDLE and window.run_bar.train_button.isEnabled()


def test_settings_are_remembered(qtbot, settings, tmp_path):
    tune = tmp_path / "my_tune.txt"
    tune.write_text("User: Hi\nAssistant: Hello!\n\nUser: Bye\nAssistant: See you.\n",
                    encoding="utf-8")
    first = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(first)
    configure(first, dModelSpin=96, nHeadSpin=3, learningRateSpin=0.002)
    assert first.data_panel.load("tune", tune)
    first.close()
    second = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(second)
    spins = second.settings_panel.spins
    assert spins["dModelSpin"].value() == 96 and spins["nHeadSpin"].value() == 3
    assert spins["learningRateSpin"].value() == pytest.approx(0.002)
    assert second.data_panel.tune_path == tune


def test_dropped_files_go_to_the_right_slot(window, tmp_path):
    text = tmp_path / "facts.txt"
    text.write_text("Rain falls from clouds.\n\nSnow is frozen rain.\n", encoding="utf-8")
    dialogue = tmp_path / "talk.txt"
    dialogue.write_text("User: Is snow cold?\nAssistant: Yes, it is frozen water.\n",
                        encoding="utf-8")
    assert window.data_panel.load_dropped(str(dialogue))
    assert window.data_panel.load_dropped(str(text))
    assert window.data_panel.tune_path == dialogue and window.data_panel.pretrain_path == text


def test_a_dropped_thing_that_cannot_be_read_is_explained(window, tmp_path):
    """Dropping a folder (or an unreadable file) says what is wrong in the engine's words,
    never a raw '[Errno 21] Is a directory'."""
    errors = []
    window.data_panel.errorOccurred.connect(lambda title, msg: errors.append((title, msg)))
    folder = tmp_path / "notes"
    folder.mkdir()
    assert not window.data_panel.load_dropped(str(folder))
    assert errors and "Errno" not in errors[-1][1] and "folder" in errors[-1][1].lower()
