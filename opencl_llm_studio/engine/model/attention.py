"""Causal self-attention with RoPE, in one place: the launchers of kernels/attention.cl and
kernels/rope.cl, their tile table and layouts.

Attention is fused and tiled as FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention
with Better Parallelism and Work Partitioning", Algorithms 1 and 2): no (T, T) matrix is stored;
the forward keeps y and the logsumexp L, the backward recomputes the probabilities from q, k and
L. Memory per layer is linear in T. Layouts (all row-major float32):

    qkv, dqkv  (B*T, W)    W = C + 2 KV, KV = kv_heads * head_dim: q at columns [0, C), k at
                           [C, C + KV), v at [C + KV, W); query head h owns q columns
                           [h*head_dim, (h+1)*head_dim) and reads key/value head h // G,
                           G = H / kv_heads (grouped-query attention, Ainslie et al. 2023; the
                           llama.cpp / transformers convention; G 1: multi-head attention)
    y, dy      (B*T, C)    attention output (before attn_output), heads side by side
    lse, dsum  (B*H, T)    logsumexp of the scaled scores per query row; D = rowsum(dy * y)

Two kernel variants, chosen by device type: "blocked" (CPU, kernels/attention_blocked.cl: a
work-item per head walking tiles of ROWS[vector width] rows with the score and output tiles in
float8 or float16 vector registers, docs/DESIGN.md; it transposes what its scores read across
lanes (k; backward q and dy) into its own buffer, __local memory in a work-group of one (no
barriers) or its slice of the runtime's scratch, linear in T, and its backward is one kernel
per (batch, key/value head): dq, dk and dv from one recomputation of the scores, 5 products per
(query, key) pair) and "tiled" (GPU:
kernels/attention_flash.cl, cooperative work-groups with register blocks over __local tiles,
engine/model/attention_flash.py; its backward writes dS^T once, per chunk of heads, into the
runtime's scratch (at most attention_flash.DS_BYTES) and runs dq = dS K on it, or recomputes dS
in the dq kernel where one head's T x T does not fit; where a kernel's flash tiles do not fit
the local memory, kernels/attention.cl's: a work-group per TILES["tiled"].bq rows, one row per
work-item, K/V tiles in __local; both skip tiles above the diagonal). Each file is built once
per head_dim and G (and vector width, or flash tiles) with -D options. The dk/dv kernels (the
blocked backward) run per key/value head and sum over the G query heads of its group.
On GPUs a launch covers at most Runtime.max_launch_flops of work (display drivers kill kernels
that run for seconds), so long ones are split over (batch, head).
GPUs can run attention as batched GEMMs instead (engine/model/attention_gemm.py, same calls);
attention_gemm.choose picks the path per activation set.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyopencl as cl

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import DeviceError
from opencl_llm_studio.engine.model import attention_flash
from opencl_llm_studio.engine.model.rope_scaling import llama3_factors
from opencl_llm_studio.engine.opencl.runtime import Built, Runtime


class AttentionTiles(NamedTuple):
    """Tile sizes of one kernel variant, passed to kernels/attention.cl as -D options."""

    bq: int  # ATT_BQ: rows (queries, or keys in dk/dv) per work-group of the tiled variant
    bk: int  # ATT_BK: keys (or queries) per block: a private score block, or a __local tile


# tiled: 64 rows per work-group (two NVIDIA warps), 32-row __local tiles of k and v (16 KiB at
# head_dim 64).
TILES = {"tiled": AttentionTiles(bq=64, bk=32)}
# blocked: rows per tile by vector width (forward ATT_RF), so the (rows x 2 vectors) score tile
# fits the vector registers with room for two operands: 8 x 2 float16 in 32 zmm (AVX-512), 6 x 2
# float8 in 16 ymm (AVX2), as matmul_vec.cl's GEMM tiles. The backward (ATT_RB) keeps two score
# tiles and their dS^T live: 4 rows ran M's and B's backward 15-20% faster than 8 (AVX-512) or 6
# (float8), 2 slower (benchmarks/RESULTS.md, "CPU attention at GEMM speed").
ROWS = {16: 8, 8: 6}
ROWS_BACKWARD = {16: 4, 8: 4}


class Heads(NamedTuple):
    """The shape of one attention call: batch B, sequence T, d_model C, query heads H and
    key/value heads KVH (H for multi-head attention)."""

    B: int
    T: int
    C: int
    H: int
    KVH: int

    @property
    def head_dim(self) -> int:
        return self.C // self.H

    @property
    def group(self) -> int:
        """Query heads per key/value head (G)."""
        return self.H // self.KVH

    @property
    def nz(self) -> int:
        """(batch, query head) pairs: index z = b * H + h."""
        return self.B * self.H

    @property
    def width(self) -> int:
        """Columns of a qkv row: C + 2 * KVH * head_dim."""
        return self.C + 2 * self.KVH * self.head_dim


def heads(B: int, T: int, C: int, H: int, KVH: int | None = None) -> Heads:
    """Heads of a call; KVH None or 0 means H (multi-head attention). ValueError when KVH does
    not divide H (ModelConfig.validate refuses such models before any kernel runs)."""
    KVH = KVH or H
    if H % KVH:
        raise ValueError(f"{KVH} key/value heads do not divide {H} query heads")
    return Heads(B, T, C, H, KVH)


def variant(rt: Runtime) -> str:
    """The kernel variant for rt: rt.plan.attention_variant when set (tests run both on one
    device), else "blocked" on CPUs and "tiled" on GPUs."""
    return rt.plan.attention_variant or ("blocked" if rt.is_cpu else "tiled")


def tiles_for(rt: Runtime, head_dim: int, kind: str = "tiled", local_mem: int | None = None
              ) -> AttentionTiles:
    """The tiled variant's tiles, its __local tiles shrunk (halving bk) until they fit
    local_mem bytes (default: the device's local memory). DeviceError when even 4-row tiles
    do not fit."""
    t = TILES[kind]
    local_mem = rt.limits.usable_local_bytes if local_mem is None else local_mem
    bk = t.bk
    while bk >= 4 and (2 * bk * head_dim + 2 * bk) * 4 > local_mem:
        bk //= 2
    if bk < 4:
        raise DeviceError(
            f"{rt.info.name} has {local_mem // 1024} KiB of local memory, too "
            f"little for attention tiles at head_dim {head_dim}.",
            "Use more heads (a smaller head_dim = d_model / n_head) or another device.")
    return t._replace(bk=bk)


def program(rt: Runtime, head_dim: int, kind: str | None = None, group: int = 1,
            local: bool = False) -> tuple[Built, AttentionTiles]:
    """kernels/attention.cl (tiled) or attention_blocked.cl (blocked) built for head_dim and
    `group` query heads per key/value head, with the tiles it was built with (blocked: bq =
    forward rows per tile, bk = keys per block; local: its transposed rows in __local memory),
    cached by the runtime."""
    kind = kind or variant(rt)
    if kind == "blocked":
        vw = rt.plan.vector_width
        built = rt.build(("attention_blocked.cl",), (
            ("ATT_HD", head_dim), ("ATT_G", group), ("ATT_VW", vw), ("ATT_RF", ROWS[vw]),
            ("ATT_RB", ROWS_BACKWARD[vw]), ("ATT_PREFETCH", int(rt.is_cpu)),
            ("ATT_LOCAL", int(local))))
        return built, blocked_tiles(rt)
    t = tiles_for(rt, head_dim, kind)
    built = rt.build(("attention.cl",), (("ATT_HD", head_dim), ("ATT_G", group),
                                         ("ATT_BK", t.bk), ("ATT_BQ", t.bq)))
    return built, t


def blocked_tiles(rt: Runtime) -> AttentionTiles:
    """The blocked variant's forward rows per tile (bq) and keys per block (bk) at rt's vector
    width."""
    vw = rt.plan.vector_width
    return AttentionTiles(bq=ROWS[vw], bk=2 * vw)


def _chunks(rt: Runtime, nz: int, flops_per_z: float, most: int | None = None):
    """(z0, count) ranges of nz (batch, head) pairs, each within rt.max_launch_flops (and of
    at most `most` pairs)."""
    cap = rt.launch_cap()
    step = nz if cap is None else max(1, min(nz, int(cap // max(flops_per_z, 1.0))))
    step = step if most is None else min(step, most)
    for z0 in range(0, nz, step):
        yield z0, min(step, nz - z0)


def _launch(rt: Runtime, name: str, s: Heads, passes: int, *args, per_kv: bool = False):
    """Launch the tiled (GPU) form of kernel `name` over every (row, z), in chunks of z:
    z over (batch, query head), or with per_kv over (batch, key/value head), each of which
    does the work of its G query heads. passes: q.k-sized products per (query, key) pair
    (forward 2, dq 3, dkv 4). The tiled variant runs attention_flash.cl's kernel where its
    tiles fit the device's local memory, else attention.cl's."""
    flash = attention_flash.program(rt, name, s.head_dim, s.group)
    built, t = (None, None) if flash else program(rt, s.head_dim, "tiled", s.group)
    nz = s.B * s.KVH if per_kv else s.nz
    for z0, count in _chunks(rt, nz, _work(s, passes, per_kv)):
        if z0:
            rt.between_chunks()   # a running step may stop here
        tail = (s.T, s.C, s.H, z0, z0 + count)
        if flash:
            attention_flash.launch(rt, name, flash, s.T, count, args, tail)
        else:
            rt.launch_local(name + "_tiled", (_up(s.T, t.bq), count), (t.bq, 1), *args, *tail,
                            built=built)


def _work(s: Heads, passes: int, per_kv: bool) -> float:
    """FLOPs of one z of an attention kernel with `passes` q.k-sized products per causal
    (query, key) pair (2 flops per multiply-add, half the pairs); per_kv: a key/value head's z,
    which does the work of its G query heads."""
    return passes * s.T * (s.T + 1) * s.head_dim * (s.group if per_kv else 1)


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _blocked(rt: Runtime, name: str, s: Heads, passes: int, rows: int, *args,
             per_kv: bool = False):
    """Launch blocked kernel `name` (kernels/attention_blocked.cl): a work-group of one
    work-item per (z, split), z over (batch, query head), or with per_kv (the backward) over
    (batch, key/value head), each doing the work of its G query heads; in chunks of z as
    _launch. Each work-item keeps `rows` rows of Tp floats (its transposed rows; Tp = T rounded
    up to the key block, plus one block): in __local memory where they fit the device's, else
    in its slice of the runtime's scratch. Where fewer heads than compute units would leave
    cores idle, a head's tiles are shared by a few work-items (splits); the backward's then
    write shares of dq to the scratch (after the slices), summed by attention_dq_sum."""
    split, floats, local, chunks, xt_n, dq_n = _blocked_layout(rt, s, passes, rows, per_kv)
    built = program(rt, s.head_dim, "blocked", s.group, local)[0]
    buf = rt.scratch(xt_n + dq_n) if xt_n + dq_n else None
    xt = cl.LocalMemory(4 * floats) if local else buf
    dq = (buf if dq_n else args[0], np.int32(xt_n)) if per_kv else ()
    for z0, count in chunks:
        if z0:
            rt.between_chunks()   # a running step may stop here
        tail = (s.T, s.C, s.H, z0, z0 + count)
        rt.launch_local(name, (split, count), (1, 1), *args, *dq, xt, *tail, built=built)
        if dq_n:
            rt.launch_local("attention_dq_sum", (_up(s.T, 16), count * s.group), (16, 1), args[0],
                            *dq, np.int32(split), *tail, built=built)


def _blocked_layout(rt: Runtime, s: Heads, passes: int, rows: int, per_kv: bool) -> tuple:
    """(split, floats, local, chunks, xt_n, dq_n) of a _blocked launch: work-items per head,
    floats of one work-item's transposed rows, whether they go to __local memory, the z
    chunks, and the scratch floats of the rows (xt_n, where not local) and of the dq shares
    (dq_n, the split backward)."""
    t = blocked_tiles(rt)
    nz = s.B * s.KVH if per_kv else s.nz
    split = splits(rt, s.T, nz, t.bq)
    floats = rows * (_up(s.T, t.bk) + t.bk)
    local = 4 * floats <= rt.limits.usable_local_bytes
    chunks = list(_chunks(rt, nz, _work(s, passes, per_kv)))
    most = max(c for _, c in chunks)
    xt_n = 0 if local else most * split * floats
    dq_n = most * split * s.group * s.T * s.head_dim if per_kv and split > 1 else 0
    return split, floats, local, chunks, xt_n, dq_n


# rows of a blocked work-item's transposed rows: the forward's k^T (head_dim rows), the
# backward's per query head q^T, dy^T, dq^T, then L and D (kernels/attention_blocked.cl ATT_BROWS)
def _forward_rows(s: Heads) -> int:
    return s.head_dim


def _backward_rows(s: Heads) -> int:
    return s.group * (3 * s.head_dim + 2)


def scratch_floats(rt: Runtime, B: int, T: int, C: int, H: int, kv_heads: int | None,
                   backward: bool) -> int:
    """Floats of rt.scratch that attention_forward (or, with backward, the larger of it and
    attention_backward) takes for (B, T) on rt: the blocked kernels' rows where they do not
    fit __local memory and the split backward's dq shares (CPUs), the dS^T chunk of the
    fused backward (GPUs, attention_flash.ds_heads; 0 where the recomputing backward runs)."""
    s = heads(B, T, C, H, kv_heads)
    if variant(rt) == "blocked":
        need = sum(_blocked_layout(rt, s, 2, _forward_rows(s), False)[4:])
        if backward:
            need = max(need, sum(_blocked_layout(rt, s, 5, _backward_rows(s), True)[4:]))
        return need
    if not backward:
        return 0
    most, _, dkv = _ds_programs(rt, s)
    return most * s.group * s.T * s.T if dkv else 0


def splits(rt: Runtime, T: int, nz: int, rows: int) -> int:
    """Work-items sharing one of nz heads of a blocked kernel (each takes every n-th tile of
    `rows` rows, after transposing the whole head itself): where fewer heads than compute
    units would leave cores idle (a batch of 1 with one head), enough for one work-item per
    compute unit, at most one per tile. More shares cost more than they gained: T 512, one
    head, 2 cores: 1.4 ms unsplit, 1.7 in 2 shares, 2.2 in 8; T 2048: 28, 17, 19 ms."""
    return max(1, min(-(-T // rows), -(-rt.info.compute_units // nz)))


def attention_forward(rt: Runtime, y, lse, qkv, B: int, T: int, C: int, H: int,
                      kv_heads: int | None = None):
    """Causal attention (Vaswani et al. 2017): y (B*T, C) and lse (B*H, T) from qkv (B*T, W),
    W = C + 2 * kv_heads * head_dim (kv_heads None: H, multi-head), scores scaled by
    1/sqrt(head_dim)."""
    s = heads(B, T, C, H, kv_heads)
    if variant(rt) == "blocked":
        _blocked(rt, "attention_forward", s, 2, _forward_rows(s), y, lse, qkv)
    else:
        _launch(rt, "attention_forward", s, 2, y, lse, qkv)


def attention_backward(rt: Runtime, dqkv, dsum, dy, qkv, y, lse, B: int, T: int, C: int,
                       H: int, kv_heads: int | None = None):
    """dqkv (B*T, W), fully overwritten, from dy (B*T, C) and the forward's qkv, y, lse
    (W as attention_forward); dk and dv of a key/value head sum over its query heads.
    dsum (B*H, T) is scratch (D = rowsum(dy * y), written by the dq pass, read by dk/dv).
    The blocked (CPU) variant also uses about 3 * B * T * C floats of the runtime's scratch
    and runs it all in one kernel (5 products per (query, key) pair instead of 7)."""
    s = heads(B, T, C, H, kv_heads)
    if variant(rt) == "blocked":
        _blocked(rt, "attention_backward", s, 5, _backward_rows(s), dqkv, dsum, dy, y, qkv, lse,
                 per_kv=True)
        return
    if _backward_ds(rt, s, dqkv, dsum, dy, qkv, y, lse):
        return
    _launch(rt, "attention_backward_dq", s, 3, dqkv, dsum, dy, y, qkv, lse)
    _launch(rt, "attention_backward_dkv", s, 4, dqkv, dy, qkv, lse, dsum, per_kv=True)


def _backward_ds(rt: Runtime, s: Heads, dqkv, dsum, dy, qkv, y, lse) -> bool:
    """The GPU backward's dS path (kernels/attention_flash.cl, ATT_DS): per chunk of key/value
    heads, D, then dk/dv writing dS^T into the runtime's scratch, then dq = dS K; False (nothing
    enqueued) where its kernels' tiles or one head's G x T x T floats of dS^T do not fit."""
    most, dq, dkv = _ds_programs(rt, s)
    if not dkv:
        return False
    G = s.group
    ds = rt.scratch(most * G * s.T * s.T)
    for z0, count in _chunks(rt, s.B * s.KVH, _work(s, 4, True), most):
        if z0:
            rt.between_chunks()   # a running step may stop here
        tail = (s.T, s.C, s.H, z0, z0 + count)
        q_tail = (s.T, s.C, s.H, z0 * G, (z0 + count) * G)  # the chunk's query heads
        attention_flash.launch_dsum(rt, dkv, s.T, count * G, (dsum, dy, y, *q_tail))
        attention_flash.launch(rt, "attention_backward_dkv", dkv, s.T, count,
                               (dqkv, dy, qkv, lse, dsum), tail, ds)
        attention_flash.launch(rt, "attention_backward_dq", dq, s.T, count * G,
                               (dqkv, dsum, dy, y, qkv, lse), q_tail, ds)
    return True


def _ds_programs(rt: Runtime, s: Heads) -> tuple:
    """(key/value heads per chunk, dq program, dk/dv program) of the dS path; a falsy program
    where its tiles or one head's dS^T do not fit (then the recomputing backward runs)."""
    most = attention_flash.ds_heads(rt.info, s.group, s.T, s.B * s.KVH)
    dq = most and attention_flash.program(rt, "attention_backward_dq", s.head_dim, s.group, True)
    dkv = dq and attention_flash.program(rt, "attention_backward_dkv", s.head_dim, s.group,
                                         True)
    return most, dq, dkv


def attention_decode(rt: Runtime, y, scores, qkv_row, cache, pos: int, T_max: int, C: int,
                     H: int, kv_heads: int | None = None):
    """y (C,) for one query at position pos over the KV cache rows 0..pos of (T_max, W)
    (W as attention_forward); scores (H, T_max) is scratch."""
    # attention.cl on every device (the tiled kernels in it only run on GPUs, so a CPU skips
    # the local-memory fit of the tiles)
    s = heads(1, 1, C, H, kv_heads)
    hd = s.head_dim
    t = TILES["tiled"] if rt.is_cpu else tiles_for(rt, hd)
    built = rt.build(("attention.cl",), (("ATT_HD", hd), ("ATT_G", s.group), ("ATT_BK", t.bk),
                                         ("ATT_BQ", t.bq)))
    local = rt.local_1d
    rt.launch_local("attention_decode", (-(-H // local[0]) * local[0],), local, y, scores,
                    qkv_row, cache, pos, T_max, C, H, built=built)


def _rope(rt: Runtime, qkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int, pos0: int,
          sign: float, kv_heads: int | None):
    s = heads(BT, T, C, C // head_dim, kv_heads)
    pairs = (C + s.KVH * head_dim) // 2  # q then k: contiguous at the start of each row
    rt.launch_elementwise("rope", pairs, BT, qkv, cos_t, sin_t, BT, T, s.width, pairs, head_dim,
                          pos0, sign)


def rope_forward(rt: Runtime, qkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int,
                 pos0: int = 0, kv_heads: int | None = None):
    """RoPE (Su et al. 2021, llama.cpp NORM pairs): rotate q and k in place inside qkv (BT, W),
    W = C + 2 * kv_heads * head_dim (kv_heads None: C // head_dim); the position of row i is
    i % T + pos0; cos_t, sin_t (context_length, head_dim/2) from rope_table."""
    _rope(rt, qkv, cos_t, sin_t, BT, T, C, head_dim, pos0, 1.0, kv_heads)


def rope_backward(rt: Runtime, dqkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int,
                  pos0: int = 0, kv_heads: int | None = None):
    """The gradient of rope_forward in place on dqkv: the inverse rotation (it is orthogonal)."""
    _rope(rt, dqkv, cos_t, sin_t, BT, T, C, head_dim, pos0, -1.0, kv_heads)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """RoPE inverse frequencies (head_dim/2,) float64: base^(-2i/head_dim) (Su et al. 2021),
    with rope_scaling "llama3" rescaled as Meta's Llama 3.1 does (transformers'
    modeling_rope_utils._compute_llama3_parameters, llama.cpp's rope_freqs): wavelengths
    longer than original_context / low_freq_factor are divided by factor, those shorter than
    original_context / high_freq_factor kept, and those between interpolated smoothly."""
    hd = cfg.head_dim
    inv = cfg.rope_base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    if cfg.rope_scaling != "llama3":
        return inv
    return inv / llama3_factors(cfg, np.float64)   # one formula for the engine and the GGUF


def rope_table(head_dim: int, T: int, base: float, inv_freq: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin (T, head_dim/2) float32 of pos * inv_freq, computed in float64; inv_freq
    (head_dim/2,) defaults to base^(-2i/head_dim) (rope_inv_freq gives a model's, scaled)."""
    inv = base ** (-2.0 * np.arange(head_dim // 2) / head_dim) if inv_freq is None else inv_freq
    ang = np.arange(T)[:, None] * np.asarray(inv, np.float64)[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
