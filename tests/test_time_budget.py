"""Training by wall time (issue 20): a budget with dialogues trains both stages and ends on
time, pauses do not count, evaluations take a bounded share, the learning rate never rises
outside a warmup, Continue re-warms. The tests drive the Trainer with an injected clock whose
seconds advance only when a step, a validation or a pause says so (deterministic on a busy
machine), the command line's run too: no test waits for real seconds to pass."""

import math

import numpy as np
import pytest

from opencl_llm_studio.engine.training.budget import EvalPacer, PhaseCosts, TimePlan
from opencl_llm_studio.engine.progress import Clock
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.training.schedule import Rewarm, StageSchedule, decay_factor, planned_lr
from opencl_llm_studio.engine.training.opening import create_session, load_session
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.training.trainer import Trainer

from tests.fake_clock import FakeTime, fake_training_time
from tests.helpers import RESOURCES as RES, metrics

MODEL = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=96)


def _session(tc: TrainConfig, tune: bool = True, pretrain: str | None = None):
    text = pretrain if pretrain is not None else read_text(RES / "pretrain.txt")
    return create_session(MODEL, tc, text,
                          read_text(RES / "tune.txt") if tune else None,
                          tokenizer_kind="char")


def _timed_run(s, fake: FakeTime, step_s=0.05, eval_s=0.2, first_step_s=None, pause_at=None,
               pause_s=0.0):
    """Run s with a fake clock: each train step costs step_s (the first first_step_s), each
    validation pass eval_s; at step pause_at the caller holds the generator for pause_s
    (paused, as the studio's worker does). Returns (records, trainer)."""
    trainer = Trainer(s, Clock(s.elapsed_s(), time_fn=fake))
    real_step, real_val = s.model.train_step, s.pretrain_val

    def step(*a, **k):
        fake.t += first_step_s if (first_step_s and s.step == 0) else step_s
        return real_step(*a, **k)

    def val(*args):
        fake.t += eval_s
        return real_val(*args)
    s.model.train_step, s.pretrain_val = step, val
    records = []
    for m in trainer.run():
        records.append(m)
        if m.step == pause_at:
            trainer.clock.pause()
            fake.t += pause_s
            trainer.clock.resume()
    return records, trainer


def _no_rise_after_warmup(records, warmup):
    """Per stage: after its warmup steps, the lr never goes up."""
    for stage in ("pretrain", "tune"):
        lrs = [m.lr for m in records if m.stage == stage][warmup:]
        assert all(b <= a * (1 + 1e-9) for a, b in zip(lrs, lrs[1:])), (stage, lrs)


TC = TrainConfig(pretrain_steps=600, tune_steps=200, batch_size=4, eval_interval=25,
                 sample_interval=0, evaluate_recall=False, time_budget_s=30.0, warmup_steps=10)


def test_budget_with_dialogues_trains_both_stages_and_ends_on_time():
    s = _session(TC)
    records, _ = _timed_run(s, FakeTime())
    stages = [m.stage for m in records]
    assert "pretrain" in stages and "tune" in stages         # the old re-plan never tuned
    n_pre = stages.count("pretrain")
    assert stages == ["pretrain"] * n_pre + ["tune"] * (len(stages) - n_pre)
    last = records[-1]
    assert abs(last.elapsed_s - TC.time_budget_s) <= 0.05 * TC.time_budget_s
    # the stage boundary at the step split's share of the time (600 : 200 -> 75%)
    boundary = next(m for m in records if m.stage == "tune")
    assert boundary.elapsed_s == pytest.approx(0.75 * TC.time_budget_s, abs=1.0)
    assert last.step == last.total_steps and s.steps.pretrain == n_pre
    assert s.steps.tune == len(stages) - n_pre
    # the plan's estimates live in session.steps: the settings stay as given (issue 35), and
    # the checkpoint's settings are the run's as it stands
    assert s.train_config == TC
    assert (s.run_config().pretrain_steps, s.run_config().tune_steps) == (n_pre, len(stages) - n_pre)
    s.retrain_with(batch_size=2)                   # other settings keep where the stages ended
    assert (s.steps.pretrain, s.train_config.batch_size) == (n_pre, 2)
    assert all(m.pretrain_steps for m in records)
    _no_rise_after_warmup(records, TC.warmup_steps)
    # each stage decays to its floor by its end
    pre_last = records[n_pre - 1]
    assert pre_last.lr == pytest.approx(TC.learning_rate * TC.min_lr_ratio, rel=0.05)
    assert last.lr == pytest.approx(TC.tune_peak * TC.min_lr_ratio, rel=0.05)


def test_plan_follows_the_run():
    """total_steps in the records is the live plan: it ends equal to the steps taken."""
    s = _session(TC, tune=False)
    records, _ = _timed_run(s, FakeTime())
    totals = [m.total_steps for m in records]
    assert all(t >= m.step for t, m in zip(totals, records))
    assert totals[-1] == records[-1].step
    assert abs(totals[len(totals) // 2] - totals[-1]) <= 0.05 * totals[-1]
    assert all(m.time_left_s is not None for m in records)


def test_pause_does_not_shorten_training():
    plain, _ = _timed_run(_session(TC), FakeTime())
    paused, _ = _timed_run(_session(TC), FakeTime(), pause_at=100, pause_s=20.0)
    assert len(paused) == len(plain)
    assert paused[-1].elapsed_s == pytest.approx(plain[-1].elapsed_s)
    lrs = [m.lr for m in paused]
    assert lrs == pytest.approx([m.lr for m in plain])    # no step down after the pause


def test_slow_first_step_keeps_the_warmup():
    s = _session(TC, tune=False)
    records, _ = _timed_run(s, FakeTime(), first_step_s=3.0)
    lrs = [m.lr for m in records]
    # old: a 3 s first step planned 18 steps and step 2 ran at the full rate
    assert lrs[1] < 0.5 * TC.learning_rate
    assert all(b >= a for a, b in zip(lrs[:5], lrs[1:6]))   # still rising: warmup
    _no_rise_after_warmup(records, TC.warmup_steps)
    assert abs(records[-1].elapsed_s - TC.time_budget_s) <= 0.05 * TC.time_budget_s


def test_a_first_step_that_builds_kernels_does_not_end_the_run():
    """On a quiet 16-core host the first step (kernel builds) took 10 s and priced the final
    validation of a 1 MB text's held-out tenth at minutes: runs of 60 s ended after 1 step at
    14 s. The first step no longer prices the plan once later ones are measured."""
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(20000))
    s = _session(TC.replace(val_split="tail"), tune=False, pretrain=text)
    records, trainer = _timed_run(s, FakeTime(), first_step_s=10.0)
    assert len(records) > 100
    assert abs(records[-1].elapsed_s - TC.time_budget_s) <= 0.05 * TC.time_budget_s
    # and it did not place the decay: the rate warms up to the peak and holds it (a first
    # estimate put it at the floor from step 2, where the no-rise rule kept it all run)
    lrs = [m.lr for m in records]
    assert max(lrs) == pytest.approx(TC.learning_rate)
    assert trainer.rate.warmup["pretrain"] == TC.warmup_steps
    assert lrs[-1] == pytest.approx(TC.learning_rate * TC.min_lr_ratio, rel=0.05)


def test_evaluations_take_a_bounded_share_of_the_time():
    tc = TC.replace(eval_interval=5, eval_share=0.05)
    s = _session(tc, tune=False)
    records, trainer = _timed_run(s, FakeTime(), step_s=0.02, eval_s=0.5)
    periodic = trainer.pacer.spent
    assert periodic <= 0.05 * records[-1].elapsed_s + 0.5     # + the first, always run
    evals = [m for m in records if m.val_loss is not None]
    assert 2 <= len(evals) < len(records) // 5                 # fewer than every 5 steps
    assert records[-1].val_loss is not None                    # the stage end always scores


def test_one_line_text_prices_its_stage_end_by_the_caps():
    """The old plan priced recall by whole documents: a 1 MB one-line text reserved most of
    the budget and trained a fraction of it. Recall is now priced by its per-case caps."""
    from opencl_llm_studio.engine.training.evaluate import MAX_FACTS, RECALL_MAX_NEW_TOKENS, recall_tokens
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far"]
    text = " ".join(rng.choice(words, 250_000))   # one line, ~1 MB
    s = _session(TC.replace(evaluate_recall=True), tune=False, pretrain=text)
    assert recall_tokens(s, "pretrain") <= MAX_FACTS * (RECALL_MAX_NEW_TOKENS + 3)
    records, _ = _timed_run(s, FakeTime())
    assert abs(records[-1].elapsed_s - TC.time_budget_s) <= 0.05 * TC.time_budget_s
    assert records[-1].recall is not None


def test_many_documents_budget_ends_on_time():
    text = "\n\n".join(f"Fact {i}: item {i} is {i % 7} units long." for i in range(7000))
    s = _session(TC.replace(time_budget_s=20.0), tune=True, pretrain=text)
    records, _ = _timed_run(s, FakeTime())
    assert {m.stage for m in records} == {"pretrain", "tune"}
    assert abs(records[-1].elapsed_s - 20.0) <= 0.05 * 20.0


def test_continue_rewarms_instead_of_jumping():
    tc = TrainConfig(pretrain_steps=50, tune_steps=0, batch_size=4, eval_interval=25,
                     sample_interval=0, evaluate_recall=False, warmup_steps=10)
    s = _session(tc, tune=False)
    first = list(s.train())
    assert first[-1].lr == pytest.approx(tc.learning_rate * tc.min_lr_ratio)
    note = s.continue_training(pretrain_steps=100)
    assert note and "re-warms" in note
    second = list(s.train())
    lrs = [first[-1].lr] + [m.lr for m in second]
    rise = (tc.learning_rate - first[-1].lr) / tc.warmup_steps
    assert all(b - a <= rise * 1.001 for a, b in zip(lrs, lrs[1:])), lrs[:12]  # old: 7x jump
    assert max(lrs) == pytest.approx(tc.learning_rate)        # back at the peak after it
    assert second[-1].lr == pytest.approx(tc.learning_rate * tc.min_lr_ratio)


def test_continue_with_the_same_totals_changes_no_rate():
    """A run resumed with the totals it had (the CLI's --continue after a kill passes them)
    follows the schedule exactly: no re-warm (a rewarm there capped the tuning stage's warmup
    and the resumed losses differed from the unkilled run's)."""
    tc = TrainConfig(pretrain_steps=20, tune_steps=8, batch_size=4, eval_interval=50,
                     sample_interval=0, evaluate_recall=False, warmup_steps=4)
    full = [m.lr for m in _session(tc).train()]
    s = _session(tc)
    part = []
    for m in s.train():
        part.append(m.lr)
        if m.step == 19:
            break
    assert s.continue_training(20, 8) is None and s.rewarm is None
    part += [m.lr for m in s.train()]
    assert part == pytest.approx(full, rel=1e-12)


def test_a_rewarm_stays_in_its_stage():
    tc = TrainConfig(pretrain_steps=20, tune_steps=8, batch_size=4, eval_interval=50,
                     sample_interval=0, evaluate_recall=False, warmup_steps=10)
    s = _session(tc)
    list(s.train())
    s.continue_training(tune_steps=16)            # more tuning: re-warms inside tuning
    assert s.rewarm is not None and s.stage_at(s.rewarm.step) == "tune"
    t = TrainConfig(pretrain_steps=20, tune_steps=0, batch_size=4, eval_interval=50,
                    sample_interval=0, evaluate_recall=False, warmup_steps=10)
    p = _session(t, tune=False)
    for m in p.train():
        if m.step == 15:
            break
    p.continue_training(pretrain_steps=18)         # re-warm in pretraining, near its end
    assert p.rewarm is not None
    assert p.lr_at(16) <= planned_lr(p.train_config, p.steps, p.has_tune, 16)
    p.train_config = p.train_config.replace(tune_steps=5)
    p.tune = s.tune                                # a tuning stage after it
    assert p.lr_at(18) == planned_lr(p.train_config, p.steps, p.has_tune, 18)           # the tuning warmup is its own


def test_continue_rewarm_survives_a_checkpoint(tmp_path):
    tc = TrainConfig(pretrain_steps=20, tune_steps=0, batch_size=4, eval_interval=25,
                     sample_interval=0, evaluate_recall=False, warmup_steps=10)
    s = _session(tc, tune=False)
    list(s.train())
    s.continue_training(pretrain_steps=60)
    s.save(tmp_path)
    r = load_session(tmp_path)
    assert r.rewarm == s.rewarm and r.lr_at(21) == pytest.approx(s.lr_at(21))


def test_continue_by_time_adds_seconds():
    tc = TC.replace(time_budget_s=5.0)
    s = _session(tc, tune=False)
    first, _ = _timed_run(s, FakeTime())
    s.continue_training(more_seconds=5.0)
    assert s.train_config.time_budget_s == pytest.approx(first[-1].elapsed_s + 5.0)
    second, _ = _timed_run(s, FakeTime())
    assert second[0].elapsed_s > first[-1].elapsed_s
    assert abs(second[-1].elapsed_s - s.train_config.time_budget_s) <= 0.5
    lrs = [first[-1].lr] + [m.lr for m in second]
    rise = (tc.learning_rate - first[-1].lr) / tc.warmup_steps
    assert all(b - a <= rise * 1.001 for a, b in zip(lrs, lrs[1:]))


def test_elapsed_s_continues_across_resume(tmp_path):
    tc = TrainConfig(pretrain_steps=3, tune_steps=0, batch_size=4, eval_interval=2,
                     sample_interval=0, evaluate_recall=False)
    s = _session(tc, tune=False)
    first = [m.elapsed_s for m in s.train()]
    s.save(tmp_path)
    r = load_session(tmp_path)
    assert r.elapsed_s() == pytest.approx(first[-1])
    r.continue_training(pretrain_steps=6)
    second = [m.elapsed_s for m in r.train()]
    assert second[0] > first[-1] and second == sorted(second)


def test_budget_with_samples_and_recall_ends_on_time(monkeypatch):
    """The whole thing with samples and the stage-end recall on, each generated token costing
    time too (the plan measures that cost and reserves it): both stages, on time."""
    budget = 12.0
    tc = TrainConfig(pretrain_steps=300, tune_steps=100, batch_size=4, eval_interval=20,
                     sample_interval=40, time_budget_s=budget)
    s = _session(tc)
    fake_training_time(monkeypatch, step_s=0.1, eval_s=0.2, token_s=0.001)
    records = list(s.train())
    assert {m.stage for m in records} == {"pretrain", "tune"}
    assert abs(records[-1].elapsed_s - budget) <= 0.05 * budget, records[-1].elapsed_s
    assert any(m.samples for m in records)
    assert records[-1].recall is not None and "answers" in records[-1].recall


def test_the_plan_prices_generation_on_the_trainers_clock(monkeypatch):
    """The plan's cost of a generated token (samples, recall) is measured on the trainer's
    clock like everything else (it was read off the wall clock, so an injected clock's run
    reserved what the machine happened to take: a test of it passed or failed by load)."""
    fake_training_time(monkeypatch, step_s=0.1, token_s=0.01)
    trainer = Trainer(_session(TC.replace(sample_interval=40), tune=False))
    next(trainer.run())
    assert trainer.plan.per_token_s == pytest.approx(0.01)


def test_cli_budget_with_dialogues_tunes(tmp_path, monkeypatch):
    """`llm-studio train --time-budget` with dialogues trains both stages (the old re-plan kept
    moving the pretraining total ahead, so tuning never ran: tune_steps 0). Training time is
    fake: each step takes 0.1 s of it, however long it really takes."""
    from opencl_llm_studio.studio.cli import main
    fake_training_time(monkeypatch, step_s=0.1, eval_s=0.1, token_s=0.001)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--time-budget", "10", "--d-model", "32",
                 "--n-layer", "1", "--n-head", "2", "--context-length", "64",
                 "--batch-size", "4", "--quiet"]) == 0
    rows = metrics(out)
    assert {r["stage"] for r in rows} == {"pretrain", "tune"}
    assert abs(rows[-1]["elapsed_s"] - 10) <= 0.5, rows[-1]
    assert rows[-1]["step"] == rows[-1]["total_steps"]
    assert 60 <= len(rows) < 100   # 10 s of 0.1 s steps, less evaluations, samples and recall


# -- the pieces ------------------------------------------------------------------------------
def test_wsd_schedule_shape():
    sched = StageSchedule(1.0, warmup_steps=10, decay_fraction=0.2, min_ratio=0.1)
    assert sched.lr(0, 0.0) == pytest.approx(0.1)               # warmup from 0
    assert sched.lr(9, 0.5) == 1.0 and sched.lr(50, 0.8) == 1.0  # stable
    assert sched.lr(50, 1.0) == pytest.approx(0.1)              # floor at the end
    assert decay_factor(0.9, 0.2, 0.1) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.5)))
    values = [decay_factor(p / 100, 0.2, 0.1) for p in range(101)]
    assert values == sorted(values, reverse=True)


def test_rewarm_ramp():
    r = Rewarm(step=50, from_lr=0.1, steps=10)
    assert r.cap(49, 1.0) == 1.0 and r.cap(60, 1.0) == 1.0
    assert r.cap(50, 1.0) == pytest.approx(0.19) and r.cap(59, 1.0) == pytest.approx(1.0)
    assert r.cap(55, 0.05) == 0.05                               # below the ramp: unchanged
    assert Rewarm.from_list(r.to_list()) == r and Rewarm.from_list(None) is None


def test_clock_excludes_pauses():
    fake = FakeTime()
    c = Clock(10.0, time_fn=fake)
    fake.t += 2
    c.pause()
    fake.t += 100
    assert c.now() == pytest.approx(12.0)
    c.resume()
    fake.t += 1
    assert c.now() == pytest.approx(13.0)


def test_plan_reserves_the_stage_end():
    plan = TimePlan(100.0, 0.25, tokens_per_step=100,
                    costs={"pretrain": PhaseCosts(1000), "tune": PhaseCosts(2000)})
    plan.step_done(9.0)                 # the first step built the kernels: not counted later
    assert plan.fits_step("pretrain", 74.9) and not plan.fits_step("pretrain", 75.0)
    for _ in range(3):
        plan.step_done(0.5)
    assert plan.step_s == 0.5
    plan.eval_done(1.0, 1000)
    assert plan.reserve("pretrain") == pytest.approx(1.0)
    assert plan.train_end("pretrain") == pytest.approx(74.0)
    assert plan.train_end("tune") == pytest.approx(98.0)
    assert plan.fits_step("pretrain", 73.4) and not plan.fits_step("pretrain", 73.6)
    plan.end_pretrain(70.0)
    assert plan.steps_left("tune", 70.0) == int(28.0 / 0.5)


def test_pacer_runs_the_first_and_bounds_the_rest():
    p = EvalPacer(0.05)
    assert p.allows(0.1, 5.0)           # the first always
    p.done(1.0)
    assert not p.allows(10.0, 1.0) and p.allows(40.0, 1.0)


def test_studio_train_for_minutes(qtbot):
    from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
    w = SettingsPanel()
    qtbot.addWidget(w)
    assert w.train_config().time_budget_s == 0
    w.set_value("trainMinutesSpin", 3)
    assert w.train_config().time_budget_s == 180.0
    # an opened run: the field means minutes more (Continue), said beside it, off at first
    w.set_from_configs(ModelConfig(), TrainConfig(time_budget_s=120.0))
    minutes = w.spins["trainMinutesSpin"]
    assert minutes.value() == 0 and minutes.suffix() == " min more"
    assert minutes.toolTip().startswith("Minutes more")
    w.forget_opened()   # New model: the whole run's minutes again
    assert minutes.suffix() == " min" and minutes.toolTip().startswith("Minutes of training")
