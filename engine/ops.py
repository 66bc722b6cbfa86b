"""Python launchers, one per layer per direction (llm.c style): outputs, inputs, weights, dims.

Every launcher enqueues on `rt.queue` and returns at once; nothing here reads back to the host.
Linear weights are (out_features, in_features), as in docs/ENGINE_API.md.
"""

from __future__ import annotations

import numpy as np

from engine.runtime import Runtime

f32, i32 = np.float32, np.int32


TN_SLICE = 256  # rows of K per matmul_tn launch on CPUs (cache blocking, see matmul.cl)
GPU_GROUPS = 264  # work-groups a split-K weight gradient aims for (2 per SM of a big GPU)


def _gemm(rt: Runtime, form: str, C, A, B, M: int, N: int, K: int, beta: float):
    if rt.gemm == "blocked":  # register-blocked, one work-item per 6x16 tile (matmul.cl)
        grid, local = (-(-N // 16), -(-M // 6)), (4, 4)
        if form == "nn":
            rt.launch_local("matmul_nn", _round(grid, local), local, C, A, B, M, N, K, beta)
        else:
            for k0 in range(0, max(K, 1), TN_SLICE):
                rt.launch_local("matmul_tn", _round(grid, local), local, C, A, B, M, N, K,
                                beta if k0 == 0 else 1.0, k0, min(k0 + TN_SLICE, K))
    elif form == "nn":  # local-memory tiled, 16x16 work-items per 64x64 tile (matmul_tiled.cl)
        rt.launch_local("matmul_nn_tiled", (16 * -(-N // 64), 16 * -(-M // 64)), (16, 16),
                        C, A, B, M, N, K, beta)
    else:  # tn: split K over enough work-groups to fill the GPU, then add the slices
        tiles = -(-N // 64) * -(-M // 64)
        slices = max(1, min(-(-GPU_GROUPS // tiles), -(-K // 256)))
        kslice = -(-K // slices)
        slices = -(-K // kslice) if K else 1
        grid = (16 * -(-N // 64), 16 * -(-M // 64), slices)
        if slices == 1:
            rt.launch_local("matmul_tn_tiled", grid, (16, 16, 1), C, A, B, M, N, K, beta,
                            max(K, 1))
            return
        parts = rt.scratch(slices * M * N)
        rt.launch_local("matmul_tn_tiled", grid, (16, 16, 1), parts, A, B, M, N, K, 0.0, kslice)
        rt.launch_long("sum_slices", M * N, C, parts, slices, M * N, beta)


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
    """out (M, N) = inp (M, K) @ w (N, K)^T, via w^T in scratch (K, N) and the NN micro-kernel."""
    transpose(rt, w_t_scratch, w, N, K)
    matmul_nn(rt, out, inp, w_t_scratch, M, N, K)


def matmul_backward(rt: Runtime, dinp, dw, dout, inp, w, M: int, N: int, K: int):
    """dinp (M, K) = dout (M, N) @ w (N, K); dw (N, K) += dout^T @ inp (M, K).
    dinp may be None (no gradient needed for the input)."""
    if dinp is not None:
        matmul_nn(rt, dinp, dout, w, M, K, N)
    matmul_tn(rt, dw, dout, inp, N, K, M, 1.0)


def rmsnorm_forward(rt: Runtime, out, rstd, inp, w, R: int, C: int, eps: float):
    """out (R, C) = inp / sqrt(mean(inp^2) + eps) * w; rstd (R,)."""
    rt.launch("rmsnorm_forward", (R,), out, rstd, inp, w, R, C, eps)


def rmsnorm_backward(rt: Runtime, dinp, dw, dout, inp, w, rstd, R: int, C: int):
    """dinp (R, C) += ...; dw (C,) += ... (both accumulate)."""
    rt.launch("rmsnorm_backward", (R,), dinp, dout, inp, w, rstd, R, C)
    rt.launch("rmsnorm_backward_dweight", (C,), dw, dout, inp, rstd, R, C)


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


def att_key_major(rt: Runtime) -> bool:
    """True where att / datt hold (B, H, T_key, T_query) instead of (B, H, T_query, T_key):
    on GPUs, so neighbouring work-items read neighbouring words (kernels/attention.cl)."""
    return not rt.is_cpu


def attention_forward(rt: Runtime, y, att, qkv, B: int, T: int, C: int, H: int):
    """y (B*T, C), att (B, H, T, T) from qkv (B*T, 3C), causal; att layout: att_key_major."""
    rt.launch("attention_forward", (T, H, B), y, att, qkv, B, T, C, H)


def attention_backward(rt: Runtime, dqkv, datt, dy, qkv, att, B: int, T: int, C: int, H: int):
    """dqkv (B*T, 3C) from dy (B*T, C); datt (B, H, T, T) is scratch."""
    rt.launch("attention_backward_dq", (T, H, B), dqkv, datt, dy, qkv, att, B, T, C, H)
    rt.launch("attention_backward_dkv", (T, H, B), dqkv, datt, dy, qkv, att, B, T, C, H)


def swiglu_forward(rt: Runtime, h, gu, BT: int, F: int):
    """h (BT, F) = silu(gu[:, :F]) * gu[:, F:]."""
    rt.launch("swiglu_forward", (F, BT), h, gu, BT, F)


def swiglu_backward(rt: Runtime, dgu, dh, gu, BT: int, F: int):
    rt.launch("swiglu_backward", (F, BT), dgu, dh, gu, BT, F)


def residual_forward(rt: Runtime, out, a, b, n: int):
    """out = a + b over n floats."""
    rt.launch_long("residual_forward", n, out, a, b, n)


def crossentropy_forward_backward(rt: Runtime, logits, losses, targets, R: int, V: int,
                                  n_counted: int, want_grad: bool):
    """losses (R,); with want_grad, logits are replaced by dlogits of the mean over counted rows."""
    inv = 1.0 / max(n_counted, 1)
    rt.launch("crossentropy_forward_backward", (R,), logits, losses, targets, R, V, inv,
              1 if want_grad else 0)


GRAD_NORM_PARTIALS = 1024  # fixed, so the reduction order (and the result) never changes


def grad_norm(rt: Runtime, stats, partial, grads, n: int, max_norm: float):
    """stats[0] = ||grads||, stats[1] = clip scale, stats[2] = non-finite flag (device only)."""
    rt.launch("grad_norm_partial", (GRAD_NORM_PARTIALS,), partial, grads, n)
    rt.launch("grad_norm_finalize", (1,), stats, partial, GRAD_NORM_PARTIALS, max_norm)


def adamw_update(rt: Runtime, params, grads, m, v, stats, n: int, n_decay: int, lr: float,
                 beta1: float, beta2: float, eps: float, weight_decay: float, t: int):
    """One AdamW step t (from 1) over the flat buffers, gradient scaled by stats[1]."""
    bc1, bc2 = 1.0 - beta1 ** t, 1.0 - beta2 ** t
    rt.launch_long("adamw_update", n, params, grads, m, v, stats, n, n_decay, lr, beta1, beta2,
                   eps, weight_decay, bc1, bc2)


def attention_decode(rt: Runtime, y, scores, qkv_row, cache, pos: int, T_max: int, C: int, H: int):
    """y (C,) for one query at position pos over cache rows 0..pos of (T_max, 3C)."""
    rt.launch("attention_decode", (H,), y, scores, qkv_row, cache, pos, T_max, C, H)
