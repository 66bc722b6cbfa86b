"""Fused causal attention (FlashAttention-2 style, engine/model/attention.py) and RoPE against the
float64 twin in tests/reference.py, on every kernel variant (the CPU's register-blocked kernels
at both vector widths, and the GPU's "tiled", all on the test device), random awkward shapes
(T = 1, odd T, T a multiple of no tile, batch 1, head_dim 2 to 128) and with launches split over
(batch, head)."""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.model import attention
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ConfigError, DeviceError
from opencl_llm_studio.engine.model.memory import activation_floats
from tests.kernel_helpers import GQA_SHAPES, close, down, run_attention, up


@pytest.fixture(params=["blocked8", "blocked16", "tiled"])
def att_rt(rt, request):
    """The test runtime with attention forced to one kernel variant: the CPU's register-blocked
    kernels in float8 (AVX2) or float16 (AVX-512) vectors, or the GPU's tiled ones."""
    variant = request.param.rstrip("0123456789")
    width = int(request.param[7:]) if variant == "blocked" else rt.plan.vector_width
    return rt.with_plan(rt.plan.replace(attention_variant=variant, vector_width=width))


@pytest.mark.parametrize("B,T,H,hd", [(1, 1, 1, 2), (2, 5, 3, 4), (1, 19, 2, 6), (2, 33, 2, 10),
                                      (1, 70, 3, 8), (3, 97, 1, 6), (2, 130, 2, 64),
                                      (1, 47, 1, 24), (1, 37, 2, 40), (1, 45, 1, 128)])
def test_attention(att_rt, B, T, H, hd):
    run_attention(att_rt, B, T, H, hd, seed=B * T + H)


@pytest.mark.parametrize("B,T,H,hd,KVH", GQA_SHAPES)
def test_grouped_query_attention(att_rt, B, T, H, hd, KVH):
    """Query head h reads key/value head h // (H / KVH); dk, dv sum over the group."""
    run_attention(att_rt, B, T, H, hd, seed=B * T + H + KVH, KVH=KVH)


def test_grouped_query_attention_with_kv_heads_equal_heads_is_multi_head(att_rt):
    """KVH = H gives the layout and numbers of plain multi-head attention."""
    run_attention(att_rt, 2, 9, 3, 4, seed=3, KVH=3)


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
    # forward, dq, dkv: one launch per (batch, head); blocked: forward, fused backward
    assert rt.launches - n0 >= _kernels(rt) * 6


def test_grouped_query_attention_split_launches(att_rt):
    """Split launches of the grouped kernels (dk/dv per (batch, key/value head)) agree too."""
    rt = att_rt
    before, rt.max_launch_flops = rt.max_launch_flops, 1.0e4
    n0 = rt.launches
    try:
        run_attention(rt, 2, 21, 6, 6, seed=8, KVH=2)
    finally:
        rt.max_launch_flops = before
    # forward, dq per (batch, head), dkv per kv head; blocked: forward, backward per kv head
    assert rt.launches - n0 >= (2 * 6 + 2 * 2 if _kernels(rt) == 3 else 6 + 2 * 2)


def _kernels(rt) -> int:
    """Attention kernels a forward + backward runs: 2 on the blocked variant (its backward is
    one kernel), else 3."""
    return 2 if attention.variant(rt) == "blocked" else 3


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("splits", [1, 2, 5, 64])
def test_blocked_splits_agree(rt, monkeypatch, width, splits):
    """The blocked kernels give the same y, logsumexp and gradients whether one work-item takes
    all the tiles of a head or several share them (every n-th tile, each with its own
    transposed rows; the backward's shares of dq summed by attention_dq_sum; more work-items
    than tiles leave the rest idle), grouped-query too."""
    monkeypatch.setattr(attention, "splits", lambda *a: splits)
    brt = rt.with_plan(rt.plan.replace(attention_variant="blocked", vector_width=width))
    n0 = brt.launches
    run_attention(brt, 2, 37, 6, 24, seed=splits, KVH=2)
    run_attention(brt, 1, 9, 1, 40, seed=splits + 1)
    assert brt.launches - n0 == 2 * (2 + (splits > 1))  # forward, backward (+ dq sum)


@pytest.mark.parametrize("local_kib", [1, 16])
def test_blocked_rows_in_scratch_when_local_memory_is_small(rt, local_kib):
    """Where a work-item's transposed rows do not fit the device's local memory (1 KiB: none
    do; 16 KiB: the forward's do, the backward's do not) the blocked kernels keep them in the
    runtime's scratch (the backward's shares of dq after them where it splits heads), with the
    same results, grouped-query and split heads too."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    small = Runtime(rt.info, limits={"local_mem_bytes": local_kib * 1024})
    for width in (8, 16):
        brt = small.with_plan(small.plan.replace(attention_variant="blocked", vector_width=width))
        run_attention(brt, 2, 37, 6, 24, seed=local_kib + width, KVH=2)
        run_attention(brt, 1, 70, 1, 40, seed=local_kib + width + 1)


def test_blocked_rows_leave_a_reserve_of_local_memory(rt, monkeypatch):
    """A work-item's transposed rows that would take exactly the local memory a device reports
    go to the scratch instead (NVIDIA refused a blocked kernel at its full 48 KiB with
    OUT_OF_RESOURCES), with the reference's results."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    T, hd = 130, 64
    floats = hd * (-(-T // 32) * 32 + 32)   # the forward's k^T rows at vector width 16
    edge = Runtime(rt.info, limits={"local_mem_bytes": 4 * floats})
    brt = edge.with_plan(edge.plan.replace(attention_variant="blocked", vector_width=16))
    seen, build = [], attention.program

    def program(rt, head_dim, kind=None, group=1, local=False):
        seen.append(local)
        return build(rt, head_dim, kind, group, local)

    monkeypatch.setattr(attention, "program", program)
    run_attention(brt, 2, T, 2, hd, seed=3)
    assert seen and not any(seen)


def test_blocked_splits_fill_the_cores(rt):
    """Fewer heads than compute units are shared out until every compute unit has a
    work-item, never more work-items than tiles; as many heads as units run a work-item each."""
    cu = rt.info.compute_units
    assert attention.splits(rt, 1000, 1, 8) == min(cu, 125)   # 125 tiles of 8 rows
    assert attention.splits(rt, 9, 1, 8) == min(cu, 2)
    assert attention.splits(rt, 128, cu, 8) == 1


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


@pytest.mark.parametrize("B,T,H,hd,KVH", [(1, 1, 1, 2, 1), (2, 5, 3, 4, 3), (1, 17, 2, 6, 2),
                                          (3, 32, 4, 16, 4), (1, 1, 9, 2, 3), (2, 7, 6, 4, 1),
                                          (1, 13, 9, 6, 3)])
def test_rope(rt, B, T, H, hd, KVH):
    """q (H heads) and k (KVH heads) rotated, v untouched; backward the inverse rotation."""
    rng = np.random.default_rng(T)
    C, KV = H * hd, KVH * hd
    W = C + 2 * KV
    qkv = rng.normal(size=(B, T, W))
    cos, sin = ref.rope_angles(T, hd)
    bq, bc, bs = up(rt, qkv), up(rt, cos), up(rt, sin)
    attention.rope_forward(rt, bq, bc, bs, B * T, T, C, hd, 0, KVH)
    want = qkv.copy()
    want[..., :C] = ref.rope_forward(qkv[..., :C], H)
    want[..., C:C + KV] = ref.rope_forward(qkv[..., C:C + KV], KVH)
    close(down(rt, bq, (B, T, W)), want)
    attention.rope_backward(rt, bq, bc, bs, B * T, T, C, hd, 0, KVH)
    close(down(rt, bq, (B, T, W)), qkv)  # backward is the inverse rotation
    dq, dk = rng.normal(size=(B, T, C)), rng.normal(size=(B, T, KV))
    bd = up(rt, np.concatenate([dq, dk, np.zeros_like(dk)], -1))
    attention.rope_backward(rt, bd, bc, bs, B * T, T, C, hd, 0, KVH)
    got = down(rt, bd, (B, T, W))
    close(got[..., :C], ref.rope_backward(dq, H))
    close(got[..., C:C + KV], ref.rope_backward(dk, KVH))
    assert not got[..., C + KV:].any()


@pytest.mark.parametrize("hd,base,factor,lo,hi,orig,T", [
    (64, 500000.0, 32.0, 1.0, 4.0, 8192, 40),   # Llama 3.2 1B
    (128, 500000.0, 8.0, 1.0, 4.0, 8192, 9),    # Llama 3.1 8B
    (16, 10000.0, 4.0, 2.0, 8.0, 64, 33)])      # a small model where all three bands occur
def test_rope_llama3_scaling(hd, base, factor, lo, hi, orig, T):
    """rope_inv_freq with rope_scaling llama3 equals transformers' _compute_llama3_parameters
    (tests/reference.py's line-by-line numpy copy), and its table feeds the angles."""
    cfg = ModelConfig(d_model=2 * hd, n_head=2, rope_base=base, rope_scaling="llama3",
                      rope_scaling_factor=factor, rope_low_freq_factor=lo,
                      rope_high_freq_factor=hi, rope_original_context=orig).validate()
    want = ref.llama3_inv_freq(base, hd, factor, lo, hi, orig)
    got = attention.rope_inv_freq(cfg)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    plain = attention.rope_inv_freq(cfg.replace(rope_scaling=""))
    assert (got < plain).any() and (got == plain).any()  # scaled low, kept high frequencies
    if hd == 16:
        assert ((got < plain) & (got > plain / factor)).any()  # the smoothed band
    cos, sin = attention.rope_table(hd, T, base, got)
    rc, rs = ref.rope_angles(T, hd, inv_freq=want)
    close(cos, rc)
    close(sin, rs)


def test_rope_scaling_settings_are_checked():
    with pytest.raises(ConfigError, match="rope_scaling"):
        ModelConfig(rope_scaling="yarn").validate()
    with pytest.raises(ConfigError, match="low_freq_factor"):
        ModelConfig(rope_scaling="llama3", rope_low_freq_factor=4.0).validate()


def test_kv_heads_must_divide_heads():
    with pytest.raises(ConfigError, match="n_kv_head") as e:
        ModelConfig(d_model=96, n_head=6, n_kv_head=4).validate()
    assert "1, 2, 3, 6" in e.value.hint
    assert ModelConfig(d_model=96, n_head=6, n_kv_head=2).validate().kv_heads == 2
    assert ModelConfig(n_head=4).kv_heads == 4
