"""Python launchers, one per layer per direction (llm.c style): outputs, inputs, weights, dims.

Every launcher enqueues on `rt.queue` and returns at once; nothing here reads back to the host.
Linear weights are (out_features, in_features), as in docs/ENGINE_API.md.
"""

from __future__ import annotations

import numpy as np

from engine import gemm_tiles
from engine.runtime import Runtime

f32, i32 = np.float32, np.int32


TN_SLICE = 256  # rows of K per CPU matmul_tn (and vector matmul_nn) launch: cache blocking
# Resident 256-work-item GEMM groups per compute unit (122 registers per work-item on an H200:
# 2 groups fit); split-K and the tile choice aim for whole waves of these.
GROUPS_PER_CU = 2


def _gemm(rt: Runtime, form: str, C, A, B, M: int, N: int, K: int, beta: float):
    if rt.gemm == "packed":
        gemm_packed(rt, form, C, A, B, M, N, K, beta)
        return
    if rt.gemm in ("blocked", "vector"):
        # register-blocked, one work-item per tile: 6x16 scalar (matmul.cl), or in vectors of
        # the device's width (matmul_vec.cl): 8x32 in float16 (AVX-512), 6x16 in float8 (AVX2)
        vec = rt.gemm == "vector"
        tm, tn = gemm_tiles.VECTOR[rt.vector_width] if vec else gemm_tiles.BLOCKED
        built = (rt.build(("matmul_vec.cl",), gemm_tiles.vector_defines(rt.vector_width))
                 if vec else None)
        grid, local = (-(-N // tn), -(-M // tm)), (4, 4)
        if form == "nn" and not vec:
            rt.launch_local("matmul_nn", _round(grid, local), local, C, A, B, M, N, K, beta)
            return
        # K in slices (beta 1 after the first), so the slice of A and B stays in cache
        name = f"matmul_{form}_vec" if vec else f"matmul_{form}"
        for k0 in range(0, max(K, 1), TN_SLICE):
            rt.launch_local(name, _round(grid, local), local, C, A, B, M, N, K,
                            beta if k0 == 0 else 1.0, k0, min(k0 + TN_SLICE, K), built=built)
    else:
        tl = _tile_edge(rt, form, M, N)
        # float4 fetches where every row stride and edge is a multiple of 4 floats
        suffix = ("" if tl == 64 else "128") + ("_v4" if _fetch4(rt, M, N, K) else "")
        gx, gy = gemm_tiles.TILED_GROUP
        grid, n_tiles = (gx * -(-N // tl), gy * -(-M // tl)), -(-N // tl) * -(-M // tl)
        tiles, tk = rt.gemm_tiles(tl), gemm_tiles.TILED_K
        if form == "nn":  # local-memory tiled, one work-group per tile
            rt.launch_local("matmul_nn_tiled" + suffix, grid, (gx, gy), C, A, B, M, N, K, beta,
                            *tiles)
            return
        # tn: split K so the groups fill whole waves, then add the slices up (sum_slices)
        slices = _k_slices(rt, n_tiles, K)
        kslice = -(-K // slices)
        kslice = max(tk, -(-kslice // tk) * tk)
        slices = -(-K // kslice) if K else 1
        name = "matmul_tn_tiled" + suffix
        if slices == 1:
            rt.launch_local(name, grid + (1,), (gx, gy, 1), C, A, B, M, N, K, beta, max(K, 1),
                            *tiles)
            return
        parts = rt.scratch(slices * M * N)
        rt.launch_local(name, grid + (slices,), (gx, gy, 1), parts, A, B, M, N, K, 0.0, kslice,
                        *tiles)
        rt.launch_long("sum_slices", M * N, C, parts, slices, M * N, beta)


def gemm_packed(rt: Runtime, form: str, C, A, B, M: int, N: int, K: int, beta: float):
    """C (M, N) = beta * C + op(A) @ op(B) by kernels/matmul_packed.cl (packed panels, one
    work-item per work-group), form "nn" (A (M,K), B (K,N)), "nt" (B stored (N,K)) or "tn"
    (A stored (K,M)). The C blocks per group: see packed_blocks."""
    width = rt.vector_width
    defines = gemm_tiles.packed_defines(width, rt.device.local_mem_size)
    built = rt.build(("matmul_packed.cl",), defines)
    mb, nb = packed_blocks(M, N, dict(defines), rt.info.compute_units)
    grid = (-(-N // nb), -(-M // mb))
    rt.launch_local(f"matmul_{form}_packed", grid, (1, 1), C, A, B, M, N, K, beta, mb, nb,
                    built=built)


PACKED_GROUPS_PER_CU = 2  # C blocks per compute unit: equal blocks, whole rounds of them
PACKED_MIN_COLS = 256  # narrowest block split further by columns (packed A reused by 8 panels)


def packed_blocks(M: int, N: int, sizes: dict, compute_units: int) -> tuple[int, int]:
    """(rows mb, columns nb) of the C block one matmul_packed.cl work-group computes, for
    PACKED_GROUPS_PER_CU equal blocks per compute unit. Each group packs its PK_KC x nb slice
    of B once per K slice and reuses it over mb rows (2 * mb flops per packed float), so
    blocks are split by columns first (down to PACKED_MIN_COLS) and by rows after; nb is a
    multiple of 2 * VEC_W and at most PK_NB, mb a multiple of PK_MR."""
    nr, mr = 2 * sizes["VEC_W"], sizes["PK_MR"]
    want = PACKED_GROUPS_PER_CU * compute_units
    col_blocks, row_blocks = -(-N // sizes["PK_NB"]), 1
    while col_blocks * row_blocks < want:
        if -(-N // (2 * col_blocks)) >= PACKED_MIN_COLS:
            col_blocks *= 2
        elif -(-M // (2 * row_blocks)) >= mr:
            row_blocks *= 2
        else:
            break
    nb = -(-(-(-N // col_blocks)) // nr) * nr
    mb = -(-(-(-M // row_blocks)) // mr) * mr
    return mb, nb


def _fetch4(rt: Runtime, M: int, N: int, K: int) -> bool:
    """Whether the tiled GEMM may fetch float4s (kernels/matmul_tiled.cl gemm_tile4): M, N and
    K (every row stride of C(M,N) = A(M,K) B(K,N) or A(K,M)^T B(K,N)) multiples of 4, unless
    rt.gemm_fetch4 is False (tests and benchmarks force the scalar form)."""
    return rt.gemm_fetch4 and M % 4 == 0 and N % 4 == 0 and K % 4 == 0


SUM_DEPTH = 64  # a split-K slice's partial sums cost about as much as 64 more K per tile


def _k_slices(rt: Runtime, n_tiles: int, K: int) -> int:
    """How many slices of K a tn product of n_tiles output tiles is split into: the count with
    the least estimated time, waves x depth per slice (a last, partly empty wave costs as much
    as a full one: 270 groups where 264 fit ran at 2/3 of the speed of 264) plus the summing
    of the slices (sum_slices); each slice at least 256 deep."""
    wave = _wave(rt)

    def cost(s: int) -> float:
        return -(-n_tiles * s // wave) * K / s + (SUM_DEPTH * s * n_tiles / wave if s > 1 else 0)

    return min(range(1, max(1, K // 256) + 1), key=lambda s: (cost(s), s))


def _tile_edge(rt: Runtime, form: str, M: int, N: int) -> int:
    """64 or 128: 128x128 tiles (8x8 per work-item, twice the arithmetic per local-memory
    read) once the product has a full wave of them; for tn (split over K,
    which makes its own parallelism) once C has 2^17 elements (measured on an H200, M and L
    shapes: bench_kernels.py); 64 where the device's local memory is too small for 128. Tests
    force one."""
    if rt.gemm_tile:
        return rt.gemm_tile
    if rt.gemm_tiles(128) is None:
        return 64
    if form == "tn":
        return 128 if M * N >= 1 << 17 and min(M, N) >= 128 else 64
    return 128 if -(-M // 128) * -(-N // 128) >= _wave(rt) else 64


def _wave(rt: Runtime) -> int:
    """Tiled-GEMM work-groups the device runs at once (GROUPS_PER_CU per compute unit)."""
    return GROUPS_PER_CU * rt.info.compute_units


def _round(grid, local):
    return tuple(-(-g // l) * l for g, l in zip(grid, local))


def matmul_nn(rt: Runtime, C, A, B, M: int, N: int, K: int, beta: float = 0.0):
    """C (M, N) = beta * C + A (M, K) @ B (K, N). CPU and GPU variants by device type.
    Rows of A and C in chunks of at most rt.max_launch_flops (display watchdogs; GPUs only,
    scaled to the device: engine.runtime.launch_flops_cap)."""
    for m0, rows in _row_chunks(rt, M, 2 * N * K):
        _gemm(rt, "nn", _rows(rt, C, m0, rows, N, M), _rows(rt, A, m0, rows, K, M), B, rows,
              N, K, beta)


def matmul_tn(rt: Runtime, C, A, B, M: int, N: int, K: int, beta: float = 0.0):
    """C (M, N) = beta * C + A^T @ B with A stored (K, M) and B (K, N). The sum over K in
    chunks of at most rt.max_launch_flops where it is set (the later ones accumulate)."""
    for k0, ks in _row_chunks(rt, K, 2 * M * N):
        _gemm(rt, "tn", C, _rows(rt, A, k0, ks, M, K), _rows(rt, B, k0, ks, N, K), M, N, ks,
              beta if k0 == 0 else 1.0)


def _row_chunks(rt: Runtime, rows: int, flops_per_row: int):
    """(first row, row count) chunks of at most rt.max_launch_flops each (one chunk when there
    is no cap); chunk starts are multiples of 128 rows, so sub-buffer origins stay aligned."""
    cap = rt.max_launch_flops
    if cap is None or rows * flops_per_row <= cap:
        yield 0, rows
        return
    step = max(128, int(cap // max(flops_per_row, 1)) // 128 * 128)
    for r0 in range(0, rows, step):
        yield r0, min(step, rows - r0)


def _rows(rt: Runtime, buf, r0: int, n: int, width: int, total: int):
    """Rows [r0, r0 + n) of the (total, width) float matrix in buf, as a buffer."""
    if r0 == 0 and n == total:
        return buf
    return rt.sub_buffer(buf, r0 * width, n * width)


def transpose(rt: Runtime, out, inp, R: int, C: int):
    """out (C, R) = inp (R, C)^T."""
    rt.launch("transpose", (-(-C // 4), -(-R // 4)), out, inp, R, C)


def matmul_forward(rt: Runtime, out, inp, w, w_t_scratch, M: int, N: int, K: int):
    """out (M, N) = inp (M, K) @ w (N, K)^T: with the "packed" GEMM in one nt product, else
    via w^T in scratch (K, N) and the NN kernel (on an
    H200 the transpose + nn ran ~8% faster than a tiled kernel reading w in place: its fetches
    of w are 64-byte row pieces instead of 128-byte runs)."""
    if rt.gemm == "packed":  # reads w in place while packing it: no transpose pass
        for m0, rows in _row_chunks(rt, M, 2 * N * K):
            gemm_packed(rt, "nt", _rows(rt, out, m0, rows, N, M), _rows(rt, inp, m0, rows, K, M),
                        w, rows, N, K, 0.0)
        return
    transpose(rt, w_t_scratch, w, N, K)
    matmul_nn(rt, out, inp, w_t_scratch, M, N, K)


def matmul_backward(rt: Runtime, dinp, dw, dout, inp, w, M: int, N: int, K: int):
    """dinp (M, K) = dout (M, N) @ w (N, K); dw (N, K) += dout^T @ inp (M, K).
    dinp may be None (no gradient needed for the input). dw goes on the runtime's side queue
    (GPUs): the caller keeps dout and inp unchanged until rt.before_write / rt.join."""
    with rt.side(reads=(dout, inp)):
        matmul_tn(rt, dw, dout, inp, N, K, M, 1.0)
    if dinp is not None:
        matmul_nn(rt, dinp, dout, w, M, K, N)


def _rows_launch(rt: Runtime, name: str, rows: int, *args):
    """A row kernel: rt.row_lanes work-items per row (kernels/common.h, lanes_reduce)."""
    lanes, per = rt.row_lanes, rt.row_group_rows
    rt.launch_local(name, (lanes, -(-rows // per) * per), (lanes, per), *args)


def rmsnorm_forward(rt: Runtime, out, rstd, inp, w, R: int, C: int, eps: float):
    """out (R, C) = inp / sqrt(mean(inp^2) + eps) * w; rstd (R,)."""
    _rows_launch(rt, "rmsnorm_forward", R, out, rstd, inp, w, R, C, eps)


def residual_rmsnorm_forward(rt: Runtime, xsum, out, rstd, a, b, w, R: int, C: int, eps: float):
    """xsum (R, C) = a + b, then out, rstd = rmsnorm_forward(xsum, w), in one pass."""
    _rows_launch(rt, "residual_rmsnorm_forward", R, xsum, out, rstd, a, b, w, R, C, eps)


def rmsnorm_backward(rt: Runtime, dinp, dw, dout, inp, w, rstd, R: int, C: int):
    """dinp (R, C) += ...; dw (C,) += ... (both accumulate)."""
    _rows_launch(rt, "rmsnorm_backward", R, dinp, dout, inp, w, rstd, R, C)
    # dw walks columns of (R, C): in slices of >= 64 rows on every device (a GPU: 9% of a step
    # unsplit; a CPU: 4-6x faster at R 4096, RESULTS.md tuning timings), summed by sum_slices
    slices = max(1, min(256, R // 64))
    if slices == 1:
        rt.launch("rmsnorm_backward_dweight", (C, 1), dw, dout, inp, rstd, R, C, max(R, 1), 1)
        return
    rows = -(-R // slices)
    parts = rt.scratch(slices * C)
    rt.launch("rmsnorm_backward_dweight", (C, slices), parts, dout, inp, rstd, R, C, rows, 0)
    rt.launch_long("sum_slices", C, dw, parts, slices, C, 1.0)


def embedding_forward(rt: Runtime, out, ids, wte, BT: int, C: int):
    """out (BT, C) = wte[ids]."""
    rt.launch_elementwise("embedding_forward", C, BT, out, ids, wte, BT, C)


def embedding_backward(rt: Runtime, dwte, dout, uniq, starts, order, U: int, C: int):
    """dwte[uniq[u]] += sum of dout rows grouped by token (see `group_positions`)."""
    if U:
        rt.launch_elementwise("embedding_backward", C, U, dwte, dout, uniq, starts, order, U, C)


def group_positions(ids: np.ndarray):
    """CSR grouping of positions by token id, computed on the host with the batch.
    Returns (uniq (U,), starts (U+1,), order (BT,)) as int32."""
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable").astype(i32)
    uniq, counts = np.unique(flat, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(i32)
    return uniq.astype(i32), starts, order


def swiglu_forward(rt: Runtime, h, gu, BT: int, F: int):
    """h (BT, F) = silu(gu[:, :F]) * gu[:, F:]."""
    rt.launch_elementwise("swiglu_forward", F, BT, h, gu, BT, F)


def swiglu_backward(rt: Runtime, dgu, dh, gu, BT: int, F: int):
    rt.launch_elementwise("swiglu_backward", F, BT, dgu, dh, gu, BT, F)


def crossentropy_forward_backward(rt: Runtime, logits, losses, targets, R: int, V: int,
                                  n_counted: int, want_grad: bool):
    """losses (R,); with want_grad, logits are replaced by dlogits of the mean over counted rows."""
    inv = 1.0 / max(n_counted, 1)
    _rows_launch(rt, "crossentropy_forward_backward", R, logits, losses, targets, R, V, inv,
                 1 if want_grad else 0)


def grad_norm_partials(rt: Runtime) -> int:
    """Work-items of grad_norm_partial: fixed per device kind, so the reduction order (and the
    result) never changes between steps. 1024 keep 2 CPU cores busy; a GPU needs more to
    fill its units (benchmarks/RESULTS.md, tuning timings)."""
    return 1024 if rt.is_cpu else 8192


def grad_norm(rt: Runtime, stats, partial, grads, n: int, max_norm: float):
    """stats[0] = ||grads||, stats[1] = clip scale, stats[2] = non-finite flag (device only)."""
    parts = grad_norm_partials(rt)
    rt.launch("grad_norm_partial", (parts,), partial, grads, n)
    rt.launch_local("grad_norm_finalize", (rt.row_lanes,), (rt.row_lanes,), stats, partial,
                    parts, max_norm)


def adamw_update(rt: Runtime, params, grads, m, v, stats, n: int, n_decay: int, lr: float,
                 beta1: float, beta2: float, eps: float, weight_decay: float, t: int):
    """One AdamW step t (from 1) over the flat buffers, gradient scaled by stats[1]."""
    bc1, bc2 = 1.0 - beta1 ** t, 1.0 - beta2 ** t
    rt.launch_long("adamw_update", n, params, grads, m, v, stats, n, n_decay, lr, beta1, beta2,
                   eps, weight_decay, bc1, bc2)


def dropout_forward(rt: Runtime, out, inp, key: int, threshold: int, scale: float, n: int):
    """out (n,) = inp * keep * scale; keep from the hash of (key, index) (kernels/dropout.cl,
    engine/dropout.py). out may be inp."""
    rt.launch_long("dropout_forward", n, out, inp, key, threshold, scale, n)


def dropout_backward(rt: Runtime, dinp, dout, key: int, threshold: int, scale: float, n: int):
    """dinp (n,) = dout * keep * scale, the mask of dropout_forward with the same key."""
    rt.launch_long("dropout_backward", n, dinp, dout, key, threshold, scale, n)
