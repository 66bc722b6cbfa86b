"""The GPU's cooperative FlashAttention-2 kernels (kernels/attention_flash.cl; Dao 2023,
Algorithms 1 and 2): their tiles, local-memory fit and launches. engine/model/attention.py calls
`launch` for the "tiled" variant and falls back to attention.cl's one-row-per-work-item kernels
for a kernel whose tiles do not fit the device's local memory.

Each kernel runs 16 x 16 work-items per group over a tile of bq query rows and bk key rows
(multiples of 16), head_dim padded with zeros to hdp, a multiple of 16. Its __local floats
(`local_floats`) must fit the device's local memory; `tiles` takes the first fitting candidate of
CANDIDATES, the fastest first (measured on an H200, benchmarks/RESULTS.md), so a device with
OpenCL's guaranteed 32 KiB takes smaller tiles than one with 48 KiB.
"""

from __future__ import annotations

from typing import NamedTuple

from engine.opencl.runtime import Built, Runtime

GROUP = (16, 16)  # work-items per group: (tx, ty) of kernels/attention_flash.cl
# kernel name -> its -D switch
DEFINES = {"attention_forward": "FLASH_FWD", "attention_backward_dq": "FLASH_DQ",
           "attention_backward_dkv": "FLASH_DKV"}


class FlashTiles(NamedTuple):
    """One kernel's tile: bq query rows and bk key rows per tile (kernels/attention_flash.cl)."""

    bq: int
    bk: int


# (bq, bk) per kernel, preferred first; the first whose __local floats fit is taken. Order from
# `bench_attention.py tiles` on an H200 (d384 T2048 B8, fused forward + backward, Dec 2026:
# forward 64x32 6.62 ms < 32x64 6.82 < 32x32 6.86; dq 64x16 6.45 < 32x32 6.61 < 32x16 7.05;
# dk/dv 32x32 6.63 < 16x32 7.08 < 32x16 8.83).
CANDIDATES = {
    "attention_forward": (FlashTiles(64, 32), FlashTiles(32, 32), FlashTiles(32, 16),
                          FlashTiles(16, 16)),
    "attention_backward_dq": (FlashTiles(64, 16), FlashTiles(32, 32), FlashTiles(32, 16),
                              FlashTiles(16, 16)),
    "attention_backward_dkv": (FlashTiles(32, 32), FlashTiles(16, 32), FlashTiles(16, 16)),
}


def padded(head_dim: int) -> int:
    """head_dim rounded up to a multiple of 16 (ATT_HDP: 16 work-items share a row's channels)."""
    return -(-head_dim // 16) * 16


def local_floats(name: str, t: FlashTiles, head_dim: int) -> int:
    """__local floats of kernel `name` (as declared in kernels/attention_flash.cl) with tiles t:
    channel-major tiles of N rows take hdp * (N + 4) floats on the A side (float4-aligned rows),
    hdp * (N + 2) on the B side (N + 4 for N 64)."""
    hdp = padded(head_dim)
    qa, qb, ka, kb = t.bq + 4, _b_stride(t.bq), t.bk + 4, _b_stride(t.bk)  # A, B sides
    if name == "attention_forward":   # Qt, K/V tile, P^T, partial row maxima
        return hdp * qa + hdp * kb + t.bk * qa + 16 * t.bq
    if name == "attention_backward_dq":   # Qt, dY^T, Kt, Vt, dS^T
        return 2 * hdp * qa + 2 * hdp * kb + t.bk * qa
    if name == "attention_backward_dkv":  # Kt, Vt, Qt, dY^T, P, dS, L, D
        return 2 * hdp * ka + 2 * hdp * qb + 2 * t.bq * ka + 2 * t.bq
    raise ValueError(f"no flash kernel {name!r}")


def _b_stride(n: int) -> int:
    """LB(N) of kernels/attention_flash.cl."""
    return n + (4 if n > 32 else 2)


def tiles(name: str, head_dim: int, local_mem: int) -> FlashTiles | None:
    """The first of CANDIDATES[name] whose __local floats fit local_mem bytes, or None (the
    caller then runs attention.cl's kernel)."""
    return next((t for t in CANDIDATES[name] if 4 * local_floats(name, t, head_dim) <= local_mem),
                None)


def program(rt: Runtime, name: str, head_dim: int, group: int) -> tuple[Built, FlashTiles] | None:
    """kernels/attention_flash.cl built for kernel `name`, head_dim and `group` query heads per
    key/value head with the tiles that fit rt's local memory (cached by the runtime), or None
    when none fits."""
    t = tiles(name, head_dim, rt.limits.local_mem_bytes)
    if t is None:
        return None
    built = rt.build(("attention_flash.cl",), (
        (DEFINES[name], 1), ("ATT_HD", head_dim), ("ATT_HDP", padded(head_dim)),
        ("ATT_G", group), ("ATT_BQ", t.bq), ("ATT_BK", t.bk)))
    return built, t


def launch(rt: Runtime, name: str, flash: tuple[Built, FlashTiles], T: int, count: int,
           args: tuple):
    """Enqueue flash kernel `name`, built and tiled as `program` gave it, over a chunk of
    `count` z values (args end with T, C, H, z0, z_end as every attention kernel's)."""
    built, t = flash
    rows = t.bk if name == "attention_backward_dkv" else t.bq  # the tile a work-group owns
    grid = (GROUP[0] * -(-T // rows), GROUP[1] * count)
    rt.launch_local(name + "_flash", grid, GROUP, *args, built=built)
