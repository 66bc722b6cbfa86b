"""One layer's causal attention, forward + backward, timed side by side (issue 24 goal 2): the
engine's fused FlashAttention-2 kernels (engine/model/attention.py, kernels/attention_flash.cl), its
batched-GEMM path (engine/model/attention_gemm.py) where its (B, H, T, T) buffers fit, and
PyTorch's fp32 F.scaled_dot_product_attention(is_causal=True) on the same shapes (CUDA, TF32 off).
Used by `bench_attention.py layer` and `bench_attention.py tiles`."""

from __future__ import annotations

import time

import numpy as np

# (d_model, n_head, T, batch): d384 and d768 at head_dim 64, batches as in issue 24
SHAPES = [(384, 6, 256, 64), (384, 6, 512, 32), (384, 6, 1024, 16), (384, 6, 2048, 8),
          (384, 6, 4096, 8), (768, 12, 256, 32), (768, 12, 512, 16), (768, 12, 1024, 8),
          (768, 12, 2048, 4), (768, 12, 4096, 2)]


def engine_ms(rt, path: str, C: int, H: int, T: int, B: int, reps: int = 5) -> float | None:
    """Median ms of one forward + backward of `path` ("fused" or "gemm") on rt; None where the
    gemm path's buffers cannot be allocated."""
    from opencl_llm_studio.engine.errors import DeviceError
    from opencl_llm_studio.engine.model import attention, attention_gemm
    rng = np.random.default_rng(0)
    W = 3 * C
    qkv = rt.to_device(rng.standard_normal((B * T, W)).astype(np.float32))
    dy = rt.to_device(rng.standard_normal((B * T, C)).astype(np.float32))
    y, dqkv = rt.empty(B * T * C), rt.empty(B * T * W)
    n = B * H * T * (T if path == "gemm" else 1)
    try:
        state, scratch = rt.empty(n), rt.empty(n)
    except DeviceError:
        return None
    mod = attention if path == "fused" else attention_gemm
    times = []
    for i in range(reps + 1):
        rt.finish()
        t0 = time.perf_counter()
        mod.attention_forward(rt, y, state, qkv, B, T, C, H)
        mod.attention_backward(rt, dqkv, scratch, dy, qkv, y, state, B, T, C, H)
        rt.finish()
        if i:  # the first call compiles
            times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def torch_ms(C: int, H: int, T: int, B: int, reps: int = 5) -> float | None:
    """Median ms of F.scaled_dot_product_attention(is_causal=True) forward + backward in fp32 on
    CUDA (None without a CUDA PyTorch)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    q, k, v = (torch.randn(B, H, T, C // H, device="cuda", requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, T, C // H, device="cuda")
    times = []
    for i in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def layer_table(device, shapes=SHAPES) -> str:
    """The markdown table of fused, gemm and PyTorch ms per shape."""
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(device)
    rows = [f"Attention forward + backward, one layer, ms ({rt.info.name}; PyTorch fp32 SDPA)",
            "", "| d_model | H | T | B | fused | batched GEMM | PyTorch SDPA | fused / GEMM |",
            "|---|---|---|---|---|---|---|---|"]
    for C, H, T, B in shapes:
        f, g, p = engine_ms(rt, "fused", C, H, T, B), engine_ms(rt, "gemm", C, H, T, B), \
            torch_ms(C, H, T, B)
        cell = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        ratio = "-" if g is None else f"{f / g:.2f}"
        rows.append(f"| {C} | {H} | {T} | {B} | {cell(f)} | {cell(g)} | {cell(p)} | {ratio} |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


def tile_sweep(device, C: int = 384, H: int = 6, T: int = 2048, B: int = 8
               ) -> tuple[str, dict]:
    """fused forward + backward ms with each kernel's tile candidates tried in turn (the others
    at their first fitting candidate), and the fastest tiles per kernel: which CANDIDATES order
    to keep."""
    from opencl_llm_studio.engine.model import attention_flash as af
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(device)
    hd, rows = C // H, [f"Flash tile sweep, d{C} H{H} T{T} B{B} ({rt.info.name})", ""]
    base, best = dict(af.CANDIDATES), {}
    for name in af.DEFINES:
        timed = []
        for bq in (16, 32, 64):
            for bk in (16, 32, 64):
                t = af.FlashTiles(bq, bk)
                if 4 * af.local_floats(name, t, hd) > rt.limits.local_mem_bytes:
                    continue
                af.CANDIDATES[name] = (t,)
                timed.append((engine_ms(rt, "fused", C, H, T, B, reps=3), t))
                rows.append(f"{name} bq{bq} bk{bk}: {timed[-1][0]:.2f} ms")
                print(rows[-1], flush=True)
        af.CANDIDATES[name] = base[name]
        best[name] = min(timed)[1]
    rows.append(f"fastest: {best}")
    return "\n".join(rows), best


def sweep_then_table(device) -> str:
    """tile_sweep, then layer_table with each kernel's fastest tiles tried first."""
    from opencl_llm_studio.engine.model import attention_flash as af
    text, best = tile_sweep(device)
    for name, t in best.items():
        af.CANDIDATES[name] = (t,) + tuple(c for c in af.CANDIDATES[name] if c != t)
    return text + "\n\n" + layer_table(device)
