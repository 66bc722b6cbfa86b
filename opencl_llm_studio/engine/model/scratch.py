"""The runtime scratch (Runtime.scratch) a run grows to, counted before anything is allocated.

Runtime.scratch is one buffer per queue, grown to the largest request made on that queue. A
training step requests: the K split partial products of its matrix products
(engine.opencl.ops.gemm_scratch_floats: tiled split-K on GPUs, the packed GEMM's K ranges on
CPUs), RMSNorm's dweight partial sums, and attention's own (the CPU blocked kernels' transposed
rows where they do not fit __local memory, the GPU backward's dS^T chunk, the CPU GEMM path's
transposed keys). Weight gradients run on the side queue where the runtime has one (GPUs), so
their requests grow the side buffer. Evaluation runs the training set's forward; generation the
(1, context_length) set's forward (decoding reads weights in place, no scratch).
engine.model.memory adds these bytes to its estimate; each size comes from the launch plan
the launcher itself follows (GemmPlan.launch_for, gemm_packed.packed_launch, the blocked
attention's layout, the dS path's chunk), so the two cannot drift apart.
"""

from __future__ import annotations

from opencl_llm_studio.engine.model import attention, attention_gemm
from opencl_llm_studio.engine.model.activations import logit_rows
from opencl_llm_studio.engine.model.params import qkv_width
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.runtime import Runtime


def linear_layers(cfg) -> list[tuple[str, int, int]]:
    """(name, out features n, in features k) of every kind of linear layer of cfg, the output
    projection ("logits") last (engine/model/transformer.py)."""
    C, F = cfg.d_model, cfg.hidden_dim
    return [("qkv", qkv_width(cfg), C), ("attn_out", C, C), ("gate_up", 2 * F, C),
            ("down", C, F), ("logits", cfg.vocab_size, C)]


def row_counts(name: str, n: int, BT: int) -> set[int]:
    """The row counts of layer `name`'s products over BT rows: BT, or for the output
    projection of a large vocabulary its chunks' (engine.model.output_head: logit_rows each,
    the last one what is left)."""
    if name != "logits":
        return {BT}
    rows = logit_rows(n, BT)
    return {rows, BT % rows} - {0}


def _forward_floats(rt: Runtime, cfg, B: int, T: int, path: str) -> int:
    """The largest scratch request of a forward pass over (B, T) on `path`."""
    need = [attention_floats(rt, cfg, B, T, path, backward=False)]
    for name, n, k in linear_layers(cfg):
        need += [ops.forward_scratch_floats(rt, rows, n, k)
                 for rows in row_counts(name, n, B * T)]
    return max(need)


def attention_floats(rt: Runtime, cfg, B: int, T: int, path: str, backward: bool) -> int:
    """Scratch floats of attention over (B, T) on `path` ("fused" or "gemm"), forward only or
    forward and backward."""
    dims = (B, T, cfg.d_model, cfg.n_head, cfg.kv_heads)
    if path == "gemm":
        return attention_gemm.scratch_floats(rt, *dims)
    return attention.scratch_floats(rt, *dims, backward=backward)


def step_scratch_bytes(rt: Runtime, cfg, batch_size: int, train_path: str,
                       generate_path: str, window: int | None = None) -> tuple[int, int]:
    """(main, side) bytes of scratch that a run of cfg on rt grows to: a training step at
    (batch_size, window) (None: context_length) with attention on train_path (and an evaluation
    on the same set), and a generation window (1, context_length) on generate_path. side is 0
    on a runtime without a side queue (its weight gradients grow the main scratch)."""
    T = window or cfg.context_length
    BT = batch_size * T
    main = [_forward_floats(rt, cfg, batch_size, T, train_path),
            _forward_floats(rt, cfg, 1, cfg.context_length, generate_path),
            attention_floats(rt, cfg, batch_size, T, train_path, backward=True),
            ops.rmsnorm_scratch_floats(BT, cfg.d_model)]
    weight_grads = [0]
    for name, n, k in linear_layers(cfg):
        for rows in row_counts(name, n, BT):
            main.append(ops.nn_scratch_floats(rt, rows, k, n))           # dX = dY @ W
            weight_grads.append(ops.tn_scratch_floats(rt, n, k, rows))   # dW += dY^T @ X
    if rt.side_queue is None:
        return 4 * max(main + weight_grads), 0
    return 4 * max(main), 4 * max(weight_grads)
