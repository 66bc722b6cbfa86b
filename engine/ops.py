"""Python launchers, one per layer per direction (llm.c style): outputs, inputs, weights, dims.

Every launcher enqueues on `rt.queue` and returns at once; nothing here reads back to the host.
Linear weights are (out_features, in_features), as in docs/ENGINE_API.md.
"""

from __future__ import annotations

import numpy as np

from engine.runtime import Runtime

f32, i32 = np.float32, np.int32


TN_SLICE = 256  # rows of K per CPU matmul_tn (and vector matmul_nn) launch: cache blocking
# Resident 256-work-item GEMM groups per compute unit (122 registers per work-item on an H200:
# 2 groups fit); split-K and the tile choice aim for whole waves of these.
GROUPS_PER_CU = 2
TK = 16  # K slice of the tiled GEMM (kernels/matmul_tiled.cl); split-K slices are multiples


def _gemm(rt: Runtime, form: str, C, A, B, M: int, N: int, K: int, beta: float):
    if rt.gemm in ("blocked", "vector"):
        # register-blocked, one work-item per tile: 6x16 scalar (matmul.cl) or 8x32 in float16
        # vectors for 16-float SIMD (matmul_vec.cl)
        vec = rt.gemm == "vector"
        tm, tn, suffix = (8, 32, "_vec") if vec else (6, 16, "")
        grid, local = (-(-N // tn), -(-M // tm)), (4, 4)
        if form == "nn" and not vec:
            rt.launch_local("matmul_nn", _round(grid, local), local, C, A, B, M, N, K, beta)
            return
        # K in slices (beta 1 after the first), so the slice of A and B stays in cache
        for k0 in range(0, max(K, 1), TN_SLICE):
            rt.launch_local(f"matmul_{form}{suffix}", _round(grid, local), local, C, A, B, M, N,
                            K, beta if k0 == 0 else 1.0, k0, min(k0 + TN_SLICE, K))
    else:
        tl = _tile_edge(rt, form, M, N)
        suffix = "" if tl == 64 else "128"
        grid = (16 * -(-N // tl), 16 * -(-M // tl))
        tiles = rt.gemm_tiles(tl)
        if form == "nn":  # local-memory tiled, 16x16 work-items per tile
            rt.launch_local("matmul_nn_tiled" + suffix, grid, (16, 16), C, A, B, M, N, K, beta,
                            *tiles)
            return
        # tn: split K so the groups fill one wave (more would start a second, nearly empty
        # wave: 270 groups where 264 fit ran at 2/3 of the speed of 264), then add the slices
        n_tiles = grid[0] * grid[1] // 256
        slices = max(1, min(_wave(rt) // n_tiles, -(-K // 256)))
        kslice = -(-K // slices)
        kslice = max(TK, -(-kslice // TK) * TK)
        slices = -(-K // kslice) if K else 1
        name = "matmul_tn_tiled" + suffix
        if slices == 1:
            rt.launch_local(name, grid + (1,), (16, 16, 1), C, A, B, M, N, K, beta, max(K, 1),
                            *tiles)
            return
        parts = rt.scratch(slices * M * N)
        rt.launch_local(name, grid + (slices,), (16, 16, 1), parts, A, B, M, N, K, 0.0, kslice,
                        *tiles)
        rt.launch_long("sum_slices", M * N, C, parts, slices, M * N, beta)


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
    """C (M, N) = beta * C + A (M, K) @ B (K, N). CPU and GPU variants by device type."""
    _gemm(rt, "nn", C, A, B, M, N, K, beta)


def matmul_tn(rt: Runtime, C, A, B, M: int, N: int, K: int, beta: float = 0.0):
    """C (M, N) = beta * C + A^T @ B with A stored (K, M) and B (K, N)."""
    _gemm(rt, "tn", C, A, B, M, N, K, beta)


def transpose(rt: Runtime, out, inp, R: int, C: int):
    """out (C, R) = inp (R, C)^T."""
    rt.launch("transpose", (-(-C // 4), -(-R // 4)), out, inp, R, C)


def matmul_forward(rt: Runtime, out, inp, w, w_t_scratch, M: int, N: int, K: int):
    """out (M, N) = inp (M, K) @ w (N, K)^T, via w^T in scratch (K, N) and the NN kernel (on an
    H200 the transpose + nn ran ~8% faster than a tiled kernel reading w in place: its fetches
    of w are 64-byte row pieces instead of 128-byte runs)."""
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
    slices = 1 if rt.is_cpu else max(1, min(256, R // 64))
    if slices == 1:
        rt.launch("rmsnorm_backward_dweight", (C, 1), dw, dout, inp, rstd, R, C, max(R, 1), 1)
        return
    rows = -(-R // slices)
    parts = rt.scratch(slices * C)
    rt.launch("rmsnorm_backward_dweight", (C, slices), parts, dout, inp, rstd, R, C, rows, 0)
    rt.launch_long("sum_slices", C, dw, parts, slices, C, 1.0)


def embedding_forward(rt: Runtime, out, ids, wte, BT: int, C: int):
    """out (BT, C) = wte[ids]."""
    rt.launch("embedding_forward", (C, BT), out, ids, wte, BT, C)


def embedding_backward(rt: Runtime, dwte, dout, uniq, starts, order, U: int, C: int):
    """dwte[uniq[u]] += sum of dout rows grouped by token (see `group_positions`)."""
    if U:
        rt.launch("embedding_backward", (C, U), dwte, dout, uniq, starts, order, U, C)


def group_positions(ids: np.ndarray):
    """CSR grouping of positions by token id, computed on the host with the batch.
    Returns (uniq (U,), starts (U+1,), order (BT,)) as int32."""
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable").astype(i32)
    uniq, counts = np.unique(flat, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(i32)
    return uniq.astype(i32), starts, order


def rope_forward(rt: Runtime, qkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int, pos0=0):
    """Rotate q and k in place inside qkv (BT, 3C); position of row i is i % T + pos0."""
    rt.launch("rope_forward", (C, BT), qkv, cos_t, sin_t, BT, T, C, head_dim, pos0)


def rope_backward(rt: Runtime, dqkv, cos_t, sin_t, BT: int, T: int, C: int, head_dim: int, pos0=0):
    rt.launch("rope_backward", (C, BT), dqkv, cos_t, sin_t, BT, T, C, head_dim, pos0)


def _bmm(rt: Runtime, C, A, B, M: int, N: int, K: int, H: int, nz: int, a, b, c,
         alpha: float = 1.0, beta: float = 0.0, causal: int = 0):
    """C[z] (M, N) = alpha * A[z] (M, K) @ B[z] (K, N) + beta * C[z] for z = b * H + h < nz.
    a, b = (offset, row stride, column stride, batch stride, head stride) in floats; c = the same
    without the column stride (it is 1). causal: 0 none, 1 skip tiles above the diagonal,
    2 only k <= m, 3 only k >= m (kernels/matmul_tiled.cl, bmm_tiled)."""
    if rt.gemm in ("blocked", "vector"):
        if b[2] != 1:
            raise ValueError("bmm_blocked needs rows of B contiguous; transpose it first")
        tm, tn, name = (8, 32, "bmm_vec") if rt.gemm == "vector" else (6, 16, "bmm_blocked")
        grid = _round((-(-N // tn), -(-M // tm), nz), (4, 4, 1))
        rt.launch_local(name, grid, (4, 4, 1), C, A, B, M, N, K, H, *a,
                        b[0], b[1], b[3], b[4], *c, alpha, beta, causal)
    else:
        rt.launch_local("bmm_tiled", (16 * -(-N // 64), 16 * -(-M // 64), nz), (16, 16, 1),
                        C, A, B, M, N, K, H, *a, *b, *c, alpha, beta, causal,
                        *rt.gemm_tiles(64))


def _heads_transposed(rt: Runtime, qkv, part: int, B: int, T: int, C: int, H: int):
    """The transpose of q, k or v (part 0, 1, 2) of every head, (B*H, head_dim, T), in
    rt.scratch, for bmm_blocked: returns its bmm stride tuple."""
    hd, C3 = C // H, 3 * C
    out = rt.scratch(B * T * C)
    grid = _round((-(-hd // 4), -(-T // 4), B * H), (4, 4, 1))
    rt.launch_local("transpose_heads", grid, (4, 4, 1), out, qkv, T, hd, H, part * C, C3,
                    T * C3, hd)
    return out, (0, T, 1, H * hd * T, hd * T)


def attention_forward(rt: Runtime, y, att, qkv, B: int, T: int, C: int, H: int):
    """Causal attention (Vaswani et al. 2017): y (B*T, C) and the probabilities att (B, H, T, T),
    query-major, from qkv (B*T, 3C): S = Q K^T / sqrt(head_dim) and Y = P V as batched
    products, the causal row softmax in between."""
    hd, C3, nz = C // H, 3 * C, B * H
    q = (0, C3, 1, T * C3, hd)
    p = (0, T, 1, H * T * T, T * T)
    if rt.gemm in ("blocked", "vector"):
        kt, kt_s = _heads_transposed(rt, qkv, 1, B, T, C, H)
    else:
        kt, kt_s = qkv, (C, 1, C3, T * C3, hd)
    _bmm(rt, att, qkv, kt, T, T, hd, H, nz, q, kt_s, p[:2] + p[3:], 1.0 / np.sqrt(hd), causal=1)
    _rows_launch(rt, "attention_softmax", nz * T, att, nz * T, T, 1.0)
    _bmm(rt, y, att, qkv, T, hd, T, H, nz, p, (2 * C, C3, 1, T * C3, hd), (0, C, T * C, hd),
         causal=2)


def attention_backward(rt: Runtime, dqkv, datt, dy, qkv, att, B: int, T: int, C: int, H: int):
    """dqkv (B*T, 3C) from dy (B*T, C), fully overwritten; datt (B, H, T, T) is scratch:
    dP = dY V^T, dS = softmax backward, dQ = dS K, dK = dS^T Q, dV = P^T dY."""
    hd, C3, nz = C // H, 3 * C, B * H
    g = (0, C, 1, T * C, hd)                   # dy of head h: (T, hd)
    p = (0, T, 1, H * T * T, T * T)            # P or dS: (T_query, T_key)
    pt = (0, 1, T, H * T * T, T * T)           # their transpose
    if rt.gemm in ("blocked", "vector"):
        vt, vt_s = _heads_transposed(rt, qkv, 2, B, T, C, H)
    else:
        vt, vt_s = qkv, (2 * C, 1, C3, T * C3, hd)
    _bmm(rt, datt, dy, vt, T, T, hd, H, nz, g, vt_s, p[:2] + p[3:], causal=1)
    _rows_launch(rt, "attention_softmax_backward", nz * T, datt, att, nz * T, T,
                    1.0 / np.sqrt(hd))
    dq, dk, dv = ((part * C, C3, T * C3, hd) for part in range(3))  # inside dqkv
    _bmm(rt, dqkv, datt, qkv, T, hd, T, H, nz, p, (C, C3, 1, T * C3, hd), dq, causal=2)
    _bmm(rt, dqkv, datt, qkv, T, hd, T, H, nz, pt, (0, C3, 1, T * C3, hd), dk, causal=3)
    _bmm(rt, dqkv, att, dy, T, hd, T, H, nz, pt, g, dv, causal=3)


def swiglu_forward(rt: Runtime, h, gu, BT: int, F: int):
    """h (BT, F) = silu(gu[:, :F]) * gu[:, F:]."""
    rt.launch("swiglu_forward", (F, BT), h, gu, BT, F)


def swiglu_backward(rt: Runtime, dgu, dh, gu, BT: int, F: int):
    rt.launch("swiglu_backward", (F, BT), dgu, dh, gu, BT, F)


def crossentropy_forward_backward(rt: Runtime, logits, losses, targets, R: int, V: int,
                                  n_counted: int, want_grad: bool):
    """losses (R,); with want_grad, logits are replaced by dlogits of the mean over counted rows."""
    inv = 1.0 / max(n_counted, 1)
    _rows_launch(rt, "crossentropy_forward_backward", R, logits, losses, targets, R, V, inv,
                 1 if want_grad else 0)


def grad_norm_partials(rt: Runtime) -> int:
    """Work-items of grad_norm_partial: fixed per device kind, so the reduction order (and the
    result) never changes between steps. 1024 keep 2 CPU cores busy; a GPU needs more (1024
    threads walking 10.8 M gradients took 1.2 ms on an H200)."""
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


def attention_decode(rt: Runtime, y, scores, qkv_row, cache, pos: int, T_max: int, C: int, H: int):
    """y (C,) for one query at position pos over cache rows 0..pos of (T_max, 3C)."""
    rt.launch("attention_decode", (H,), y, scores, qkv_row, cache, pos, T_max, C, H)


def dropout_forward(rt: Runtime, out, inp, key: int, threshold: int, scale: float, n: int):
    """out (n,) = inp * keep * scale; keep from the hash of (key, index) (kernels/dropout.cl,
    engine/dropout.py). out may be inp."""
    rt.launch_long("dropout_forward", n, out, inp, key, threshold, scale, n)


def dropout_backward(rt: Runtime, dinp, dout, key: int, threshold: int, scale: float, n: int):
    """dinp (n,) = dout * keep * scale, the mask of dropout_forward with the same key."""
    rt.launch_long("dropout_backward", n, dinp, dout, key, threshold, scale, n)
