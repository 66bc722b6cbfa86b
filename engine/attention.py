"""Causal self-attention with RoPE, in one place: the launchers of kernels/attention.cl and
kernels/rope.cl, their tile table and layouts.

Attention is fused and tiled as FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention
with Better Parallelism and Work Partitioning", Algorithms 1 and 2): no (T, T) matrix is stored;
the forward keeps y and the logsumexp L, the backward recomputes the probabilities from q, k and
L. Memory per layer is linear in T. Layouts (all row-major float32):

    qkv, dqkv  (B*T, 3C)   q at columns [0, C), k at [C, 2C), v at [2C, 3C); head h owns
                           columns [h*head_dim, (h+1)*head_dim) of each part
    y, dy      (B*T, C)    attention output (before attn_output), heads side by side
    lse, dsum  (B*H, T)    logsumexp of the scaled scores per query row; D = rowsum(dy * y)

Two kernel variants, chosen by device type: "blocked" (CPU, kernels/attention_blocked.cl: a
work-item per ROWS[vector width] rows with the score and output tiles in float8 or float16
vector registers, no __local, docs/DESIGN.md; its scores read k, v, q and dy transposed, which
attention_transpose writes into the runtime's scratch, linear in T) and "tiled" (GPU,
kernels/attention.cl: a work-group per TILES["tiled"].bq rows, K/V tiles in __local, tiles above
the diagonal skipped). Each file is built once per head_dim (and vector width) with -D options.
On GPUs a launch covers at most Runtime.max_launch_flops of work (display drivers kill kernels
that run for seconds), so long ones are split over (batch, head).
GPUs run attention as batched GEMMs instead (engine/attention_gemm.py, same calls) wherever the
(B, H, T, T) probabilities fit; attention_gemm.choose picks the path per activation set.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.errors import DeviceError
from engine.runtime import Built, Runtime


class AttentionTiles(NamedTuple):
    """Tile sizes of one kernel variant, passed to kernels/attention.cl as -D options."""

    bq: int  # ATT_BQ: rows (queries, or keys in dk/dv) per work-group of the tiled variant
    bk: int  # ATT_BK: keys (or queries) per block: a private score block, or a __local tile


# tiled: 64 rows per work-group (two NVIDIA warps), 32-row __local tiles of k and v (16 KiB at
# head_dim 64).
TILES = {"tiled": AttentionTiles(bq=64, bk=32)}
# blocked: rows per work-item by vector width (ATT_R), so the (rows x 2 vectors) score tile fits
# the vector registers with room for two operands: 8 x 2 float16 in 32 zmm (AVX-512), 6 x 2
# float8 in 16 ymm (AVX2), as matmul_vec.cl's GEMM tiles.
ROWS = {16: 8, 8: 6}
BLOCKED_LOCAL = (4, 1)  # work-items per group: fixed (each local size is a PoCL compile)


class Heads(NamedTuple):
    """The shape of one attention call: batch B, sequence T, d_model C, heads H."""

    B: int
    T: int
    C: int
    H: int

    @property
    def head_dim(self) -> int:
        return self.C // self.H

    @property
    def nz(self) -> int:
        """(batch, head) pairs: index z = b * H + h."""
        return self.B * self.H


def variant(rt: Runtime) -> str:
    """The kernel variant for rt: rt.attention_variant when set (tests run both on one
    device), else "blocked" on CPUs and "tiled" on GPUs."""
    return rt.attention_variant or ("blocked" if rt.is_cpu else "tiled")


def tiles_for(rt: Runtime, head_dim: int, kind: str = "tiled", local_mem: int | None = None
              ) -> AttentionTiles:
    """The tiled variant's tiles, its __local tiles shrunk (halving bk) until they fit
    local_mem bytes (default: the device's local memory). DeviceError when even 4-row tiles
    do not fit."""
    t = TILES[kind]
    local_mem = rt.device.local_mem_size if local_mem is None else local_mem
    bk = t.bk
    while bk >= 4 and (2 * bk * head_dim + 2 * bk) * 4 > local_mem:
        bk //= 2
    if bk < 4:
        raise DeviceError(
            f"{rt.info.name} has {local_mem // 1024} KiB of local memory, too "
            f"little for attention tiles at head_dim {head_dim}.",
            "Use more heads (a smaller head_dim = d_model / n_head) or another device.")
    return t._replace(bk=bk)


def program(rt: Runtime, head_dim: int, kind: str | None = None) -> tuple[Built, AttentionTiles]:
    """kernels/attention.cl (tiled) or attention_blocked.cl (blocked) built for head_dim, with
    the tiles it was built with (blocked: bq = rows per work-item, bk = keys per block), cached
    by the runtime."""
    kind = kind or variant(rt)
    if kind == "blocked":
        vw = rt.vector_width
        built = rt.build(("attention_blocked.cl",), (("ATT_HD", head_dim), ("ATT_VW", vw),
                                                     ("ATT_R", ROWS[vw])))
        return built, AttentionTiles(bq=ROWS[vw], bk=2 * vw)
    t = tiles_for(rt, head_dim, kind)
    built = rt.build(("attention.cl",), (("ATT_HD", head_dim), ("ATT_BK", t.bk),
                                         ("ATT_BQ", t.bq)))
    return built, t


def _chunks(rt: Runtime, s: Heads, flops_per_z: float):
    """(z0, count) ranges of (batch, head) pairs, each within rt.max_launch_flops."""
    cap = rt.max_launch_flops
    step = s.nz if cap is None else max(1, min(s.nz, int(cap // max(flops_per_z, 1.0))))
    for z0 in range(0, s.nz, step):
        yield z0, min(step, s.nz - z0)


def _launch(rt: Runtime, name: str, s: Heads, passes: int, *args):
    """Launch the blocked or tiled form of kernel `name` over every (row, z), in chunks of z.
    passes: q.k-sized products per (query, key) pair (forward 2, dq 3, dkv 4)."""
    kind = variant(rt)
    built, t = program(rt, s.head_dim, kind)
    work = passes * s.T * (s.T + 1) * s.head_dim  # 2 flops per multiply-add, half the pairs
    for z0, count in _chunks(rt, s, work):
        if kind == "blocked":
            local = BLOCKED_LOCAL
            grid = (_up(-(-s.T // t.bq), local[0]), count)
            rt.launch_local(name, grid, local, *args, s.T, s.C, s.H, z0, z0 + count,
                            built=built)
        else:
            grid = (_up(s.T, t.bq), count)
            rt.launch_local(name + "_tiled", grid, (t.bq, 1), *args, s.T, s.C, s.H, z0,
                            z0 + count, built=built)


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _transposed(rt: Runtime, s: Heads, parts) -> object:
    """The blocked kernels' xt: (nz, len(parts), head_dim, Tp) floats in the runtime's scratch,
    part p of each (batch, head) transposed from (src, row stride, column offset) = parts[p];
    Tp = T rounded up to the key block, zero-padded (kernels/attention_blocked.cl)."""
    built, t = program(rt, s.head_dim, "blocked")
    tp = _up(s.T, t.bk)
    xt = rt.scratch(s.nz * len(parts) * s.head_dim * tp)
    local = BLOCKED_LOCAL
    for p, (src, rs, off) in enumerate(parts):
        rt.launch_local("attention_transpose", (_up(tp // t.bk, local[0]), s.nz), local, xt, src,
                        rs, off, len(parts), p, s.T, s.C, s.H, 0, s.nz, built=built)
    return xt


def attention_forward(rt: Runtime, y, lse, qkv, B: int, T: int, C: int, H: int):
    """Causal attention (Vaswani et al. 2017): y (B*T, C) and lse (B*H, T) from qkv (B*T, 3C),
    scores scaled by 1/sqrt(head_dim)."""
    s = Heads(B, T, C, H)
    if variant(rt) == "blocked":
        kt = _transposed(rt, s, [(qkv, 3 * C, C)])
        _launch(rt, "attention_forward", s, 2, y, lse, qkv, kt)
    else:
        _launch(rt, "attention_forward", s, 2, y, lse, qkv)


def attention_backward(rt: Runtime, dqkv, dsum, dy, qkv, y, lse, B: int, T: int, C: int,
                       H: int):
    """dqkv (B*T, 3C), fully overwritten, from dy (B*T, C) and the forward's qkv, y, lse;
    dsum (B*H, T) is scratch (D = rowsum(dy * y), written by the dq pass, read by dk/dv).
    The blocked (CPU) variant also uses 4 * B * T * C floats of the runtime's scratch."""
    s = Heads(B, T, C, H)
    if variant(rt) == "blocked":
        xt = _transposed(rt, s, [(qkv, 3 * C, 0), (qkv, 3 * C, C), (qkv, 3 * C, 2 * C),
                                 (dy, C, 0)])
        _launch(rt, "attention_backward_dq", s, 3, dqkv, dsum, dy, y, qkv, lse, xt)
        _launch(rt, "attention_backward_dkv", s, 4, dqkv, dy, qkv, lse, dsum, xt)
        return
    _launch(rt, "attention_backward_dq", s, 3, dqkv, dsum, dy, y, qkv, lse)
    _launch(rt, "attention_backward_dkv", s, 4, dqkv, dy, qkv, lse, dsum)


def attention_decode(rt: Runtime, y, scores, qkv_row, cache, pos: int, T_max: int, C: int,
                     H: int):
    """y (C,) for one query at position pos over the KV cache rows 0..pos of (T_max, 3C);
    scores (H, T_max) is scratch."""
    # attention.cl on every device (the tiled kernels in it only run on GPUs, so a CPU skips
    # the local-memory fit of the tiles)
    hd = C // H
    t = TILES["tiled"] if rt.is_cpu else tiles_for(rt, hd)
    built = rt.build(("attention.cl",), (("ATT_HD", hd), ("ATT_BK", t.bk), ("ATT_BQ", t.bq)))
    local = rt.local_1d
    rt.launch_local("attention_decode", (-(-H // local[0]) * local[0],), local, y, scores,
                    qkv_row, cache, pos, T_max, C, H, built=built)


def _rope(rt: Runtime, qkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int, pos0: int,
          sign: float):
    rt.launch_elementwise("rope", C, BT, qkv, cos_t, sin_t, BT, T, C, head_dim, pos0, sign)


def rope_forward(rt: Runtime, qkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int,
                 pos0: int = 0):
    """RoPE (Su et al. 2021, llama.cpp NORM pairs): rotate q and k in place inside qkv (BT, 3C);
    the position of row i is i % T + pos0; cos_t, sin_t (context_length, head_dim/2)."""
    _rope(rt, qkv, cos_t, sin_t, BT, T, C, head_dim, pos0, 1.0)


def rope_backward(rt: Runtime, dqkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int,
                  pos0: int = 0):
    """The gradient of rope_forward in place on dqkv: the inverse rotation (it is orthogonal)."""
    _rope(rt, dqkv, cos_t, sin_t, BT, T, C, head_dim, pos0, -1.0)


def rope_table(head_dim: int, T: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin (T, head_dim/2) float32 of pos * base^(-2i/head_dim), computed in float64."""
    inv = base ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    ang = np.arange(T)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
