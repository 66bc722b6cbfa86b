"""A quantized frozen base weight on the device, and its products (issue 34: LoRA tuning).

A LoRA tuner never changes the base model's linear weights, so they stay on the device in the
GGUF file's quantized form (QuantMatrix) and are never expanded to float32 whole: the products
dequantize at most `PANEL_FLOATS` floats of W (a panel of its rows, kernels/quant.cl) into a
buffer the caller owns (PanelScratch) and hand each panel to the project's tuned GEMMs
(engine.opencl.ops.matmul_forward, matmul_nn). Those GEMMs use rt.scratch themselves, so the
panels live in PanelScratch, never there.

Device forms (kernels/quant.cl has the layouts):
  q4   4-bit codes, float32 scale and min per 32 values: GGUF Q4_0, Q4_1, Q4_K (exact)
  q8   int8 codes, float32 scale per group: GGUF Q8_0 (32 values), Q6_K (16 values) (exact)
  f16  IEEE half: GGUF F16 (exact) and every other type gguf-py can dequantize (Q5_0, Q5_1,
       Q2_K, Q3_K, Q5_K, IQ*, ...), rounded to half row chunk by row chunk (relative error
       at most 2^-11 per value; a value beyond half's range is a ValueError)
  bf16 bfloat16 bits: GGUF BF16 (exact; half would lose its range)
  f32  GGUF F32
Block layouts and the dequantization formulas: gguf-py gguf/quants.py and llama.cpp
ggml/src/ggml-quants.c (get_scale_min_k4 for Q4_K's packed 6-bit scales and mins).
Linear weights are (out, in) = (rows, cols), y = x @ W^T (docs/ENGINE_API.md).
"""

from __future__ import annotations

from typing import Iterable

import gguf
import numpy as np

from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.runtime import Runtime

T = gguf.GGMLQuantizationType
# The most floats of W one panel dequantizes (16 MiB): a 135M-class model's matrices whole in
# one panel, Llama 3 8B's MLP (14336 x 4096) in 14. Tests lower it (PanelScratch's
# panel_floats, or this module attribute) to run several panels and a partial last one.
PANEL_FLOATS = 1 << 22
PANEL_ROW_STEP = 64    # panels of more rows than this are whole multiples (the GEMMs' tiles)
HOST_CHUNK_VALUES = 1 << 20   # values of W repacked on the host at a time (bounds host memory)
Q4_GROUP = 32          # values per scale and min of the q4 form (Q4_GROUP in kernels/quant.cl)
Q8_GROUPS = {T.Q8_0: 32, T.Q6_K: 16}   # values per scale of the q8 form, by source type
Q4_TYPES = (T.Q4_0, T.Q4_1, T.Q4_K)
EXACT_16 = {T.F16: "f16", T.BF16: "bf16"}
# Rows of x up to which linear_forward reads W's codes in place (kernels/quant_matvec.cl)
# instead of dequantizing panels (benchmarks/bench_lora.py --decode sets it to 0 to compare)
MATVEC_MAX_ROWS = ops.MATVEC_ROWS


def _half(b: np.ndarray) -> np.ndarray:
    """(..., 2) uint8 little-endian half bits -> (...) float32."""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., 16) bytes of a 32-value ggml block (value j low nibble of byte j, j + 16 the high
    one) -> (..., 32) codes in value order."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _q4_0(b):
    """Q4_0 blocks (R, nb, 18): d f16, 16 bytes of codes; value d (q - 8) = d q + (-8 d)."""
    d = _half(b[..., 0:2])
    return _nibbles(b[..., 2:18]), d, -8 * d


def _q4_1(b):
    """Q4_1 blocks (R, nb, 20): d, m f16, 16 bytes of codes; value d q + m."""
    return _nibbles(b[..., 4:20]), _half(b[..., 0:2]), _half(b[..., 2:4])


def _k_scale_min(s: np.ndarray):
    """Q4_K's 12 bytes (..., 12) of eight 6-bit scales and mins -> two (..., 8) arrays
    (get_scale_min_k4 in ggml-quants.c: bytes 0-3 the low 6 bits of scales 0-3, 4-7 of mins
    0-3; bytes 8-11 the low 4 bits of scales 4-7 (and mins' in the high nibble), their top
    2 bits in the top bits of bytes 0-3 (scales) and 4-7 (mins))."""
    s = s.reshape(*s.shape[:-1], 3, 4)
    d, m, md = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    sc = np.concatenate([d & 63, (md & 15) | ((d >> 2) & 48)], axis=-1)
    mn = np.concatenate([m & 63, (md >> 4) | ((m >> 2) & 48)], axis=-1)
    return sc, mn


def _q4_k(b):
    """Q4_K super-blocks (R, nb, 144): d, dmin f16, 12 bytes of scales, 128 of codes (each 32
    bytes hold sub-blocks 2i (low nibbles) and 2i + 1 (high)); value (d sc_j) q - dmin m_j,
    both products exact in float32 (11 x 6 significant bits)."""
    d, dmin = _half(b[..., 0:2]), _half(b[..., 2:4])
    sc, mn = _k_scale_min(b[..., 4:16])
    qs = b[..., 16:144].reshape(*b.shape[:-1], 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=-2).reshape(*b.shape[:-1], 256)
    scale = d[..., None] * sc.astype(np.float32)
    return q, scale, -(dmin[..., None] * mn.astype(np.float32))


def _q8_0(b):
    """Q8_0 blocks (R, nb, 34): d f16, 32 int8 codes; value d q."""
    return b[..., 2:34].view(np.int8), _half(b[..., 0:2])


def _q6_k(b):
    """Q6_K super-blocks (R, nb, 210): ql 128 bytes (low 4 bits), qh 64 (high 2 bits), 16 int8
    scales, d f16; value (d scale_j) (q - 32) over 16 sub-blocks of 16 (gguf-py Q6_K)."""
    lead = b.shape[:-1]
    ql = b[..., 0:128].reshape(*lead, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)
    ql = (ql & 15).reshape(*lead, 8, 32)
    qh = b[..., 128:192].reshape(*lead, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    qh = (qh & 3).reshape(*lead, 8, 32)
    q = ((ql | (qh << 4)).astype(np.int8) - np.int8(32)).reshape(*lead, 256)
    scale = _half(b[..., 208:210])[..., None] * b[..., 192:208].view(np.int8).astype(np.float32)
    return q, scale


_Q4_UNPACK = {T.Q4_0: _q4_0, T.Q4_1: _q4_1, T.Q4_K: _q4_k}
_Q8_UNPACK = {T.Q8_0: _q8_0, T.Q6_K: _q6_k}


def _form_of(qtype: T) -> str:
    """The device form of GGUF type qtype; ValueError naming a type gguf-py cannot read."""
    if qtype in Q4_TYPES:
        return "q4"
    if qtype in Q8_GROUPS:
        return "q8"
    if qtype == T.F32:
        return "f32"
    if qtype in EXACT_16:
        return EXACT_16[qtype]
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    try:   # the fallback: whatever gguf-py can dequantize (its table of types is private)
        gguf.quants.dequantize(np.zeros((1, tsize), np.uint8), qtype)
    except NotImplementedError as e:
        raise ValueError(f"GGUF type {qtype.name} is not supported for a quantized base "
                         "(gguf-py cannot dequantize it)") from e
    return "f16"


def _byte_rows(raw: np.ndarray, qtype: T, shape: tuple[int, int]) -> np.ndarray:
    """raw as (rows, bytes per row) without a copy where it is contiguous (a memory map stays
    one). ValueError when cols is not whole blocks or raw has the wrong size."""
    rows, cols = shape
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    if rows < 1 or cols < 1 or cols % block:
        raise ValueError(f"a {qtype.name} matrix needs rows >= 1 and cols a multiple of "
                         f"{block} (its block size); got shape {tuple(shape)}")
    arr = np.asarray(raw)
    want = rows * (cols // block) * tsize
    if arr.nbytes != want:
        raise ValueError(f"{qtype.name} data of shape {tuple(shape)} is {want} bytes; "
                         f"got {arr.nbytes}")
    return arr.reshape(rows, -1)


def _row_chunks(rows: int, cols: int):
    """(r0, r1) ranges of rows of about HOST_CHUNK_VALUES values each (at least one row)."""
    step = max(1, HOST_CHUNK_VALUES // cols)
    for r0 in range(0, rows, step):
        yield r0, min(rows, r0 + step)


class QuantMatrix:
    """One frozen linear weight W (rows = out, cols = in) on the device in a compact form.

    rows, cols; form ("q4", "q8", "f16", "bf16", "f32"); source_type (the GGUF type's name);
    group (values per scale of q4 / q8, else 0); nbytes (device bytes); buffers: codes (and
    scales, mins where the form has them). Build with from_gguf or from_float."""

    def __init__(self, rows: int, cols: int, form: str, source_type: str, group: int,
                 codes, scales=None, mins=None):
        self.rows, self.cols, self.form, self.source_type = rows, cols, form, source_type
        self.group, self.codes, self.scales, self.mins = group, codes, scales, mins

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.cols

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in (self.codes, self.scales, self.mins) if b is not None)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, rt: Runtime, raw: np.ndarray, ggml_type: T,
                  shape: tuple[int, int]) -> "QuantMatrix":
        """W from a GGUF tensor's data as gguf.GGUFReader gives it (ReaderTensor.data: uint8
        blocks for quantized types, the values for F32/F16), shape (out, in) (the reverse of
        the file's ne order). Repacked on the host HOST_CHUNK_VALUES values at a time and
        uploaded; W is never whole in float32 on the host or the device. ValueError for a
        type gguf-py cannot read, cols not whole blocks, or data of the wrong size."""
        qtype = T(ggml_type)
        form = _form_of(qtype)
        rows, cols = int(shape[0]), int(shape[1])
        src = _byte_rows(raw, qtype, (rows, cols))
        group = Q4_GROUP if form == "q4" else Q8_GROUPS.get(qtype, 0)
        groups = cols // group if group else 0
        code_dtype = {"q4": np.uint8, "q8": np.int8, "f32": np.float32}.get(form, np.uint16)
        per_row = cols // 2 if form == "q4" else cols
        qm = cls(rows, cols, form, qtype.name, group, rt.empty(rows * per_row, code_dtype),
                 rt.empty(rows * groups) if group else None,
                 rt.empty(rows * groups) if form == "q4" else None)
        _, tsize = gguf.GGML_QUANT_SIZES[qtype]
        for r0, r1 in _row_chunks(rows, cols):
            b = np.ascontiguousarray(src[r0:r1]).view(np.uint8).reshape(r1 - r0, -1, tsize)
            parts = _repack(b, qtype, form, cols)
            for buf, part in zip((qm.codes, qm.scales, qm.mins), parts):
                rt.write(buf, part.reshape(-1), r0 * (part.size // (r1 - r0)))
        rt.finish()   # the host chunks are temporaries
        return qm

    @classmethod
    def from_float(cls, rt: Runtime, w: np.ndarray, ggml_type: T) -> "QuantMatrix":
        """W quantized from a float32 (out, in) matrix by gguf.quants.quantize (tests, random
        models at real shapes). ValueError for a type gguf-py cannot quantize (in gguf 0.19
        the K types: use from_gguf with a file's blocks)."""
        qtype = T(ggml_type)
        w = np.ascontiguousarray(w, np.float32)
        if w.ndim != 2:
            raise ValueError(f"from_float takes an (out, in) matrix; got shape {w.shape}")
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        if w.shape[1] % block:
            raise ValueError(f"a {qtype.name} matrix needs cols a multiple of {block} (its "
                             f"block size); got shape {w.shape}")
        try:
            raw = gguf.quants.quantize(w, qtype)
        except NotImplementedError as e:
            raise ValueError(f"gguf-py cannot quantize to {qtype.name}") from e
        return cls.from_gguf(rt, raw, qtype, w.shape)

    # -- launches ---------------------------------------------------------------------------
    def kernel_args(self) -> tuple:
        if self.form == "q4":
            return self.codes, self.scales, self.mins
        if self.form == "q8":
            return self.codes, self.scales, self.group
        return (self.codes,)

    def dequantize_rows(self, rt: Runtime, out, r0: int, n: int):
        """out (n, cols) float32 = W[r0 : r0 + n] (kernels/quant.cl dequant_*). ValueError
        for rows outside W or an out smaller than n x cols floats."""
        if not (0 <= r0 and n >= 0 and r0 + n <= self.rows):
            raise ValueError(f"rows [{r0}, {r0 + n}) outside W's {self.rows}")
        if out.size < n * self.cols * 4:   # a kernel writing past a buffer corrupts memory
            raise ValueError(f"out holds {out.size // 4} floats; {n} rows need {n * self.cols}")
        columns = self.cols // 2 if self.form == "q4" else self.cols
        rt.launch_elementwise(f"dequant_{self.form}", columns, n, out, *self.kernel_args(), r0, n,
                              self.cols)

    def gather_rows(self, rt: Runtime, out, ids, n: int):
        """out (n, cols) float32 = W[ids[i]] for the n int32 ids on the device (the caller
        keeps them in [0, rows): the kernel cannot check)."""
        if self.form == "f32":
            ops.embedding_forward(rt, out, ids, self.codes, n, self.cols)
            return
        columns = self.cols // 2 if self.form == "q4" else self.cols
        rt.launch_elementwise(f"gather_{self.form}", columns, n, out, ids, *self.kernel_args(), n,
                              self.cols)


def _repack(b: np.ndarray, qtype: T, form: str, cols: int) -> tuple:
    """GGUF blocks (R, nb, type size) uint8 -> the device form's arrays for those R rows:
    q4 (codes two per byte, scales, mins), q8 (codes, scales), else (codes,)."""
    R = b.shape[0]
    if form == "q4":
        q, scale, mn = _Q4_UNPACK[qtype](b)
        q = q.reshape(R, cols)
        packed = q[:, 0::2] | (q[:, 1::2] << 4)
        return packed, scale.reshape(R, -1), mn.reshape(R, -1)
    if form == "q8":
        q, scale = _Q8_UNPACK[qtype](b)
        return q.reshape(R, cols), scale.reshape(R, -1).astype(np.float32)
    if form in ("f32", "bf16") or qtype == T.F16:
        return (b.reshape(R, -1).view({"f32": np.float32}.get(form, np.uint16)),)
    w = gguf.quants.dequantize(b.reshape(R, -1), qtype).reshape(R, cols)
    with np.errstate(over="ignore"):   # checked just below
        h = w.astype(np.float16)
    if not np.isfinite(h).all() and np.isfinite(w).all():
        raise ValueError(f"a {qtype.name} weight holds values beyond float16's range "
                         f"(|w| up to {np.abs(w).max():.3g})")
    return (h.view(np.uint16),)


def dequantize_reference(raw: np.ndarray, ggml_type: T, shape: tuple[int, int]) -> np.ndarray:
    """W (out, in) as float64 by gguf.quants.dequantize (the oracle the device is tested
    against; whole on the host: for tests and small matrices)."""
    qtype = T(ggml_type)
    src = _byte_rows(raw, qtype, shape)
    return gguf.quants.dequantize(src, qtype).reshape(shape).astype(np.float64)


# -- products -----------------------------------------------------------------------------
def panel_rows(rows: int, cols: int, panel_floats: int | None = None) -> int:
    """Rows of W one panel dequantizes: all where rows x cols <= panel_floats (default
    PANEL_FLOATS), else as many as fit, in whole PANEL_ROW_STEP where more than that fit, and
    at least one (a row wider than panel_floats is a panel alone)."""
    limit = PANEL_FLOATS if panel_floats is None else panel_floats
    n = max(1, limit // cols)
    if n >= rows:
        return rows
    return n - n % PANEL_ROW_STEP if n >= PANEL_ROW_STEP else n


def panel_scratch_floats(rows: int, cols: int, M: int, panel_floats: int | None = None) -> int:
    """Device floats a PanelScratch for W (rows, cols) and up to M rows of x takes: the panel
    (n x cols, n = panel_rows), the GEMM's transposed panel (as many: ops.matmul_forward's
    w_t_scratch) and, where W takes several panels, the panel's (M, n) columns of the output
    or of dout."""
    n = panel_rows(rows, cols, panel_floats)
    return 2 * n * cols + (M * n if n < rows else 0)


def _shape_of(m) -> tuple[int, int]:
    return m.shape if isinstance(m, QuantMatrix) else (int(m[0]), int(m[1]))


class PanelScratch:
    """The caller's device buffers for the panel products of one or more quantized weights
    (rt.scratch is the GEMMs' own, so the panels cannot live there): panel (a dequantized
    panel of W), w_t (its transpose, where matmul_forward needs one) and part (a panel's
    (M, n) output or dout columns), each as large as the largest of `mats` needs
    (QuantMatrix or (rows, cols)) for up to M rows of x. floats: their total (what
    panel_scratch_floats counts per matrix, maximised per buffer)."""

    def __init__(self, rt: Runtime, mats: Iterable, M: int, panel_floats: int | None = None):
        self.panel_floats = PANEL_FLOATS if panel_floats is None else int(panel_floats)
        self.M = int(M)
        panel = part = 0
        for rows, cols in map(_shape_of, mats):
            n = panel_rows(rows, cols, self.panel_floats)
            panel = max(panel, n * cols)
            part = max(part, self.M * n if n < rows else 0)
        self.panel, self.w_t, self.part = rt.empty(panel), rt.empty(panel), rt.empty(part)
        self.floats = 2 * panel + part
        self._panel, self._part = panel, part

    def rows_for(self, qm: QuantMatrix, M: int) -> int:
        """Rows per panel of qm at M rows of x; ValueError when this scratch is too small."""
        n = panel_rows(qm.rows, qm.cols, self.panel_floats)
        if M > self.M or n * qm.cols > self._panel or (n < qm.rows and M * n > self._part):
            raise ValueError(f"this PanelScratch was sized for up to {self.M} rows and "
                             f"smaller weights; W {qm.shape} at M {M} needs "
                             f"{panel_scratch_floats(qm.rows, qm.cols, M, self.panel_floats)}"
                             " floats")
        return n


def _panels(rt: Runtime, qm: QuantMatrix, n: int):
    """(r0, rows) of each panel of n rows; a running step may stop between them."""
    for r0 in range(0, qm.rows, n):
        if r0:
            rt.between_chunks()
        yield r0, min(n, qm.rows - r0)


def copy_columns(rt: Runtime, dst, dst_ld: int, dst_off: int, src, src_ld: int, src_off: int,
                  M: int, n: int):
    """dst[m, dst_off : dst_off + n] = src[m, src_off : src_off + n] for m < M."""
    rt.launch_elementwise("copy_columns", n, M, dst, dst_ld, dst_off, src, src_ld, src_off, M, n)


def linear_forward(rt: Runtime, out, inp, qm: QuantMatrix, M: int, scratch: PanelScratch):
    """out (M, rows) = inp (M, cols) @ W^T. For at most MATVEC_MAX_ROWS rows of x (decoding) W
    is read in its own form (kernels/quant_matvec.cl); else W is dequantized a panel of rows
    at a time into scratch.panel and multiplied by ops.matmul_forward; a panel of only some rows writes
    scratch.part (M, n), copied into its columns of out. ValueError when scratch is too small."""
    if M < 1:
        return
    if M <= MATVEC_MAX_ROWS and qm.form != "f32":   # decoding: W's codes read in place
        ops.matvec(rt, f"matvec_{qm.form}", out, inp, qm.kernel_args(), M, qm.rows, qm.cols)
        return
    n = scratch.rows_for(qm, M)
    if n == qm.rows and qm.form == "f32":   # W is already floats: no copy
        ops.matmul_forward(rt, out, inp, qm.codes, scratch.w_t, M, qm.rows, qm.cols)
        return
    for r0, nr in _panels(rt, qm, n):
        qm.dequantize_rows(rt, scratch.panel, r0, nr)
        if nr == qm.rows:
            ops.matmul_forward(rt, out, inp, scratch.panel, scratch.w_t, M, nr, qm.cols)
            continue
        ops.matmul_forward(rt, scratch.part, inp, scratch.panel, scratch.w_t, M, nr, qm.cols)
        copy_columns(rt, out, qm.rows, r0, scratch.part, nr, 0, M, nr)


def linear_backward_input(rt: Runtime, dinp, dout, qm: QuantMatrix, M: int,
                          scratch: PanelScratch, beta: float = 0.0):
    """dinp (M, cols) = beta * dinp + dout (M, rows) @ W, summed over panels of W's rows
    (ops.matmul_nn; the later panels accumulate); a panel of only some rows takes its columns
    of dout, gathered into scratch.part. With beta 0, dinp's old contents are not used.
    ValueError when scratch is too small."""
    if M < 1:
        return
    n = scratch.rows_for(qm, M)
    if n == qm.rows and qm.form == "f32":
        ops.matmul_nn(rt, dinp, dout, qm.codes, M, qm.cols, qm.rows, beta)
        return
    for r0, nr in _panels(rt, qm, n):
        qm.dequantize_rows(rt, scratch.panel, r0, nr)
        a = dout
        if nr < qm.rows:
            copy_columns(rt, scratch.part, nr, 0, dout, qm.rows, r0, M, nr)
            a = scratch.part
        ops.matmul_nn(rt, dinp, a, scratch.panel, M, qm.cols, nr, beta if r0 == 0 else 1.0)


def embedding_forward(rt: Runtime, out, ids, qm: QuantMatrix, n: int):
    """out (n, cols) = W[ids] (the token embedding of a quantized base: W (vocab, d_model)),
    dequantized row by row; ids: n int32 on the device."""
    if n > 0:
        qm.gather_rows(rt, out, ids, n)
