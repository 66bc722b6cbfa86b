"""The studio's "Train for N minutes" (issue 20): the plots, the plan line and the ETA follow the
live plan of a time-budgeted run, and a pause does not shorten its training."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from opencl_llm_studio.engine.metrics import StepMetrics  # noqa: E402
from opencl_llm_studio.studio.protocol import Outcome, RunState  # noqa: E402
from opencl_llm_studio.studio.ui.panels.plots import LivePlots  # noqa: E402
from opencl_llm_studio.studio.ui.panels.run_bar import RunBar  # noqa: E402
from tests.fake_clock import fake_training_time  # noqa: E402
from tests.studio_helpers import configure  # noqa: E402


def _record(step, total, boundary, left=None):
    stage = "pretrain" if step <= boundary else "tune"
    return StepMetrics(step, total, stage, 3.0, 1.0, 1e-3, 1000.0, 0.1 * step,
                       pretrain_steps=boundary, time_left_s=left)


def test_plots_follow_the_live_plan(qtbot):
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.start_run(950, 750, 200, 512, 1.0, preview=True, time_budget_s=180.0)
    assert "3:00" in plots.summary.text() and "950" not in plots.summary.text()
    assert not plots._stage_lines          # the boundary is not known before the run
    plots.add_metrics([_record(1, 1366, 1025)])
    plots.add_metrics([_record(step, 1366, 1025) for step in range(2, 1200)])
    plots.redraw()
    x_max = plots.loss_plot.getViewBox().viewRange()[0][1]
    assert x_max >= 1366          # old: framed 0-950 from the preview, the last steps off-plot
    stage_x = [line.value() for _, line in plots._stage_lines]
    assert stage_x and all(x == pytest.approx(1025.5) for x in stage_x)
    plots.add_metrics([_record(1200, 1400, 1025)])   # the plan grows: the frame follows
    assert plots.loss_plot.getViewBox().viewRange()[0][1] >= 1400


def test_eta_is_the_budget_left(qtbot):
    bar = RunBar()
    qtbot.addWidget(bar)
    bar.show_step(_record(10, 1000, 750, left=125.0))
    assert "ETA 2:05" in bar.progress.format()


def test_pause_does_not_shorten_a_budgeted_run(qtbot, window, monkeypatch):
    """A pause of 1000 s in the middle of a 3 s budget: the run still trains its 3 s (the old
    worker counted the pause, so the run ended at the first step after it). Training time is
    fake: each step takes 0.05 s of it, and the pause what the test says."""
    fake = fake_training_time(monkeypatch, step_s=0.05)
    configure(window, pretrainStepsSpin=300, tuneStepsSpin=100, sampleIntervalSpin=0,
              evalIntervalSpin=20, contextLengthSpin=64)
    budget = 3.0
    panel = window.settings_panel
    real = panel.train_config
    monkeypatch.setattr(panel, "train_config",
                        lambda: real().replace(time_budget_s=budget, evaluate_recall=False))
    window.run_bar.train_button.click()
    qtbot.waitUntil(lambda: window.plots.point_count() >= 3, timeout=120_000)
    window.run_bar.pause_button.click()
    qtbot.waitUntil(lambda: window.controller.state is RunState.PAUSED, timeout=30_000)
    paused_at = window.controller.worker.session.elapsed_s()
    assert paused_at < budget / 2
    fake.t += 1000.0                                    # the person walks away
    with qtbot.waitSignal(window.trainingFinished, timeout=120_000) as blocker:
        window.run_bar.pause_button.click()             # resume; the run ends on its own
    result = blocker.args[0]
    assert result.outcome is Outcome.FINISHED
    history = window.controller.worker.session.history
    assert abs(history[-1]["elapsed_s"] - budget) <= 0.05 * budget, history[-1]  # old: + pause
    assert {r["stage"] for r in history} == {"pretrain", "tune"}
    assert sum(r["elapsed_s"] > paused_at for r in history) >= 20  # it trained on after it


def test_continue_for_minutes_trains_that_much_longer(qtbot, tmp_path, monkeypatch):
    """Continue with "Train for N minutes" set: N minutes more (the ContinueJob carries
    more_seconds; the old worker kept the step totals and the studio refused equal totals).
    Training time is fake: 0.05 s a step."""
    from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
    from opencl_llm_studio.studio.protocol import ContinueJob, TrainJob
    from opencl_llm_studio.studio.ui.run.worker import TrainingWorker
    from tests.helpers import bundled_texts
    fake_training_time(monkeypatch, step_s=0.05)
    w = TrainingWorker()
    results = []
    for signal in (w.finished, w.stopped, w.failed):
        signal.connect(results.append)
    mc = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32, vocab_size=400)
    tc = TrainConfig(pretrain_steps=10, tune_steps=0, batch_size=4, sample_interval=0,
                     evaluate_recall=False)
    w.start(TrainJob(mc, tc, bundled_texts()[0], str(tmp_path / "a")))
    assert results[-1].outcome is Outcome.FINISHED and w.session.step == 10
    before = w.session.elapsed_s()
    w.proceed(ContinueJob(10, 0, str(tmp_path / "b"), more_seconds=3.0))
    assert results[-1].outcome is Outcome.FINISHED, results
    s = w.session
    assert s.step > 10 and s.train_config.time_budget_s == pytest.approx(before + 3.0)
    assert before == pytest.approx(10 * 0.05)
    assert abs(s.elapsed_s() - (before + 3.0)) <= 0.1
    assert s.step - 10 >= 3.0 / 0.05 * 0.9              # the 3 s were spent training


def test_an_opened_budgeted_run_continues_for_the_minutes_given(qtbot, window, monkeypatch):
    """A run trained for 1 minute, opened: "Train for" was greyed out at "1 min" ("The opened
    model fixes this") and Continue trained 1 minute more whatever the person wanted; after it,
    the step fields kept the old totals. Now the field is editable, reads "min more", starts
    off, Continue trains the minutes set, and the fields show the run's totals after it.
    Training time is fake: each step takes 1 s of it."""
    fake_training_time(monkeypatch, step_s=1.0)
    configure(window, pretrainStepsSpin=300, tuneStepsSpin=0, sampleIntervalSpin=0,
              evalIntervalSpin=1000, contextLengthSpin=32, trainMinutesSpin=1)
    with qtbot.waitSignal(window.trainingFinished, timeout=300_000) as blocker:
        window.run_bar.train_button.click()
    first = blocker.args[0]
    assert first.outcome is Outcome.FINISHED
    with qtbot.waitSignal(window.modelOpened, timeout=60_000):
        window.files.open_checkpoint(first.run_dir)
    sp = window.settings_panel
    minutes = sp.spins["trainMinutesSpin"]
    assert minutes.isEnabled() and minutes.value() == 0 and minutes.suffix() == " min more"
    before = window.controller.worker.session.elapsed_s()
    assert before == pytest.approx(60.0, abs=2.0)
    minutes.setValue(2)
    with qtbot.waitSignal(window.trainingFinished, timeout=300_000) as blocker:
        window.run_bar.train_button.click()
    assert blocker.args[0].outcome is Outcome.FINISHED
    s = window.controller.worker.session
    assert s.elapsed_s() == pytest.approx(before + 120.0, abs=2.0)   # 2 minutes more
    assert sp.spins["pretrainStepsSpin"].value() == s.steps.pretrain == s.step

