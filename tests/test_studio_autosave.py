"""The studio's run folders (pytest-qt, offscreen): autosave every N steps and at the end,
metrics.jsonl, stage-end recall in the samples pane, Continue after opening a checkpoint or an
exported GGUF, and training errors shown without closing the app or losing the checkpoint."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtGui import QGuiApplication  # noqa: E402

from tests.helpers import TEST_DEVICE, metrics_steps  # noqa: E402
from tests.studio_helpers import (assert_answered, chat, configure, curve_x,  # noqa: E402
                                  open_model, run_folders, train)

from opencl_llm_studio.engine.errors import CheckpointError, DeviceError, TrainingDiverged  # noqa: E402
from opencl_llm_studio.engine.training.session import TrainingSession # noqa: E402
from opencl_llm_studio.engine.training.opening import load_session
from opencl_llm_studio.engine.training.trainer import Trainer  # noqa: E402
from opencl_llm_studio.studio.protocol import ModelSource, Outcome, RunState  # noqa: E402


def test_every_run_autosaves_into_its_run_folder(qtbot, window, rt):
    configure(window, pretrainStepsSpin=20, tuneStepsSpin=10, sampleIntervalSpin=10)
    window.autosave_box.every_spin.setValue(7)
    saves = []
    window.controller.host.worker.autosaved.connect(lambda folder, step: saves.append(step))
    result = train(qtbot, window)
    assert result.outcome is Outcome.FINISHED and result.step == 30 and result.saved_step == 30
    assert saves == [7, 14, 21, 28, 30]
    [folder] = run_folders(window)
    assert Path(result.run_dir) == folder and folder.parent == window.autosave_box.runs_root()
    assert metrics_steps(folder) == list(range(1, 31))     # one line per step, like the CLI
    assert not list(folder.glob("*.tmp"))
    session = load_session(folder, runtime=rt)
    assert session.step == 30 and len(session.history) == 30

    label = window.findChild(type(window.run_bar.folder_label), "runFolderLabel")
    assert label.isVisible() and str(folder) in label.toolTip()
    assert folder.name in label.full_text() and "step 30" in label.full_text()
    window.run_bar.copy_path_button.click()
    assert QGuiApplication.clipboard().text() == str(folder)

    # Stage-end recall: in the samples stream and in the line above it.
    recall = window.samples_panel.recall_label.text()
    assert "Text recall after pretraining (step 20): " in recall and "/32 documents (" in recall
    assert "Recall after tuning (step 30): text" in recall and "answers" in recall
    assert "Text recall after pretraining:" in window.samples_panel.text()

    # A second run gets a folder of its own.
    result = train(qtbot, window)
    assert len(run_folders(window)) == 2 and Path(result.run_dir) != folder


def test_open_checkpoint_refills_plots_and_continues(qtbot, window, rt):
    configure(window, pretrainStepsSpin=20, tuneStepsSpin=0, sampleIntervalSpin=0)
    first = train(qtbot, window)
    window.training.new_model()  # no-op: a run trained here is not in continue mode
    window.plots.start_run(1, 1, 0, 512, 1.0)  # forget the curves: they must come back
    info = open_model(qtbot, window, first.run_dir)
    assert info.step == 20 and window.run_bar.train_button.text().endswith("Continue")
    assert list(curve_x(window, "lossPlot", "train loss")) == list(range(1, 21))
    assert "Text recall after pretraining" in window.samples_panel.recall_label.text()
    assert not window.run_bar.train_button.isEnabled()       # 20 of 20 steps done
    assert "raise the pretraining steps" in window.run_bar.hint.text().lower()
    assert window.run_bar.hint.property("role") == "muted"   # the next step, not an error (red)
    assert not window.settings_panel.spins["dModelSpin"].isEnabled()  # the model is fixed
    window.settings_panel.set_value("pretrainStepsSpin", 32)
    window.run_bar.as_new_run_check.setChecked(True)   # Continue as a new run (not in place)
    result = train(qtbot, window)
    assert result.outcome is Outcome.FINISHED and result.step == 32
    window.plots.redraw()
    assert list(curve_x(window, "lossPlot", "train loss")) == list(range(1, 33))
    folder = Path(result.run_dir)
    assert folder != Path(first.run_dir) and metrics_steps(folder) == list(range(1, 33))
    assert load_session(folder, runtime=rt).step == 32
    assert load_session(first.run_dir, runtime=rt).step == 20  # left as it was
    window.run_bar.new_button.click()
    assert window.run_bar.train_button.text().endswith("Train")
    assert window.settings_panel.spins["dModelSpin"].isEnabled()


def test_open_exported_gguf_and_continue(qtbot, window, tmp_path, rt):
    configure(window, pretrainStepsSpin=10, tuneStepsSpin=0, sampleIntervalSpin=0)
    train(qtbot, window)
    path = tmp_path / "tiny.gguf"
    with qtbot.waitSignal(window.exportFinished, timeout=60_000):
        window.files.export_to(path, "f32")
    info = open_model(qtbot, window, path)
    assert info.source is ModelSource.GGUF and info.step == 10   # its metadata's steps_done
    window.settings_panel.set_value("pretrainStepsSpin", 16)
    result = train(qtbot, window)
    assert result.outcome is Outcome.FINISHED and result.step == 16
    assert load_session(result.run_dir, runtime=rt).step == 16


def failing_at(step, exc, restore=False):
    """A Trainer.run that raises `exc` once `step` is reached (TrainingDiverged: after
    restoring the last good state, as the engine does)."""
    original = Trainer.run

    def run_(self):
        for m in original(self):
            if m.step == step:
                if restore:
                    self._restore()
                raise exc
            yield m
    return run_


@pytest.mark.parametrize("kind", ["diverged", "device"])
def test_training_errors_are_shown_and_the_checkpoint_stays(qtbot, window, monkeypatch, rt,
                                                            kind):
    if kind == "diverged":
        exc = TrainingDiverged("The loss was NaN for 3 steps in a row.",
                               "Lower the learning rate (e.g. by 3x) and train again.")
    else:
        exc = DeviceError("The OpenCL device failed during step 9.", "Use a smaller batch.")
    monkeypatch.setattr(Trainer, "run", failing_at(9, exc, kind == "diverged"))
    configure(window, pretrainStepsSpin=30, tuneStepsSpin=0, sampleIntervalSpin=0,
              evalIntervalSpin=5)
    window.autosave_box.every_spin.setValue(4)
    result = train(qtbot, window)
    assert result.outcome is Outcome.FAILED and window.controller.state is RunState.IDLE
    title, message = window.last_error
    assert exc.hint in message and str(exc) in message and result.run_dir in message
    assert title == ("Training diverged" if kind == "diverged" else "The OpenCL device failed")
    # Diverged: the restored state (step 5, the last validation) is saved; device failure: the
    # checkpoint of step 8 is kept, not overwritten with what the failed device holds.
    expected = 5 if kind == "diverged" else 8
    assert result.saved_step == expected
    session = load_session(result.run_dir, runtime=rt)
    assert session.step == expected
    if kind == "diverged":
        assert metrics_steps(Path(result.run_dir)) == list(range(1, 6))
    monkeypatch.undo()
    configure(window, pretrainStepsSpin=5)
    assert train(qtbot, window).outcome is Outcome.FINISHED  # the app keeps working


def test_autosave_failure_is_reported_once_and_training_goes_on(qtbot, window, monkeypatch):
    def broken(self, path):
        raise CheckpointError(f"Could not write the checkpoint {path}: No space left on device.",
                              "Free disk space.")
    monkeypatch.setattr(TrainingSession, "save", broken)
    shown = []
    window.errorShown.connect(lambda title, message: shown.append(title))
    configure(window, pretrainStepsSpin=12, tuneStepsSpin=0, sampleIntervalSpin=0)
    window.autosave_box.every_spin.setValue(3)
    result = train(qtbot, window)
    assert result.outcome is Outcome.FINISHED and result.step == 12 and result.saved_step is None
    assert shown == ["Autosave failed"]
    assert "No space left" in window.last_error[1] and "Training goes on" in window.last_error[1]


def test_closing_while_paused_saves_the_run(qtbot, settings, rt):
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(device=TEST_DEVICE, settings=settings)
    qtbot.addWidget(win)
    win.show()
    configure(win, pretrainStepsSpin=5000, tuneStepsSpin=0, sampleIntervalSpin=0)
    win.autosave_box.every_spin.setValue(0)  # only pause / stop / end / close save
    win.run_bar.train_button.click()
    qtbot.waitUntil(lambda: win.plots.point_count() >= 3, timeout=60_000)
    win.run_bar.pause_button.click()
    qtbot.waitUntil(lambda: win.controller.state is RunState.PAUSED, timeout=30_000)
    win.run_bar.pause_button.click()  # resume, train a little more, then close
    qtbot.waitUntil(lambda: win.plots.point_count() >= 8, timeout=60_000)
    win.close()
    assert not win.controller.host.thread.isRunning()
    [folder] = run_folders(win)
    session = load_session(folder, runtime=rt)
    assert session.step >= 8 and metrics_steps(folder) == list(range(1, session.step + 1))


def test_stop_just_after_the_run_ended_does_not_cancel_the_next_chat(qtbot, window):
    configure(window, pretrainStepsSpin=4, tuneStepsSpin=0, sampleIntervalSpin=0)
    train(qtbot, window)
    # the chat is queued on the worker's thread behind the stop: once it is answered, the
    # stop was handled; it ended nothing (no second trainingFinished) and cancelled no chat
    with qtbot.assertNotEmitted(window.trainingFinished):
        window.controller.host.stop()  # what a Stop click racing the end of the run sends
        answer = chat(qtbot, window, "Hello")
    assert window.controller.state is RunState.IDLE
    assert_answered(window, answer)
