"""Both forms of the element-wise kernels written with FOR_COLUMNS (kernels/common.h), against
the float64 reference (tests/reference.py): the CPU form (CPU_DEVICE: one work-item walks a
row) through the engine's launchers, and the GPU form (one work-item per column, or every
get_global_size(0)-th column), built here without CPU_DEVICE and run on the test device, so a
CPU-only machine checks the code GPUs run.
"""

import numpy as np
import pyopencl as cl
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.model import attention
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.runtime import kernel_source
from tests.kernel_helpers import close, down, up

FILES = ("swiglu.cl", "rope.cl", "embedding.cl")


@pytest.fixture(scope="module")
def gpu_form(rt):
    """The FILES built as for a GPU (no CPU_DEVICE) on the test device: name -> cl.Kernel."""
    src = kernel_source(FILES)
    prog = cl.Program(rt.ctx, src).build(options=["-cl-std=CL1.2", "-DSM_LANES=64",
                                                  "-DSM_ROWS=4"])
    return {n: cl.Kernel(prog, n) for n in ("swiglu_forward", "swiglu_backward", "rope",
                                            "embedding_forward", "embedding_backward")}


def run(rt, kernel, columns: int, rows: int, *args):
    """A GPU-form launch: `columns` work-items per row (fewer than the row has: the kernel
    strides), 4 rows per group, both edges overhanging."""
    dt = [np.int32 if isinstance(a, int) else np.float32 if isinstance(a, float) else None
          for a in args]
    kernel.set_scalar_arg_dtypes(dt)
    kernel(rt.queue, (-(-columns // 8) * 8, -(-rows // 4) * 4), (8, 4), *args)


@pytest.mark.parametrize("BT,F,cols", [(1, 1, 1), (7, 13, 13), (9, 70, 16)])
def test_swiglu_gpu_form(rt, gpu_form, BT, F, cols):
    rng = np.random.default_rng(F)
    gu, dh = rng.normal(scale=3, size=(BT, 2 * F)), rng.normal(size=(BT, F))
    g, u = gu[:, :F], gu[:, F:]
    h, dgu, bgu = rt.empty(BT * F), rt.empty(BT * 2 * F), up(rt, gu)
    run(rt, gpu_form["swiglu_forward"], cols, BT, h, bgu, BT, F)
    close(down(rt, h, (BT, F)), ref.swiglu_forward(g, u))
    run(rt, gpu_form["swiglu_backward"], cols, BT, dgu, up(rt, dh), bgu, BT, F)
    rdg, rdu = ref.swiglu_backward(dh, g, u)
    close(down(rt, dgu, (BT, 2 * F)), np.concatenate([rdg, rdu], -1))


@pytest.mark.parametrize("B,T,H,hd,KVH,cols", [(1, 1, 1, 2, 1, 1), (2, 5, 3, 4, 3, 12),
                                               (1, 17, 2, 6, 2, 5), (2, 7, 6, 4, 2, 5)])
def test_rope_gpu_form(rt, gpu_form, B, T, H, hd, KVH, cols):
    """q (H heads) and the KVH k heads of rows (B*T, C + 2 KVH hd) rotated, v untouched."""
    rng = np.random.default_rng(T)
    C, KV = H * hd, KVH * hd
    W = C + 2 * KV
    qkv = rng.normal(size=(B, T, W))
    cos, sin = ref.rope_angles(T, hd)
    bq, bc, bs = up(rt, qkv), up(rt, cos), up(rt, sin)
    pairs = (C + KV) // 2
    run(rt, gpu_form["rope"], cols, B * T, bq, bc, bs, B * T, T, W, pairs, hd, 0, 1.0)
    want = qkv.copy()
    want[..., :C] = ref.rope_forward(qkv[..., :C], H)
    want[..., C:C + KV] = ref.rope_forward(qkv[..., C:C + KV], KVH)
    close(down(rt, bq, (B, T, W)), want)


@pytest.mark.parametrize("B,T,V,C,cols", [(1, 1, 5, 3, 3), (2, 7, 11, 9, 4)])
def test_embedding_gpu_form(rt, gpu_form, B, T, V, C, cols):
    rng = np.random.default_rng(V)
    ids = rng.integers(0, V, size=(B, T))
    ids[0, -1] = ids[0, 0]  # a repeated id must sum
    wte, dout = rng.normal(size=(V, C)), rng.normal(size=(B, T, C))
    out, dwte = rt.empty(B * T * C), rt.zeros(V * C)
    run(rt, gpu_form["embedding_forward"], cols, B * T, out, up(rt, ids, np.int32), up(rt, wte),
        B * T, C)
    close(down(rt, out, (B, T, C)), ref.embedding_forward(ids, wte))
    uniq, starts, order = ops.group_positions(ids)
    run(rt, gpu_form["embedding_backward"], cols, len(uniq), dwte, up(rt, dout),
        up(rt, uniq, np.int32), up(rt, starts, np.int32), up(rt, order, np.int32), len(uniq), C)
    close(down(rt, dwte, (V, C)), ref.embedding_backward(dout, ids, V))


def test_cpu_launches_one_work_item_per_row(rt, monkeypatch):
    """On a CPU device the element-wise kernels run one work-item per row (one per element ran
    2-5x slower under PoCL: benchmarks/RESULTS.md), and their results stay right."""
    if not rt.info.is_cpu:
        pytest.skip("the row-per-work-item form is the CPU device's")
    sizes = []
    launch = rt.launch_local
    monkeypatch.setattr(rt, "launch_local",
                        lambda name, gs, ls, *a, **k: sizes.append((name, gs)) or
                        launch(name, gs, ls, *a, **k))
    BT, F, H, hd, T = 5, 24, 2, 8, 5
    rng = np.random.default_rng(0)
    gu = rng.normal(size=(BT, 2 * F))
    h = rt.empty(BT * F)
    ops.swiglu_forward(rt, h, up(rt, gu), BT, F)
    close(down(rt, h, (BT, F)), ref.swiglu_forward(gu[:, :F], gu[:, F:]))
    cos, sin = ref.rope_angles(T, hd)
    attention.rope_forward(rt, rt.zeros(BT * 3 * H * hd), up(rt, cos), up(rt, sin), BT, T,
                           H * hd, hd)
    assert [(n, g[0]) for n, g in sizes] == [("swiglu_forward", 1), ("rope", 1)]
