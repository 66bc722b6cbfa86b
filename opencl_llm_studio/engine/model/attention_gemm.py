"""Causal attention as batched GEMMs, for GPUs whose memory holds the (B, H, T, T)
probabilities; and the rule that picks it or the fused kernels (engine/model/attention.py).

The "gemm" path (Vaswani et al. 2017, written out): S = Q K^T / sqrt(head_dim) and Y = P V as
batched strided products (bmm_* in kernels/matmul*.cl, the tuned GEMM tiles) around the causal
row softmax (kernels/softmax.cl); backward dP = dY V^T, dS = P * (dP - rowsum(dP * P)) / sqrt(hd),
dQ = dS K, dK = dS^T Q, dV = P^T dY. It keeps the probabilities P (B, H, T, T) per layer and one
dP/dS scratch of the same size, so its memory grows with T^2. On an H200 the fused
FlashAttention-2 kernels (kernels/attention_flash.cl) run one layer's forward + backward in
0.85-0.93 of this path's time at T 256..4096, d384 and d768 (benchmarks/RESULTS.md, fused
attention round 2), with memory linear in T; so the fused path is the rule everywhere, and the
gemm path runs where it is forced or where the tuner (gemm_tune.tune_attention) timed it faster
by its margin on the device at hand (GemmPlan.attention_path).

Path rule (`choose`): LLM_STUDIO_ATTENTION=gemm|fused (or the runtime's plan.attention_path)
forces one; otherwise CPUs take "fused" (PoCL runs attention_blocked.cl fastest), and so do GPUs
up to head_dim attention_flash.ANY_DEVICE_HEAD_DIM (96), where the flash tiles fit every
device's local memory; above it (a device may then run attention.cl's one-row kernels, 2x slower
than the GEMMs) GPUs take "gemm" where `gemm_fits`: one activation set's probability buffers
(n_layer of them, plus the backward scratch) take at most GEMM_SHARE of the device memory and
one of them fits the largest single allocation; else "fused". engine/model/memory.py counts
whichever is chosen.
"""

from __future__ import annotations

import os
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from opencl_llm_studio.engine.opencl import gemm_tiles
from opencl_llm_studio.engine.model import attention_flash
from opencl_llm_studio.engine.model.attention import Heads, heads
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.opencl.device import DeviceInfo
from opencl_llm_studio.engine.opencl.ops import _rows_launch
from opencl_llm_studio.engine.opencl.runtime import Runtime
from opencl_llm_studio.engine.opencl.gemm_plan import round_grid

ATTENTION_ENV = "LLM_STUDIO_ATTENTION"  # "gemm" or "fused" forces a path; "auto"/unset: rule
PATHS = ("gemm", "fused")
# Where the gemm path may run (the tuner's choice, or a head_dim above the flash tiles'): one
# activation set's (B, H, T, T) buffers take at most 1/8 of the device memory, so the training
# set (evaluation shares it) and the generation set hold less than a quarter, leaving the rest
# to weights, AdamW moments and the other activations (an H200: 17.6 GB per set; a 4 GB laptop
# GPU: 512 MB).
GEMM_SHARE = 1 / 8
_INT_MAX = 2**31 - 1  # the bmm kernels index a (b, h) slice with int strides


class Causal(IntEnum):
    """Which part of a batched product the causal mask leaves (kernels/common.h CAUSAL_*, same
    values; tile-granular, so a kernel skips whole tiles)."""

    NONE = 0        # a plain product
    SKIP_ABOVE = 1  # S = Q K^T: output tiles wholly above the diagonal are skipped (masked)
    K_UPTO_M = 2    # X = P V: sum only k <= m (P is zero above the diagonal)
    K_FROM_M = 3    # X = P^T Y: sum only k >= m (rows of P^T are keys)


class Strided(NamedTuple):
    """Where one (batch b, head h) operand of a batched product lies in its buffer, in floats:
    element (r, c) at off + b * batch + h * head + r * row + c * col."""

    off: int
    row: int
    col: int
    batch: int
    head: int

    def at_batch(self, b0: int) -> "Strided":
        """The same layout starting at batch b0 (a launch over batches b0.. of a split)."""
        return self._replace(off=self.off + b0 * self.batch)


def probability_floats(cfg: ModelConfig, B: int, T: int, with_grad: bool) -> int:
    """Floats of the gemm path's (B, H, T, T) buffers in one activation set: P per layer, and
    one dP/dS scratch when training."""
    return (cfg.n_layer + (1 if with_grad else 0)) * B * cfg.n_head * T * T


def choose(info: DeviceInfo, cfg: ModelConfig, B: int, T: int, with_grad: bool,
           forced: str | None = None) -> str:
    """'gemm' or 'fused' for an activation set (B, T) of cfg on device info (rule in the module
    docstring). forced: 'gemm', 'fused', or None/'auto' for the environment variable, then the
    rule. ValueError for any other value."""
    forced = forced or os.environ.get(ATTENTION_ENV) or "auto"
    if forced not in PATHS + ("auto",):
        raise ValueError(f"attention path {forced!r}: use one of gemm, fused, auto "
                         f"(environment variable {ATTENTION_ENV})")
    if forced != "auto":
        return forced
    if info.is_cpu or cfg.head_dim <= attention_flash.ANY_DEVICE_HEAD_DIM:
        return "fused"
    return "gemm" if gemm_fits(info, cfg, B, T, with_grad) else "fused"


def gemm_fits(info: DeviceInfo, cfg: ModelConfig, B: int, T: int, with_grad: bool) -> bool:
    """Whether the gemm path's (B, H, T, T) buffers of one activation set take at most
    GEMM_SHARE of the device memory and one fits the largest single allocation (and int
    indexing)."""
    one = B * cfg.n_head * T * T
    return (4 * probability_floats(cfg, B, T, with_grad) <= GEMM_SHARE * info.global_mem_bytes
            and 4 * one <= info.max_alloc_bytes and one <= _INT_MAX)


def path_for(rt: Runtime, cfg: ModelConfig, B: int, T: int, with_grad: bool) -> str:
    """choose() on rt's device, honouring rt.plan.attention_path when set."""
    return choose(rt.info, cfg, B, T, with_grad, rt.plan.attention_path)


def _bmm(rt: Runtime, C, A, B, M: int, N: int, K: int, H: int, nb: int, a: Strided,
         b: Strided, c: Strided, alpha: float = 1.0, beta: float = 0.0,
         causal: Causal = Causal.NONE):
    """C[z] (M, N) = alpha * A[z] (M, K) @ B[z] (K, N) + beta * C[z] for z = b * H + h, b < nb,
    each operand where its Strided says (C's column stride must be 1). Batches go in chunks of
    at most rt.max_launch_flops (display GPUs), by moving the offsets."""
    if c.col != 1:
        raise ValueError("the batched products write rows of C contiguous (col stride 1)")
    per_batch = 2.0 * M * N * K * H
    cap = rt.launch_cap()
    step = nb if cap is None else max(1, min(nb, int(cap // max(per_batch, 1.0))))
    for b0 in range(0, nb, step):
        if b0:
            rt.between_chunks()   # a running step may stop here
        n = min(step, nb - b0)
        _bmm_launch(rt, C, A, B, M, N, K, H, n * H, a.at_batch(b0), b.at_batch(b0),
                    c.at_batch(b0), alpha, beta, causal)


def _bmm_launch(rt, C, A, B, M, N, K, H, nz, a: Strided, b: Strided, c: Strided, alpha, beta,
                causal: Causal):
    cs = (c.off, c.row, c.batch, c.head)  # the kernels take no column stride for C
    if rt.plan.bmm_variant == "blocked":
        if b.col != 1:
            raise ValueError("bmm_blocked needs rows of B contiguous; transpose it first")
        # CPUs take the fused kernels unless forced here; the scalar batched kernel serves both
        tm, tn = gemm_tiles.BLOCKED  # MM_TM, MM_TN of kernels/matmul.cl
        grid = round_grid((-(-N // tn), -(-M // tm), nz), (4, 4, 1))
        rt.launch_local("bmm_blocked", grid, (4, 4, 1), C, A, B, M, N, K, H, *a,
                        b.off, b.row, b.batch, b.head, *cs, alpha, beta, int(causal))
    else:
        tl, (gx, gy) = gemm_tiles.BMM_EDGE, gemm_tiles.TILED_GROUP
        rt.launch_local("bmm_tiled", (gx * -(-N // tl), gy * -(-M // tl), nz), (gx, gy, 1),
                        C, A, B, M, N, K, H, *a, *b, *cs, alpha, beta, int(causal),
                        *rt.gemm_tiles(tl))


def scratch_floats(rt: Runtime, B: int, T: int, C: int, H: int, kv_heads: int | None) -> int:
    """Floats of rt.scratch that this path's attention_forward and attention_backward take:
    one k or v of every key/value head transposed (_heads_transposed) for the CPU's
    bmm_blocked, none on GPUs (bmm_tiled reads them in place)."""
    s = heads(B, T, C, H, kv_heads)
    return s.B * s.KVH * s.head_dim * s.T if rt.plan.bmm_variant == "blocked" else 0


def _heads_transposed(rt: Runtime, qkv, s: Heads, off: int):
    """The transpose of k or v (at column off of qkv) of every key/value head,
    (B*KVH, head_dim, T), in rt.scratch, for bmm_blocked: returns it and its bmm stride tuple."""
    hd, T, W = s.head_dim, s.T, s.width
    out = rt.scratch(s.B * s.KVH * hd * T)
    grid = round_grid((-(-hd // 4), -(-T // 4), s.B * s.KVH), (4, 4, 1))
    rt.launch_local("transpose_heads", grid, (4, 4, 1), out, qkv, T, hd, s.KVH, off, W,
                    T * W, hd)
    return out, Strided(0, T, 1, s.KVH * hd * T, hd * T)


def _keys(rt: Runtime, qkv, part: int, s: Heads):
    """K (part 1) or V (part 2) of every key/value head transposed, (hd, T) per head, as a bmm
    operand: read in place with strides on GPUs, copied out for the CPU kernels (contiguous
    rows)."""
    off = _part(s, part)
    if rt.plan.bmm_variant == "blocked":
        return _heads_transposed(rt, qkv, s, off)
    return qkv, Strided(off, 1, s.width, s.T * s.width, s.head_dim)


def _part(s: Heads, part: int) -> int:
    """Column of part 0 (q), 1 (k) or 2 (v) in a qkv row."""
    return 0 if part == 0 else s.C + (part - 1) * s.KVH * s.head_dim


class _Group(NamedTuple):
    """The operands of query heads kvh * G + g (g fixed, kvh = 0..KVH-1) as a batched product
    over KVH "heads": their q (or dq) inside qkv, dy (or y) rows, and P (or dS) with its
    transpose."""

    q: Strided
    g: Strided
    p: Strided
    pt: Strided


def _group(s: Heads, g: int) -> _Group:
    hd, T, W, G, TT = s.head_dim, s.T, s.width, s.group, s.T * s.T
    return _Group(Strided(g * hd, W, 1, T * W, G * hd), Strided(g * hd, s.C, 1, T * s.C, G * hd),
                  Strided(g * TT, T, 1, s.H * TT, G * TT), Strided(g * TT, 1, T, s.H * TT, G * TT))


def _kv(s: Heads, part: int) -> Strided:
    """k (part 1) or v (part 2) rows of every key/value head inside qkv (or dqkv)."""
    return Strided(_part(s, part), s.width, 1, s.T * s.width, s.head_dim)


def attention_forward(rt: Runtime, y, att, qkv, B: int, T: int, C: int, H: int,
                      kv_heads: int | None = None):
    """Causal attention: y (B*T, C) and the probabilities att (B, H, T, T), query-major, zero
    above the diagonal, from qkv (B*T, C + 2 * kv_heads * head_dim) (layouts as
    engine/model/attention.py). Grouped-query attention (kv_heads < H) runs one batched product over the
    key/value heads per query head of a group (G of them)."""
    s = heads(B, T, C, H, kv_heads)
    hd = s.head_dim
    kt, kt_s = _keys(rt, qkv, 1, s)
    for g in range(s.group):
        o = _group(s, g)
        _bmm(rt, att, qkv, kt, T, T, hd, s.KVH, B, o.q, kt_s, o.p, 1.0 / np.sqrt(hd),
             causal=Causal.SKIP_ABOVE)
    _rows_launch(rt, "attention_softmax", B * H * T, att, B * H * T, T, 1.0)
    for g in range(s.group):
        o = _group(s, g)
        _bmm(rt, y, att, qkv, T, hd, T, s.KVH, B, o.p, _kv(s, 2), o.g, causal=Causal.K_UPTO_M)


def attention_backward(rt: Runtime, dqkv, datt, dy, qkv, y, att, B: int, T: int, C: int,
                       H: int, kv_heads: int | None = None):
    """dqkv (B*T, C + 2 * kv_heads * head_dim), fully overwritten, from dy (B*T, C), qkv and the
    forward's att; dk and dv of a key/value head sum over its G query heads (the first
    product writes them, the others add: beta 1). datt (B, H, T, T) is scratch. y is unused
    (the fused path's signature)."""
    del y
    s = heads(B, T, C, H, kv_heads)
    hd, G = s.head_dim, s.group
    vt, vt_s = _keys(rt, qkv, 2, s)
    for g in range(G):
        o = _group(s, g)
        _bmm(rt, datt, dy, vt, T, T, hd, s.KVH, B, o.g, vt_s, o.p, causal=Causal.SKIP_ABOVE)
    _rows_launch(rt, "attention_softmax_backward", B * H * T, datt, att, B * H * T, T,
                 1.0 / np.sqrt(hd))
    for g in range(G):
        o, beta = _group(s, g), 0.0 if g == 0 else 1.0
        _bmm(rt, dqkv, datt, qkv, T, hd, T, s.KVH, B, o.p, _kv(s, 1), o.q,
             causal=Causal.K_UPTO_M)
        _bmm(rt, dqkv, datt, qkv, T, hd, T, s.KVH, B, o.pt, o.q, _kv(s, 1), beta=beta,
             causal=Causal.K_FROM_M)
        _bmm(rt, dqkv, att, dy, T, hd, T, s.KVH, B, o.pt, o.g, _kv(s, 2), beta=beta,
             causal=Causal.K_FROM_M)
