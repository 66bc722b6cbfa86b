"""Pretraining keeps the weights of its lowest held-out validation (engine.training.best_weights):
a model trained past the point where it memorizes its text ends with the earlier, better
weights, says so, and scores them on the whole held-out text; a run whose validation kept
falling is left as it was; a copy that scores worse on the final set is not taken, and a
stop during that scoring leaves the last step's weights."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.metrics import ValScore
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.progress import Cancelled
from opencl_llm_studio.engine.training.best_weights import BestWeights
from opencl_llm_studio.engine.training.opening import create_session
from tests.helpers import RESOURCES, tiny_config

# the bundled 2,440-character text and a model with ~45 parameters per character of it: the
# held-out loss turns upward within a few hundred steps at this rate (lowest near step 240 of
# 600, 14% above it at the end)
MODEL = ModelConfig(d_model=64, n_layer=2, n_head=2, context_length=64)


def _run(steps: int, eval_interval: int, rt):
    tc = TrainConfig(pretrain_steps=steps, tune_steps=0, batch_size=8, learning_rate=1e-2,
                     warmup_steps=5, eval_interval=eval_interval, sample_interval=0,
                     evaluate_recall=False, dropout=0.0, seed=3)
    s = create_session(MODEL, tc, read_text(RESOURCES / "pretrain.txt"), None,
                       tokenizer_kind="char", runtime=rt)
    assert s.pretrain.val_source == "held-out"
    return s, list(s.train())


def test_a_run_past_its_best_keeps_the_best_weights(rt):
    s, records = _run(600, 20, rt)
    periodic = [(m.step, m.val_loss) for m in records[:-1] if m.val_loss is not None]
    best_step, best_loss = min(periodic, key=lambda p: p[1])
    last_periodic = periodic[-1][1]
    assert last_periodic > best_loss * 1.05, periodic   # the run did overfit: the test can fail
    final = records[-1]
    assert final.extra.get("kept_step") == best_step
    assert final.warnings and f"step {best_step}" in final.warnings[0]
    # the record holds the kept weights' score on the whole held-out text, and they are the
    # model's now: scoring again reads the same
    again = s.pretrain_val(1_000_000, "pretrain")
    assert final.val_loss == pytest.approx(again.loss, rel=1e-5)
    assert final.val_bpb == pytest.approx(again.bpb, rel=1e-5)
    assert final.val_loss < last_periodic
    assert final.val_loss == pytest.approx(best_loss, rel=2e-3)   # this held-out text is
    #                                                                all in the periodic windows


def test_a_run_whose_validation_kept_falling_is_left_as_it_was(rt):
    s, records = _run(40, 10, rt)
    periodic = [m.val_loss for m in records[:-1] if m.val_loss is not None]
    assert periodic == sorted(periodic, reverse=True)
    final = records[-1]
    assert "kept_step" not in final.extra and not final.warnings
    assert final.val_loss == pytest.approx(s.pretrain_val(1_000_000, "pretrain").loss, rel=1e-5)


def _score(loss):
    return ValScore(loss=loss, bpb=loss / np.log(2), tokens=10, n_bytes=10)


def test_a_copy_that_scores_worse_on_the_final_set_is_not_kept(rt):
    m = Model(rt, tiny_config(), seed=1)
    early = m.read_flat("params")
    best = BestWeights()
    best.offer(m, 10, 2.0)
    best.offer(m, 20, 2.5)                   # not lower: no copy
    assert best.step == 10 and best.worth_trying(30)
    later = early + np.float32(0.01)
    m.write_flat("params", later)
    seen = []

    def score():
        seen.append(m.read_flat("params"))
        return _score(3.5)
    k = best.choose(m, 30, 3.0, score)
    np.testing.assert_array_equal(seen[0], early)          # it was the copy that was scored
    assert not k.kept and k.step == 30
    np.testing.assert_array_equal(m.read_flat("params"), later)
    k = best.choose(m, 30, 4.0, lambda: _score(3.5))
    assert k.kept and k.step == 10 and k.score.loss == 3.5
    np.testing.assert_array_equal(m.read_flat("params"), early)


def test_a_stop_while_the_copy_is_scored_leaves_the_last_weights(rt):
    m = Model(rt, tiny_config(), seed=1)
    best = BestWeights()
    best.offer(m, 10, 2.0)
    later = m.read_flat("params") * np.float32(1.5)
    m.write_flat("params", later)

    def stopped():
        raise Cancelled("stopped")
    with pytest.raises(Cancelled):
        best.choose(m, 30, 3.0, stopped)
    np.testing.assert_array_equal(m.read_flat("params"), later)


def test_a_rise_within_noise_or_a_non_finite_reading_is_not_acted_on(rt):
    m = Model(rt, tiny_config(), seed=1)
    best = BestWeights()
    best.offer(m, 10, float("nan"))
    assert best.step is None and not best.worth_trying(20, 5.0)
    best.offer(m, 10, 2.0)
    assert not best.worth_trying(20, 2.005)      # 0.25% above: a step's noise
    assert not best.worth_trying(10, 3.0)        # the copy is of this very step
    assert best.worth_trying(20, 2.1)
