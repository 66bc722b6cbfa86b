"""Fused causal attention (FlashAttention-2 style, engine/attention.py) and RoPE against the
float64 twin in tests/reference.py, on every kernel variant (the CPU's register-blocked kernels
at both vector widths, and the GPU's "tiled", all on the test device), random awkward shapes
(T = 1, odd T, T a multiple of no tile, batch 1, head_dim 2 to 128) and with launches split over
(batch, head)."""

import numpy as np
import pytest

import tests.reference as ref
from engine import attention
from engine.config import ModelConfig
from engine.errors import DeviceError
from engine.memory import activation_floats
from tests.test_kernels import close, down, up


@pytest.fixture(params=["blocked8", "blocked16", "tiled"])
def att_rt(rt, request):
    """The test runtime with attention forced to one kernel variant: the CPU's register-blocked
    kernels in float8 (AVX2) or float16 (AVX-512) vectors, or the GPU's tiled ones."""
    before = rt.attention_variant, rt.vector_width
    rt.attention_variant = request.param.rstrip("0123456789")
    if rt.attention_variant == "blocked":
        rt.vector_width = int(request.param[7:])
    yield rt
    rt.attention_variant, rt.vector_width = before


def run_attention(rt, B, T, H, hd, seed):
    rng = np.random.default_rng(seed)
    C = H * hd
    qkv, dy = rng.normal(size=(B, T, 3 * C)), rng.normal(size=(B, T, C))
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    nan = lambda n: up(rt, np.full(n, np.nan))  # noqa: E731  no kernel may read stale contents
    y, lse, bqkv = nan(B * T * C), nan(B * H * T), up(rt, qkv)
    attention.attention_forward(rt, y, lse, bqkv, B, T, C, H)
    ry, ratt = ref.attention_forward(q, k, v, H)
    close(down(rt, y, (B, T, C)), ry)
    close(down(rt, lse, (B, H, T)), ref.attention_logsumexp(q, k, H))
    dqkv, dsum = nan(B * T * 3 * C), nan(B * H * T)
    attention.attention_backward(rt, dqkv, dsum, up(rt, dy), bqkv, y, lse, B, T, C, H)
    got = down(rt, dqkv, (B, T, 3 * C))
    rdq, rdk, rdv = ref.attention_backward(dy, q, k, v, ratt, H)
    close(got[..., :C], rdq, 5e-5)
    close(got[..., C:2 * C], rdk, 5e-5)
    close(got[..., 2 * C:], rdv, 5e-5)


@pytest.mark.parametrize("B,T,H,hd", [(1, 1, 1, 2), (2, 5, 3, 4), (1, 19, 2, 6), (2, 33, 2, 10),
                                      (1, 70, 3, 8), (3, 97, 1, 6), (2, 130, 2, 64),
                                      (1, 47, 1, 24), (1, 37, 2, 40), (1, 45, 1, 128)])
def test_attention(att_rt, B, T, H, hd):
    run_attention(att_rt, B, T, H, hd, seed=B * T + H)


def test_attention_split_launches(att_rt):
    """Launches capped at a small amount of work (as on a display GPU) give the same result,
    and really are split."""
    rt = att_rt
    before, rt.max_launch_flops = rt.max_launch_flops, 1.0e4
    n0 = rt.launches
    try:
        run_attention(rt, 2, 21, 3, 6, seed=7)
    finally:
        rt.max_launch_flops = before
    assert rt.launches - n0 >= 3 * 6  # forward, dq, dkv: one launch per (batch, head)


def test_tiles_shrink_to_local_memory_or_refuse(rt):
    assert attention.tiles_for(rt, 64, "tiled", local_mem=48 * 1024).bk == 32
    assert attention.tiles_for(rt, 256, "tiled", local_mem=32 * 1024).bk == 8
    with pytest.raises(DeviceError, match="local memory") as e:
        attention.tiles_for(rt, 2048, "tiled", local_mem=32 * 1024)
    assert "head_dim" in e.value.hint


def test_activation_memory_is_linear_in_context_length():
    """No (T, T) buffer: doubling T at most doubles the activation floats (before: 4x the
    attention matrices), both in training and evaluation."""
    cfg = ModelConfig(vocab_size=512, d_model=384, n_layer=6, n_head=6, context_length=2048)
    for grad in (True, False):
        small, _ = activation_floats(cfg, 4, 1024, grad)
        big, biggest = activation_floats(cfg, 4, 2048, grad)
        assert big <= 2 * small
        assert biggest < 4 * 6 * 2048 * 2048


@pytest.mark.parametrize("B,T,H,hd", [(1, 1, 1, 2), (2, 5, 3, 4), (1, 17, 2, 6), (3, 32, 4, 16)])
def test_rope(rt, B, T, H, hd):
    rng = np.random.default_rng(T)
    C = H * hd
    qkv = rng.normal(size=(B, T, 3 * C))
    cos, sin = ref.rope_angles(T, hd)
    bq, bc, bs = up(rt, qkv), up(rt, cos), up(rt, sin)
    attention.rope_forward(rt, bq, bc, bs, B * T, T, C, hd)
    want = qkv.copy()
    want[..., :C] = ref.rope_forward(qkv[..., :C], H)
    want[..., C:2 * C] = ref.rope_forward(qkv[..., C:2 * C], H)
    close(down(rt, bq, (B, T, 3 * C)), want)
    attention.rope_backward(rt, bq, bc, bs, B * T, T, C, hd)
    close(down(rt, bq, (B, T, 3 * C)), qkv)  # backward is the inverse rotation
    dq = rng.normal(size=(B, T, C))
    bd = up(rt, np.concatenate([dq, dq, np.zeros_like(dq)], -1))
    attention.rope_backward(rt, bd, bc, bs, B * T, T, C, hd)
    close(down(rt, bd, (B, T, 3 * C))[..., :C], ref.rope_backward(dq, H))
