"""LoRA adapters on a frozen base (engine.model.lora) against the float64 reference.

The reference is the merged model W' = W + s B A (tests/reference.py forward/backward); by the
chain rule the adapters' gradients are dB = s dW' A^T and dA = s B^T dW', so every adapter
gradient is checked against an independent computation, not against the engine itself."""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.config import LORA_TARGETS, LoraConfig, TrainConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.generation.decode import KVDecoder
from opencl_llm_studio.engine.model.lora import LoraModel
from opencl_llm_studio.engine.model.lora_base import FlatBase
from opencl_llm_studio.engine.model.lora_table import names
from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.model.transformer import Model
from tests.helpers import tiny_config
from tests.kernel_helpers import batch, rel_err

TC = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0)


def _models(rt, cfg, lora, seed=0, b_std=0.05):
    """A base (reference weights) and a LoraModel on it whose B is non-zero."""
    w = ref.init_weights(cfg, seed=seed)
    flat = ParamTable(cfg).flatten(w)
    m = LoraModel(rt, cfg, FlatBase(rt, cfg, flat), lora, seed=seed)
    rng = np.random.default_rng(seed + 1)
    ad = {n: (v if n.endswith("lora_a") else rng.normal(0, b_std, v.shape)).astype(np.float32)
          for n, v in m.adapters().items()}
    m.write_flat("params", m.table.flatten(ad))
    return w, m, ad


def _merged(w, ad, cfg, lora):
    out = dict(w)
    for layer in range(cfg.n_layer):
        for t in lora.targets:
            a, b = names(layer, t)
            key = f"blk.{layer}.{t}.weight"
            out[key] = w[key] + lora.scale * (ad[b].astype(np.float64) @ ad[a])
    return out


@pytest.mark.parametrize("shape,kw,lora", [
    ((2, 7), {}, LoraConfig()),
    ((1, 1), {}, LoraConfig(rank=3, alpha=5.0)),
    ((3, 16), {"n_head": 4, "n_kv_head": 2, "d_model": 32}, LoraConfig(rank=5)),
    ((1, 9), {"n_head": 6, "n_kv_head": 1, "d_model": 36, "tie_embeddings": False},
     LoraConfig(rank=2, targets=("attn_k", "ffn_up"))),
])
def test_lora_step_matches_reference(rt, shape, kw, lora):
    B, T = shape
    cfg = tiny_config(**kw)
    w, m, ad = _models(rt, cfg, lora)
    merged = _merged(w, ad, cfg, lora)
    x, y = batch(cfg, B, T, mask=(B == 3))
    np.testing.assert_allclose(m.logits(x), ref.forward(merged, cfg, x), rtol=0, atol=2e-5)
    _, rloss, cache = ref.forward(merged, cfg, x, y)
    rgrads = ref.backward(merged, cfg, cache)
    loss, _, skipped = m.train_step(x, y, 1e-30, TC)
    assert not skipped and abs(loss - rloss) < 1e-5 * max(1.0, abs(rloss))
    grads = m.table.unflatten(m.read_flat("grads"))
    for layer in range(cfg.n_layer):
        for t in lora.targets:
            a, b = names(layer, t)
            dW = rgrads[f"blk.{layer}.{t}.weight"]
            want_b = lora.scale * dW @ ad[a].T
            want_a = lora.scale * ad[b].T.astype(np.float64) @ dW
            assert rel_err(grads[b], want_b) < 1e-4, b
            assert rel_err(grads[a], want_a) < 1e-4, a


def test_step_zero_is_the_base_and_only_adapters_train(rt):
    cfg = tiny_config()
    w = ref.init_weights(cfg, seed=4)
    flat = ParamTable(cfg).flatten(w)
    full = Model(rt, cfg, flat)
    m = LoraModel(rt, cfg, FlatBase(rt, cfg, flat), LoraConfig(rank=4), seed=4)
    x, y = batch(cfg, 2, 11, seed=1)
    np.testing.assert_array_equal(m.logits(x), full.logits(x))   # B = 0: exactly the base
    before = m.adapters()
    losses = [m.train_step(x, y, 3e-3, TrainConfig(weight_decay=0.0))[0] for _ in range(8)]
    assert losses[-1] < losses[0] - 0.05
    after = m.adapters()
    assert all(np.any(after[n] != before[n]) for n in after if n.endswith("lora_b"))
    for name, v in m.base.weights().items():   # the base never moves
        np.testing.assert_array_equal(v, w[name].astype(np.float32), err_msg=name)
    assert m.table.n_params < ParamTable(cfg).n_params / 3   # trainable: the adapters alone


def test_decoding_with_adapters_matches_the_full_pass(rt):
    cfg = tiny_config(n_head=4, n_kv_head=2, d_model=32)
    _, m, _ = _models(rt, cfg, LoraConfig(rank=4), seed=2)
    ids = [5, 17, 42, 7, 99, 3]
    full = m.logits(np.array([ids], np.int32))[0]
    dec = KVDecoder(m)
    np.testing.assert_allclose(dec.reset(ids[:3]), full[2], atol=2e-5)
    for i in range(3, len(ids)):
        np.testing.assert_allclose(dec.step(ids[i]), full[i], atol=2e-5)


def test_chunked_logits_head_with_adapters(rt):
    """A vocabulary large enough that the output head runs in row chunks."""
    cfg = tiny_config(vocab_size=70000, n_layer=1)
    w, m, ad = _models(rt, cfg, LoraConfig(rank=2, targets=("attn_v", "ffn_down")))
    x, y = batch(cfg, 2, 16, seed=3)
    merged = _merged(w, ad, cfg, m.lora)
    _, rloss, cache = ref.forward(merged, cfg, x, y)
    rgrads = ref.backward(merged, cfg, cache)
    loss, _, _ = m.train_step(x, y, 1e-30, TC)
    assert abs(loss - rloss) < 1e-5 * max(1.0, rloss)
    g = m.table.unflatten(m.read_flat("grads"))
    a, b = names(0, "ffn_down")
    assert rel_err(g[b], m.lora.scale * rgrads["blk.0.ffn_down.weight"] @ ad[a].T) < 1e-4


def test_adapter_dropout_trains_and_leaves_inference_alone(rt):
    cfg = tiny_config()
    w, m, _ = _models(rt, cfg, LoraConfig(rank=4, dropout=0.3), seed=5)
    _, plain, _ = _models(rt, cfg, LoraConfig(rank=4), seed=5)
    x, y = batch(cfg, 2, 12, seed=6)
    assert m.loss(x, y) == pytest.approx(plain.loss(x, y), abs=1e-6)   # off at inference
    l_drop = m.train_step(x, y, 1e-30, TC)[0]
    l_plain = plain.train_step(x, y, 1e-30, TC)[0]
    assert l_drop != pytest.approx(l_plain, abs=1e-7)
    # the masks are the same forward and backward: the gradient of a linear probe agrees with
    # a finite difference of the dropped loss along it
    g = m.read_flat("grads").astype(np.float64)
    p0 = m.read_flat("params")
    d = np.random.default_rng(0).normal(0, 1, p0.shape) * (g != 0)
    eps = 1e-2 / np.linalg.norm(d)

    def loss_at(flat):
        m.write_flat("params", flat.astype(np.float32))
        m.adam_t = 0   # the same masks (keyed by the step)
        out = m.train_step(x, y, 1e-30, TC)[0]
        return out
    fd = (loss_at(p0 + eps * d) - loss_at(p0 - eps * d)) / (2 * eps)
    assert fd == pytest.approx(float(g @ d), rel=3e-2)


@pytest.mark.parametrize("bad", [dict(rank=0), dict(alpha=-1.0), dict(dropout=1.0),
                                 dict(targets=("attn_x",)), dict(targets=())])
def test_bad_lora_settings_are_refused(bad):
    with pytest.raises(ConfigError):
        LoraConfig(**bad).validate()


def test_targets_default_to_every_linear_layer():
    assert LoraConfig().targets == LORA_TARGETS and len(LORA_TARGETS) == 7
