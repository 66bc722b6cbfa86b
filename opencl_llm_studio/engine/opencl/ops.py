"""Python launchers, one per layer per direction (llm.c style): outputs, inputs, weights, dims.

Every launcher enqueues on `rt.queue` and returns at once; nothing here reads back to the host.
Linear weights are (out_features, in_features), as in docs/ENGINE_API.md.
"""

from __future__ import annotations

import numpy as np

from opencl_llm_studio.engine.opencl import gemm_tiles
from opencl_llm_studio.engine.opencl.gemm_packed import gemm_packed, packed_scratch_floats
from opencl_llm_studio.engine.opencl.runtime import Runtime

f32, i32 = np.float32, np.int32

# Partial sums of the grad-norm reduction (grad_norm below): fixed, so the reduction
# order (and the result) never changes between steps. CPU: one per work-item (1024 keep 2 cores
# busy); GPU: one per work-group of the row kernels' lanes (64 x 1024 work-items, enough loads in
# flight to read the gradients at memory speed; kernels/optimizer.cl).
GRAD_NORM_PARTIALS = 1024


def _gemm(rt: Runtime, form: str, C, A, B, M: int, N: int, K: int, beta: float):
    """C (M, N) = beta * C + A @ B (nn) or A^T @ B (tn), launched as rt.plan says
    (engine/opencl/gemm_plan.py: GemmPlan.launch_for)."""
    choice = rt.plan.choice_for(form, M, N, K)
    if choice.variant == "packed":
        gemm_packed(rt, form, C, A, B, M, N, K, beta, choice.vector_width)
        return
    g = rt.plan.launch_for(form, M, N, K)
    if g.edge is None:  # CPU register-blocked kernels, one work-item per tile
        built = (rt.build(("matmul_vec.cl",), gemm_tiles.vector_defines(g.vector_width))
                 if g.vector_width else None)
        if g.k_step is None:
            rt.launch_local(g.kernel, g.grid, g.local, C, A, B, M, N, K, beta, built=built)
            return
        # K in slices (beta 1 after the first), so the slice of A and B stays in cache
        for k0 in range(0, max(K, 1), g.k_step):
            rt.launch_local(g.kernel, g.grid, g.local, C, A, B, M, N, K,
                            beta if k0 == 0 else 1.0, k0, min(k0 + g.k_step, K), built=built)
        return
    tiles = rt.gemm_tiles(g.edge)  # local-memory tiled, one work-group per tile
    # K split so the groups fill whole waves, the slices' partial sums added by sum_slices (their
    # scratch: slices x M x N floats, at most a few waves of tiles)
    slices = g.grid[2]
    if slices == 1:
        rt.launch_local(g.kernel, g.grid, g.local, C, A, B, M, N, K, beta, g.kslice, *tiles)
        return
    parts = rt.scratch(gemm_scratch_floats(rt, form, M, N, K))
    rt.launch_local(g.kernel, g.grid, g.local, parts, A, B, M, N, K, 0.0, g.kslice, *tiles)
    rt.launch_long("sum_slices", M * N, C, parts, slices, M * N, beta)


def gemm_scratch_floats(rt: Runtime, form: str, M: int, N: int, K: int) -> int:
    """Floats of rt.scratch that _gemm takes for these sizes: the partial products of a K split
    (tiled: slices x M x N; packed: gemm_packed.packed_scratch_floats), 0 where K is not split
    (engine.model.scratch counts them before a run allocates anything)."""
    choice = rt.plan.choice_for(form, M, N, K)
    if choice.variant == "packed":
        return packed_scratch_floats(rt, choice.vector_width, M, N, K)
    g = rt.plan.launch_for(form, M, N, K)
    return g.grid[2] * M * N if g.edge is not None and g.grid[2] > 1 else 0


def nn_scratch_floats(rt: Runtime, M: int, N: int, K: int) -> int:
    """rt.scratch floats of matmul_nn (M, N, K): its largest row chunk's."""
    return max(gemm_scratch_floats(rt, "nn", rows, N, K)
               for _, rows in _row_chunks(rt, M, 2 * N * K))


def tn_scratch_floats(rt: Runtime, M: int, N: int, K: int) -> int:
    """rt.scratch floats of matmul_tn (M, N, K): its largest chunk of K's."""
    return max(gemm_scratch_floats(rt, "tn", M, N, ks) for _, ks in _row_chunks(rt, K, 2 * M * N))


def forward_scratch_floats(rt: Runtime, M: int, N: int, K: int) -> int:
    """rt.scratch floats of matmul_forward (M, N, K): none for matvec_nt, the packed nt
    product's per row chunk, else matmul_nn's."""
    if M <= MATVEC_ROWS:
        return 0
    choice = rt.plan.choice_for("nn", M, N, K)
    if choice.variant == "packed":
        return max(packed_scratch_floats(rt, choice.vector_width, rows, N, K)
                   for _, rows in _row_chunks(rt, M, 2 * N * K))
    return nn_scratch_floats(rt, M, N, K)


def matmul_nn(rt: Runtime, C, A, B, M: int, N: int, K: int, beta: float = 0.0):
    """C (M, N) = beta * C + A (M, K) @ B (K, N). CPU and GPU variants by device type.
    Rows of A and C in chunks of at most rt.max_launch_flops (display watchdogs; GPUs only,
    scaled to the device: engine.opencl.runtime.launch_flops_cap)."""
    for m0, rows in _row_chunks(rt, M, 2 * N * K):
        if m0:
            rt.between_chunks()   # a running step may stop here
        _gemm(rt, "nn", _rows(rt, C, m0, rows, N, M), _rows(rt, A, m0, rows, K, M), B, rows,
              N, K, beta)


def matmul_tn(rt: Runtime, C, A, B, M: int, N: int, K: int, beta: float = 0.0):
    """C (M, N) = beta * C + A^T @ B with A stored (K, M) and B (K, N). The sum over K in
    chunks of at most rt.max_launch_flops where it is set (the later ones accumulate)."""
    for k0, ks in _row_chunks(rt, K, 2 * M * N):
        if k0:
            rt.between_chunks()   # a running step may stop here
        _gemm(rt, "tn", C, _rows(rt, A, k0, ks, M, K), _rows(rt, B, k0, ks, N, K), M, N, ks,
              beta if k0 == 0 else 1.0)


def _row_chunks(rt: Runtime, rows: int, flops_per_row: int):
    """(first row, row count) chunks of at most rt.max_launch_flops each (one chunk when there
    is no cap); chunk starts are multiples of 128 rows, so sub-buffer origins stay aligned.
    The launch loops let a running step stop between chunks (Runtime.between_chunks)."""
    cap = rt.launch_cap()
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


# Rows of x up to which matmul_forward runs matvec_nt (MATVEC_ROWS in kernels/matvec.cl); on
# CPUs matvec_nt_cpu's columns per block (MV_R) and work-groups per compute unit
MATVEC_ROWS, MATVEC_CPU_COLUMNS, MATVEC_CPU_GROUPS = 4, 4, 8


def reads_weight_in_place(rt: Runtime, M: int, N: int, K: int) -> bool:
    """True where matmul_forward of these sizes reads w (N, K) as it is (matvec_nt for a few
    rows, the packed GEMM's nt form), False where it needs w^T (K, N) first (a transpose pass,
    then the nn kernel)."""
    return M <= MATVEC_ROWS or rt.plan.choice_for("nn", M, N, K).variant == "packed"


def matvec(rt: Runtime, kernel: str, out, inp, weight: tuple, M: int, N: int, K: int):
    """out (M, N) = inp (M, K) @ W (N, K)^T by a matrix-vector kernel that reads W in place:
    `kernel` (kernels/matvec.cl matvec_nt: W float32; kernels/quant_matvec.cl matvec_q4, ...:
    W quantized) with W's buffers `weight`; on CPUs its `_cpu` form, a few single-work-item
    groups per compute unit taking MATVEC_CPU_COLUMNS columns at a time, on GPUs the row-lanes
    form. For the few rows of decoding (M <= MATVEC_ROWS)."""
    if rt.row_lanes == 1:
        groups = min(-(-N // MATVEC_CPU_COLUMNS), MATVEC_CPU_GROUPS * rt.info.compute_units)
        rt.launch_local(kernel + "_cpu", (groups,), (1,), out, inp, *weight, M, N, K)
    else:
        _rows_launch(rt, kernel, N, out, inp, *weight, M, N, K)


def matmul_forward(rt: Runtime, out, inp, w, w_t_scratch, M: int, N: int, K: int,
                   w_t_ready: bool = False):
    """out (M, N) = inp (M, K) @ w (N, K)^T: for at most MATVEC_ROWS rows (decoding) by
    matvec_nt reading w in place, with the "packed" GEMM in one nt product, else
    via w^T in scratch (K, N) and the NN kernel (on an H200 the transpose + nn ran ~8% faster
    than a tiled kernel reading w in place: its fetches of w are 64-byte row pieces instead of
    128-byte runs). w_t_ready: the scratch already holds w^T (a caller projecting in chunks
    transposes once)."""
    if M <= MATVEC_ROWS:  # decoding: w read once, in place (kernels/matvec.cl)
        matvec(rt, "matvec_nt", out, inp, (w,), M, N, K)
        return
    choice = rt.plan.choice_for("nn", M, N, K)
    if choice.variant == "packed":  # reads w in place while packing it: no transpose pass
        for m0, rows in _row_chunks(rt, M, 2 * N * K):
            if m0:
                rt.between_chunks()   # a running step may stop here
            gemm_packed(rt, "nt", _rows(rt, out, m0, rows, N, M), _rows(rt, inp, m0, rows, K, M),
                        w, rows, N, K, 0.0, choice.vector_width)
        return
    if not w_t_ready:
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
    """dinp (R, C) += ...; dw (C,) += ... (both accumulate); dw None: the weight is frozen
    (LoRA), its gradient not computed."""
    _rows_launch(rt, "rmsnorm_backward", R, dinp, dout, inp, w, rstd, R, C)
    if dw is None:
        return
    # dw walks columns of (R, C): in slices of >= 64 rows on every device (a GPU: 9% of a step
    # unsplit; a CPU: 4-6x faster at R 4096, benchmarks/results/tuning-timings.md), summed by
    # sum_slices
    slices = rmsnorm_dweight_slices(R)
    if slices == 1:
        rt.launch("rmsnorm_backward_dweight", (C, 1), dw, dout, inp, rstd, R, C, max(R, 1), 1)
        return
    rows = -(-R // slices)
    parts = rt.scratch(rmsnorm_scratch_floats(R, C))
    rt.launch("rmsnorm_backward_dweight", (C, slices), parts, dout, inp, rstd, R, C, rows, 0)
    rt.launch_long("sum_slices", C, dw, parts, slices, C, 1.0)


def rmsnorm_dweight_slices(R: int) -> int:
    """Slices of R rows that rmsnorm_backward sums dw over (at least 64 rows each, at most 256)."""
    return max(1, min(256, R // 64))


def rmsnorm_scratch_floats(R: int, C: int) -> int:
    """rt.scratch floats of rmsnorm_backward over (R, C): the slices' partial dw, 0 unsplit."""
    slices = rmsnorm_dweight_slices(R)
    return slices * C if slices > 1 else 0


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


# Vocabularies from this size run crossentropy_wide on GPUs (256 lanes per row, one pass for the
# softmax statistics): 2.4x PyTorch's log_softmax time at 49,152 with 64 lanes (H200)
CE_WIDE_VOCAB = 8192
CE_WIDE_LANES = 256  # CE_LANES in kernels/crossentropy.cl


def crossentropy_forward_backward(rt: Runtime, logits, losses, targets, R: int, V: int,
                                  n_counted: int, want_grad: bool, wide: bool | None = None):
    """losses (R,); with want_grad, logits are replaced by dlogits of the mean over counted rows.
    wide: one row per 256-lane work-group (crossentropy_wide); None: on GPUs for vocabularies of
    at least CE_WIDE_VOCAB."""
    inv = 1.0 / max(n_counted, 1)
    if wide is None:
        wide = not rt.is_cpu and V >= CE_WIDE_VOCAB
    if wide:
        rt.launch_local("crossentropy_wide", (CE_WIDE_LANES, R), (CE_WIDE_LANES, 1), logits,
                        losses, targets, V, inv, 1 if want_grad else 0)
        return
    _rows_launch(rt, "crossentropy_forward_backward", R, logits, losses, targets, R, V, inv,
                 1 if want_grad else 0)


def grad_norm(rt: Runtime, stats, partial, grads, n: int, max_norm: float):
    """stats[0] = ||grads||, stats[1] = clip scale, stats[2] = non-finite flag (device only).
    partial: GRAD_NORM_PARTIALS floats of scratch (kernels/optimizer.cl: one per
    work-item on a CPU, one per work-group of rt.row_lanes on a GPU)."""
    parts = GRAD_NORM_PARTIALS
    if rt.row_lanes == 1:
        rt.launch("grad_norm_partial", (parts,), partial, grads, n)
    else:
        rt.launch_local("grad_norm_partial", (parts * rt.row_lanes,), (rt.row_lanes,), partial,
                        grads, n)
    rt.launch_local("grad_norm_finalize", (rt.row_lanes,), (rt.row_lanes,), stats, partial,
                    parts, max_norm)


# work-items per adamw_update16 group: 64 ran the 135M model's update 1.1-1.6x faster than 1024
# (the long-kernel size) under PoCL on the 2-core Xeon (benchmarks/RESULTS.md, 135M step)
ADAMW_CPU_GROUP = 64


def adamw_update(rt: Runtime, params, grads, m, v, stats, n: int, n_decay: int, lr: float,
                 beta1: float, beta2: float, eps: float, weight_decay: float, t: int,
                 vectors: bool | None = None, bf16_key: int | None = None):
    """One AdamW step t (from 1) over the flat buffers, gradient scaled by stats[1]
    (kernels/optimizer.cl). vectors: 16 elements per work-item, in float16 vectors
    (None: on CPUs; tests run both forms on every device). bf16_key: m and v are bfloat16
    (uint16) buffers, written back with stochastic rounding drawn from this 32-bit key (one
    per step: engine.model.moments.moment_key); None: float32 moments."""
    bc1, bc2 = 1.0 - beta1 ** t, 1.0 - beta2 ** t
    args = (params, grads, m, v, stats, n, n_decay, lr, beta1, beta2, eps, weight_decay, bc1, bc2)
    suffix = ""
    if bf16_key is not None:
        args, suffix = args + (np.uint32(bf16_key),), "_bf16"
    if not (rt.is_cpu if vectors is None else vectors):
        rt.launch_long("adamw_update" + suffix, n, *args)
        return
    items = -(-n // 16)
    rt.launch_local("adamw_update16" + suffix, (-(-items // ADAMW_CPU_GROUP) * ADAMW_CPU_GROUP,),
                    (ADAMW_CPU_GROUP,), *args)


def dropout_forward(rt: Runtime, out, inp, key: int, threshold: int, scale: float, n: int):
    """out (n,) = inp * keep * scale; keep from the hash of (key, index) (kernels/dropout.cl,
    engine/model/dropout.py). out may be inp."""
    rt.launch_long("dropout_forward", n, out, inp, key, threshold, scale, n)


def dropout_backward(rt: Runtime, dinp, dout, key: int, threshold: int, scale: float, n: int):
    """dinp (n,) = dout * keep * scale, the mask of dropout_forward with the same key."""
    rt.launch_long("dropout_backward", n, dinp, dout, key, threshold, scale, n)
