"""Continue in the studio follows the engine's one rule (engine.training.session.check_continuation, as
`llm-studio train --continue` applies it): more tuning after tuning began, more pretraining before,
a pretraining-only run, a run stopped mid-stage."""

import itertools
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from tests.helpers import metrics, metrics_steps  # noqa: E402
from tests.studio_helpers import configure, open_model, train  # noqa: E402

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.errors import ConfigError  # noqa: E402
from opencl_llm_studio.engine.training.session import TrainingSession, check_continuation # noqa: E402
from opencl_llm_studio.studio.protocol import ContinuePoint, Outcome  # noqa: E402


def allowed(*args, **kw) -> bool:
    try:
        check_continuation(*args, **kw)
        return True
    except ConfigError:
        return False


# (step, pretrain_steps, tune_steps, has_tune, new_pretrain, new_tune, allowed)
CASES = [
    (900, 600, 300, True, 600, 400, True),    # the issue: more tuning after tuning
    (900, 600, 300, True, 900, 300, False),   # pretraining is over once tuning began
    (900, 600, 300, True, 600, 250, False),   # fewer than done
    (600, 600, 300, True, 800, 300, True),    # pretraining ended, tuning not begun: grow it
    (300, 600, 300, True, 800, 500, True),    # stopped mid-pretraining
    (300, 600, 300, True, 299, 300, False),   # below the steps done
    (700, 600, 300, True, 600, 300, True),    # stopped mid-tuning, same totals: finish it
    (600, 600, 0, False, 900, 0, True),       # pretraining only
    (600, 600, 0, False, 600, 200, False),    # no dialogues: no tuning stage to add
    (600, 600, 200, False, 900, 200, True),   # (tune_steps kept as it was: ignored)
]


@pytest.mark.parametrize("case", CASES)
def test_the_continuation_rule(case):
    *args, expected = case
    assert allowed(*args) == expected
    if expected:  # nothing left to do: allowed for continue_training, not the studio's Continue
        step, pre, tune, has_tune, new_pre, new_tune = args
        total = new_pre + (new_tune if has_tune else 0)
        assert allowed(*args, require_more=True) == (total > step)


def test_the_rule_messages_say_what_to_do():
    with pytest.raises(ConfigError) as e:
        check_continuation(900, 600, 300, True, 900, 300)
    assert "keep pretraining steps at 600" in str(e.value)
    assert "Raise the tuning steps" in e.value.hint
    with pytest.raises(ConfigError) as e:
        check_continuation(900, 600, 300, True, 600, 300, require_more=True)
    assert "900" in str(e.value) and "tuning" in e.value.hint


@pytest.mark.parametrize("args,hint", [
    ((900, 600, 300, True, 600, 300), "Raise the tuning steps above 300 to train further."),
    ((6, 0, 6, True, 0, 6), "Raise the tuning steps above 6 to train further."),  # an open model
    ((600, 600, 0, False, 600, 0), "Raise the pretraining steps above 600 to train further."),
    ((600, 600, 0, True, 600, 0),
     "Raise the pretraining steps above 600 or the tuning steps above 0 to train further."),
])
def test_a_finished_run_is_told_which_totals_to_raise(args, hint):
    """The hint names only a stage that can still grow, with its total (was "Raise the
    pretraining or tuning steps above that": pretraining cannot grow once tuning began, and
    "that" was the run's step, not a stage's total). Seen on an opened open model tuned 6 steps."""
    with pytest.raises(ConfigError) as e:
        check_continuation(*args, require_more=True)
    assert e.value.hint == hint


def test_continue_training_uses_the_rule(rt):
    mc = ModelConfig(d_model=16, n_layer=1, n_head=2, context_length=32, vocab_size=259)
    s = TrainingSession(rt, mc, TrainConfig(pretrain_steps=6, tune_steps=3),
                        _tiny_tokenizer(), "Cats sleep a lot.\n\nDogs bark at night.\n" * 20,
                        "User: Hi?\nAssistant: Hello.\n\nUser: Cats?\nAssistant: Sleep.\n")
    s.step = 9
    s.continue_training(tune_steps=5)
    assert s.total_steps == 11
    with pytest.raises(ConfigError, match="already tuning"):
        s.continue_training(pretrain_steps=9)
    with pytest.warns(DeprecationWarning, match="continue_training"):
        s.extend(tune_steps=6)  # the old name still works
    assert s.total_steps == 12


def set_steps(win, pretrain: int, tune: int) -> None:
    win.settings_panel.set_value("pretrainStepsSpin", pretrain)
    win.settings_panel.set_value("tuneStepsSpin", tune)


def _tiny_tokenizer():
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer
    return Tokenizer.train(["Cats sleep a lot. Dogs bark at night. User: Assistant:"], 259,
                           "char")


def test_studio_hint_and_train_button_follow_the_engine_rule(window):
    """Every combination the engine allows (with something left to train) enables Continue;
    every one it refuses disables it and shows the engine's reason."""
    for step, has_tune in ((900, True), (600, True), (300, True), (600, False)):
        window.controller.continue_from = ContinuePoint(step, 600, 300 if has_tune else 0,
                                                        has_tune)
        window.update_actions()  # the spins that stay editable follow has_tune
        for new_pre, new_tune in itertools.product((300, 600, 900), (0, 300, 400)):
            if not has_tune and new_tune:
                continue  # the Tuning spin is disabled for such a run
            set_steps(window, new_pre, new_tune)
            ok = allowed(step, 600, 300 if has_tune else 0, has_tune, new_pre, new_tune,
                         require_more=True)
            case = (step, has_tune, new_pre, new_tune, window.run_bar.hint.text())
            assert window.run_bar.train_button.isEnabled() == ok, case
            assert (window.run_bar.hint.text() == "") == ok, case


def test_continue_after_tuning_trains_to_the_new_total(qtbot, window):
    """The issue's case, small: a run that finished tuning (20 + 10 steps) is opened, its tuning
    steps raised to 20, and Continue trains it to step 40 without touching pretraining."""
    configure(window, pretrainStepsSpin=20, tuneStepsSpin=10, sampleIntervalSpin=0)
    first = train(qtbot, window)
    assert first.outcome is Outcome.FINISHED and first.step == 30
    info = open_model(qtbot, window, first.run_dir)
    assert info.step == 30 and info.has_tune
    assert window.run_bar.train_button.text().endswith("Continue")

    set_steps(window, 20, 20)
    assert window.run_bar.train_button.isEnabled(), window.run_bar.hint.text()
    assert window.run_bar.hint.text() == ""
    second = train(qtbot, window)
    assert second.outcome is Outcome.FINISHED and second.step == 40
    tc = second.train_config
    assert (tc.pretrain_steps, tc.tune_steps) == (20, 20)
    assert metrics_steps(Path(second.run_dir)) == list(range(1, 41))

    # growing pretraining now is refused, with the engine's reason, and Continue is disabled
    set_steps(window, 40, 20)
    assert not window.run_bar.train_button.isEnabled()
    assert "keep pretraining steps at 20" in window.run_bar.hint.text()


def test_opened_model_shows_its_own_run_folder_not_the_last_run(qtbot, window, tmp_path):
    """After a run, opening a GGUF left "Autosave: <that run> · checkpoint at step N" with Open
    folder / Copy path pointing at a run the GGUF is not; opening a run folder names that one."""
    configure(window, pretrainStepsSpin=10, tuneStepsSpin=0, sampleIntervalSpin=0)
    first = train(qtbot, window)
    rb = window.run_bar
    assert rb.run_dir == Path(first.run_dir) and rb.folder_label.isVisible()
    gguf = tmp_path / "m.gguf"
    with qtbot.waitSignal(window.exportFinished, timeout=60_000):
        window.files.export_to(gguf, "f32")
    second = train(qtbot, window)
    open_model(qtbot, window, gguf)
    assert rb.run_dir is None
    assert not rb.folder_label.isVisible() and not rb.open_folder_button.isVisible()
    # a GGUF has weights, no curves: the plots say so instead of standing empty
    assert "no training curves" in window.plots.summary.full_text()
    open_model(qtbot, window, first.run_dir)
    assert rb.run_dir == Path(first.run_dir) != Path(second.run_dir)
    assert rb.folder_label.isVisible()
    assert rb.folder_label.text().startswith("Opened: ")
    assert "step 10" in rb.folder_label.text()


def test_a_run_without_dialogues_is_continued_into_tuning_on_the_open_tune_file(qtbot, window,
                                                                              tmp_path):
    """A pretraining-only run (or a model imported without dialogues) opened in the studio:
    its Tuning steps and the tune file's Open button stay usable, and Continue with tuning
    steps tunes on the open dialogue file, which the checkpoint then keeps (was: the Tuning
    spin was disabled and the only way was a new model). The pretraining text's slot stays
    fixed."""
    import numpy as np
    configure(window, pretrainStepsSpin=6, tuneStepsSpin=0, sampleIntervalSpin=0)
    first = train(qtbot, window)
    assert first.outcome is Outcome.FINISHED and first.step == 6
    dialogues = tmp_path / "d.txt"
    dialogues.write_text("User: Where is Vell?\nAssistant: In the north sea.\n" * 3)
    info = open_model(qtbot, window, first.run_dir)
    assert not info.has_tune
    dp = window.data_panel
    assert dp.tune.button.isEnabled() and not dp.pretrain.button.isEnabled()
    assert window.settings_panel.spins["tuneStepsSpin"].isEnabled()
    assert dp.load("tune", dialogues)
    set_steps(window, 6, 4)
    assert window.run_bar.train_button.isEnabled(), window.run_bar.hint.text()
    second = train(qtbot, window)
    assert second.outcome is Outcome.FINISHED and second.step == 10, second
    ck = np.load(Path(second.run_dir) / "checkpoint.npz")
    assert bytes(ck["tune_text"]).decode() == dialogues.read_text()
    stages = [r["stage"] for r in metrics(Path(second.run_dir))]
    assert stages == ["pretrain"] * 6 + ["tune"] * 4


def test_continue_takes_the_batch_size_and_learning_rate_on_screen(qtbot, window):
    """The batch size field was greyed out for an opened run ("a continued run keeps its
    settings"), so an imported model tuned at batch 16: Continue now takes the batch size and
    learning rate in the fields, and keeps the model's shape."""
    from opencl_llm_studio.engine.training.opening import load_session
    configure(window, pretrainStepsSpin=6, tuneStepsSpin=0, sampleIntervalSpin=0,
              batchSizeSpin=4)
    first = train(qtbot, window)
    open_model(qtbot, window, first.run_dir)
    sp = window.settings_panel
    assert sp.spins["batchSizeSpin"].isEnabled() and not sp.spins["dModelSpin"].isEnabled()
    sp.set_value("pretrainStepsSpin", 8)
    sp.set_value("batchSizeSpin", 2)
    sp.set_value("learningRateSpin", 0.001)
    window.run_bar.as_new_run_check.setChecked(False)
    result = train(qtbot, window)
    assert result.step == 8
    s = load_session(first.run_dir)
    assert (s.train_config.batch_size, s.train_config.learning_rate) == (2, 0.001)
