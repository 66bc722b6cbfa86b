"""Large vocabularies (issue 21): the output projection and cross-entropy in row chunks
(engine/model/output_head.py) give the numbers of the unchunked path and of the float64 reference;
the memory estimate counts the chunk, not B x T x V, and a model that does not fit is refused
with the largest batch size and context length that do."""

from dataclasses import replace

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.model import activations, output_head
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.model.memory import activation_floats, check_fits, fits, largest_fit
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.gemm_plan import GemmChoice
from tests.helpers import tiny_config
from tests.kernel_helpers import batch, rel_err

TC = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0)


def step(model, x, y):
    """One train_step at lr ~0: (loss, every gradient by name)."""
    loss, _, skipped = model.train_step(x, y, 1e-30, TC)
    assert not skipped
    return loss, model.table.unflatten(model.read_flat("grads"))


@pytest.mark.parametrize("cfg,B,T,mask", [
    (tiny_config(), 10, 15, False),                                  # 150 rows: 128 + 22
    (tiny_config(tie_embeddings=False, n_head=6, n_kv_head=2), 17, 16, True),  # 272: 128 x 2 + 16
    (tiny_config(n_layer=1), 1, 16, False),                         # fewer rows than a chunk
])
def test_chunked_cross_entropy_equals_unchunked_and_reference(rt, monkeypatch, cfg, B, T, mask):
    x, y = batch(cfg, B, T, seed=B, mask=mask)
    whole = Model(rt, cfg, seed=5)
    w = whole.weights()
    a = whole.activations(B, T, with_grad=True)
    assert not output_head.chunked(a)
    want_logits = whole.logits(x)
    want_loss, want_grads = step(whole, x, y)
    monkeypatch.setattr(activations, "LOGITS_FLOATS", 1)  # the smallest chunk: 128 rows
    parts = Model(rt, cfg, flat_weights=whole.read_flat(), seed=5)
    a = parts.activations(B, T, with_grad=True)
    assert a.logit_rows == min(128, B * T) and output_head.chunked(a) == (B * T > 128)
    np.testing.assert_array_equal(parts.logits(x), want_logits)
    np.testing.assert_array_equal(parts.last_logits(x[:1], 7), want_logits[0, 6])
    assert parts.loss(x, y) == pytest.approx(want_loss, rel=1e-6)
    loss, grads = step(parts, x, y)
    assert loss == pytest.approx(want_loss, rel=1e-6)
    for name, g in want_grads.items():
        assert rel_err(grads[name], g) < 1e-5, name
    _, rloss, cache = ref.forward(w, cfg, x, y)
    rgrads = ref.backward(w, cfg, cache)
    assert abs(loss - rloss) < 1e-5 * max(1.0, abs(rloss))
    for name, g in rgrads.items():
        assert rel_err(grads[name], g) < 1e-4, name


@pytest.mark.parametrize("packed_rows", [(128, 22), (128,), (22,)])
def test_chunks_read_the_output_weight_in_place_where_the_gemm_can(rt, monkeypatch, packed_rows):
    """Chunks whose product runs on the packed GEMM (its nt form reads W (V, C) as stored) make
    no transposed copy of W; the others share one, made by the first chunk that needs it
    (150 rows: chunks of 128 and 22). Logits, loss and gradients as the float64 reference."""
    if not rt.is_cpu and "Oclgrind" not in rt.info.name:
        pytest.skip("the packed GEMM is for CPUs (and checked under Oclgrind)")
    cfg, B, T = tiny_config(), 10, 15
    C, V = cfg.d_model, cfg.vocab_size
    packed = GemmChoice("packed", vector_width=rt.plan.vector_width)
    plan = replace(rt.plan, large=None, few_rows=None,
                   shapes=tuple((("nn", n, V, C), packed) for n in packed_rows))
    monkeypatch.setattr(activations, "LOGITS_FLOATS", 1)  # chunks of 128 rows
    transposes = []
    transpose = ops.transpose
    monkeypatch.setattr(ops, "transpose", lambda rt_, out, inp, R, C_: (
        transposes.append((R, C_)), transpose(rt_, out, inp, R, C_)))
    model = Model(rt.with_plan(plan), cfg, seed=3)
    x, y = batch(cfg, B, T, seed=1)
    w = model.weights()
    rlogits, rloss, cache = ref.forward(w, cfg, x, y)
    logits = model.logits(x)
    head = [t for t in transposes if t == (V, C)]
    assert len(head) == (0 if len(packed_rows) == 2 else 1)
    np.testing.assert_allclose(logits, rlogits.reshape(logits.shape), atol=2e-5)
    loss, grads = step(model, x, y)
    assert abs(loss - rloss) < 1e-5 * max(1.0, abs(rloss))
    for name, g in ref.backward(w, cfg, cache).items():
        assert rel_err(grads[name], g) < 1e-4, name


def test_last_logits_of_any_row_of_a_chunked_window(rt, monkeypatch):
    """Generation's window (1, T) in chunks: the row asked for, across chunk boundaries."""
    monkeypatch.setattr(activations, "LOGITS_FLOATS", 1)
    cfg = tiny_config(context_length=300)
    model = Model(rt, cfg, seed=2)
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, 300))
    full = ref.forward(model.weights(), cfg, ids)[0]
    for length in (1, 128, 129, 257, 300):
        np.testing.assert_allclose(model.last_logits(ids, length), full[length - 1], atol=2e-5)


SMOL = ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                   ffn_dim=1536, context_length=256)   # SmolLM2-135M's shape


def test_memory_counts_a_chunk_of_logits_not_all():
    B, T, V = 8, 256, SMOL.vocab_size
    rows = activations.logit_rows(V, B * T)
    assert rows == 256 and rows * V <= activations.LOGITS_FLOATS
    total, biggest = activation_floats(SMOL, B, T, True)
    assert biggest < B * T * V // 4
    small = activation_floats(SMOL.replace(vocab_size=512), B, T, True)[0]
    assert total - small == rows * V - B * T * 512    # the logits: one chunk


def test_memory_counts_narrower_kv_rows():
    """Grouped-query attention's qkv rows: C + 2 kv_dim wide (a quarter less here)."""
    mha = activation_floats(SMOL.replace(n_kv_head=0), 2, 256, True)[0]
    gqa = activation_floats(SMOL, 2, 256, True)[0]
    assert mha - gqa == 2 * SMOL.n_layer * 2 * 256 * (576 - 192) + 2 * 256 * 2 * (576 - 192)


def test_refusal_names_the_largest_batch_and_context_that_fit(rt):
    """A device too small for batch 16: the message names the largest batch and context that
    fit, and they do (one more does not)."""
    info = replace(rt.info, global_mem_bytes=5 * 2**30, max_alloc_bytes=2**30)  # 135M: 6.3 GiB
    assert not fits(SMOL, 16, info)
    with pytest.raises(ConfigError, match="GiB") as e:
        check_fits(SMOL, 16, info)
    batch, context = largest_fit(SMOL, 16, info)
    assert 1 <= batch < 16 and 1 <= context < 256
    assert f"batch size {batch} at context length 256" in e.value.hint
    assert f"context length {context} at batch size 16" in e.value.hint
    assert fits(SMOL, batch, info) and not fits(SMOL, batch + 1, info)
    ctx = SMOL.replace(context_length=context)
    assert fits(ctx, 16, info) and not fits(ctx.replace(context_length=context + 1), 16, info)
    tiny = replace(info, global_mem_bytes=2**20)
    with pytest.raises(ConfigError) as e:
        check_fits(SMOL, 1, tiny)
    assert "weights" in e.value.hint
