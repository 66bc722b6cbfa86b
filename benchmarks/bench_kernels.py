"""Kernel throughput on each configuration's shapes (issue 6).

GEMMs: GFLOP/s of our matmul_nn / matmul_tn on every product one training step does (forward
X @ W^T through transpose + matmul_nn, backward dX = dY @ W with matmul_nn, dW += dY^T @ X with
matmul_tn), against numpy's sgemm (OpenBLAS) on a CPU device and torch.mm (fp32, tf32 off) on
--torch-device (a GPU, or cpu: MKL with --torch-threads threads); --packed adds a column for
the packed-panel CPU GEMM (engine.opencl.gemm_packed, kernels/matmul_packed.cl). Row-wise
kernels: GB/s counting each input read once and each output written once (the fewest bytes the
kernel must move). Timed with rt.finish() around repeated
launches on one set of buffers, so small shapes sit in cache: the numbers are upper bounds.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_kernels.py --configs S,M
    PYTHONPATH=. taskset -c 0,1 .venv/bin/python benchmarks/bench_kernels.py --configs S,M,L \
        --packed --torch-device cpu --no-rowwise     # the CPU GEMMs beside MKL, 2 threads
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import md_table, model_config  # noqa: E402
from opencl_llm_studio.engine.model.params import qkv_width  # noqa: E402
from opencl_llm_studio.engine.model.params import param_count


def timeit(fn, sync, min_s=0.15, min_reps=3) -> float:
    """Mean seconds per call over >= min_reps calls and >= min_s, after one warm-up call."""
    fn()
    sync()
    reps, t0 = 0, time.perf_counter()
    while reps < min_reps or time.perf_counter() - t0 < min_s:
        fn()
        reps += 1
        if reps >= 1000:
            break
    sync()
    return (time.perf_counter() - t0) / reps




def gemm_shapes(cfg, B):
    """(label, kind, M, N, K) of the products in one step; kind nn or tn as our kernels name them
    (engine.model.gemm_tune.model_products)."""
    from opencl_llm_studio.engine.model.gemm_tune import model_products
    return [(label, *shape) for label, shape in model_products(cfg, B)]


def bench_gemms(rt, cfg, B, tdev, no_numpy=False, packed=False):
    from opencl_llm_studio.engine.opencl import gemm_tiles, ops
    rng = np.random.default_rng(0)
    rows = []
    for label, kind, M, N, K in gemm_shapes(cfg, B):
        a = rng.standard_normal((K, M) if kind == "tn" else (M, K), np.float32)
        b = rng.standard_normal((K, N), np.float32)
        ba, bb, bc = rt.to_device(a), rt.to_device(b), rt.empty(M * N)
        fn = {"nn": ops.matmul_nn, "tn": ops.matmul_tn}[kind]
        ours = timeit(lambda: fn(rt, bc, ba, bb, M, N, K), rt.finish)
        got = rt.read(bc, M * N).reshape(M, N)
        per_tile = []  # tiled GEMM: each tile edge forced, and scalar fetches, beside the choice
        for tile, fetch4 in ([(t, True) for t in gemm_tiles.TILED_EDGES] + [(None, False)]
                             if rt.plan.variant == "tiled" else ()):
            forced = rt.with_plan(rt.plan.replace(tile_edge=tile, fetch4=fetch4))
            per_tile.append(timeit(lambda: fn(forced, bc, ba, bb, M, N, K), rt.finish))
        if packed:  # the packed-panel CPU GEMM beside the runtime's choice (same buffers)
            forced = rt.with_plan(rt.plan.replace(variant="packed"))
            per_tile.append(timeit(lambda: fn(forced, bc, ba, bb, M, N, K), rt.finish))
            pgot = rt.read(bc, M * N).reshape(M, N)
        want = (a.T if kind == "tn" else a) @ b
        err = max(np.abs(g - want).max() for g in ([got, pgot] if packed else [got]))
        err /= np.abs(want).max()
        at = np.ascontiguousarray(a.T) if kind == "tn" else a
        npy = None if no_numpy else timeit(lambda: (a.T if kind == "tn" else a) @ b, lambda: None)
        flops = 2.0 * M * N * K
        row = [label, f"{kind} {M}x{N}x{K}", f"{flops / ours / 1e9:.1f}"]
        row += [f"{flops / t / 1e9:.1f}" for t in per_tile]
        row += [] if no_numpy else [f"{flops / npy / 1e9:.1f}"]
        if tdev:
            import torch
            ta = torch.from_numpy(at).to(tdev)
            tb = torch.from_numpy(b).to(tdev)
            tt = timeit(lambda: ta @ tb, torch.cuda.synchronize if tdev != "cpu" else lambda: None)
            row.append(f"{flops / tt / 1e9:.1f}")
        row.append(f"{err:.1e}")
        rows.append(row)
        print("  " + " | ".join(row), flush=True)
    return rows


def bench_rowwise(rt, cfg, B):
    from opencl_llm_studio.engine.opencl import ops
    BT, C, F, V = B * cfg.context_length, cfg.d_model, cfg.hidden_dim, cfg.vocab_size
    rng = np.random.default_rng(1)
    dev = lambda n: rt.to_device(rng.standard_normal(n).astype(np.float32))  # noqa: E731
    x, w, out, rstd, dx, dw = dev(BT * C), dev(C), dev(BT * C), dev(BT), dev(BT * C), dev(C)
    gu, h, dgu = dev(BT * 2 * F), dev(BT * F), dev(BT * 2 * F)
    logits = dev(BT * V)
    targets = rt.to_device(rng.integers(0, V, BT).astype(np.int32))
    losses = dev(BT)
    n = param_count(cfg)
    p, g, m, v = dev(n), dev(n), dev(n), rt.to_device(np.abs(rng.standard_normal(n)).astype(np.float32))
    stats = rt.to_device(np.array([1.0, 1.0, 0.0], np.float32))
    cases = [
        ("rmsnorm_forward", (2 * BT * C + BT + C) * 4,
         lambda: ops.rmsnorm_forward(rt, out, rstd, x, w, BT, C, 1e-5)),
        ("rmsnorm_backward (dx + dw)", (4 * BT * C + BT + 2 * C) * 4,
         lambda: ops.rmsnorm_backward(rt, dx, dw, out, x, w, rstd, BT, C)),
        ("residual_rmsnorm_forward", (4 * BT * C + BT + C) * 4,
         lambda: ops.residual_rmsnorm_forward(rt, dx, out, rstd, x, x, w, BT, C, 1e-5)),
        ("swiglu_forward", 3 * BT * F * 4, lambda: ops.swiglu_forward(rt, h, gu, BT, F)),
        ("swiglu_backward", 5 * BT * F * 4, lambda: ops.swiglu_backward(rt, dgu, h, gu, BT, F)),
        ("crossentropy_forward (loss only)", (BT * V + 2 * BT) * 4,
         lambda: ops.crossentropy_forward_backward(rt, logits, losses, targets, BT, V, BT, False)),
        ("adamw_update", 7 * n * 4,
         lambda: ops.adamw_update(rt, p, g, m, v, stats, n, n // 2, 1e-9, 0.9, 0.95, 1e-8, 0.0, 1)),
    ]
    rows = []
    for name, nbytes, fn in cases:
        s = timeit(fn, rt.finish)
        rows.append([name, f"{nbytes / 2**20:.1f}", f"{s * 1e3:.3f}", f"{nbytes / s / 1e9:.1f}"])
        print("  " + " | ".join(rows[-1]), flush=True)
    return rows


def local_sweep(rt, cfg, B):
    """ms of 2-D element-wise kernels under several work-group shapes (the runtime fixes one:
    (4, 4) on a CPU). On PoCL each work-group has a fixed cost, so tiny groups over millions of
    elements can cost more than the arithmetic."""
    import pyopencl as cl
    BT, C, F = B * cfg.context_length, cfg.d_model, cfg.hidden_dim
    rng = np.random.default_rng(2)
    dev = lambda n: rt.to_device(rng.standard_normal(n).astype(np.float32))  # noqa: E731
    W, hd = qkv_width(cfg), cfg.head_dim
    gu, h, dh, dgu, qkv = dev(BT * 2 * F), dev(BT * F), dev(BT * F), dev(BT * 2 * F), dev(BT * W)
    pairs = (C + cfg.kv_heads * hd) // 2  # q and k: rotated (kernels/rope.cl)
    cos, sin = dev(cfg.context_length * hd // 2), dev(cfg.context_length * hd // 2)
    i32 = np.int32
    cases = [("swiglu_forward", (F, BT), (h, gu, i32(BT), i32(F))),
             ("swiglu_backward", (F, BT), (dgu, dh, gu, i32(BT), i32(F))),
             ("rope", (pairs, BT), (qkv, cos, sin, i32(BT), i32(cfg.context_length), i32(W),
                                    i32(pairs), i32(hd), i32(0), np.float32(1.0)))]
    shapes = [(4, 4), (16, 1), (64, 1), (16, 16), (128, 1), (256, 1)]
    rows = []
    for name, gsz, args in cases:
        k = cl.Kernel(rt.program, name)   # own kernel object: scalars passed typed
        row = [name, f"{gsz[0]}x{gsz[1]}"]
        for ls in shapes:
            gs = tuple(-(-g // l) * l for g, l in zip(gsz, ls))
            row.append(f"{timeit(lambda: k(rt.queue, gs, ls, *args), rt.finish) * 1e3:.2f}")
        rows.append(row)
        print("  " + " | ".join(row), flush=True)
    return md_table(["kernel", "global"] + [f"ms @ {a}x{b}" for a, b in shapes], rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="S,M")
    ap.add_argument("--device", default=None)
    ap.add_argument("--torch-device", default=None,
                    help="cuda[:i] or cpu to compare with torch.mm (cpu: --torch-threads threads)")
    ap.add_argument("--torch-threads", type=int, default=2, help="torch.mm threads on cpu")
    ap.add_argument("--packed", action="store_true",
                    help="also time the packed-panel CPU GEMM (engine.opencl.gemm_packed)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--local-sweep", action="store_true",
                    help="also time element-wise kernels under several work-group shapes")
    ap.add_argument("--idle-busy", type=float, default=0.0,
                    help="wait until other processes use at most this share of the CPUs")
    ap.add_argument("--no-gemm", action="store_true", help="skip the GEMM and row-wise tables")
    ap.add_argument("--no-rowwise", action="store_true", help="skip the row-wise table")
    ap.add_argument("--no-numpy", action="store_true", help="skip numpy's sgemm column")
    ap.add_argument("--groups-per-cu", type=int, default=None,
                    help="tiled GEMM: resident work-groups per compute unit assumed by the "
                         "split-K and tile choices (engine.opencl.gemm_plan.GROUPS_PER_CU)")
    ap.add_argument("--build-options", default="",
                    help="extra OpenCL compiler options: --build-options='-DGEMM_UNROLL_K'")
    args = ap.parse_args(argv)
    from opencl_llm_studio.engine.opencl import gemm_tiles
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    # select_device: never a simulator by default
    rt = Runtime(args.device, build_options=tuple(shlex.split(args.build_options)))
    if args.groups_per_cu:
        rt = rt.with_plan(rt.plan.replace(wave=args.groups_per_cu * rt.info.compute_units))
    tdev = args.torch_device if args.torch_device and args.torch_device.startswith(
        ("cuda", "cpu")) else None
    if tdev:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_num_threads(args.torch_threads)
    lines = [f"Kernels on {rt.info.name} ({rt.info.type}, {rt.info.platform})"
             + (f", extra build options `{args.build_options}`" if args.build_options else "")
             + (f", {args.groups_per_cu} GEMM groups per compute unit" if args.groups_per_cu
                else "") + "."]
    for name in [c.strip().upper() for c in args.configs.split(",") if c.strip()]:
        cfg, B = model_config(name)
        if args.idle_busy > 0:
            from benchmarks.common import wait_idle
            wait_idle(args.idle_busy, 300.0)
        head = ["product", "shape (M x N x K)", "ours GFLOP/s"]
        head += ([f"ours {t}x{t} tiles" for t in gemm_tiles.TILED_EDGES]
                 + ["ours scalar fetches"]
                 if rt.plan.variant == "tiled" else [])
        head += ["packed GFLOP/s"] if args.packed else []
        head += [] if args.no_numpy else ["numpy GFLOP/s"]
        head += ["torch.mm GFLOP/s"] if tdev else []
        if not args.no_gemm:
            lines += ["", f"### {name}: GEMMs (B*T = {B * cfg.context_length})", "",
                      md_table(head + ["max rel err"],
                               bench_gemms(rt, cfg, B, tdev, args.no_numpy, args.packed))]
            if not args.no_rowwise:
                lines += ["", f"### {name}: row-wise kernels", "",
                          md_table(["kernel", "MiB moved", "ms", "GB/s"],
                                   bench_rowwise(rt, cfg, B))]
        if args.local_sweep:
            lines += ["", f"### {name}: work-group shape sweep (element-wise kernels)", "",
                      local_sweep(rt, cfg, B)]
        print(f"{name} done", flush=True)
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
