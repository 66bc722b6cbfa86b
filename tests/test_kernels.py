"""Every kernel, forward and backward, against the float64 numpy twin in tests/reference.py.

Shapes are random and include sizes that are multiples of no tile (odd sizes, batch 1, T=1).
Tolerances are relative to the magnitude of the reference, in float32 terms.
"""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.opencl.ops import GRAD_NORM_PARTIALS
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.gemm_plan import k_slices
from opencl_llm_studio.engine.model.moments import moment_key
from tests.kernel_helpers import GEMM_VARIANTS, close, down, plan_rt, up

SEEDS = [0, 1, 2]


@pytest.fixture(params=GEMM_VARIANTS)
def gemm_rt(rt, request):
    """The test runtime with each GEMM variant (CPU register-blocked in scalars, or in float8
    (AVX2) or float16 (AVX-512) vectors; GPU local-memory tiled with 64x64 or 128x128 tiles,
    with float4 fetches where the shape allows, or with scalar fetches only: suffix s)."""
    return plan_rt(rt, request.param)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 13, 5), (6, 16, 8), (37, 50, 19), (64, 96, 128),
                                   (5, 33, 300), (130, 70, 33), (600, 20, 7), (257, 129, 600),
                                   (16, 64, 3), (41, 97, 260),
                                   # multiples of 4 (float4 fetches), not of the tiles
                                   (4, 4, 4), (132, 68, 36), (260, 132, 600), (8, 200, 44)])
def test_matmul_forward_backward(gemm_rt, M, N, K):
    rt = gemm_rt
    rng = np.random.default_rng(M * 1000 + N)
    x, w, dout = rng.normal(size=(M, K)), rng.normal(size=(N, K)), rng.normal(size=(M, N))
    dw0 = rng.normal(size=(N, K))  # dw accumulates into existing contents
    out, scratch = rt.empty(M * N), rt.empty(N * K)
    bx, bw = up(rt, x), up(rt, w)
    ops.matmul_forward(rt, out, bx, bw, scratch, M, N, K)
    close(down(rt, out, (M, N)), ref.matmul_forward(x, w))
    dx, dw = rt.empty(M * K), up(rt, dw0)
    ops.matmul_backward(rt, dx, dw, up(rt, dout), bx, bw, M, N, K)
    rdx, rdw = ref.matmul_backward(dout, x, w)
    close(down(rt, dx, (M, K)), rdx)
    close(down(rt, dw, (N, K)), rdw + dw0)


@pytest.mark.parametrize("form", ["nn", "tn"])
@pytest.mark.parametrize("M,N,K", [(68, 132, 1028), (64, 64, 2048), (67, 130, 1100),
                                   (4, 8, 772)])
def test_matmul_split_over_k(gemm_rt, form, M, N, K):
    """A product with few output tiles and a long K (a weight gradient, tn; a tied output head's
    dX per chunk of rows, nn) is split into slices of K summed by sum_slices
    (engine.opencl.gemm_plan.k_slices; float4 fetches where M, N, K allow), accumulating into the
    existing C (beta 1) as matmul_backward does. The wave is made large (as on a big GPU) so the
    split happens on any test device."""
    plan = gemm_rt.plan.replace(wave=64 * gemm_rt.info.compute_units)
    rt = gemm_rt.with_plan(plan)
    if plan.variant == "tiled":
        assert k_slices(plan.wave, -(-M // 64) * -(-N // 64), K) > 1 or K < 512
        assert plan.launch_for(form, M, N, K).grid[2] > 1 or K < 512
    rng = np.random.default_rng(K)
    a = rng.normal(size=(K, M) if form == "tn" else (M, K))
    b, c0 = rng.normal(size=(K, N)), rng.normal(size=(M, N))
    c = up(rt, c0)
    (ops.matmul_tn if form == "tn" else ops.matmul_nn)(rt, c, up(rt, a), up(rt, b), M, N, K,
                                                        beta=1.0)
    close(down(rt, c, (M, N)), (a.T if form == "tn" else a) @ b + c0, 3e-5)


@pytest.fixture(params=["cpu", "gpu"])
def rows_rt(request, rt_one_lane, rt_lanes):
    """A runtime with the launch choices of either device kind: one work-item per row and
    unsplit reductions ("cpu"), or 64 lanes per row and split reductions ("gpu")."""
    return rt_one_lane if request.param == "cpu" else rt_lanes


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (1, 7, 3), (1, 130, 64), (2, 33, 257), (3, 5, 1001),
                                   (4, 64, 8), (1, 300, 4097)])
def test_matvec_reads_the_weight_in_place(rows_rt, M, N, K):
    """A forward product of at most ops.MATVEC_ROWS rows (KV decoding) is matvec_nt: the
    reference's result, and the transposed-weight scratch is never written (a transpose of
    every weight per decoded token took 2/3 of a 135M model's token time on a CPU)."""
    rt = rows_rt
    rng = np.random.default_rng(M * N + K)
    x, w = rng.normal(size=(M, K)), rng.normal(size=(N, K))
    out, scratch = rt.empty(M * N), up(rt, np.full(N * K, np.nan))
    ops.matmul_forward(rt, out, up(rt, x), up(rt, w), scratch, M, N, K)
    close(down(rt, out, (M, N)), ref.matmul_forward(x, w))
    assert np.isnan(down(rt, scratch, (N * K,))).all()
    assert ops.reads_weight_in_place(rt, M, N, K)


@pytest.mark.parametrize("R,C", [(1, 1), (1, 7), (13, 31), (64, 128), (1000, 33)])
def test_rmsnorm(rows_rt, R, C):
    rt = rows_rt
    rng = np.random.default_rng(R + C)
    x, w, dout = rng.normal(size=(R, C)), rng.normal(size=C), rng.normal(size=(R, C))
    dx0, dw0 = rng.normal(size=(R, C)), rng.normal(size=C)
    out, rstd = rt.empty(R * C), rt.empty(R)
    bx, bw = up(rt, x), up(rt, w)
    ops.rmsnorm_forward(rt, out, rstd, bx, bw, R, C, 1e-5)
    rout, rrstd = ref.rmsnorm_forward(x, w, 1e-5)
    close(down(rt, out, (R, C)), rout)
    close(down(rt, rstd, (R,)), rrstd)
    dx, dw = up(rt, dx0), up(rt, dw0)
    ops.rmsnorm_backward(rt, dx, dw, up(rt, dout), bx, bw, rstd, R, C)
    rdx, rdw = ref.rmsnorm_backward(dout, x, w, rrstd)
    close(down(rt, dx, (R, C)), rdx + dx0, 5e-5)
    close(down(rt, dw, (C,)), rdw + dw0, 5e-5)


@pytest.mark.parametrize("R,C", [(1, 1), (13, 31), (1000, 33)])
def test_residual_rmsnorm(rows_rt, R, C):
    rt = rows_rt
    rng = np.random.default_rng(R * C + 1)
    a, b, w = rng.normal(size=(R, C)), rng.normal(size=(R, C)), rng.normal(size=C)
    xsum, out, rstd = rt.empty(R * C), rt.empty(R * C), rt.empty(R)
    ops.residual_rmsnorm_forward(rt, xsum, out, rstd, up(rt, a), up(rt, b), up(rt, w), R, C, 1e-5)
    rout, rrstd = ref.rmsnorm_forward(a + b, w, 1e-5)
    close(down(rt, xsum, (R, C)), a + b)
    close(down(rt, out, (R, C)), rout)
    close(down(rt, rstd, (R,)), rrstd)


@pytest.mark.parametrize("B,T,V,C", [(1, 1, 5, 3), (2, 7, 11, 9), (3, 16, 300, 32)])
def test_embedding(rt, B, T, V, C):
    rng = np.random.default_rng(V)
    ids = rng.integers(0, V, size=(B, T))
    ids[0, -1] = ids[0, 0]  # a repeated id must sum
    wte, dout = rng.normal(size=(V, C)), rng.normal(size=(B, T, C))
    out = rt.empty(B * T * C)
    ops.embedding_forward(rt, out, up(rt, ids, np.int32), up(rt, wte), B * T, C)
    close(down(rt, out, (B, T, C)), ref.embedding_forward(ids, wte))
    dwte = rt.zeros(V * C)
    uniq, starts, order = ops.group_positions(ids)
    ops.embedding_backward(rt, dwte, up(rt, dout), up(rt, uniq, np.int32), up(rt, starts, np.int32),
                           up(rt, order, np.int32), len(uniq), C)
    close(down(rt, dwte, (V, C)), ref.embedding_backward(dout, ids, V))


@pytest.mark.parametrize("BT,F", [(1, 1), (7, 13), (64, 96)])
def test_swiglu(rt, BT, F):
    rng = np.random.default_rng(F)
    gu, dh = rng.normal(scale=3, size=(BT, 2 * F)), rng.normal(size=(BT, F))
    g, u = gu[:, :F], gu[:, F:]
    h, bgu = rt.empty(BT * F), up(rt, gu)
    ops.swiglu_forward(rt, h, bgu, BT, F)
    close(down(rt, h, (BT, F)), ref.swiglu_forward(g, u))
    dgu = rt.empty(BT * 2 * F)
    ops.swiglu_backward(rt, dgu, up(rt, dh), bgu, BT, F)
    rdg, rdu = ref.swiglu_backward(dh, g, u)
    close(down(rt, dgu, (BT, 2 * F)), np.concatenate([rdg, rdu], -1))


@pytest.mark.parametrize("R,V", [(1, 1), (1, 7), (9, 300), (33, 1000), (3, 257), (5, 9001)])
@pytest.mark.parametrize("wide", [False, True], ids=["rows", "wide"])
def test_crossentropy(rows_rt, R, V, wide):
    """Both kernels (SM_LANES lanes per row; crossentropy_wide: 256 lanes, online softmax):
    rows shorter than the lanes (lanes with no element), masked rows, a row's max late in it."""
    rt = rows_rt
    rng = np.random.default_rng(R * V)
    logits = rng.normal(scale=4, size=(R, V))
    targets = rng.integers(0, V, size=R)
    if R > 2:
        targets[1] = -1  # a masked row counts neither in the loss nor the gradient
        targets[R - 1] = -1  # also in a work-group whose other rows count
    logits[0, -1] += 30.0   # the running max jumps at the row's last element
    n = int((targets >= 0).sum())
    bl, losses, bt = up(rt, logits), rt.empty(R), up(rt, targets, np.int32)
    ops.crossentropy_forward_backward(rt, bl, losses, bt, R, V, n, want_grad=True, wide=wide)
    mean, rlosses = ref.crossentropy_forward(logits, targets)
    close(down(rt, losses, (R,)), rlosses)
    close(down(rt, bl, (R, V)), ref.crossentropy_backward(logits, targets))


@pytest.mark.parametrize("n,clip", [(1, 1.0), (1000, 1.0), (5003, 0.0), (5003, 1e6),
                                    (50_001, 1.0), (1_000_003, 1.0)])
@pytest.mark.parametrize("vectors", [False, True], ids=["adamw1", "adamw16"])
def test_grad_norm_and_adamw(rows_rt, n, clip, vectors):
    rt = rows_rt
    rng = np.random.default_rng(n)
    p, g = rng.normal(size=n), rng.normal(size=n)
    m, v = rng.normal(size=n) * 0.1, np.abs(rng.normal(size=n)) * 0.01
    stats, partial = rt.empty(3), rt.empty(GRAD_NORM_PARTIALS)
    bp, bg, bm, bv = up(rt, p), up(rt, g), up(rt, m), up(rt, v)
    ops.grad_norm(rt, stats, partial, bg, n, clip)
    norm = np.sqrt((g * g).sum())
    scale = clip / norm if 0 < clip < norm else 1.0
    st = down(rt, stats, (3,))
    close(st[:2], np.array([norm, scale]))
    assert st[2] == 0
    n_decay = n // 2
    ops.adamw_update(rt, bp, bg, bm, bv, stats, n, n_decay, 1e-2, 0.9, 0.95, 1e-8, 0.1, 3,
                     vectors)
    wd = np.where(np.arange(n) < n_decay, 0.1, 0.0)
    rp, rm, rv = ref.adamw_update(p, g, m, v, 3, 1e-2, 0.9, 0.95, 1e-8, wd, scale)
    close(down(rt, bp, (n,)), rp)
    close(down(rt, bm, (n,)), rm)
    close(down(rt, bv, (n,)), rv)


@pytest.mark.parametrize("n", [1, 17, 4099, 65_537])
@pytest.mark.parametrize("vectors", [False, True], ids=["adamw1", "adamw16"])
def test_adamw_with_bf16_moments(rows_rt, n, vectors):
    """Moments kept as bfloat16 bits (engine.model.moments): the weights as the float64
    reference computes them from the stored moments, each new moment its stochastic rounding
    with the same draws (a float32 vs float64 difference may move a draw across a step: then
    one bfloat16 step apart, rarely)."""
    rt = rows_rt
    rng = np.random.default_rng(n + 7)
    p, g = rng.normal(size=n), rng.normal(size=n)
    m16 = ref.bf16_stochastic(rng.normal(size=n) * 0.1, np.zeros(n, np.uint32))
    v16 = ref.bf16_stochastic(np.abs(rng.normal(size=n)) * 0.01, np.zeros(n, np.uint32))
    stats, partial = rt.empty(3), rt.empty(GRAD_NORM_PARTIALS)
    bp, bg = up(rt, p), up(rt, g)
    bm, bv = up(rt, m16, np.uint16), up(rt, v16, np.uint16)
    ops.grad_norm(rt, stats, partial, bg, n, 1.0)
    scale = min(1.0, 1.0 / np.sqrt((g * g).sum()))
    key = moment_key(1337, 3)
    n_decay = n // 2
    ops.adamw_update(rt, bp, bg, bm, bv, stats, n, n_decay, 1e-2, 0.9, 0.95, 1e-8, 0.1, 3,
                     vectors, bf16_key=key)
    wd = np.where(np.arange(n) < n_decay, 0.1, 0.0)
    rp, rm16, rv16, rm, rv = ref.adamw_update_bf16(p, g, m16, v16, 3, 1e-2, 0.9, 0.95, 1e-8,
                                                   wd, key, scale)
    close(down(rt, bp, (n,)), rp)
    for buf, want16, exact in ((bm, rm16, rm), (bv, rv16, rv)):
        got16 = rt.read(buf, n, np.uint16)
        got = ref.bf16_value(got16)
        assert np.mean(got16 != want16) <= 1e-3
        # within one bfloat16 step (2^-7 relative) of the float64 value
        assert np.all(np.abs(got - exact) <= 2.0 ** -7 * np.abs(exact) + 1e-30)


def test_bf16_moments_round_without_bias(rows_rt):
    """Stochastic rounding: over 200,000 elements whose new m lies between two bfloat16 values,
    the stored values average to it (round-to-nearest would miss by 0.23%)."""
    rt = rows_rt
    n = 200_000
    exact_m = 1.0 + 0.3 * 2.0 ** -7          # 30% of the way to the next bfloat16 value
    m16 = ref.bf16_stochastic(np.full(n, exact_m / 0.9), np.zeros(n, np.uint32))
    m_old = ref.bf16_value(m16)[0]
    target = 0.9 * m_old                     # g = 0: m = beta1 m
    nearest = ref.bf16_value(ref.bf16_stochastic(np.array([target]), np.array([0x8000])))[0]
    assert abs(nearest - target) > 1e-3 * target   # this test could fail on round-to-nearest
    stats = up(rt, np.array([0.0, 1.0, 0.0]))
    bp, bg = up(rt, np.zeros(n)), up(rt, np.zeros(n))
    bm, bv = up(rt, m16, np.uint16), up(rt, np.zeros(n, np.uint16), np.uint16)
    ops.adamw_update(rt, bp, bg, bm, bv, stats, n, 0, 1e-3, 0.9, 0.95, 1e-8, 0.0, 1,
                     bf16_key=moment_key(0, 1))
    mean = ref.bf16_value(rt.read(bm, n, np.uint16)).mean()
    assert abs(mean - target) < 2e-4 * target, (mean, target)


@pytest.mark.parametrize("vectors", [False, True], ids=["adamw1", "adamw16"])
def test_nonfinite_gradient_skips_update(rows_rt, vectors):
    rt = rows_rt
    n = 100
    g = np.ones(n)
    g[7] = np.nan
    p = np.arange(n, dtype=np.float64)
    stats, partial = rt.empty(3), rt.empty(GRAD_NORM_PARTIALS)
    bp, bg = up(rt, p), up(rt, g)
    ops.grad_norm(rt, stats, partial, bg, n, 1.0)
    assert down(rt, stats, (3,))[2] == 1
    ops.adamw_update(rt, bp, bg, rt.zeros(n), rt.zeros(n), stats, n, n, 1e-2, 0.9, 0.95, 1e-8,
                     0.1, 1, vectors)
    np.testing.assert_array_equal(down(rt, bp, (n,)), p.astype(np.float32))


def test_vector_width_follows_the_device_unless_overridden(rt, monkeypatch):
    """PoCL reports a native float width of 16 on AVX-512 and 8 on AVX2: the CPU kernels take
    that width; LLM_STUDIO_VECTOR_WIDTH or the Runtime argument override it (tests run the
    AVX2 kernels on an AVX-512 machine); other widths are refused with a hint."""
    from opencl_llm_studio.engine.errors import DeviceError
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    from opencl_llm_studio.engine.opencl.gemm_plan import VECTOR_WIDTH_ENV, pick_vector_width
    assert pick_vector_width(16) == 16 and pick_vector_width(8) == 8
    assert pick_vector_width(4) == 8 and pick_vector_width(1) == 8
    assert pick_vector_width(16, "8") == 8 and pick_vector_width(8, 16) == 16
    with pytest.raises(DeviceError) as e:
        pick_vector_width(16, "12")
    assert VECTOR_WIDTH_ENV in e.value.hint
    monkeypatch.setenv(VECTOR_WIDTH_ENV, "8")
    r8 = Runtime(rt.info)
    assert r8.plan.vector_width == 8 and (r8.plan.variant == "vector" or not r8.is_cpu)
    assert Runtime(rt.info, vector_width=16).plan.vector_width == 16
