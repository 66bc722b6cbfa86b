"""The GPU's cooperative FlashAttention-2 kernels (kernels/attention_flash.cl) against the float64
reference at the edges of their tiles (T = 1, 63, 64, 65, 129 around 16/32/64-row tiles; head_dim
16, 24, 64, 96, padded to multiples of 16; grouped-query attention with groups of 2 and 3), their
local-memory fit, and the fallback to attention.cl's kernels where their tiles do not fit a
(simulated) small local memory."""

import pytest

from engine.model import attention_flash
from engine.opencl.runtime import Runtime
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


@pytest.mark.parametrize("B,T,H,hd,KVH", [
    (1, 1, 2, 16, 1), (1, 63, 2, 24, 1), (2, 64, 3, 16, 3), (1, 65, 3, 64, 1),
    (1, 129, 2, 96, 2), (1, 129, 3, 24, 1), (2, 65, 4, 16, 2), (1, 33, 6, 64, 2)])
def test_flash_edges(rt, B, T, H, hd, KVH):
    run_attention(tiled(rt), B, T, H, hd, seed=T + hd + KVH, KVH=KVH)


def test_tiled_variant_runs_the_flash_kernels(rt):
    """Forward, dq and dk/dv all run kernels/attention_flash.cl where its tiles fit."""
    t = tiled(rt)
    names = launched(t, lambda: run_attention(t, 1, 40, 2, 24, seed=1, KVH=1))
    assert [n for n in names if n.startswith("attention_")] == [k + "_flash" for k in KERNELS]


def test_flash_tiles_fit_local_memory():
    """Every head_dim up to 96 fits OpenCL's guaranteed 32 KiB, up to 128 an NVIDIA GPU's 48 KiB
    (larger ones run attention.cl's kernels)."""
    for hd in (2, 16, 24, 48, 64, 72, 96, 128):
        for name in KERNELS:
            for local in (32 * 1024, 48 * 1024):
                t = attention_flash.tiles(name, hd, local)
                if hd > 96 and local < 48 * 1024:
                    continue
                assert t is not None and 4 * attention_flash.local_floats(name, t, hd) <= local
    # OpenCL's guaranteed 32 KiB takes smaller tiles than an NVIDIA GPU's 48 KiB
    small = attention_flash.tiles("attention_forward", 64, 32 * 1024)
    big = attention_flash.tiles("attention_forward", 64, 48 * 1024)
    assert small.bq * small.bk < big.bq * big.bk
    assert attention_flash.tiles("attention_backward_dq", 256, 16 * 1024) is None
    assert attention_flash.padded(24) == 32 and attention_flash.padded(64) == 64


@pytest.mark.parametrize("local_kib,want", [(32, "_flash"), (12, "mixed"), (8, "_tiled")])
def test_small_local_memory_shrinks_tiles_or_falls_back(rt, local_kib, want):
    """A device reporting less local memory takes smaller flash tiles (32 KiB), runs the forward
    as flash and the backward on attention.cl's kernels (12 KiB), or attention.cl's alone (8
    KiB), with the same results."""
    small = tiled(Runtime(rt.info, limits={"local_mem_bytes": local_kib * 1024}))
    names = launched(small, lambda: run_attention(small, 2, 37, 6, 64, seed=5, KVH=3))
    kinds = {n.rsplit("_", 1)[1] for n in names if n.startswith("attention_")}
    assert kinds == ({"flash", "tiled"} if want == "mixed" else {want[1:]})
