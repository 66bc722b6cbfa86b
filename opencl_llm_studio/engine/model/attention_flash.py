"""The GPU's cooperative FlashAttention-2 kernels (kernels/attention_flash.cl; Dao 2023,
Algorithms 1 and 2): their tiles, work-group shapes, local-memory fit and launches.
engine/model/attention.py calls `launch` for the "tiled" variant and falls back to
attention.cl's one-row-per-work-item kernels for a kernel whose tiles do not fit the device's
local memory.

Each kernel runs wx x wy work-items per group over a tile of bq query rows and bk key rows
(multiples of 16), head_dim padded with zeros to hdp, a multiple of 16; a work-item holds a
register block of (bq / wy) x (bk / wx) scores (dk/dv: (bk / wy) x (bq / wx)) and hdp / wx
output channels per row. Its __local floats (`local_floats`) must fit the device's local
memory; `tiles` takes the first fitting candidate of CANDIDATES, the fastest first (measured on
an H200, benchmarks/RESULTS.md), so a device with OpenCL's guaranteed 32 KiB takes smaller
tiles than one with 48 KiB.
"""

from __future__ import annotations

from typing import NamedTuple

import pyopencl as cl

from opencl_llm_studio.engine.opencl.runtime import Built, Runtime

# Up to this head_dim every kernel's smallest flash tiles fit OpenCL's guaranteed 32 KiB of local
# memory (tests/test_attention_flash.py), so the fused path runs these kernels on any GPU.
ANY_DEVICE_HEAD_DIM = 96
# The dS^T scratch of the backward's dS path (kernels/attention_flash.cl, ATT_DS): at most this
# many bytes, and 1/DS_SHARE of the device memory; heads go in chunks that fit. Where one key/value
# head's G x T x T floats do not fit, the backward recomputes dS in its dq kernel instead.
DS_BYTES = 1 << 30
DS_SHARE = 32

# kernel name -> its -D switch
DEFINES = {"attention_forward": "FLASH_FWD", "attention_backward_dq": "FLASH_DQ",
           "attention_backward_dkv": "FLASH_DKV"}


class FlashTiles(NamedTuple):
    """One kernel's tiles (kernels/attention_flash.cl): bq query rows and bk key rows per tile,
    wx x wy work-items per group, pf 1 to fetch the next tile into registers during this one."""

    bq: int
    bk: int
    wx: int = 16
    wy: int = 16
    pf: int = 1

    def valid(self, name: str) -> bool:
        """Whether the kernel `name` can be built with these tiles: each work-group side
        divides the tile rows laid along it, and the dk/dv kernel's prefetch of L and D has a
        work-item per query row (name: a key of CANDIDATES)."""
        rows_y, cols_x = (self.bk, self.bq) if name.startswith("attention_backward_dkv") else \
            (self.bq, self.bk)
        nt = self.wx * self.wy
        return (rows_y % self.wy == 0 and cols_x % self.wx == 0 and self.bq % 16 == 0
                and self.bk % 16 == 0 and self.bq * self.bk % nt == 0
                and not (name.startswith("attention_backward_dkv") and self.pf
                         and self.bq > nt))


# Tiles per kernel, preferred first; the first whose __local floats fit is taken. The "_ds"
# entries: the backward's dS path (ATT_DS), whose dq kernel is a single product. Order from
# `bench_attention.py sweep` on an H200 (d384 T2048 B8, each kernel alone, ms; Dec 2026;
# none of the firsts spills): forward 64x32 8x16 1.18 < 64x32 16x8 1.30 < 64x32 16x16 1.33;
# dq 64x16 8x16 1.77 ~ 32x32 16x8 1.77 < 64x16 16x16 2.08; dk/dv 16x32 16x8 2.45 < 32x32 16x8
# 2.48 < 32x32 16x16 3.01; dk/dv writing dS 16x32 16x8 2.56 < 16x32 8x8 2.68 (spills); dq from
# dS 64x32 16x8 0.63 ~ 64x32 8x16 0.63 < 128x32 16x16 0.64 < 64x64 16x16 0.72. 8x8 groups spill
# at these tiles (255 registers).
CANDIDATES = {
    "attention_forward": (FlashTiles(64, 32, 8, 16), FlashTiles(64, 32), FlashTiles(32, 32, 8, 16),
                          FlashTiles(32, 16), FlashTiles(16, 16)),
    "attention_backward_dq": (FlashTiles(64, 16, 8, 16), FlashTiles(32, 32, 16, 8),
                              FlashTiles(16, 32, 8, 16), FlashTiles(16, 16)),
    "attention_backward_dkv": (FlashTiles(16, 32, 16, 8), FlashTiles(16, 16)),
    "attention_backward_dq_ds": (FlashTiles(64, 32, 16, 8), FlashTiles(128, 32),
                                 FlashTiles(32, 32), FlashTiles(16, 16)),
    "attention_backward_dkv_ds": (FlashTiles(16, 32, 16, 8), FlashTiles(16, 16)),
}


def padded(head_dim: int) -> int:
    """head_dim rounded up to a multiple of 16 (ATT_HDP: the work-items share a row's
    channels)."""
    return -(-head_dim // 16) * 16


def local_floats(name: str, t: FlashTiles, head_dim: int) -> int:
    """__local floats of kernel `name` (a key of CANDIDATES; as declared in
    kernels/attention_flash.cl) with tiles t: row-major tiles of head rows with stride hdp + 4,
    score tiles of N columns with stride N + 4."""
    lh = padded(head_dim) + 4
    if name == "attention_backward_dq_ds":  # K, dS
        return t.bk * lh + t.bq * (t.bk + 4)
    if name == "attention_backward_dkv_ds":  # and attention_dsum_flash, built with it
        return max(local_floats("attention_backward_dkv", t, head_dim),
                   dsum_local_floats(t.wx * t.wy))
    name = name.removesuffix("_ds")
    if name == "attention_forward":   # Q, the K/V tile, P, partial row maxima
        return t.bq * lh + t.bk * lh + t.bq * (t.bk + 4) + t.bq * t.wx
    if name == "attention_backward_dq":   # Q, dY, K, V, dS
        return 2 * t.bq * lh + 2 * t.bk * lh + t.bq * (t.bk + 4)
    if name == "attention_backward_dkv":  # K, V, Q, dY, P^T, dS^T, L, D
        return 2 * t.bk * lh + 2 * t.bq * lh + 2 * t.bk * (t.bq + 4) + 2 * t.bq
    raise ValueError(f"no flash kernel {name!r}")


def tiles(name: str, head_dim: int, local_mem: int) -> FlashTiles | None:
    """The first of CANDIDATES[name] whose __local floats fit local_mem bytes, or None (the
    caller then runs attention.cl's kernel)."""
    return next((t for t in CANDIDATES[name] if 4 * local_floats(name, t, head_dim) <= local_mem),
                None)


def program(rt: Runtime, name: str, head_dim: int, group: int, ds: bool = False
            ) -> tuple[Built, FlashTiles] | None:
    """kernels/attention_flash.cl built for kernel `name` (a key of DEFINES), head_dim and
    `group` query heads per key/value head, for the backward's dS path when ds (ATT_DS), with
    the tiles that fit rt's local memory (cached by the runtime), or None when none fits."""
    key = name + "_ds" if ds else name
    t = tiles(key, head_dim, rt.limits.usable_local_bytes)
    if t is None:
        return None
    if not t.valid(key):
        raise ValueError(f"flash tiles {t} cannot build {key}")
    built = rt.build(("attention_flash.cl",), (
        (DEFINES[name], 1), ("ATT_HD", head_dim), ("ATT_HDP", padded(head_dim)),
        ("ATT_G", group), ("ATT_BQ", t.bq), ("ATT_BK", t.bk), ("ATT_WX", t.wx),
        ("ATT_WY", t.wy), ("ATT_PF", t.pf), ("ATT_DS", int(ds)), ("DSUM_CH", DSUM_CH)))
    return built, t


def ds_heads(info, group: int, T: int, kv_total: int) -> int:
    """Key/value heads per chunk of the dS path on device info (DeviceInfo), of kv_total
    (batch x key/value heads) with `group` query heads each: how many of their G x T x T
    floats fit the dS^T scratch (DS_BYTES, 1/DS_SHARE of the device memory, one allocation), at
    most kv_total; 0 where not even one does."""
    return min(_ds_cap(info) // (4 * group * T * T), kv_total)


def _ds_cap(info) -> int:
    """The most bytes of dS^T scratch on device info (DeviceInfo)."""
    return min(DS_BYTES, info.global_mem_bytes // DS_SHARE, info.max_alloc_bytes)


def ds_scratch_bytes(info, cfg, B: int, T: int) -> int:
    """Bytes of the runtime's scratch that the dS path of a training set (B, T) of cfg grows to
    on device info (engine.model.memory counts it): a chunk of key/value heads' G x T x T
    floats each, as _backward_ds in engine.model.attention allocates; 0 on CPUs (the blocked
    kernels) and where not one head fits (the recomputing backward runs)."""
    if info.is_cpu:
        return 0
    group = cfg.n_head // cfg.kv_heads
    return 4 * group * T * T * ds_heads(info, group, T, B * cfg.kv_heads)


def launch(rt: Runtime, name: str, flash: tuple[Built, FlashTiles], T: int, count: int,
           args: tuple, tail: tuple, ds=None):
    """Enqueue flash kernel `name`, built and tiled as `program` gave it, over a chunk of
    `count` z values: args, then (for the backward kernels) the dS^T scratch ds, then tail (T,
    C, H, z0, z_end as every attention kernel's). Without ds the backward kernels get args[0]
    in its place, which they do not read (built without ATT_DS)."""
    built, t = flash
    rows = t.bk if name == "attention_backward_dkv" else t.bq  # the tile a work-group owns
    grid = (t.wx * -(-T // rows), t.wy * count)
    mid = () if name == "attention_forward" else (args[0] if ds is None else ds,)
    rt.launch_local(name + "_flash", grid, (t.wx, t.wy), *args, *mid, *tail, built=built)


def launch_dsum(rt: Runtime, flash: tuple[Built, FlashTiles], T: int, count: int, args: tuple):
    """Enqueue attention_dsum_flash (D = rowsum(dy * y)) of the dk/dv kernel's dS build over
    `count` query z values; args (dsum, dy, y, T, C, H, z0, z_end)."""
    built, t = flash
    nt = t.wx * t.wy
    rt.launch_local("attention_dsum_flash", (nt * -(-T // nt), count), (nt, 1), *args,
                    cl.LocalMemory(4 * dsum_local_floats(nt)), built=built)


# channels of dy and y per __local chunk of attention_dsum_flash: 8 floats are one 32-byte sector
DSUM_CH = 8


def dsum_local_floats(nt: int) -> int:
    """__local floats of attention_dsum_flash for a group of nt work-items: dy and y rows of
    DSUM_CH channels each, padded by one against bank conflicts."""
    return 2 * nt * (DSUM_CH + 1)
