"""The packed-panel CPU GEMM (kernels/matmul_packed.cl, engine.opencl.gemm_packed) in all three
forms against float64 numpy, with block sizes made small so that one product crosses several
K slices, column blocks, row blocks and partial micro-tiles (tests/test_kernels.py runs it
with the engine's own sizes through the `gemm` fixture)."""

import numpy as np
import pytest

from opencl_llm_studio.engine.opencl import gemm_packed, gemm_tiles
from tests.kernel_helpers import close, down, up

# (M, N, K): odd sizes, one row, one column, K 1, K 0 (C = beta * C), more than one K slice
SHAPES = [(1, 1, 1), (1, 70, 33), (45, 1, 17), (7, 13, 1), (37, 50, 19), (70, 97, 65),
          (130, 33, 130), (9, 200, 0)]


@pytest.fixture(params=[8, 16])
def small_blocks(rt, request, monkeypatch):
    """vector width 8 or 16 with K slices of 16, blocks of at most 64 columns (two panels
    at width 16), split by columns down to 32, and A packed 2 micro-panels at a time: a small
    product walks every edge."""
    if not rt.is_cpu and "Oclgrind" not in rt.info.name:
        pytest.skip("the packed kernels are for CPUs (and checked under Oclgrind)")
    mr = gemm_tiles.PACKED[request.param][0]
    monkeypatch.setitem(gemm_tiles.PACKED, request.param, (mr, 16, 64, 2 * mr))
    monkeypatch.setattr(gemm_packed, "PACKED_MIN_COLS", 32)
    return request.param


@pytest.mark.parametrize("form", ["nn", "nt", "tn"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_packed_gemm_forms(rt, small_blocks, form, M, N, K):
    check_product(rt, form, M, N, K, small_blocks, (0.0, 0.5))


def check_product(rt, form: str, M: int, N: int, K: int, width: int, betas: tuple):
    """gemm_packed's C = beta * C + op(A) @ op(B) against float64 numpy, per beta."""
    rng = np.random.default_rng(M * 7919 + N * 31 + K)
    a = rng.normal(size=(K, M) if form == "tn" else (M, K))
    b = rng.normal(size=(N, K) if form == "nt" else (K, N))
    c0 = rng.normal(size=(M, N))
    want = (a.T if form == "tn" else a) @ (b.T if form == "nt" else b)
    for beta in betas:
        c = up(rt, c0)
        gemm_packed.gemm_packed(rt, form, c, up(rt, a), up(rt, b), M, N, K, beta, width)
        close(down(rt, c, (M, N)), want + beta * c0)


@pytest.mark.parametrize("form", ["nn", "nt", "tn"])
@pytest.mark.parametrize("M,N,K", [(37, 50, 19), (70, 97, 65), (130, 33, 130), (1, 70, 200),
                                   (9, 200, 0)])
def test_packed_gemm_over_k_ranges(rt, small_blocks, monkeypatch, form, M, N, K):
    """Split over K into (up to) 4 ranges of whole K slices (16 rows here): the partial
    products of every range, summed by sum_slices with beta, give the product."""
    monkeypatch.setattr(gemm_packed, "packed_splits", lambda *shape_and_device: 4)
    ranges = gemm_packed.packed_launch(rt, small_blocks, M, N, K)[3][2]
    assert ranges > 1 if K > 16 else ranges == 1
    check_product(rt, form, M, N, K, small_blocks, (0.0, 1.0))


def test_weight_gradients_split_over_k():
    """packed_splits: a weight gradient's small M x N over a long K = B*T takes K ranges (M's
    and B's dW products: before, 4 groups of 64 x 256 each packed the same 256 x 256 slice of
    B per K slice); products with C large enough for the cores' groups do not."""
    sizes = dict(gemm_tiles.packed_defines(16, 2 << 20))
    for M, N, K in [(256, 256, 4096), (256, 704, 4096), (512, 256, 4096), (256, 256, 2048)]:
        assert gemm_packed.packed_splits(M, N, K, sizes, 2) > 1, (M, N, K)
    for M, N, K in [(4096, 256, 256), (4096, 1408, 256), (2048, 2048, 256), (768, 384, 128),
                    (256, 256, 512)]:
        assert gemm_packed.packed_splits(M, N, K, sizes, 2) == 1, (M, N, K)


def test_packed_blocks_cover_c_in_equal_shares():
    """Blocks tile C (multiples of the micro-tile, at most PK_NB wide) in about
    PACKED_GROUPS_PER_CU per compute unit, split by columns first."""
    sizes = dict(gemm_tiles.packed_defines(16, 2 << 20))
    for M, N in [(2048, 2048), (4096, 256), (768, 384), (1, 1), (37, 50), (4096, 1408)]:
        mb, nb = gemm_packed.packed_blocks(M, N, sizes, 2)
        assert mb % sizes["PK_MR"] == 0 and nb % 32 == 0 and nb <= sizes["PK_NB"]
        groups = -(-M // mb) * -(-N // nb)
        assert groups >= min(4, -(-M // 8) * -(-N // 32)) or nb >= N
    # columns first (down to PACKED_MIN_COLS 256), then rows
    assert gemm_packed.packed_blocks(4096, 1024, sizes, 2) == (4096, 256)
    assert gemm_packed.packed_blocks(4096, 256, sizes, 2) == (1024, 256)


def test_packed_defines_fit_local_memory():
    """The packed block of B fits the device's __local memory (Oclgrind and OpenCL's minimum:
    32 KiB), and the engine's sizes where there is room (PoCL reports the L2: 2 MiB here)."""
    for width in (8, 16):
        for local in (32 << 10, 64 << 10, 256 << 10, 2 << 20):
            d = dict(gemm_tiles.packed_defines(width, local))
            assert gemm_tiles.packed_local_bytes(width, d["PK_MR"], d["PK_KC"], d["PK_NB"],
                                                 d["PK_MC"]) <= local
            assert d["PK_NB"] % (2 * width) == 0 and d["PK_MC"] % d["PK_MR"] == 0
            assert d["PK_PREFETCH"] == 0
        assert gemm_tiles.packed_defines(width, 2 << 20)[1:-1] == tuple(
            zip(("PK_MR", "PK_KC", "PK_NB", "PK_MC"), gemm_tiles.PACKED[width]))


def test_the_table_packs_large_products_on_pocl_cpus():
    """default_plan: on a PoCL CPU with 8- or 16-float SIMD, products of at least
    LARGE_PRODUCT multiply-adds take the packed GEMM at the device's width (the 135M model's,
    config M's and S's), smaller ones (decoding's) the vector kernel; a tuned shape wins over both;
    Intel's CPU runtime, scalar CPUs and GPUs keep one variant; forcing a variant applies it to
    every product."""
    from dataclasses import replace

    from opencl_llm_studio.engine.opencl.gemm_plan import LARGE_PRODUCT, DeviceLimits, GemmChoice, default_plan
    pocl = DeviceLimits(True, False, 2, 2 << 20, 4096, 16)
    plan = default_plan(pocl)
    for shape in [("nn", 512, 960, 576), ("tn", 3072, 576, 512), ("nn", 256, 49152, 576),
                  ("nn", 4096, 768, 256), ("nn", 768, 384, 128), ("tn", 704, 128, 768),
                  ("nn", 768, 128, 128)]:
        assert plan.choice_for(*shape) == GemmChoice("packed", vector_width=16), shape
    for shape in [("nn", 64, 256, 256), ("nn", 256, 128, 128), ("tn", 64, 64, 64)]:
        assert plan.choice_for(*shape) == plan.default and plan.default.variant == "vector"
    assert plan.choice_for("nn", 64, 64, LARGE_PRODUCT // 4096).variant == "packed"
    assert plan.choice_for("nn", 64, 64, LARGE_PRODUCT // 4096 - 1).variant == "vector"
    assert default_plan(replace(pocl, native_float_width=8)).large.vector_width == 8
    tuned = replace(plan, shapes=((("nn", 512, 960, 576), plan.default),))
    assert tuned.choice_for("nn", 512, 960, 576) == plan.default
    assert plan.choice_for("nn", 8, 8, LARGE_PRODUCT) == plan.narrow   # narrow before large
    for other in [replace(pocl, is_intel_cpu_runtime=True), replace(pocl, native_float_width=4),
                  DeviceLimits(False, False, 132, 228 << 10, 1024, 1)]:
        p = default_plan(other)
        assert p.choice_for("nn", 4096, 4096, 4096) == p.choice_for("nn", 8, 8, 8) == p.default
    forced = plan.replace(variant="vector")
    assert forced.choice_for("nn", 4096, 4096, 4096).variant == "vector"


def test_the_table_runs_narrow_products_blocked_and_few_rows_packed_on_pocl_cpus():
    """default_plan: on a PoCL CPU, products with fewer than NARROW_EDGE columns of C (LoRA's
    rank-r products x A^T (M, r), G B (M, r), G^T u (n, r)) take the scalar blocked kernel,
    where the vector one ran 2-10x slower; wider ones with fewer rows than that (a short
    prompt's prefill) the packed GEMM, which reads W in place instead of transposing it; the
    rest keep the vector or packed choice, a tuned shape wins, and the other devices' tables
    have neither rule."""
    from dataclasses import replace

    from opencl_llm_studio.engine.opencl.gemm_plan import (NARROW_EDGE, DeviceLimits,
                                                           GemmChoice, default_plan)
    pocl = DeviceLimits(True, False, 2, 2 << 20, 4096, 8)
    plan = default_plan(pocl)
    assert plan.narrow == GemmChoice("blocked", vector_width=8)
    assert plan.few_rows == GemmChoice("packed", vector_width=8)
    for shape in [("nn", 240, 8, 576), ("tn", 1536, 8, 240), ("nn", 240, 8, 1536),
                  ("nn", 8, 8, 576), ("nn", 240, NARROW_EDGE - 1, 576)]:
        assert plan.choice_for(*shape) == plan.narrow, shape
    for shape in [("nn", 16, 576, 576), ("tn", 8, 576, 240), ("nn", NARROW_EDGE - 1, 64, 64)]:
        assert plan.choice_for(*shape) == plan.few_rows, shape
    assert plan.choice_for("nn", 240, NARROW_EDGE, 256) == plan.default
    assert plan.choice_for("nn", NARROW_EDGE, 256, 256) == plan.default
    tuned = replace(plan, shapes=((("nn", 240, 8, 576), plan.default),))
    assert tuned.choice_for("nn", 240, 8, 576) == plan.default
    assert plan.replace(variant="vector").choice_for("nn", 240, 8, 576).variant == "vector"
    for other in [replace(pocl, is_intel_cpu_runtime=True),
                  DeviceLimits(False, False, 132, 228 << 10, 1024, 1)]:
        assert default_plan(other).narrow is None and default_plan(other).few_rows is None
