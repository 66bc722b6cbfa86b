"""The output projection on the rows with a target only (engine/model/output_head.py pick_rows,
cross_entropy_rows): a tuning batch scores its answers alone, so the lm_head of the other rows
was wasted work. Loss, every gradient and per-row validation losses equal the float64
reference and the all-rows path, whole and chunked logits, tied and untied, odd shapes."""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.config import TrainConfig
from opencl_llm_studio.engine.model import activations, output_head
from opencl_llm_studio.engine.model.transformer import Model
from tests.helpers import tiny_config
from tests.kernel_helpers import rel_err

TC = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0)


def answers_only(cfg, B, T, seed, share=0.3):
    """ids (B, T) and targets with only each row's last `share` of positions scored (a
    dialogue's answer), one row with none when B > 2."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, size=(B, T + 1))
    x, y = ids[:, :-1].copy(), ids[:, 1:].copy()
    y[:, : T - max(1, int(T * share))] = -1
    if B > 2:
        y[1] = -1
    if T == 1:
        y[2:B - 1] = -1
    return x, y


def step(model, x, y):
    loss, _, skipped = model.train_step(x, y, 1e-30, TC)
    assert not skipped
    return loss, model.table.unflatten(model.read_flat("grads"))


@pytest.mark.parametrize("cfg,B,T,chunk", [
    (tiny_config(context_length=32), 3, 17, False),                  # odd sizes
    (tiny_config(tie_embeddings=False, n_head=6, n_kv_head=2), 20, 16, True),  # 2+ chunks
    (tiny_config(n_layer=1), 5, 1, False),                           # T = 1: 2 of 5 rows
    (tiny_config(context_length=32), 9, 31, True),
])
def test_sparse_head_equals_reference_and_all_rows(rt, monkeypatch, cfg, B, T, chunk):
    if chunk:
        monkeypatch.setattr(activations, "LOGITS_FLOATS", 1)   # chunks of 128 rows
    x, y = answers_only(cfg, B, T, seed=B + T, share=1.0 if T == 1 else 0.3)
    model = Model(rt, cfg, seed=7)
    w = model.weights()
    loss, grads = step(model, x, y)
    a = model.activations(B, T, with_grad=True)
    assert output_head.sparse(a) and a.head_n == int((y >= 0).sum())
    rows = model.loss(x, y, per_row=True)

    monkeypatch.setattr(output_head, "SPARSE_SHARE", 0.0)   # every row projected, as before
    full = Model(rt, cfg, flat_weights=model.read_flat(), seed=7)
    want_loss, want_grads = step(full, x, y)
    assert not output_head.sparse(full.activations(B, T, with_grad=True))
    assert loss == pytest.approx(want_loss, rel=1e-6)
    for name, g in want_grads.items():
        assert rel_err(grads[name], g) < 1e-5, name
    np.testing.assert_allclose(rows, full.loss(x, y, per_row=True), rtol=1e-5, atol=1e-6)

    _, rloss, cache = ref.forward(w, cfg, x, y)
    rgrads = ref.backward(w, cfg, cache)
    assert abs(loss - rloss) < 1e-5 * max(1.0, abs(rloss))
    for name, g in rgrads.items():
        assert rel_err(grads[name], g) < 1e-4, name
    assert abs(rows.sum() / (y >= 0).sum() - rloss) < 1e-5 * max(1.0, abs(rloss))


def test_dense_batches_and_generation_keep_every_row(rt):
    """Pretraining (every target scored) and logits (no targets) project every row."""
    cfg = tiny_config()
    model = Model(rt, cfg, seed=1)
    rng = np.random.default_rng(0)
    x = rng.integers(0, cfg.vocab_size, size=(2, 8))
    model.train_step(x, x, 1e-30, TC)
    assert not output_head.sparse(model.activations(2, 8, with_grad=True))
    model.logits(x)
    assert not output_head.sparse(model.activations(2, 8, with_grad=True))


def test_lora_on_a_quantized_base_with_few_targets(rt):
    """LoRA over a Q4_1 base: the rows with a target alone give the numbers of the base's
    dequantized float weights; batches with other target counts reuse the base's panel scratch
    (one per row count kept 144 MB more on SmolLM2-135M's 10 tuning steps)."""
    from opencl_llm_studio.engine.config import LoraConfig
    from gguf import GGMLQuantizationType as Q

    from tests.helpers import quant_lora_pair
    cfg = tiny_config(d_model=64, n_head=4, n_kv_head=2, ffn_dim=96, vocab_size=320,
                      context_length=32)
    q, f, _ = quant_lora_pair(rt, cfg, {"*": Q.Q4_1}, LoraConfig(rank=4))
    for share, seed in ((0.3, 1), (0.2, 2), (0.5, 3), (0.1, 4)):
        x, y = answers_only(cfg, 6, 24, seed=seed, share=share)
        (lq, gq), (lf, gf) = step(q, x, y), step(f, x, y)
        assert output_head.sparse(q.activations(6, 24, with_grad=True))
        assert lq == pytest.approx(lf, rel=1e-5)
        for name, g in gf.items():
            assert rel_err(gq[name], g) < 1e-4, name
    assert len(q.base._scratch) == 1


def test_a_window_past_the_context_is_refused(rt):
    """RoPE's tables hold context_length positions: a longer window read past them (random
    NaN losses in a first version of this file's tests); it is refused, not computed."""
    cfg = tiny_config(context_length=16)
    model = Model(rt, cfg, seed=1)
    x = np.zeros((2, 17), np.int64)
    with pytest.raises(ValueError, match="context_length 16"):
        model.loss(x, x)
    with pytest.raises(ValueError, match="longer than"):
        model.train_step(x, x, 1e-3, TC)
    assert np.isfinite(model.loss(x[:, :16], x[:, :16]))
