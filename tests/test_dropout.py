"""Dropout (kernels/dropout.cl, engine/model/dropout.py) against the float64 reference with the same
fixed masks: the kernels alone on odd sizes, then the whole model's loss and every gradient."""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.model import dropout
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.config import TrainConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.model.transformer import Model
from tests.helpers import tiny_config
from tests.kernel_helpers import assert_step_matches, batch


def _close(got, want, tol=1e-6):
    assert np.abs(got - want).max() <= tol * max(np.abs(want).max(), 1e-6)


def test_host_hash_is_the_reference_hash():
    xs = np.random.default_rng(0).integers(0, 2**32, size=200, dtype=np.uint64)
    assert [dropout.lowbias32(int(x)) for x in xs] == [int(h) for h in ref.lowbias32(xs)]


@pytest.mark.parametrize("n,p", [(1, 0.5), (7, 0.1), (1000, 0.2), (4099, 0.9), (30001, 0.5)])
@pytest.mark.parametrize("in_place", [False, True])
def test_kernels_match_reference_with_the_same_mask(rt, n, p, in_place):
    rng = np.random.default_rng(n)
    x, dout = rng.normal(size=n), rng.normal(size=n)
    d = dropout.StepDropout(p, seed=7, step=n)
    key = d.key(1, "ffn")
    keep = ref.dropout_keep(key, n, p)
    bx = rt.to_device(x.astype(np.float32))
    out = bx if in_place else rt.empty(n)
    ops.dropout_forward(rt, out, bx, key, d.threshold, d.scale, n)
    rt.finish()
    _close(rt.read(out, n), ref.dropout_forward(x, keep, p))
    bd = rt.to_device(dout.astype(np.float32))
    dinp = bd if in_place else rt.empty(n)
    ops.dropout_backward(rt, dinp, bd, key, d.threshold, d.scale, n)
    rt.finish()
    _close(rt.read(dinp, n), ref.dropout_backward(dout, keep, p))


def test_masks_drop_p_and_differ_per_site_and_step():
    n, p = 200_000, 0.2
    d = dropout.StepDropout(p, seed=1337, step=3)
    masks = [ref.dropout_keep(d.key(layer, site), n, p) for layer in range(3)
             for site in dropout.SITES]
    masks.append(ref.dropout_keep(dropout.StepDropout(p, 1337, 4).key(0, "attn"), n, p))
    masks.append(ref.dropout_keep(dropout.StepDropout(p, 1338, 3).key(0, "attn"), n, p))
    for m in masks:  # binomial standard deviation ~0.0009
        assert abs(1 - m.mean() - p) < 0.005
    for i in range(len(masks)):
        for j in range(i):  # independent masks agree on p^2 + (1-p)^2 = 0.68 of elements
            assert abs((masks[i] == masks[j]).mean() - 0.68) < 0.01, (i, j)


@pytest.mark.parametrize("cfg,B,T,p", [
    (tiny_config(), 2, 16, 0.3),
    (tiny_config(tie_embeddings=False, n_layer=1, d_model=16, n_head=2), 1, 1, 0.5),
    (tiny_config(n_layer=2, d_model=20, n_head=5, ffn_dim=0), 3, 7, 0.1),
])
def test_model_gradients_with_dropout_match_reference(rt, cfg, B, T, p):
    model = Model(rt, cfg, seed=4)
    w = model.weights()
    x, y = batch(cfg, B, T, seed=2, mask=(B == 3))
    tc = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0, dropout=p, seed=11)
    d = dropout.StepDropout(p, tc.seed, step=model.adam_t)
    n = B * T * cfg.d_model
    masks = {(layer, site): ref.dropout_keep(d.key(layer, site), n, p).reshape(B, T, -1)
             for layer in range(cfg.n_layer) for site in dropout.SITES}
    _, rloss, cache = ref.forward(w, cfg, x, y, masks=masks, drop_p=p)
    _, plain_loss, _ = ref.forward(w, cfg, x, y)
    assert abs(rloss - plain_loss) > 1e-4  # the masks change the loss: dropout is on
    rgrads = ref.backward(w, cfg, cache)
    assert_step_matches(model, x, y, tc, rloss, rgrads)
    # off at inference: the same weights give the reference's loss without dropout
    assert abs(model.loss(x, y) - plain_loss) < 1e-5 * max(1.0, plain_loss)


def test_dropout_is_reproducible_and_changes_each_step(rt):
    cfg = tiny_config(n_layer=1)
    x, y = batch(cfg, 2, 8, seed=5)
    tc = TrainConfig(dropout=0.2)
    runs = []
    for _ in range(2):
        model = Model(rt, cfg, seed=1)
        runs.append([model.train_step(x, y, 0.0, tc)[0] for _ in range(3)])
    assert runs[0] == runs[1]  # same seed and steps: the same masks
    assert len(set(runs[0])) == 3  # lr 0 keeps the weights: only the masks change the loss


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_dropout_out_of_range_is_a_config_error(p):
    with pytest.raises(ConfigError, match="dropout"):
        TrainConfig(dropout=p).validate()
