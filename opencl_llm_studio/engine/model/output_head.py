"""The output projection and cross-entropy of a large vocabulary, in row chunks.

Logits of B*T rows of a large vocabulary do not fit memory at once (Llama 3's 128,256 at
batch 8 x 2048: 8.4 GB). An activation set holds `rows` = engine.model.activations.logit_rows of
them (all B*T for small vocabularies: then engine/model/transformer.py projects and back-propagates the
whole (B*T, V) as before, and nothing here runs). With fewer, each chunk of rows is projected
(logits = xf @ W^T), scored by the fused softmax + cross-entropy kernel and, when training,
back-propagated at once: dxf rows = dlogits @ W into the rows' part of the activation set's
dtmp, and dW += dlogits^T @ xf rows (the weight gradient accumulates over chunks). The
logits buffer is then reused by the next chunk. Same numbers as the unchunked path up to the
order of the dW sums (the approach of Liger Kernel's fused linear cross-entropy and of
Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models", without their
custom kernels).
"""

from __future__ import annotations

import numpy as np

from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.ops import _rows

# Rows with a target at most this share of B*T: the output projection and cross-entropy run on
# those rows alone. A tuning batch scores the answers only: 20% of SmolLM2's chat rows (a system
# turn, the question, the window rounded up to 64), and its lm_head was 15% of a step's time.
SPARSE_SHARE = 0.6


def pick_rows(rt, a, targets) -> None:
    """Before a pass with targets (B, T): record in `a` the rows that have one (a.head_n and
    their flat indices on the host and the device, with their targets) when they are at most
    SPARSE_SHARE of B*T, so cross_entropy_rows projects those alone; else a.head_n = None (every
    row, as before). Without targets (logits, generation): None."""
    a.head_n = None
    if targets is None:
        return
    flat = np.asarray(targets, np.int32).reshape(-1)
    idx = np.flatnonzero(flat >= 0).astype(np.int32)
    if not 0 < idx.size <= SPARSE_SHARE * flat.size:
        return
    a.head_n, a.head_index = int(idx.size), idx
    # kept on `a` until the next batch: a non-blocking copy reads the host array later
    a.head_host = [(a.head_rows, idx), (a.head_targets, np.ascontiguousarray(flat[idx]))]
    if a.with_grad:
        a.head_host += [(a.head_starts, np.arange(idx.size + 1, dtype=np.int32)),
                        (a.head_order, np.arange(idx.size, dtype=np.int32))]
    for buf, host in a.head_host:
        rt.write(buf, host)


def sparse(a) -> bool:
    """True when a's pass projects only its rows with a target (pick_rows)."""
    return a.head_n is not None


def row_losses(a, losses: np.ndarray) -> np.ndarray:
    """a.losses read back (B*T,) in row order: cross_entropy_rows wrote the rows with a target
    first, in index order."""
    if not sparse(a):
        return losses
    out = np.zeros_like(losses)
    out[a.head_index] = losses[:a.head_n]
    return out


def cross_entropy_rows(model, a, n_counted: int, want_grad: bool):
    """cross_entropy over the rows pick_rows kept: their final-norm rows gathered (the
    embedding lookup's kernel, xf as the table), projected and scored a.logit_rows at a time,
    their losses in a.losses[:head_n] (the rest 0); with want_grad their dxf rows scattered
    into a zeroed a.dtmp (the embedding gradient's kernel, one row per index) and the output
    weight's gradient added over them. Rows without a target have no loss and no gradient from
    the head, so the numbers are the full pass's up to the order of the dW sums."""
    rt, cfg = model.rt, model.cfg
    BT, C, V, n, R = a.B * a.T, cfg.d_model, cfg.vocab_size, a.head_n, a.logit_rows
    _gather(model, a, n)
    rt.fill_zero(a.losses, BT)
    project = _Projector(model, a, a.head_x)
    for r0 in range(0, n, R):
        m = min(R, n - r0)
        rows = project(r0, m)
        ops.crossentropy_forward_backward(rt, a.logits, _rows(rt, a.losses, r0, m, 1, BT),
                                          _rows(rt, a.head_targets, r0, m, 1, BT), m, V,
                                          n_counted, want_grad)
        if want_grad:
            model.head_backward(_rows(rt, a.head_dx, r0, m, C, BT), a.logits, rows, m)
    if want_grad:
        rt.fill_zero(a.dtmp, BT * C)
        ops.embedding_backward(rt, a.dtmp, a.head_dx, a.head_rows, a.head_starts, a.head_order,
                               n, C)


def chunked(a) -> bool:
    """True when activation set a holds fewer logit rows than its B*T (a.logit_rows)."""
    return a.logit_rows < a.B * a.T


def _chunks(a, first: int = 0):
    """(r0, n) row ranges of a's B*T rows from row `first` (a multiple of the chunk)."""
    BT, R = a.B * a.T, a.logit_rows
    for r0 in range(first, BT, R):
        yield r0, min(R, BT - r0)


class _Projector:
    """logits = rows of src @ W^T chunk by chunk (W (V, C) the output weight; src a.xf, or
    a.head_x where the rows were gathered): W^T is made once, in model.w_t, for the first
    chunk whose product needs it (engine.opencl.ops.matmul_forward; none where the GEMM reads
    W in place)."""

    def __init__(self, model, a, src=None):
        self.model, self.a, self.transposed = model, a, False
        self.src = a.xf if src is None else src

    def __call__(self, r0: int, n: int):
        """a.logits[:n] = rows r0..r0+n of src @ W^T; returns the src rows buffer."""
        model, a = self.model, self.a
        rt, cfg = model.rt, model.cfg
        rows = _rows(rt, self.src, r0, n, cfg.d_model, a.B * a.T)
        rt.before_write(a.logits)  # the previous chunk's dW (side queue) may still read it
        model.head(a.logits, rows, n, w_t_ready=self.transposed)
        self.transposed = self.transposed or not model.head_reads_in_place(n)
        return rows


def cross_entropy(model, a, n_counted: int, want_grad: bool):
    """Chunk by chunk: a.losses (B*T,) of the rows' cross-entropy (0 where the target is < 0);
    with want_grad also dxf (B*T, C) into a.dtmp and the output weight's gradient added to
    model.grads (the gradient of the mean over n_counted rows)."""
    rt, cfg = model.rt, model.cfg
    BT, C, V = a.B * a.T, cfg.d_model, cfg.vocab_size
    project = _Projector(model, a)
    for r0, n in _chunks(a):
        rows = project(r0, n)
        ops.crossentropy_forward_backward(rt, a.logits, _rows(rt, a.losses, r0, n, 1, BT),
                                          _rows(rt, a.targets, r0, n, 1, BT), n, V, n_counted,
                                          want_grad)
        if want_grad:
            model.head_backward(_rows(rt, a.dtmp, r0, n, C, BT), a.logits, rows, n)


def logits(model, a, first_row: int = 0, last_row: int | None = None) -> np.ndarray:
    """Logits (rows, V) float32 of rows first_row..last_row (default: all B*T) of a, whose
    a.xf the forward pass wrote, computed a chunk at a time."""
    V = model.cfg.vocab_size
    last_row = a.B * a.T if last_row is None else last_row
    start = first_row // a.logit_rows * a.logit_rows
    project = _Projector(model, a)
    parts = []
    for r0, n in _chunks(a, start):
        if r0 >= last_row:
            break
        project(r0, n)
        lo, hi = max(first_row - r0, 0), min(last_row - r0, n)
        parts.append(model.rt.read(a.logits, (hi - lo) * V, offset_elems=lo * V))
    return np.concatenate(parts).reshape(-1, V)


def _gather(model, a, n: int) -> None:
    """a.head_x[:n] = the a.xf rows a.head_rows names (the embedding lookup's kernel, xf as
    the table)."""
    model.rt.before_write(a.head_x)   # the last step's dW (side queue) may still read it
    ops.embedding_forward(model.rt, a.head_x, a.head_rows, a.xf, n, model.cfg.d_model)


def logits_of_rows(model, a, index: np.ndarray) -> np.ndarray:
    """Logits (n, V) float32 of the rows `index` (n <= B*T) of a, whose a.xf the forward pass
    wrote: gathered on the device as cross_entropy_rows gathers them, projected a.logit_rows
    at a time."""
    rt, V, R = model.rt, model.cfg.vocab_size, a.logit_rows
    n = len(index)
    a.head_host = [(a.head_rows, np.ascontiguousarray(index, np.int32))]
    rt.write(*a.head_host[0])
    _gather(model, a, n)
    project = _Projector(model, a, a.head_x)
    parts = []
    for r0 in range(0, n, R):
        m = min(R, n - r0)
        project(r0, m)
        parts.append(rt.read(a.logits, m * V).reshape(m, V))
    return np.concatenate(parts) if parts else np.zeros((0, V), np.float32)
