"""The GPU's cooperative FlashAttention-2 kernels (kernels/attention_flash.cl) against the float64
reference at the edges of their tiles (T = 1, 63, 64, 65, 129 around 16/32/64-row tiles; head_dim
16, 24, 64, 96, padded to multiples of 16; grouped-query attention with groups of 2 and 3), on
both backward paths (dS written once and read by a one-product dq kernel, in chunks of heads
that fit its scratch; or recomputed in the dq kernel), with every work-group shape, their
local-memory fit, and the fallback to attention.cl's kernels where their tiles do not fit a
(simulated) small local memory."""

import pytest

from opencl_llm_studio.engine.model import attention_flash
from opencl_llm_studio.engine.opencl.runtime import Runtime
from tests.kernel_helpers import run_attention

KERNELS = tuple(attention_flash.DEFINES)


def tiled(rt):
    """rt with attention forced to the GPU ("tiled") variant."""
    return rt.with_plan(rt.plan.replace(attention_variant="tiled"))


def launched(rt, fn) -> list[str]:
    """Names of the kernels fn() enqueues on rt."""
    names, real = [], rt.launch_local

    def spy(name, *a, **k):
        names.append(name)
        return real(name, *a, **k)
    rt.launch_local = spy
    try:
        fn()
    finally:
        del rt.launch_local
    return names


def no_ds(monkeypatch):
    """No dS^T scratch: the backward recomputes dS in its dq kernel."""
    monkeypatch.setattr(attention_flash, "DS_BYTES", 0)


@pytest.mark.parametrize("path", ["ds", "recompute"])
@pytest.mark.parametrize("B,T,H,hd,KVH", [
    (1, 1, 2, 16, 1), (1, 63, 2, 24, 1), (2, 64, 3, 16, 3), (1, 65, 3, 64, 1),
    (1, 129, 2, 96, 2), (1, 129, 3, 24, 1), (2, 65, 4, 16, 2), (1, 33, 6, 64, 2),
    (2, 300, 2, 20, 1)])
def test_flash_edges(rt, monkeypatch, path, B, T, H, hd, KVH):
    if path == "recompute":
        no_ds(monkeypatch)
    run_attention(tiled(rt), B, T, H, hd, seed=T + hd + KVH, KVH=KVH)


def flash_names(rt, *shape) -> list[str]:
    """The attention kernels run_attention(rt, *shape) launches."""
    names = launched(rt, lambda: run_attention(rt, *shape[:4], seed=1, KVH=shape[4]))
    return [n for n in names if n.startswith("attention_")]


def test_tiled_variant_runs_the_flash_kernels(rt, monkeypatch):
    """Forward, D, dk/dv and dq all run kernels/attention_flash.cl where its tiles fit (dS path);
    without room for dS, forward, dq (recomputing dS) and dk/dv."""
    t = tiled(rt)
    assert flash_names(t, 1, 40, 2, 24, 1) == [
        "attention_forward_flash", "attention_dsum_flash", "attention_backward_dkv_flash",
        "attention_backward_dq_flash"]
    no_ds(monkeypatch)
    assert flash_names(t, 1, 40, 2, 24, 1) == [k + "_flash" for k in KERNELS]


@pytest.mark.parametrize("heads_per_chunk", [1, 2])
def test_ds_path_runs_in_chunks_of_heads_that_fit(rt, monkeypatch, heads_per_chunk):
    """A dS^T scratch of one or two key/value heads' G x T x T floats splits the backward into
    that many heads per chunk (B 2 x KVH 3 = 6 heads, G 2), with the same results; one float
    less than a head's slice falls back to recomputing dS."""
    T, G = 37, 2
    monkeypatch.setattr(attention_flash, "DS_BYTES", 4 * heads_per_chunk * G * T * T)
    names = flash_names(tiled(rt), 2, T, 6, 16, 3)
    assert names.count("attention_backward_dkv_flash") == 6 // heads_per_chunk
    assert names.count("attention_dsum_flash") == names.count("attention_backward_dq_flash")
    monkeypatch.setattr(attention_flash, "DS_BYTES", 4 * G * T * T - 4)
    assert "attention_dsum_flash" not in flash_names(tiled(rt), 2, T, 6, 16, 3)


@pytest.mark.parametrize("tile", [
    attention_flash.FlashTiles(32, 32, 8, 8, 0), attention_flash.FlashTiles(16, 32, 8, 16, 1),
    attention_flash.FlashTiles(32, 16, 16, 8, 1), attention_flash.FlashTiles(16, 16, 16, 16, 0)],
    ids=lambda t: f"bq{t.bq}-bk{t.bk}-wg{t.wx}x{t.wy}-pf{t.pf}")
def test_every_work_group_shape(rt, monkeypatch, tile):
    """Work-groups 8x8, 8x16, 16x8 and 16x16, with and without the register prefetch, on every
    kernel of both backward paths (T 33 and 65 cross their tiles; head_dim 24 pads to 32, so an
    8-wide group takes 4 channels, a 16-wide 2)."""
    for name in attention_flash.CANDIDATES:
        monkeypatch.setitem(attention_flash.CANDIDATES, name, (tile,))
    run_attention(tiled(rt), 2, 33, 4, 24, seed=3, KVH=2)
    no_ds(monkeypatch)
    run_attention(tiled(rt), 1, 65, 3, 24, seed=4, KVH=1)


def test_flash_tiles_fit_local_memory():
    """Every head_dim up to ANY_DEVICE_HEAD_DIM (96) fits OpenCL's guaranteed 32 KiB, up to 128
    an NVIDIA GPU's 48 KiB (larger ones run attention.cl's kernels), every kernel of both
    backward paths, with the reserve every choice by local memory keeps (LOCAL_RESERVE)."""
    from opencl_llm_studio.engine.opencl.gemm_plan import LOCAL_RESERVE
    for hd in (2, 16, 24, 48, 64, 72, 96, 128):
        for name in attention_flash.CANDIDATES:
            for reported in (32 * 1024, 48 * 1024):
                local = reported - LOCAL_RESERVE
                t = attention_flash.tiles(name, hd, local)
                if hd > attention_flash.ANY_DEVICE_HEAD_DIM and reported < 48 * 1024:
                    continue
                assert t is not None and 4 * attention_flash.local_floats(name, t, hd) <= local
    # OpenCL's guaranteed 32 KiB takes smaller tiles than an NVIDIA GPU's 48 KiB
    small = attention_flash.tiles("attention_forward", 64, 32 * 1024)
    big = attention_flash.tiles("attention_forward", 64, 48 * 1024)
    assert small.bq * small.bk < big.bq * big.bk
    assert attention_flash.tiles("attention_backward_dq", 256, 16 * 1024) is None
    assert attention_flash.padded(24) == 32 and attention_flash.padded(64) == 64


@pytest.mark.parametrize("local_kib", [8, 12, 16, 20, 24, 32, 48])
@pytest.mark.parametrize("hd", [16, 32, 48, 64, 96])
def test_dsum_fits_the_local_memory_the_dkv_tiles_were_chosen_for(local_kib, hd):
    """attention_dsum_flash is built and launched with the dS path's dk/dv tiles (its work-group
    is theirs), and stages dy and y in __local memory: the tiles chosen for a device's local
    memory fit both kernels (16 KiB at head_dim 32 took 16 x 16 groups, whose dsum needs 18 KiB)."""
    t = attention_flash.tiles("attention_backward_dkv_ds", hd, local_kib * 1024)
    if t is not None:
        assert 4 * attention_flash.dsum_local_floats(t.wx * t.wy) <= local_kib * 1024
        assert 4 * attention_flash.local_floats("attention_backward_dkv", t, hd) <= \
            local_kib * 1024


@pytest.mark.parametrize("local_kib,want", [(32, "_flash"), (12, "mixed"), (8, "_tiled")])
def test_small_local_memory_shrinks_tiles_or_falls_back(rt, local_kib, want):
    """A device reporting less local memory takes smaller flash tiles (32 KiB), runs the forward
    as flash and the backward on attention.cl's kernels (12 KiB), or attention.cl's alone (8
    KiB), with the same results."""
    small = tiled(Runtime(rt.info, limits={"local_mem_bytes": local_kib * 1024}))
    names = launched(small, lambda: run_attention(small, 2, 37, 6, 64, seed=5, KVH=3))
    kinds = {n.rsplit("_", 1)[1] for n in names if n.startswith("attention_")}
    assert kinds == ({"flash", "tiled"} if want == "mixed" else {want[1:]})
