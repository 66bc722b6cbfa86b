"""Attention as batched GEMMs (engine/model/attention_gemm.py, the GPU path where the (B, H, T, T)
probabilities fit) against the float64 twin in tests/reference.py on every bmm kernel and
awkward shapes; the rule that picks it or the fused kernels; the whole model on both paths;
the per-launch work cap scaled to the device."""

from dataclasses import replace

import pytest

import tests.reference as ref
from opencl_llm_studio.engine.model import attention_flash, attention_gemm
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.model.memory import activation_floats, check_fits, training_bytes
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.opencl.runtime import (GPU_LAUNCH_FLOPS, Runtime, launch_flops_cap,
                                                     stop_flops_cap)
from tests.helpers import tiny_config
from tests.kernel_helpers import GQA_SHAPES, batch, rel_err, run_attention


@pytest.fixture(params=["blocked", "vector", "tiled", "tiled-lanes"])
def gemm_rt(rt, rt_lanes, request):
    """A runtime whose attention products run on each bmm kernel (tile-granular causal
    skipping differs: 6x16, 8x32, 64x64 tiles; "lanes": the softmax with 64 work-items per
    row, the GPU layout)."""
    kind, _, lanes = request.param.partition("-")
    r = rt_lanes if lanes else rt
    if kind == "vector" and not r.is_cpu:
        pytest.skip("the float16 CPU kernels are compiled for CPU devices only")
    return r.with_plan(r.plan.replace(variant=kind))


def run_gemm_attention(rt, B, T, H, hd, seed, KVH=None):
    run_attention(rt, B, T, H, hd, seed, KVH, attend=attention_gemm, state=B * H * T * T)


@pytest.mark.parametrize("B,T,H,hd", [(1, 1, 1, 2), (2, 5, 3, 4), (1, 19, 2, 6), (2, 33, 2, 10),
                                      (1, 70, 3, 8), (2, 130, 2, 32)])
def test_gemm_attention(gemm_rt, B, T, H, hd):
    run_gemm_attention(gemm_rt, B, T, H, hd, seed=B * T + H)


@pytest.mark.parametrize("B,T,H,hd,KVH", GQA_SHAPES)
def test_gemm_grouped_query_attention(gemm_rt, B, T, H, hd, KVH):
    """Grouped-query attention as G batched products per step over the key/value heads: dk,
    dv of a key/value head sum over its query heads."""
    run_gemm_attention(gemm_rt, B, T, H, hd, seed=B * T + H + KVH, KVH=KVH)


@pytest.mark.parametrize("kind", ["blocked", "tiled"])
def test_gemm_attention_split_launches(rt, kind):
    """With a small cap on the work per launch (display GPUs) the products run one batch at a
    time: same results, more launches."""
    rt = rt.with_plan(rt.plan.replace(variant=kind))  # a copy: the session's keeps no cap
    rt.max_launch_flops = 1.0
    n0 = rt.launches
    run_gemm_attention(rt, 3, 21, 2, 6, seed=11)
    # 6 products (S, PV; dP, dQ, dK, dV) one launch per batch entry, 2 softmax launches, and
    # the CPU kernels' transposes of K and V
    assert rt.launches - n0 == 6 * 3 + 2 + (2 if kind == "blocked" else 0)


def gpu(mem_gib: float, alloc_gib: float | None = None, rt=None):
    """A DeviceInfo that reports a GPU with mem_gib of memory (the rule reads nothing else)."""
    base = rt.info
    mem = int(mem_gib * 2**30)
    return replace(base, type="GPU", global_mem_bytes=mem,
                   max_alloc_bytes=int((alloc_gib or mem_gib / 4) * 2**30))


def test_path_rule(rt, monkeypatch):
    """GPUs take the fused kernels up to head_dim 96 (faster than the GEMMs on an H200 at T
    256..4096, benchmarks/RESULTS.md; the old rule took the GEMMs wherever they fit); above it
    the GEMMs while one set's probabilities fit 1/8 of the memory and one buffer the largest
    allocation, the fused kernels beyond; CPUs the fused kernels; forcing wins."""
    monkeypatch.delenv(attention_gemm.ATTENTION_ENV, raising=False)
    cfg = ModelConfig(vocab_size=512, d_model=384, n_layer=6, n_head=6, context_length=2048)
    for T in (256, 1024, 2048, 4096):  # config L (B64 T256) to long contexts, head_dim 64
        assert attention_gemm.choose(gpu(141, rt=rt), cfg, 64, T, True) == "fused"
    # head_dim 128 (3 heads): config L's 4 probability buffers of 48 MiB = 192 MiB
    wide = ModelConfig(vocab_size=512, d_model=384, n_layer=3, n_head=3, context_length=2048)
    assert attention_gemm.choose(gpu(141, rt=rt), wide, 64, 256, True) == "gemm"
    assert attention_gemm.choose(gpu(1, rt=rt), wide, 64, 256, True) == "fused"  # > 128 MiB
    assert attention_gemm.choose(gpu(6, 0.01, rt=rt), wide, 64, 256, True) == "fused"  # alloc
    assert attention_gemm.choose(gpu(141, rt=rt), wide, 64, 2048, True) == "gemm"
    assert attention_gemm.choose(gpu(141, rt=rt), wide, 64, 4096, True) == "fused"  # T^2
    cpu = replace(rt.info, type="CPU", global_mem_bytes=2**40)
    assert attention_gemm.choose(cpu, cfg, 1, 16, True) == "fused"
    assert attention_gemm.choose(cpu, cfg, 1, 16, True, forced="gemm") == "gemm"
    assert attention_gemm.choose(gpu(141, rt=rt), cfg, 64, 256, True, forced="gemm") == "gemm"
    monkeypatch.setenv(attention_gemm.ATTENTION_ENV, "fused")
    assert attention_gemm.choose(gpu(141, rt=rt), wide, 64, 256, True) == "fused"
    monkeypatch.setenv(attention_gemm.ATTENTION_ENV, "flash")
    with pytest.raises(ValueError, match="gemm, fused, auto"):
        attention_gemm.choose(gpu(141, rt=rt), cfg, 64, 256, True)


def test_memory_counts_the_chosen_path(rt, monkeypatch):
    """check_fits counts the (B, H, T, T) buffers where the GEMM path is chosen (head_dim 128,
    above the fused kernels' any-device head_dim), so a GPU with little memory is still right
    about what fits; at head_dim 32 the rule picks the fused path, and counts it."""
    monkeypatch.delenv(attention_gemm.ATTENTION_ENV, raising=False)
    narrow = ModelConfig(vocab_size=512, d_model=128, n_layer=4, n_head=4, context_length=256)
    assert training_bytes(narrow, 8, gpu(2, rt=rt)) == training_bytes(narrow, 8, gpu(2, rt=rt),
                                                                      "fused")
    cfg = ModelConfig(vocab_size=512, d_model=128, n_layer=4, n_head=1, context_length=256)
    B, T, H, L = 8, 256, 1, 4
    fused, _ = training_bytes(cfg, B, gpu(2, rt=rt), "fused")
    gemm, biggest = training_bytes(cfg, B, gpu(2, rt=rt), "gemm")
    probs = B * H * T * T
    # training (which evaluation shares): L + 1 buffers replace L + 1 logsumexps; generation
    # (B=1, forward only: the layers share one, activations.Buffer.count) 1; the fused
    # backward's dS^T scratch is gone
    want = 4 * ((L + 1) * (probs - B * H * T) + (H * T * T - H * T))
    assert gemm - fused == want - attention_flash.ds_scratch_bytes(gpu(2, rt=rt), cfg, B, T)
    assert biggest >= 4 * probs
    assert training_bytes(cfg, B, gpu(2, rt=rt)) == (gemm, biggest)  # the rule picks gemm
    ds = attention_flash.ds_scratch_bytes(gpu(2, rt=rt), cfg, B, T)
    # fused on 5 MiB, where not one head's dS^T fits 1/32 of it (the recomputing backward)
    assert attention_flash.ds_scratch_bytes(gpu(0.005, rt=rt), cfg, B, T) == 0
    assert training_bytes(cfg, B, gpu(0.005, rt=rt))[0] == fused - ds
    assert check_fits(cfg, B, gpu(2, rt=rt)) == gemm
    total, big = activation_floats(cfg, B, T, True, "gemm")
    assert big >= probs and total - activation_floats(cfg, B, T, True)[0] == \
        (L + 1) * (probs - B * H * T)


def test_memory_counts_the_fused_backwards_ds_scratch(rt, monkeypatch):
    """On a GPU the fused backward grows the runtime's scratch to a chunk of heads' dS^T (G x T
    x T floats each, at most 1/32 of the device memory): the estimate counts it, and the
    scratch _backward_ds asks for is that size."""
    monkeypatch.delenv(attention_gemm.ATTENTION_ENV, raising=False)
    cfg = ModelConfig(vocab_size=512, d_model=384, n_layer=2, n_head=6, n_kv_head=2,
                      context_length=1024)
    B, dev = 4, gpu(2, rt=rt)
    ds = attention_flash.ds_scratch_bytes(dev, cfg, B, 1024)
    per_kv = 3 * 1024 * 1024 * 4
    assert ds == per_kv * min(B * 2, (2 << 30) // 32 // per_kv) and ds > 0
    on_test_device = attention_flash.ds_scratch_bytes(rt.info, cfg, B, 1024)
    if rt.info.is_cpu:   # the blocked kernels: no dS scratch
        assert on_test_device == 0
    else:                # whole heads' slices (a GPU test device)
        assert on_test_device > 0 and on_test_device % per_kv == 0
    fused = training_bytes(cfg, B, dev, "fused")[0]
    monkeypatch.setattr(attention_flash, "ds_scratch_bytes", lambda *a: 0)
    assert fused - training_bytes(cfg, B, dev, "fused")[0] == ds


@pytest.mark.parametrize("path", ["gemm", "fused"])
@pytest.mark.parametrize("cfg,B,T", [(tiny_config(), 2, 16), (tiny_config(n_layer=1, d_model=20, n_head=5), 3, 7),
                                     (tiny_config(n_layer=1, d_model=16, n_head=2), 1, 1),
                                     (tiny_config(d_model=36, n_head=9, n_kv_head=3), 2, 9),
                                     (tiny_config(n_layer=1, n_head=6, n_kv_head=1), 1, 1)])
def test_model_on_both_paths(rt, path, cfg, B, T):
    """Loss and every gradient of the whole model against the reference on each path."""
    rt = rt.with_plan(rt.plan.replace(attention_path=path))
    model = Model(rt, cfg, seed=3)
    a = model.activations(B, T, with_grad=True)
    assert a.attention == path
    w = model.weights()
    x, y = batch(cfg, B, T, seed=B)
    _, rloss, cache = ref.forward(w, cfg, x, y)
    rgrads = ref.backward(w, cfg, cache)
    tc = TrainConfig(learning_rate=1e-9, weight_decay=0.0, grad_clip=0.0)
    loss, _, skipped = model.train_step(x, y, 1e-30, tc)
    assert not skipped and abs(loss - rloss) < 1e-5 * max(1.0, abs(rloss))
    grads = model.table.unflatten(model.read_flat("grads"))
    for name, want in rgrads.items():
        assert rel_err(grads[name], want) < 1e-4, name


def test_launch_cap_scales_with_the_device(rt, monkeypatch):
    """The per-launch work cap follows the device's estimated rate (0.1 s of it on a GPU; on a
    CPU 0.5 s, and only inside a training step, where it bounds how long a stop waits), never
    below 2^32 flops; the environment variable overrides it."""
    assert launch_flops_cap(True, 2, 3000) is None
    assert stop_flops_cap(2, 3000) == pytest.approx(0.5 * 2 * 3000e6 * 16)
    assert stop_flops_cap(1, 0) == GPU_LAUNCH_FLOPS   # a clock PoCL did not report
    assert launch_flops_cap(False, 24, 1150) == pytest.approx(4.4e10, rel=0.01)  # UHD 620
    assert launch_flops_cap(False, 2, 100) == GPU_LAUNCH_FLOPS  # the floor
    assert launch_flops_cap(False, 132, 1980) == pytest.approx(0.1 * 132 * 1980e6 * 16)
    assert launch_flops_cap(False, 132, 1980, "2") == 2e9
    assert launch_flops_cap(False, 132, 1980, "0") is None
    if rt.is_cpu:
        assert rt.launch_cap() is None and rt.stop_launch_flops >= GPU_LAUNCH_FLOPS
        rt.chunk_check = lambda: None
        try:
            assert rt.launch_cap() == rt.stop_launch_flops
        finally:
            rt.chunk_check = None
    monkeypatch.setenv("LLM_STUDIO_MAX_LAUNCH_GFLOP", "1.5")
    assert Runtime(rt.info).max_launch_flops == 1.5e9
