"""A quantized frozen base (engine/model/quant.py, kernels/quant.cl; issue 34): the device's
dequantization equals gguf-py's (the oracle), and the panel products and the embedding gather
equal the float64 reference with those weights, on awkward shapes and with several panels."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import tests.reference as ref
from opencl_llm_studio.engine.model import quant
from opencl_llm_studio.engine.model.quant import (PanelScratch, QuantMatrix, dequantize_reference,
                                                  embedding_forward, linear_backward_input,
                                                  linear_forward, panel_rows,
                                                  panel_scratch_floats)
from tests.kernel_helpers import close, down, up

# type -> byte offsets of its f16 fields (scales: random bytes there could be inf or NaN)
HALVES = {T.Q8_0: (0,), T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q4_K: (0, 2), T.Q6_K: (208,),
          T.Q5_K: (0, 2)}
TYPES = [T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K, T.F16, T.BF16, T.Q5_K]
EXACT = {T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K, T.F16, T.BF16, T.F32}
FORMS = {T.Q8_0: "q8", T.Q4_0: "q4", T.Q4_1: "q4", T.Q4_K: "q4", T.Q6_K: "q8", T.F16: "f16",
         T.BF16: "bf16", T.Q5_K: "f16", T.F32: "f32"}


def raw_tensor(qtype, rows, cols, seed=0):
    """GGUF data of a (rows, cols) weight as GGUFReader gives it: for block types random bytes
    (every code and packed scale bit pattern) with f16 scales of about 2^-6, so all values are
    finite; F32 / F16 / BF16 from normal values."""
    rng = np.random.default_rng(seed)
    if qtype not in HALVES:
        w = rng.normal(size=(rows, cols)).astype(np.float32)
        return gguf.quants.quantize(w, qtype)
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(rows, cols // block, tsize), dtype=np.uint8)
    for at in HALVES[qtype]:
        d = rng.uniform(0.5, 2, size=b.shape[:2]) * rng.choice([-1, 1], b.shape[:2]) / 64
        b[..., at:at + 2] = d.astype(np.float16)[..., None].view(np.uint8)
    return b.reshape(rows, -1)


def cols_for(qtype, k=2):
    """k blocks' worth of columns (k x 256 for the K types, k x 32 otherwise, 96 for floats)."""
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    return k * 256 if block == 256 else (k * 32 if block == 32 else 96)


def device_weights(rt, qm):
    out = rt.empty(qm.rows * qm.cols)
    qm.dequantize_rows(rt, out, 0, qm.rows)
    return down(rt, out, qm.shape).astype(np.float64)


@pytest.mark.parametrize("qtype", TYPES + [T.F32], ids=lambda t: t.name)
def test_device_dequantization_equals_gguf(rt, qtype):
    rows, cols = 67, cols_for(qtype)
    raw = raw_tensor(qtype, rows, cols)
    qm = QuantMatrix.from_gguf(rt, raw, qtype, (rows, cols))
    assert (qm.form, qm.source_type, qm.shape) == (FORMS[qtype], qtype.name, (rows, cols))
    want, got = dequantize_reference(raw, qtype, (rows, cols)), device_weights(rt, qm)
    if qtype in EXACT:   # the same float operations as gguf-py (kernels/quant.cl)
        np.testing.assert_array_equal(got, want)
    else:                # the fallback rounds to half: 2^-11 relative per value at most
        np.testing.assert_array_equal(got, want.astype(np.float16))
        assert np.all(np.abs(got - want) <= np.abs(want) * 2.0 ** -11 + 2.0 ** -25)
    # a few rows from the middle, as a panel takes them
    part = rt.empty(5 * cols)
    qm.dequantize_rows(rt, part, 31, 5)
    np.testing.assert_array_equal(down(rt, part, (5, cols)), got[31:36])


def test_the_device_forms_are_compact(rt):
    rows, cols = 64, 512
    for qtype, most in [(T.Q4_0, 0.19), (T.Q4_1, 0.19), (T.Q4_K, 0.19), (T.Q8_0, 0.29),
                        (T.Q6_K, 0.32), (T.F16, 0.5), (T.BF16, 0.5), (T.Q5_K, 0.5)]:
        qm = QuantMatrix.from_gguf(rt, raw_tensor(qtype, rows, cols), qtype, (rows, cols))
        assert qm.nbytes <= most * rows * cols * 4, qtype.name


def test_from_float_quantizes_with_gguf(rt):
    w = np.random.default_rng(3).normal(size=(9, 64)).astype(np.float32)
    qm = QuantMatrix.from_float(rt, w, T.Q4_1)
    want = dequantize_reference(gguf.quants.quantize(w, T.Q4_1), T.Q4_1, w.shape)
    np.testing.assert_array_equal(device_weights(rt, qm), want)
    assert np.abs(want - w).max() < 0.5   # and it is w, to 4 bits


def test_tensors_read_by_gguf_reader(rt, tmp_path):
    """ReaderTensor.data goes in as it is, for block types and float types alike."""
    path = tmp_path / "base.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    shapes = {T.Q4_K: (3, 256), T.Q8_0: (5, 64), T.F16: (4, 32), T.BF16: (4, 32), T.F32: (2, 8)}
    raws = {q: raw_tensor(q, *s, seed=1) for q, s in shapes.items()}
    for q, raw in raws.items():
        writer.add_tensor(q.name, raw, raw_dtype=q)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for t in gguf.GGUFReader(str(path)).tensors:
        q = T(t.tensor_type)
        shape = tuple(int(n) for n in reversed(t.shape))   # the file's ne order is (in, out)
        qm = QuantMatrix.from_gguf(rt, t.data, q, shape)
        np.testing.assert_array_equal(device_weights(rt, qm),
                                      dequantize_reference(raws[q], q, shapes[q]))


# (M, rows, panel rows): one panel; 20-row panels with a partial last; 64-row panels (whole
# PANEL_ROW_STEPs) and a last of 2; one row per panel
SHAPES = [(1, 67, None), (7, 67, 20), (33, 130, 64), (2, 5, 1)]


@pytest.mark.parametrize("qtype", TYPES + [T.F32], ids=lambda t: t.name)
def test_linear_products_match_the_reference(rt, qtype):
    rng = np.random.default_rng(7)
    for M, rows, per in SHAPES:
        cols = cols_for(qtype, 1)
        raw = raw_tensor(qtype, rows, cols, seed=M)
        qm = QuantMatrix.from_gguf(rt, raw, qtype, (rows, cols))
        W = device_weights(rt, qm)   # = the oracle's weights (checked above)
        floats = None if per is None else per * cols + 3   # not whole rows: rounded down
        sc = PanelScratch(rt, [qm], M, floats)
        assert panel_rows(rows, cols, floats) == (per or rows)
        assert sc.floats == panel_scratch_floats(rows, cols, M, floats)
        x, dy, d0 = (rng.normal(size=s) for s in [(M, cols), (M, rows), (M, cols)])
        out = up(rt, np.full(M * rows, np.nan))   # every element is written
        linear_forward(rt, out, up(rt, x), qm, M, sc)
        close(down(rt, out, (M, rows)), ref.matmul_forward(x, W))
        dx, _ = ref.matmul_backward(dy, x, W)
        dinp = up(rt, np.full(M * cols, np.nan))   # beta 0: old contents unused
        linear_backward_input(rt, dinp, up(rt, dy), qm, M, sc)
        close(down(rt, dinp, (M, cols)), dx)
        dinp = up(rt, d0)
        linear_backward_input(rt, dinp, up(rt, dy), qm, M, sc, beta=1.0)
        close(down(rt, dinp, (M, cols)), d0 + dx)


@pytest.mark.parametrize("form", ["cpu", "lanes"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_decoding_reads_the_codes_in_place(rt, rt_lanes, form, qtype):
    """At most ops.MATVEC_ROWS rows of x (KV decoding) the product reads W's codes
    (kernels/quant_matvec.cl: the CPU form and the row-lanes form GPUs run) and needs no
    panel: the scratch is sized for nothing. Odd row counts, one row, and for the float forms
    columns past the last whole 16 (the kernel's tail)."""
    from opencl_llm_studio.engine.opencl import ops
    r = rt if form == "cpu" else rt_lanes
    rng = np.random.default_rng(3)
    for M, rows, cols in [(1, 67, cols_for(qtype, 1)), (ops.MATVEC_ROWS, 5, cols_for(qtype, 3)),
                          (2, 1, cols_for(qtype, 2) + (5 if qtype in HALF_FORMS else 0))]:
        raw = raw_tensor(qtype, rows, cols, seed=M)
        qm = QuantMatrix.from_gguf(r, raw, qtype, (rows, cols))
        W = device_weights(r, qm)
        x = rng.normal(size=(M, cols))
        out = up(r, np.full(M * rows, np.nan))
        linear_forward(r, out, up(r, x), qm, M, PanelScratch(r, [], M))
        close(down(r, out, (M, rows)), ref.matmul_forward(x, W))


HALF_FORMS = (T.F16, T.BF16)   # 16-bit files: any column count (block types: whole blocks)


def test_the_module_panel_limit_applies(rt, monkeypatch):
    """PANEL_FLOATS (the default) can be lowered for a whole test: then W takes several panels."""
    monkeypatch.setattr(quant, "PANEL_FLOATS", 10 * 64)
    raw = raw_tensor(T.Q8_0, 33, 64)
    qm = QuantMatrix.from_gguf(rt, raw, T.Q8_0, (33, 64))
    sc = PanelScratch(rt, [qm], 3)
    assert sc.panel_floats == 640 and panel_rows(33, 64) == 10
    x = np.random.default_rng(0).normal(size=(3, 64))
    out = rt.empty(3 * 33)
    linear_forward(rt, out, up(rt, x), qm, 3, sc)
    close(down(rt, out, (3, 33)), x @ dequantize_reference(raw, T.Q8_0, (33, 64)).T)


@pytest.mark.parametrize("qtype", TYPES + [T.F32], ids=lambda t: t.name)
def test_embedding_rows_are_gathered(rt, qtype):
    rows, cols = 37, cols_for(qtype, 1)
    raw = raw_tensor(qtype, rows, cols, seed=5)
    qm = QuantMatrix.from_gguf(rt, raw, qtype, (rows, cols))
    W = device_weights(rt, qm)
    for ids in ([4, 36, 4, 0, 4, 17, 36], [11]):   # repeated ids; batch 1
        out = rt.empty(len(ids) * cols)
        embedding_forward(rt, out, up(rt, ids, np.int32), qm, len(ids))
        np.testing.assert_array_equal(down(rt, out, (len(ids), cols)), W[ids])


def test_bad_input_is_a_clear_value_error(rt):
    with pytest.raises(ValueError, match="multiple of 256"):
        QuantMatrix.from_gguf(rt, np.zeros((2, 144), np.uint8), T.Q4_K, (2, 288))
    with pytest.raises(ValueError, match="multiple of 32"):
        QuantMatrix.from_float(rt, np.zeros((2, 48), np.float32), T.Q8_0)
    with pytest.raises(ValueError, match="I8"):
        QuantMatrix.from_gguf(rt, np.zeros((2, 4), np.int8), T.I8, (2, 4))
    with pytest.raises(ValueError, match="bytes"):
        QuantMatrix.from_gguf(rt, np.zeros((2, 17), np.uint8), T.Q8_0, (2, 32))
    with pytest.raises(ValueError, match="cannot quantize to Q6_K"):
        QuantMatrix.from_float(rt, np.zeros((2, 256), np.float32), T.Q6_K)
    qm = QuantMatrix.from_gguf(rt, raw_tensor(T.Q4_0, 40, 64), T.Q4_0, (40, 64))
    small = PanelScratch(rt, [(40, 64)], 4, 10 * 64)
    with pytest.raises(ValueError, match="sized for up to 4 rows"):
        linear_forward(rt, rt.empty(5 * 40), rt.empty(5 * 64), qm, 5, small)
    with pytest.raises(ValueError, match="outside"):
        qm.dequantize_rows(rt, rt.empty(64), 40, 1)
    fallback = QuantMatrix.from_gguf(rt, raw_tensor(T.Q5_K, 1, 256), T.Q5_K, (1, 256))
    assert fallback.form == "f16"
    big = raw_tensor(T.Q5_K, 1, 256)
    big[:, 0:2] = np.array([60000.0], np.float16).view(np.uint8)   # d: values beyond half's
    with pytest.raises(ValueError, match="float16's range"):
        QuantMatrix.from_gguf(rt, big, T.Q5_K, (1, 256))
    with pytest.raises(ValueError, match="out holds 64 floats"):
        qm.dequantize_rows(rt, rt.empty(64), 0, 2)
