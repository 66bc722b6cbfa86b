"""Small things a new user hits (pytest-qt, offscreen): the runs folder names the app once; no
menu action or button is enabled where it cannot act; Open checkpoint takes the file itself
(checkpoint.npz, checkpoint.prev.npz, .gguf) as well as the run folder; the settings column and
the planned-run line fit 1280 x 800 and 1366 x 768; a shortened warmup is said, not hidden."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtCore import QCoreApplication  # noqa: E402
from PySide6.QtWidgets import QFileDialog  # noqa: E402

from tests.studio_helpers import configure, settle, train  # noqa: E402

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.training.schedule import lr_at  # noqa: E402
from opencl_llm_studio.studio.protocol import ContinuePoint, ModelSource, RunState  # noqa: E402


def menu_action(win, text):
    return next(a for a in win.menuBar().actions()[0].menu().actions()
                if a.text().startswith(text))


def test_runs_folder_names_the_app_once(qapp):
    from opencl_llm_studio.studio.ui.app import configure_application
    from opencl_llm_studio.studio.app_settings import APP_NAME, default_runs_root
    names = (QCoreApplication.organizationName(), QCoreApplication.applicationName())
    try:
        configure_application(qapp)
        root = default_runs_root()
        assert root.parts.count(APP_NAME) == 1 and root.name == "runs", root
    finally:
        QCoreApplication.setOrganizationName(names[0])
        QCoreApplication.setApplicationName(names[1])


def test_the_runs_command_lists_the_folder_the_studio_writes(qapp, tmp_path, monkeypatch):
    """`llm-studio runs` (studio.cli.runs.default_root) and the window's Autosave box agree on
    the runs folder, by default and once the user chose another one; they read one settings
    file (studio.app_settings): the window through QSettings, the command without Qt. The
    command used to look in <data>/APP/APP/runs and another settings file, so it listed
    nothing the studio had written. A chosen folder with a comma, quotes and non-ASCII letters
    reads back as written."""
    from opencl_llm_studio.studio import app_settings
    from opencl_llm_studio.studio.ui.app import configure_application
    from opencl_llm_studio.studio.cli.runs import default_root
    from opencl_llm_studio.studio.ui.panels.autosave_box import AutosaveBox
    monkeypatch.setattr(app_settings, "settings_path", lambda: tmp_path / "studio.conf")
    from opencl_llm_studio.studio.ui.window.settings_store import open_settings
    store = open_settings()
    names = (QCoreApplication.organizationName(), QCoreApplication.applicationName())
    try:
        configure_application(qapp)              # as the studio names itself
        box = AutosaveBox()
        assert default_root() == box.runs_root() == app_settings.default_runs_root()
        chosen = tmp_path / 'my runs, "best" \u00fcber'
        box.set_runs_root(str(chosen))
        box.save(store)                          # what the window does when it closes
        store.sync()
        assert default_root() == chosen
    finally:
        QCoreApplication.setOrganizationName(names[0])
        QCoreApplication.setApplicationName(names[1])


def test_no_action_is_enabled_where_it_cannot_act(qtbot, window):
    export, save = menu_action(window, "Export GGUF"), menu_action(window, "Save checkpoint")
    texts = [menu_action(window, t) for t in ("Open pretraining", "Open tune")]
    opens = [menu_action(window, t) for t in ("Open checkpoint", "Open exported")]
    new = menu_action(window, "New model")
    # no model yet: nothing to export, save or forget
    assert not export.isEnabled() and not save.isEnabled() and not new.isEnabled()
    assert not window.run_bar.export_button.isEnabled()
    assert all(a.isEnabled() for a in texts + opens)
    # an opened model keeps its texts: no menu action (or drop) replaces them
    window.controller.continue_from = ContinuePoint(30, 20, 10, has_tune=True)
    window.update_actions()
    assert not any(a.isEnabled() for a in texts) and new.isEnabled()
    assert not window.data_panel.pretrain.button.isEnabled()
    before = window.data_panel.pretrain_text
    other = Path(window.autosave_box.runs_root()).parent / "other.txt"
    other.write_text("Owls hunt at night.\n\nBees make honey.\n", encoding="utf-8")
    window.dropEvent(_Drop([other]))
    assert window.data_panel.pretrain_text == before
    # while training nothing that needs the worker or changes the run is enabled
    window.controller.continue_from = None
    window.controller.has_model = True
    window.controller._set_state(RunState.RUNNING)
    assert not any(a.isEnabled() for a in texts + opens + [export, save, new])
    assert not window.run_bar.export_button.isEnabled()
    window.controller._set_state(RunState.PAUSED)  # export and save act on the current weights
    assert export.isEnabled() and save.isEnabled()
    assert not any(a.isEnabled() for a in texts + opens)
    window.controller._set_state(RunState.IDLE)


class _Drop:
    """What dropEvent reads of a QDropEvent."""

    def __init__(self, paths):
        from PySide6.QtCore import QMimeData, QUrl
        self._mime = QMimeData()
        self._mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])

    def mimeData(self):
        return self._mime

    def acceptProposedAction(self):
        pass


def test_export_dialog_needs_a_file_name(qtbot, tmp_path):
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog
    dialog = ExportDialog(ModelConfig(), tmp_path / "model.gguf")
    qtbot.addWidget(dialog)
    assert dialog.export_button.isEnabled()
    for text, why in (("", "Give the file to write."), ("   ", "Give the file to write."),
                      (str(tmp_path), "is a folder: add a file name such as model.gguf.")):
        dialog.path_edit.setText(text)
        assert not dialog.export_button.isEnabled(), text
        assert dialog.export_button.toolTip().endswith(why), dialog.export_button.toolTip()
    dialog.path_edit.setText(str(tmp_path / "other.gguf"))
    assert dialog.export_button.isEnabled()


def test_open_checkpoint_takes_the_file_itself(qtbot, window, monkeypatch, tmp_path, rt):
    configure(window, pretrainStepsSpin=20, tuneStepsSpin=10, sampleIntervalSpin=0)
    window.autosave_box.every_spin.setValue(7)
    result = train(qtbot, window)
    folder = Path(result.run_dir)
    assert (folder / "checkpoint.prev.npz").exists()
    from opencl_llm_studio.engine.training.opening import load_session
    gguf = tmp_path / "tiny.gguf"
    load_session(folder, runtime=rt).export_gguf(gguf)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: "")
    for chosen, step, source in ((folder / "checkpoint.npz", 30, ModelSource.CHECKPOINT),
                                 (folder / "checkpoint.prev.npz", 28, ModelSource.CHECKPOINT),
                                 (gguf, 30, ModelSource.GGUF)):   # its steps_done
        monkeypatch.setattr(QFileDialog, "getOpenFileName",
                            lambda *a, chosen=chosen, **k: (str(chosen), ""))
        with qtbot.waitSignal(window.modelOpened, timeout=60_000) as blocker:
            menu_action(window, "Open checkpoint").trigger()
        assert (blocker.args[0].step, blocker.args[0].source) == (step, source), chosen
    with qtbot.waitSignal(window.modelOpened, timeout=60_000) as blocker:  # dropped too
        window.dropEvent(_Drop([folder / "checkpoint.prev.npz"]))
    assert blocker.args[0].step == 28


@pytest.mark.parametrize("size", [(1280, 800), (1366, 768)])
def test_settings_and_planned_run_fit_a_laptop_screen(qtbot, settings, size):
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.resize(*size)  # as a window manager sizes it on that screen, before it is shown
    win.show()
    qtbot.waitExposed(win)
    settle()
    column = win.centralWidget().widget(0)
    assert column.verticalScrollBar().maximum() == 0, "the settings column scrolls"
    summary = win.plots.summary
    assert summary.full_text().startswith("Planned run")
    assert summary.text() == summary.full_text(), summary.text()  # not cut short with "…"


def test_a_shortened_warmup_is_said(window):
    sp = window.settings_panel
    note = sp.findChild(type(sp.estimate_label), "warmupNote")
    assert note is not None and not note.isVisibleTo(window)  # the defaults are not shortened
    for name, value in dict(pretrainStepsSpin=100, tuneStepsSpin=50, warmupSpin=30).items():
        sp.set_value(name, value)
    assert note.isVisibleTo(window)
    assert "20 steps in pretraining and 10 steps in tuning" in note.text()
    assert "not 30" in note.text()
    tc = sp.train_config()  # what the note says is what the schedule does
    assert lr_at(tc, 19, 0, 100, 1.0) == 1.0 and lr_at(tc, 18, 0, 100, 1.0) < 1.0
    sp.set_value("tuneStepsSpin", 0)
    assert "in tuning" not in note.text()
    sp.set_value("pretrainStepsSpin", 600)
    assert not note.isVisibleTo(window)


def test_the_planned_run_never_shows_settings_no_longer_on_screen(window):
    """An invalid setting while the steps change: the planned run said "800 steps (600
    pretraining + 200 tuning)" (the last valid settings) beside fields of 20 and 10 steps."""
    configure(window, dModelSpin=100, nHeadSpin=3, pretrainStepsSpin=20, tuneStepsSpin=10)
    settle()
    assert window.plots.summary.text() == "Planned run: fix the setting marked in red."
    window.settings_panel.set_value("dModelSpin", 96)
    settle()
    assert window.plots.summary.text() == "Planned run: 30 steps (20 pretraining + 10 tuning)"


def test_warmup_note_in_the_engine():
    assert TrainConfig().warmup_note() is None
    assert TrainConfig(pretrain_steps=100, tune_steps=0).warmup_note() == (
        "Warmup: 20 steps in pretraining (at most 1/5 of a stage), not 30.")
    assert TrainConfig(pretrain_steps=600, tune_steps=50).warmup_note(tune=False) is None
    # a 5-step tuning (an opened model tuned briefly) said "Warmup: 1 steps in tuning"
    assert TrainConfig(pretrain_steps=0, tune_steps=5).warmup_note() == (
        "Warmup: 1 step in tuning (at most 1/5 of a stage), not 30.")


def test_a_continued_run_is_not_told_about_a_warmup_it_is_past():
    """`train --continue` at step 20 of 40 said "Warmup: 8 steps in pretraining ..., not 30"
    although warmup was never asked for and is long over; a warmup still ahead is named."""
    tc = TrainConfig(pretrain_steps=40, tune_steps=50)
    assert tc.warmup_note(from_step=20) == (
        "Warmup: 10 steps in tuning (at most 1/5 of a stage), not 30.")
    assert tc.warmup_note(from_step=55) is None          # tuning's warmup is over too
    assert tc.warmup_note(from_step=5) == (
        "Warmup: 8 steps in pretraining and 10 steps in tuning (at most 1/5 of a stage), not 30.")


def test_train_is_off_with_the_reason_when_bpe_needs_a_larger_vocabulary(window):
    """Vocabulary 300 on the bundled texts (54 distinct characters: BPE needs 313) left Train
    on, and pressing it failed at once with "Could not start training". The hint gives the
    engine's own minimum (Tokenizer.train accepts exactly that, refuses one less)."""
    from opencl_llm_studio.engine.errors import ConfigError
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer
    sp, rb, data = window.settings_panel, window.run_bar, window.data_panel
    texts = [data.pretrain_text, data.tune_text]
    sp.set_value("tuneStepsSpin", 10)
    sp.set_value("vocabSizeSpin", 300)
    assert not rb.train_button.isEnabled()
    hint = rb.hint.text()
    assert "too small for BPE" in hint, hint
    need = int(hint.split("use at least ")[1].split(",")[0])
    with pytest.raises(ConfigError):
        Tokenizer.train(texts, need - 1, "bpe")
    Tokenizer.train(texts, need, "bpe")
    sp.set_value("vocabSizeSpin", need)
    assert rb.train_button.isEnabled() and rb.hint.text() == ""
    sp.set_value("vocabSizeSpin", need - 1)
    sp.tokenizer_combo.setCurrentIndex(sp.tokenizer_combo.findData("char"))
    assert rb.train_button.isEnabled(), rb.hint.text()


def test_stop_before_the_first_step_says_nothing_was_trained(qtbot, window):
    """Stop while the tokenizer trains: the bar said "Stopped at step 0. Chat with the model or
    export it." (there is no model; Export is off) under "Autosave: <folder> · first checkpoint
    still to come" (the folder was removed)."""
    from pathlib import Path as P
    configure(window)
    rb = window.run_bar
    with qtbot.waitSignal(window.trainingFinished, timeout=120_000) as blocker:
        rb.train_button.click()
        planned = rb.run_dir
        rb.stop_button.click()
    result = blocker.args[0]
    assert result.run_dir is None and result.step == 0
    assert not P(planned).exists()
    assert rb.progress.format() == "Stopped before the first step"
    assert rb.note.text() == "Nothing was trained."
    assert rb.run_dir is None and not rb.folder_label.isVisible()
    assert not rb.export_button.isEnabled()


def test_open_gguf_and_open_hf_errors_name_what_was_asked_for(qtbot, window, tmp_path):
    """File › Open Hugging Face folder on a plain folder said "Could not open the checkpoint: No
    checkpoint at .../checkpoint.npz"; Open exported GGUF on a file not named .gguf said it is
    "not a readable checkpoint". Each now reports on the kind the person asked to open."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("hello")
    not_gguf = tmp_path / "model.bin"
    not_gguf.write_bytes(b"\x00\x01" * 64)
    for opener, path, title, says in (
            (window.files.open_hf, plain, "Could not open the Hugging Face folder",
             "not a transformers model folder"),
            (window.files.open_gguf, not_gguf, "Could not open the GGUF", "GGUF")):
        with qtbot.waitSignal(window.errorShown, timeout=60_000) as blocker:
            opener(str(path))
        got_title, message = blocker.args
        assert got_title == title and says in message, blocker.args
        assert "checkpoint" not in message.split("\n")[0].lower(), message
        qtbot.waitUntil(lambda: window.controller.free, timeout=10_000)


def test_inputs_that_are_off_say_why(qtbot, window):
    """The settings, data and device of an opened run were disabled with no word on why, as was
    everything while training; each now says why in its tooltip, and gets its own tooltip back
    when it is on again. A run without a tuning stage keeps its Tuning steps and the tune file
    usable: it can gain dialogues (test_studio_continue)."""
    sp, rb = window.settings_panel, window.run_bar
    d_model, tune = sp.spins["dModelSpin"], sp.spins["tuneStepsSpin"]
    own = d_model.toolTip()
    assert rb.export_button.toolTip().startswith("No model yet")
    configure(window, pretrainStepsSpin=100_000, tuneStepsSpin=0)
    rb.train_button.click()
    qtbot.waitUntil(lambda: window.controller.state is RunState.RUNNING, timeout=120_000)
    assert rb.export_button.toolTip().startswith("Training is running: pause it")
    off = [d_model, window.data_panel.pretrain.button, window.device_panel.combo,
           window.autosave_box.every_spin]
    for w in off:
        assert not w.isEnabled() and w.toolTip().startswith("Fixed while a run"), w.objectName()
    with qtbot.waitSignal(window.trainingFinished, timeout=120_000) as blocker:
        rb.stop_button.click()
    assert d_model.isEnabled() and d_model.toolTip() == own
    assert rb.export_button.isEnabled() and rb.export_button.toolTip().startswith("Write")
    with qtbot.waitSignal(window.modelOpened, timeout=60_000):
        window.files.open_checkpoint(blocker.args[0].run_dir)
    assert not d_model.isEnabled() and d_model.toolTip().startswith("The opened model fixes")
    assert d_model.toolTip().endswith(own)
    assert tune.isEnabled() and window.data_panel.tune.button.isEnabled()
    assert "opened model" in window.data_panel.pretrain.button.toolTip()
    assert sp.spins["pretrainStepsSpin"].isEnabled()


def test_pause_pressed_right_after_resume_holds_the_run(qtbot, window):
    """Paused, chatting; Resume, then Pause again before the answer ended: the worker's queued
    resume cleared the new pause request, so the run went on while the bar said "pausing…" and
    Pause stayed off until the run's end. Now the run holds again."""
    configure(window, pretrainStepsSpin=100_000, tuneStepsSpin=0)
    rb, c = window.run_bar, window.controller
    rb.train_button.click()
    qtbot.waitUntil(lambda: c.state is RunState.RUNNING, timeout=120_000)
    rb.pause_button.click()
    qtbot.waitUntil(lambda: c.state is RunState.PAUSED, timeout=60_000)
    window.chat_panel.input.setText("Tell me about Paris.")
    window.chat_panel.send_button.click()  # the worker is busy answering from here
    rb.pause_button.click()                # Resume
    assert c.state is RunState.RUNNING
    rb.pause_button.click()                # Pause, before the worker took the resume
    assert c.state is RunState.PAUSING
    qtbot.waitUntil(lambda: c.state is RunState.PAUSED, timeout=60_000)
    assert rb.pause_button.text() == "Resume" and rb.pause_button.isEnabled()
