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


def chunked(a) -> bool:
    """True when activation set a holds fewer logit rows than its B*T (a.logit_rows)."""
    return a.logit_rows < a.B * a.T


def _chunks(a, first: int = 0):
    """(r0, n) row ranges of a's B*T rows from row `first` (a multiple of the chunk)."""
    BT, R = a.B * a.T, a.logit_rows
    for r0 in range(first, BT, R):
        yield r0, min(R, BT - r0)


class _Projector:
    """logits = xf rows @ W^T chunk by chunk (W (V, C) the output weight): W^T is made once, in
    model.w_t, for the first chunk whose product needs it (engine.opencl.ops.matmul_forward;
    none where the GEMM reads W in place)."""

    def __init__(self, model, a):
        self.model, self.a, self.transposed = model, a, False

    def __call__(self, r0: int, n: int):
        """a.logits[:n] = rows r0..r0+n of a.xf @ W^T; returns the xf rows buffer."""
        model, a = self.model, self.a
        rt, cfg = model.rt, model.cfg
        rows = _rows(rt, a.xf, r0, n, cfg.d_model, a.B * a.T)
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


def project_rows(model, a, xf_rows: np.ndarray) -> np.ndarray:
    """Logits (n, V) float32 of host rows xf_rows (n, C) of final-norm outputs (rows picked from
    a.xf), projected a.logit_rows at a time through a's logits buffer."""
    rt, V, C = model.rt, model.cfg.vocab_size, model.cfg.d_model
    n_all, R = len(xf_rows), a.logit_rows
    staged = rt.zeros(min(n_all, R) * C)
    parts, transposed = [], False
    for r0 in range(0, n_all, R):
        n = min(R, n_all - r0)
        rt.write(staged, np.ascontiguousarray(xf_rows[r0:r0 + n], np.float32).reshape(-1), wait=True)
        rt.before_write(a.logits)
        model.head(a.logits, staged, n, w_t_ready=transposed)
        transposed = transposed or not model.head_reads_in_place(n)
        parts.append(rt.read(a.logits, n * V).reshape(n, V))
    return np.concatenate(parts) if parts else np.zeros((0, V), np.float32)
