"""engine.training.health: per-group gradient norms against the float64 reference model's gradients,
update-to-weight ratios against AdamW's own update, clipped/skipped counts, and the warnings
(a too-high learning rate, a plateau, a divergence) from the measurements."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

import tests.reference as ref
from tests.helpers import tiny_config
from opencl_llm_studio.engine.config import TrainConfig
from opencl_llm_studio.engine.training.health import (GROUPS, NORM_RATIO_TOO_HIGH, HealthMonitor, group_of,
                           unigram_entropy)
from opencl_llm_studio.engine.metrics import StepMetrics
from opencl_llm_studio.engine.model.transformer import Model


def ref_group_norms(grads: dict) -> dict:
    sq = {g: 0.0 for g in GROUPS}
    for name, g in grads.items():
        sq[group_of(name)] += float((np.asarray(g, np.float64) ** 2).sum())
    return {g: math.sqrt(v) for g, v in sq.items()}


def test_group_of_names_every_tensor():
    assert group_of("blk.3.attn_q.weight") == "attention"
    assert group_of("blk.0.attn_output.weight") == "attention"
    assert group_of("blk.1.ffn_down.weight") == "feed_forward"
    assert group_of("blk.1.attn_norm.weight") == "norms"
    assert group_of("output_norm.weight") == "norms"
    assert group_of("token_embd.weight") == "embedding"
    assert group_of("output.weight") == "embedding"


@pytest.mark.parametrize("cfg,B,T", [(tiny_config(), 2, 16),
                                     (tiny_config(tie_embeddings=False, n_layer=1, d_model=16,
                                           n_head=2), 1, 5)])
def test_group_grad_norms_match_reference(rt, cfg, B, T):
    model = Model(rt, cfg, seed=4)
    rng = np.random.default_rng(1)
    w = {k: v + (rng.normal(0, 0.1, v.shape) if v.ndim == 1 else 0)
         for k, v in model.table.unflatten(model.read_flat()).items()}
    model.write_flat("params", model.table.flatten(w))
    ids = rng.integers(0, cfg.vocab_size, size=(B, T + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    _, _, cache = ref.forward(w, cfg, x, y)
    want = ref_group_norms(ref.backward(w, cfg, cache))
    tc = TrainConfig(eval_interval=1, weight_decay=0.0)
    mon = HealthMonitor(model, tc)
    mon.before_step(1)
    before = model.read_flat()
    loss, gnorm, skipped = model.train_step(x, y, 1e-3, tc)
    m = StepMetrics(1, 1, "pretrain", loss, gnorm, 1e-3, 0.0, 0.0, skipped=skipped)
    mon.after_step(m)
    got = m.health["grad_norm"]
    for g in GROUPS:
        assert abs(got[g] - want[g]) <= 1e-4 * want[g], (g, got[g], want[g])
    # the groups partition the parameters: together they make the global grad norm
    assert abs(math.sqrt(sum(v * v for v in got.values())) - gnorm) < 1e-4 * gnorm
    # update ratio: ||w_after - w_before|| / ||w_before|| per group, from the device's update
    after = model.table.unflatten(model.read_flat())
    prev = model.table.unflatten(before)
    for g in GROUPS:
        names = [n for n in prev if group_of(n) == g]
        dw = math.sqrt(sum(((after[n] - prev[n]).astype(np.float64) ** 2).sum() for n in names))
        w0 = math.sqrt(sum((prev[n].astype(np.float64) ** 2).sum() for n in names))
        assert m.health["update_ratio"][g] == pytest.approx(dw / w0, rel=1e-5)
        assert 0 < m.health["update_ratio"][g]


def fake_monitor(tc, vocab=512, tokens=None):
    model = SimpleNamespace(table=SimpleNamespace(entries={}), cfg=SimpleNamespace(vocab_size=vocab))
    return HealthMonitor(model, tc, tokens)


def step(i, loss, stage="pretrain", gnorm=0.5, skipped=False, lr=3e-3, total=600):
    return StepMetrics(i, total, stage, loss, gnorm, lr, 1.0, float(i), skipped=skipped)


def test_clipped_and_skipped_counted_per_window(rt):
    tc = TrainConfig(eval_interval=4, grad_clip=1.0)
    model = Model(rt, tiny_config(n_layer=1), seed=0)
    mon = HealthMonitor(model, tc)
    records = []
    for i, (g, skip) in enumerate([(2.0, False), (0.5, False), (math.nan, True), (3.0, False)],
                                  start=1):
        mon.before_step(i)
        m = step(i, 5.0, gnorm=g, skipped=skip)
        mon.after_step(m)
        records.append(m)
    assert [m.health is not None for m in records] == [False, False, False, True]
    h = records[-1].health
    assert (h["clipped"], h["skipped"], h["window"]) == (2, 1, 4)
    assert set(h) >= {"grad_norm", "update_ratio", "weight_rms"}


def test_plateau_warning_for_a_run_stuck_near_the_unigram_baseline():
    tokens = np.random.default_rng(0).integers(0, 300, 20_000)
    H = unigram_entropy(tokens)
    assert 5.5 < H < math.log(300)  # uniform ids: near ln(300)
    stuck = fake_monitor(TrainConfig(pretrain_steps=600), tokens=tokens)
    good = fake_monitor(TrainConfig(pretrain_steps=600), tokens=tokens)
    said_stuck, said_good = [], []
    for i in range(1, 200):
        a, b = step(i, 1.02 * H), step(i, max(H * (1 - i / 150), 0.5))
        stuck.after_step(a)
        good.after_step(b)
        said_stuck += a.warnings or []
        said_good += b.warnings or []
    assert len(said_stuck) == 1 and "stuck" in said_stuck[0]
    assert said_good == []


def test_divergence_warning_once_and_not_at_the_tuning_stage_change():
    mon = fake_monitor(TrainConfig(pretrain_steps=100, tune_steps=100))
    said = []
    for i in range(1, 101):  # pretraining falls to 0.1, tuning starts at 2.0: no warning
        m = step(i, max(6.0 - 0.06 * i, 0.1) if i <= 100 else 2.0)
        mon.after_step(m)
        said += m.warnings or []
    for i in range(101, 141):
        m = step(i, 2.0, stage="tune")
        mon.after_step(m)
        said += m.warnings or []
    assert said == []
    for i in range(141, 200):  # then the loss climbs 3 nats
        m = step(i, 2.0 + 0.05 * (i - 140), stage="tune")
        mon.after_step(m)
        said += m.warnings or []
    assert len(said) == 1 and "diverging" in said[0]


def test_lr_warning_from_the_norm_update_ratio():
    mon = fake_monitor(TrainConfig())
    said = []
    for i, ratio in enumerate([0.002, 5 * NORM_RATIO_TOO_HIGH, 0.003, 3 * NORM_RATIO_TOO_HIGH,
                               4 * NORM_RATIO_TOO_HIGH, 6 * NORM_RATIO_TOO_HIGH], start=1):
        m = step(i * 50, 4.0, lr=0.5)
        m.health = {"update_ratio": {g: ratio for g in GROUPS}}
        said.append(mon._ratio(m))
    # one high measurement alone is not enough; two in a row are
    assert [s is not None for s in said] == [False, False, False, False, True, True]
    assert "far too high" in said[4]


def test_health_holds_ranges_and_reads_in_chunks(monkeypatch):
    """The groups are ranges of the flat buffer, not element indices (1 GiB of int64 held for a
    whole run of a 135M model), and a norm summed a chunk at a time equals the whole one."""
    import sys
    from opencl_llm_studio.engine.config import ModelConfig
    from opencl_llm_studio.engine.model.params import ParamTable
    from opencl_llm_studio.engine.training import health
    smol = ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                       context_length=1024, ffn_dim=1536)
    index = health.group_index(ParamTable(smol))
    held = sum(sys.getsizeof(r) + 64 * len(r) for r in index.values())
    assert held < 2 ** 20
    table = ParamTable(ModelConfig(vocab_size=300, d_model=24, n_layer=2, n_head=3,
                                   context_length=16, ffn_dim=40))
    rng = np.random.default_rng(0)
    before = rng.standard_normal(table.size).astype(np.float32)
    after = before + 0.01 * rng.standard_normal(table.size).astype(np.float32)
    idx = health.group_index(table)
    whole = health.update_ratios(idx, before, after)
    monkeypatch.setattr(health, "CHUNK", 7)
    reads = []
    chunked = health.update_ratios(idx, before,
                                   lambda o, n: reads.append(n) or after[o:o + n])
    assert max(reads) == 7 and chunked == pytest.approx(whole, rel=1e-12)
    for g, ranges in idx.items():   # each group's norm is its tensors' elements'
        want = np.sqrt(sum(np.sum(np.square(before[o:o + n], dtype=np.float64))
                           for o, n in ranges))
        assert health.group_norms(idx, before)[g] == pytest.approx(want, rel=1e-12)
