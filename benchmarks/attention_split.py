"""Where one layer's attention time goes (issue 24 goal 2): the fused FlashAttention-2 kernels
(forward, dq, dk/dv) each timed alone against the batched-GEMM path's forward and backward, and
a sweep of each fused kernel's tiles and work-group shapes (kernels/attention_flash.cl), timed
alone. Used by `bench_attention.py split` and `bench_attention.py sweep`.

Each figure is the best of 3 rounds of `reps` back-to-back launches (ms per launch, host clock
around rt.finish(); the kernels run for milliseconds, the launch gap is microseconds).
"""

from __future__ import annotations

import itertools
import time

import numpy as np

# the kernels a sweep times alone: forward, the recomputing backward's dq and dk/dv, and the
# dS path's dk/dv (writing dS^T) and dq (dS K); keys of attention_flash.CANDIDATES
KERNELS = ("attention_forward", "attention_backward_dq", "attention_backward_dkv",
           "attention_backward_dkv_ds", "attention_backward_dq_ds")


class Buffers:
    """Device buffers of one attention call (B, T, C, H; head_dim C / H, multi-head), random
    qkv and dy; `state`, `scratch`: the fused path's lse and dsum (B*H*T) or, with gemm, the
    (B, H, T, T) probabilities and scratch."""

    def __init__(self, rt, C: int, H: int, T: int, B: int, gemm: bool = False):
        rng = np.random.default_rng(0)
        self.shape = (B, T, C, H)
        self.qkv = rt.to_device(rng.standard_normal((B * T, 3 * C)).astype(np.float32))
        self.dy = rt.to_device(rng.standard_normal((B * T, C)).astype(np.float32))
        self.y, self.dqkv = rt.empty(B * T * C), rt.empty(B * T * 3 * C)
        n = B * H * T * (T if gemm else 1)
        self.state, self.scratch = rt.empty(n), rt.empty(n)
        self._ds = None

    def ds(self, rt):
        """The dS path's dS^T scratch for every head at once (B*H*T*T), made on first use."""
        if self._ds is None:
            B, T, _, H = self.shape
            self._ds = rt.empty(B * H * T * T)
        return self._ds


def timed(rt, fn, reps: int = 5) -> float:
    """Best of 3 rounds of ms per call of fn() (reps back-to-back calls), after one warm call."""
    fn()
    rt.finish()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        rt.finish()
        best = min(best, (time.perf_counter() - t0) / reps)
    return 1e3 * best


def fused_calls(rt, b: Buffers) -> dict:
    """name -> a call that launches that kernel alone over all heads (engine/model/attention.py's
    _launch; the dS path's kernels with a dS^T scratch for every head at once, and "dsum", its
    D kernel) or, under "fused", the whole forward + backward as the engine runs it."""
    from opencl_llm_studio.engine.model import attention, attention_flash as af
    B, T, C, H = b.shape
    s = attention.heads(B, T, C, H)
    fwd = (b.y, b.state, b.qkv)
    dq = (b.dqkv, b.scratch, b.dy, b.y, b.qkv, b.state)
    dkv = (b.dqkv, b.dy, b.qkv, b.state, b.scratch)
    tail = (T, C, H, 0, B * H)

    def ds_call(name):  # built when called (the runtime caches builds), so sweeps can swap tiles
        args = dkv if name == "attention_backward_dkv" else dq
        return lambda: af.launch(rt, name, af.program(rt, name, C // H, 1, ds=True), T, B * H,
                                 args, tail, b.ds(rt))

    def dsum():
        af.launch_dsum(rt, af.program(rt, "attention_backward_dkv", C // H, 1, ds=True), T,
                       B * H, (b.scratch, b.dy, b.y, *tail))

    def whole():
        attention.attention_forward(rt, *fwd, B, T, C, H)
        attention.attention_backward(rt, b.dqkv, b.scratch, b.dy, b.qkv, b.y, b.state, B, T, C,
                                     H)
    return {"attention_forward": lambda: attention._launch(rt, "attention_forward", s, 2, *fwd),
            "attention_backward_dq":
                lambda: attention._launch(rt, "attention_backward_dq", s, 3, *dq),
            "attention_backward_dkv":
                lambda: attention._launch(rt, "attention_backward_dkv", s, 4, *dkv, per_kv=True),
            "dsum": dsum, "attention_backward_dkv_ds": ds_call("attention_backward_dkv"),
            "attention_backward_dq_ds": ds_call("attention_backward_dq"), "fused": whole}


COLUMNS = ("attention_forward", "attention_backward_dq", "attention_backward_dkv", "dsum",
           "attention_backward_dkv_ds", "attention_backward_dq_ds", "fused")


def split(rt, C: int, H: int, T: int, B: int) -> dict:
    """ms of each of COLUMNS alone and of the gemm path's forward and backward."""
    from opencl_llm_studio.engine.model import attention_gemm as ag
    b = Buffers(rt, C, H, T, B)
    calls = fused_calls(rt, b)
    out = {k: timed(rt, calls[k]) for k in COLUMNS}
    del b, calls
    g = Buffers(rt, C, H, T, B, gemm=True)
    Bq, Tq, Cq, Hq = g.shape
    out["gemm_forward"] = timed(rt, lambda: ag.attention_forward(
        rt, g.y, g.state, g.qkv, Bq, Tq, Cq, Hq))
    ag.attention_forward(rt, g.y, g.state, g.qkv, Bq, Tq, Cq, Hq)
    out["gemm_backward"] = timed(rt, lambda: ag.attention_backward(
        rt, g.dqkv, g.scratch, g.dy, g.qkv, g.y, g.state, Bq, Tq, Cq, Hq))
    return out


def split_text(rt, shapes) -> str:
    """split() per (d_model, n_head, T, B) of shapes as a markdown table."""
    rows = [f"Per-kernel split, ms ({rt.info.name}); fused: forward + backward as the engine "
            "runs it (dS path where its scratch holds a head)", "",
            "| d_model | H | T | B | fwd | dq | dkv | D | dkv+dS | dq(dS) | fused | gemm fwd "
            "| gemm bwd | gemm | fused / gemm |", "|---" * 15 + "|"]
    for C, H, T, B in shapes:
        r = split(rt, C, H, T, B)
        gemm = r["gemm_forward"] + r["gemm_backward"]
        rows.append(f"| {C} | {H} | {T} | {B} | " + " | ".join(
            f"{x:.2f}" for x in (*(r[k] for k in COLUMNS), r["gemm_forward"],
                                 r["gemm_backward"], gemm, r["fused"] / gemm)) + " |")
        print(rows[-1], flush=True)
    return "\n".join(rows)


def configs(name: str, head_dim: int, local_mem: int):
    """The FlashTiles a sweep tries for kernel `name`: work-groups 16x16, 8x8, 8x16 and 16x8
    with the next tile prefetched (pf 1), 8x8 without, over three tile shapes per kernel; those
    the kernel can build and whose __local floats fit local_mem bytes."""
    from opencl_llm_studio.engine.model import attention_flash as af
    shapes = {"attention_forward": ((64, 32), (32, 32), (32, 64)),
              "attention_backward_dq": ((32, 32), (64, 16), (16, 64)),
              "attention_backward_dkv": ((32, 32), (16, 32)),
              "attention_backward_dkv_ds": ((32, 32), (16, 32)),
              "attention_backward_dq_ds": ((64, 64), (64, 32), (128, 32), (32, 64))}[name]
    groups = [((16, 16), 1), ((8, 8), 1), ((8, 16), 1), ((16, 8), 1), ((8, 8), 0)]
    for ((wx, wy), pf), (bq, bk) in itertools.product(groups, shapes):
        t = af.FlashTiles(bq, bk, wx, wy, pf)
        if t.valid(name) and 4 * af.local_floats(name, t, head_dim) <= local_mem:
            yield t


def _registers(rt, name: str, head_dim: int) -> str:
    """", registers R, spilled S bytes" of the flash build of kernel `name` from NVIDIA's
    -cl-nv-verbose log (rt built with it), else ""."""
    import re

    import pyopencl as cl

    from opencl_llm_studio.engine.model import attention_flash as af
    if "-cl-nv-verbose" not in rt.build_options:
        return ""
    kernel, ds = name.removesuffix("_ds"), name.endswith("_ds")
    log = af.program(rt, kernel, head_dim, 1, ds)[0].program.get_build_info(
        rt.device, cl.program_build_info.LOG)
    regs = re.findall(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes spill stores", log)
    return f", registers {'/'.join(regs)}, spilled {'/'.join(spill)} bytes"


def sweep(rt, C: int, H: int, T: int, B: int, only=None) -> tuple[str, dict]:
    """Each kernel's configs (or `only`: name -> list of FlashTiles, for the names given) timed
    alone at (C, H, T, B); returns the lines and the fastest tiles per kernel."""
    from opencl_llm_studio.engine.model import attention_flash as af
    b = Buffers(rt, C, H, T, B)
    base, best, rows = dict(af.CANDIDATES), {}, []
    for name in (only or KERNELS):
        timed_ = []
        cands = only[name] if only else configs(name, C // H, rt.limits.local_mem_bytes)
        for t in cands:
            af.CANDIDATES[name] = (t,)
            try:
                timed_.append((timed(rt, fused_calls(rt, b)[name], reps=3), t))
                regs = _registers(rt, name, C // H)
            except Exception as e:  # a build the device refuses: say so, keep sweeping
                rows.append(f"{name} {tuple(t)}: failed {type(e).__name__}: {str(e)[:200]}")
                print(rows[-1], flush=True)
                continue
            rows.append(f"{name} bq{t.bq} bk{t.bk} wg{t.wx}x{t.wy} pf{t.pf}: "
                        f"{timed_[-1][0]:.3f} ms{regs}")
            print(rows[-1], flush=True)
        af.CANDIDATES[name] = base[name]
        best[name] = min(timed_)[1]
    rows.append(f"fastest: {best}")
    return "\n".join(rows), best
