"""Time per kernel of one engine training step, from OpenCL profiling events.

The runtime's queue is swapped for a profiling one for the duration of one step, and every launch
is recorded with its event (engine code unchanged). Matmul launches are also counted in FLOPs, so
the table shows the GEMM rate reached inside the model. The step's wall time minus the summed
kernel time is host work and gaps between kernels (launch overhead, queue latency).
"""

from __future__ import annotations

import time
from collections import defaultdict

import pyopencl as cl

from benchmarks.common import md_table


def _is_matmul(name: str) -> bool:
    """Every GEMM kernel of engine/opencl/ops.py (matmul_nn / matmul_tn / matmul_nt and their
    tiled, vector, packed and float4 forms): FLOPs of one launch from its scalar arguments
    (M, N, K after 3 buffers)."""
    return name.startswith(("matmul_nn", "matmul_tn", "matmul_nt"))


# fused attention (engine/model/attention.py): q.k-sized products per causal (query, key) pair
# (the CPU's blocked backward is one kernel per (batch, key/value head): 5, exact for multi-head)
_ATT = {"attention_forward": 2, "attention_backward_dq": 3, "attention_backward_dkv": 4,
        "attention_backward": 5}


def profile_engine_step(rt, model, inputs, targets, lr, tc, serial: bool = False) -> str:
    """Run one train_step with profiling on; return a markdown table of time per kernel.
    serial: run the side queue's weight gradients on the main queue too, so no two kernels
    overlap and each kernel's time is its own (with overlap, kernels sharing the GPU look slower
    than they are)."""
    rt.finish()
    queue0, side0 = rt.queue, rt.side_queue
    profiling = cl.command_queue_properties.PROFILING_ENABLE
    rt.queue = cl.CommandQueue(rt.ctx, properties=profiling)
    if side0 is not None and serial:
        rt.side_queue = None
    elif side0 is not None:  # weight gradients on the side queue: profiled too (they overlap)
        rt.side_queue = cl.CommandQueue(rt.ctx, properties=profiling)
    events = []
    launch_local0 = rt.launch_local  # rt.launch goes through it too

    def record(name, ev, args):
        flops = 2.0 * args[3] * args[4] * args[5] if _is_matmul(name) else 0.0
        passes = _ATT.get(name.removesuffix("_tiled"))
        if passes:  # trailing arguments T, C, H, z0, z_end
            T, C, H, z0, z1 = args[-5:]
            flops = passes * T * (T + 1) * (C // H) * (z1 - z0)
        if name in ("matmul_tn", "matmul_tn_vec", "matmul_nn_vec") and len(args) > 8:
            # a K slice (k0, k1) of a CPU product
            flops = 2.0 * args[3] * args[4] * (args[8] - args[7])
        events.append((name, ev, flops))
        return ev

    def launch_local(name, global_size, local_size, *args, **kw):
        return record(name, launch_local0(name, global_size, local_size, *args, **kw), args)

    rt.launch_local = launch_local
    try:
        t0 = time.perf_counter()
        model.train_step(inputs, targets, lr, tc)
        rt.finish()
        wall = time.perf_counter() - t0
    finally:
        del rt.launch_local   # back to the class method
        rt.finish()
        rt.queue, rt.side_queue = queue0, side0
    per = defaultdict(lambda: [0, 0.0, 0.0])   # name -> calls, seconds, flops
    for name, ev, flops in events:
        p = per[name]
        p[0] += 1
        p[1] += (ev.profile.end - ev.profile.start) * 1e-9
        p[2] += flops
    busy = sum(p[1] for p in per.values())
    rows = []
    for name, (calls, sec, flops) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        rate = f"{flops / sec / 1e9:.1f}" if flops and sec > 0 else ""
        rows.append([name, calls, f"{sec * 1e3:.2f}", f"{100 * sec / busy:.1f}%", rate])
    mm_s = sum(v[1] for n, v in per.items() if _is_matmul(n))
    mm_f = sum(v[2] for n, v in per.items() if _is_matmul(n))
    lines = [md_table(["kernel", "launches", "ms", "share of kernel time", "GFLOP/s"], rows), "",
             f"Profiled step: wall {wall * 1e3:.1f} ms, kernels {busy * 1e3:.1f} ms "
             f"({100 * busy / wall:.0f}% of wall; the rest is host work and gaps between "
             f"{len(events)} launches"
             + ("; weight gradients ran on a second queue, beside the rest, so kernel time can "
                "exceed wall time" if side0 is not None and not serial else "")
             + ("; one queue (serial), so no kernel overlapped another" if serial else "")
             + "). GEMMs (matmul_nn, _nt, _tn): "
             f"{100 * mm_s / max(busy, 1e-12):.0f}% of kernel time at "
             f"{mm_f / max(mm_s, 1e-12) / 1e9:.1f} GFLOP/s."]
    return "\n".join(lines)
