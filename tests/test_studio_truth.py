"""What is shown is true (issue 22), pytest-qt offscreen: an opened GGUF shows the step and step
totals its model reached; a model change clears the chat (and says so) instead of sending the
last model's turns as context; the recall line names what it measures; a preset does not warn
about its own warmup; a preset's values without a field survive a restart; Continue in place and
Continue as a new run behave as `train --continue` and `train --continue-from` do."""

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")
from PySide6.QtCore import QSettings  # noqa: E402

from tests.helpers import TINY, metrics, metrics_steps  # noqa: E402
from tests.studio_helpers import configure, open_model, train  # noqa: E402

from opencl_llm_studio.studio.cli import main  # noqa: E402
from opencl_llm_studio.studio.protocol import ChatRequest, Outcome  # noqa: E402
from opencl_llm_studio.studio.run_folder import recall_text  # noqa: E402
from opencl_llm_studio.studio.runs import read_header  # noqa: E402
from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel  # noqa: E402


def saved_step(folder) -> int:
    return read_header(folder)["step"]


def test_an_opened_gguf_shows_how_far_its_model_was_trained(qtbot, window, tmp_path, rt):
    """File > Open exported GGUF said "GGUF opened at step 0" and the plan showed whatever the
    fields held, for a model trained 30 steps (20 + 10): now its metadata's steps_done,
    pretrain_steps and tune_steps."""
    from opencl_llm_studio.engine.training.opening import load_session
    configure(window, pretrainStepsSpin=20, tuneStepsSpin=10, sampleIntervalSpin=0)
    first = train(qtbot, window)
    gguf = tmp_path / "model.gguf"
    load_session(first.run_dir, runtime=rt).export_gguf(gguf)
    configure(window, pretrainStepsSpin=600, tuneStepsSpin=300)   # other values in the fields
    info = open_model(qtbot, window, gguf)
    assert info.step == 30
    assert (info.train_config.pretrain_steps, info.train_config.tune_steps) == (20, 10)
    assert window.run_bar.progress.format() == "GGUF opened at step 30"
    assert window.settings_panel.spins["pretrainStepsSpin"].value() == 20
    assert window.settings_panel.spins["tuneStepsSpin"].value() == 10
    assert "30 steps (20 pretraining + 10 tuning)" in window.plots.summary.full_text()


def test_a_model_change_clears_the_chat_and_says_so(qtbot, window):
    """The previous model's chat stayed and was sent to the next model as context."""
    from opencl_llm_studio.studio.ui.panels.chat_panel import CLEARED_NOTE
    configure(window, pretrainStepsSpin=4, tuneStepsSpin=2, sampleIntervalSpin=0)
    first = train(qtbot, window)
    chat = window.chat_panel
    sent = []
    chat.sendRequested.connect(lambda messages, knobs: sent.append(messages))
    chat.messages[:] = [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello"}]   # a chat with model one
    open_model(qtbot, window, first.run_dir)
    assert chat.messages == []
    assert CLEARED_NOTE in chat.view.toPlainText()
    assert CLEARED_NOTE in window.run_bar.note.text()
    chat.input.setText("Who are you?")
    with qtbot.waitSignal(window.chatFinished, timeout=60_000):
        chat.send_button.click()
    assert [m["content"] for m in sent[-1]] == ["Who are you?"]
    assert len(ChatRequest.from_panel(sent[-1], chat.knobs()).messages) == 1

    chat.messages[:] = [{"role": "user", "content": "Hi"}]
    window.training.new_model()                      # a new model from scratch: cleared too
    train(qtbot, window)
    assert chat.messages == [] and CLEARED_NOTE in chat.view.toPlainText()


def test_the_recall_line_names_what_it_measures():
    """"Fact recall after pretraining: 0/64" on Shakespeare, a text with no facts: the check
    is whether training documents are continued word for word, on any text."""
    pre = recall_text({"stage": "pretrain", "facts": {"correct": 0, "total": 64}})
    tune = recall_text({"stage": "tune", "facts": {"correct": 3, "total": 4},
                        "answers": {"correct": 1, "total": 2}})
    assert pre == "Text recall after pretraining: 0/64 documents (0%)"
    assert tune == "Recall after tuning: text 3/4 documents (75%), answers 1/2 (50%)"
    assert "fact" not in (pre + tune).lower()


def test_a_preset_does_not_warn_about_its_own_warmup(qtbot):
    sp = SettingsPanel()
    qtbot.addWidget(sp)
    sp.show()
    sp.set_value("tuneStepsSpin", 150)      # a tuning stage too short for the preset's 50
    sp.apply_preset("cpu")
    assert sp.train_config().warmup_note() is not None   # the engine does cap it ...
    assert not sp.warmup_note.isVisible()                # ... as the preset was measured
    sp.set_value("warmupSpin", 60)          # the person's own value: said
    assert sp.preset_combo.currentData() == ""
    assert sp.warmup_note.isVisible() and "not 60" in sp.warmup_note.text()


def test_a_presets_values_without_a_field_survive_a_restart(qtbot, tmp_path):
    """beta2 and min_lr_ratio of the CPU preset stayed in use after an edit turned the box to
    "Custom" but were not saved: after a restart the same screen trained differently."""
    s = QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat)
    sp = SettingsPanel()
    qtbot.addWidget(sp)
    sp.apply_preset("cpu")
    sp.set_value("batchSizeSpin", 16)       # an edit: "Custom"
    assert sp.preset_combo.currentData() == ""
    before = sp.train_config()
    assert (before.beta2, before.min_lr_ratio) == (0.99, 0.1)
    assert "beta2 0.99" in sp.extra_label.text() and "min_lr_ratio 0.1" in sp.extra_label.text()
    sp.save(s)
    s.sync()
    again = SettingsPanel()
    qtbot.addWidget(again)
    again.restore(QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    assert again.train_config() == before
    assert again.extra_label.text() == sp.extra_label.text()
    s.setValue("settings/extra", "{not json")   # a damaged entry: the defaults, no error
    again.restore(s)


def test_continue_in_place_and_as_a_new_run(qtbot, window):
    """Runs > Continue trained into a new folder while `train --continue` trains in place;
    now both are there by name, and in place is what Continue does unless told."""
    configure(window, pretrainStepsSpin=6, tuneStepsSpin=2, sampleIntervalSpin=0)
    first = Path(train(qtbot, window).run_dir)
    root = first.parent
    open_model(qtbot, window, first)
    check = window.run_bar.as_new_run_check
    assert check.isVisible() and check.isEnabled() and not check.isChecked()
    window.settings_panel.set_value("tuneStepsSpin", 4)
    second = train(qtbot, window)                       # in place
    assert second.outcome is Outcome.FINISHED and Path(second.run_dir) == first
    assert sorted(root.iterdir()) == [first]
    assert saved_step(first) == 10 and metrics_steps(first) == list(range(1, 11))

    check.setChecked(True)                              # as a new run
    window.settings_panel.set_value("tuneStepsSpin", 6)
    third = Path(train(qtbot, window).run_dir)
    assert third != first and third.parent == root
    assert saved_step(first) == 10                      # the run it came from stays
    assert saved_step(third) == 12 and metrics_steps(third) == list(range(1, 13))


def test_a_gguf_continues_only_as_a_new_run(qtbot, window, tmp_path, rt):
    from opencl_llm_studio.engine.training.opening import load_session
    configure(window, pretrainStepsSpin=4, tuneStepsSpin=2, sampleIntervalSpin=0)
    first = train(qtbot, window)
    gguf = tmp_path / "m.gguf"
    load_session(first.run_dir, runtime=rt).export_gguf(gguf)
    open_model(qtbot, window, gguf)
    check = window.run_bar.as_new_run_check
    assert check.isVisible() and check.isChecked() and not check.isEnabled()
    assert "no run folder" in check.toolTip()


def test_cli_continue_from_trains_a_new_run(tmp_path, capsys):
    """`--continue` trains the run in --out in place; `--continue-from RUN --out NEW` is the
    studio's Continue as a new run: NEW starts with RUN's history, RUN stays as it is."""
    old, new = tmp_path / "old", tmp_path / "new"
    assert main(["train", "--out", str(old), "--steps", "6", "--no-tune", *TINY]) == 0
    # the stage-end recall is printed, as the studio shows it (the CLI printed none)
    assert "step 6: Text recall after pretraining: " in capsys.readouterr().err
    before = (old / "metrics.jsonl").read_text()
    assert main(["train", "--out", str(new), "--continue-from", str(old), "--steps", "9",
                 "--quiet"]) == 0
    assert (old / "metrics.jsonl").read_text() == before and saved_step(old) == 6
    assert saved_step(new) == 9
    assert [r["step"] for r in metrics(new)] == list(range(1, 10))
    losses = [(r["step"], r["loss"]) for r in metrics(old)]
    assert [(r["step"], r["loss"]) for r in metrics(new)][:6] == losses
    # into a folder that holds a run: refused, naming --continue
    assert main(["train", "--out", str(old), "--continue-from", str(new), "--steps", "12",
                 "--quiet"]) == 2
    assert "--continue" in capsys.readouterr().err and saved_step(old) == 6
