"""Whole-model checks against tests/reference.py: logits, loss, every gradient, a loss trajectory;
and a finite-difference check of the reference itself."""

import numpy as np
import pytest

import tests.reference as ref
from tests.helpers import tiny_config
from tests.kernel_helpers import assert_step_matches, batch
from opencl_llm_studio.engine.config import TrainConfig
from opencl_llm_studio.engine.model.transformer import Model


@pytest.mark.parametrize("cfg,B,T", [
    (tiny_config(), 2, 16),
    (tiny_config(tie_embeddings=False, n_layer=1, d_model=16, n_head=2), 1, 1),
    (tiny_config(n_layer=1, d_model=20, n_head=5, ffn_dim=0), 3, 7),
    # grouped-query attention: 9 heads / 3 kv heads, multi-query (6 / 1) at T 1 and odd T
    (tiny_config(d_model=36, n_head=9, n_kv_head=3), 2, 13),
    (tiny_config(tie_embeddings=False, n_layer=1, n_head=6, n_kv_head=1), 1, 1),
    (tiny_config(n_layer=1, n_head=6, n_kv_head=1), 3, 7),
    # Llama 3.1 RoPE scaling, original context 8 so all three frequency bands occur
    (tiny_config(d_model=32, n_head=2, n_kv_head=1, rope_base=500000.0, rope_scaling="llama3",
                 rope_scaling_factor=4.0, rope_original_context=8), 2, 16),
])
def test_logits_loss_and_every_gradient(rt, cfg, B, T):
    model = Model(rt, cfg, seed=3)
    flat = model.read_flat()
    # perturb norm weights away from 1 so their gradients are tested in general position
    rng = np.random.default_rng(0)
    w = {k: v + (rng.normal(0, 0.1, v.shape) if v.ndim == 1 else 0) for k, v in
         model.table.unflatten(flat).items()}
    model.write_flat("params", model.table.flatten(w))
    x, y = batch(cfg, B, T, mask=(B == 3))
    np.testing.assert_allclose(model.logits(x), ref.forward(w, cfg, x), rtol=0, atol=2e-5)
    rlogits, rloss, cache = ref.forward(w, cfg, x, y)
    rgrads = ref.backward(w, cfg, cache)
    tc = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0)
    gnorm = assert_step_matches(model, x, y, tc, rloss, rgrads)
    want_norm = np.sqrt(sum((g ** 2).sum() for g in rgrads.values()))
    assert abs(gnorm - want_norm) < 1e-4 * want_norm


def test_loss_trajectory_matches_reference_adamw(rt):
    cfg = tiny_config(n_layer=1)
    tc = TrainConfig(weight_decay=0.1, grad_clip=1.0)
    model = Model(rt, cfg, seed=1)
    w = {k: v.astype(np.float64) for k, v in model.weights().items()}
    names = list(w)
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v2 = {k: np.zeros_like(v) for k, v in w.items()}
    x, y = batch(cfg, 2, 8, seed=5)
    ours, theirs = [], []
    for t in range(1, 6):
        loss, _, _ = model.train_step(x, y, 3e-3, tc)
        ours.append(loss)
        _, rloss, cache = ref.forward(w, cfg, x, y)
        theirs.append(rloss)
        g = ref.backward(w, cfg, cache)
        norm = np.sqrt(sum((g[k] ** 2).sum() for k in names))
        scale = min(1.0, tc.grad_clip / norm)
        for k in names:
            wd = tc.weight_decay if w[k].ndim == 2 else 0.0
            w[k], m[k], v2[k] = ref.adamw_update(w[k], g[k], m[k], v2[k], t, 3e-3, tc.beta1,
                                                 tc.beta2, tc.adam_eps, wd, scale)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < ours[0]


def test_reference_gradients_by_finite_differences():
    cfg = tiny_config(vocab_size=11, d_model=8, n_layer=1, n_head=2, context_length=5, ffn_dim=6)
    w = ref.init_weights(cfg, seed=2, std=0.3)
    x, y = batch(cfg, 2, 5, seed=1)
    _, _, cache = ref.forward(w, cfg, x, y)
    grads = ref.backward(w, cfg, cache)
    rng = np.random.default_rng(0)
    eps = 1e-6
    for name, g in grads.items():
        for _ in range(3):
            idx = tuple(rng.integers(0, s) for s in g.shape)
            wp = {k: v.copy() for k, v in w.items()}
            wm = {k: v.copy() for k, v in w.items()}
            wp[name][idx] += eps
            wm[name][idx] -= eps
            num = (ref.forward(wp, cfg, x, y)[1] - ref.forward(wm, cfg, x, y)[1]) / (2 * eps)
            assert abs(num - g[idx]) < 1e-6 + 1e-4 * abs(num), (name, idx, num, g[idx])


def test_side_queue_training_is_identical(rt):
    """Weight gradients on a second queue (what GPUs do; Runtime.side) change nothing: the same
    losses and bit-identical weights after a few steps, on this device with the second queue
    forced on. The model is big enough that the queues really overlap on a multi-core PoCL."""
    import pyopencl as cl

    from opencl_llm_studio.engine.opencl.runtime import Runtime
    two = Runtime(rt.info)
    two.side_queue = two.side_queue or cl.CommandQueue(two.ctx)
    one = Runtime(rt.info)
    one.side_queue = None
    cfg = tiny_config(n_layer=2, d_model=64, n_head=4, context_length=32, vocab_size=300)
    tc = TrainConfig(learning_rate=3e-3)
    models = [Model(r, cfg, seed=5) for r in (one, two)]
    rng = np.random.default_rng(2)
    for step in range(3):
        x = rng.integers(0, cfg.vocab_size, size=(4, 32)).astype(np.int32)
        y = np.roll(x, -1, axis=1)
        (l1, g1, _), (l2, g2, _) = (m.train_step(x, y, 3e-3, tc) for m in models)
        assert (l1, g1) == (l2, g2), f"step {step}"
    np.testing.assert_array_equal(models[0].read_flat(), models[1].read_flat())
