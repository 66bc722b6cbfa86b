"""Kernel autotuning (issue 24 goal 4): measure GEMM configurations on the model's own products.

The hand table (engine/opencl/gemm_plan.default_plan) was measured on two devices; on others its tile,
work-group and vector-width choices can be slow or not even run. `tune(rt, cfg, batch_size)`
times candidates for every matrix product of one training step (engine.opencl.gemm_plan.GemmChoice:
variant, vector width, work-group shape, K slice, tile edge, float4 fetches, split-K depth)
and the attention path, as CLBlast tunes per device; within `seconds` (default 30): the
largest products first, each in stages: variant, then work-group shape, then K slice / split;
then the attention path if time is left. Every candidate's first result is checked against
numpy (float64) before it is timed, so a wrong-but-fast candidate (a miscompiled kernel, a
launch the device does not honour) is never chosen; one the device refuses (DeviceError) is
skipped. A candidate replaces the best so far only when it is MARGIN faster in one timing, and
the final winner must be MARGIN faster than the table again over 5 alternating rounds (least
times) and faster in at least 4 of the 5, so noise does not move the plan off the table. Products not reached in time,
and winners left unconfirmed when time runs out, keep the table's choice.

Winners are cached per device, driver and model shape (engine/opencl/tune_cache.py);
`runtime_for_model` gives a session the cached plan, and tunes first when none exists and the
person opted in (LLM_STUDIO_AUTOTUNE=1). `llm-studio tune-kernels` runs `tune` on demand.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from opencl_llm_studio.engine.model import attention, attention_gemm
from opencl_llm_studio.engine.model.activations import logit_rows
from opencl_llm_studio.engine.opencl import gemm_packed, ops, tune_cache
from opencl_llm_studio.engine.errors import DeviceError
from opencl_llm_studio.engine.opencl.gemm_plan import GemmChoice, GemmPlan, Shape
from opencl_llm_studio.engine.model.scratch import linear_layers, row_counts
from opencl_llm_studio.engine.progress import Cancelled, Monitor
from opencl_llm_studio.engine.opencl.runtime import Runtime

TUNE_SECONDS = 30.0
AUTOTUNE_ENV = "LLM_STUDIO_AUTOTUNE"  # "1": tune before training when the cache has no entry
PHASE = "tuning kernels"  # Monitor phase: f"{PHASE}: {product label}", then ": attention path"
MARGIN = 0.03      # a candidate must be 3% faster than the best so far to replace it
MIN_TIME_S = 0.01  # each timing repeats a product for at least this long
TOLERANCE = 1e-4   # largest error relative to the largest element of the float64 product
CPU_GROUPS = ((4, 4), (8, 2), (2, 8), (16, 1), (8, 4), (4, 8), (4, 2), (2, 4), (8, 1), (2, 2),
              (1, 1))  # work-group shapes of the CPU GEMMs, table's first; at most 4 fitting
CPU_K_SLICES = (128, 512)
SPLIT_DEPTHS = (128, 512)


def timer(rt: Runtime) -> Callable[[], float]:
    """The clock candidates are timed with: on a CPU device this process's CPU time (PoCL runs
    kernels on its own threads, so other programs on a shared CPU do not count: on a 2-core
    machine at load 14, one product's wall times spread 11-42 ms, its CPU times 1.6-2.1 ms;
    candidates that would leave cores idle are not tried, see _measure); elsewhere wall time."""
    return time.process_time if rt.is_cpu else time.perf_counter


def model_products(cfg, batch_size: int) -> list[tuple[str, Shape]]:
    """(label, (form, M, N, K)) of the matrix products of one training step of cfg
    (engine/model/transformer.py via ops.matmul_forward/backward): per linear layer (out n, in k) the
    forward (nn BT x n x k), the input gradient (nn BT x k x n), the weight gradient
    (tn n x k x BT). The output projection's rows are those of one chunk where the logits are
    projected in chunks of rows (engine.model.activations.logit_rows, engine.model.output_head)."""
    BT = batch_size * cfg.context_length
    out = []
    for name, n, k in linear_layers(cfg):
        rows = max(row_counts(name, n, BT))   # the first chunk's where logits are chunked
        out += [(f"{name} fwd", ("nn", rows, n, k)), (f"{name} dX", ("nn", rows, k, n)),
                (f"{name} dW", ("tn", n, k, rows))]
    return out


@dataclass
class TuneResult:
    """plan: the table's plan with the winners; rows: (label, shape, table choice, table
    seconds, tuned choice, tuned seconds) per product measured (seconds None: it did not run
    or was wrong); complete: every product and the attention path measured; cancelled."""

    plan: GemmPlan
    rows: list
    complete: bool
    cancelled: bool
    seconds: float


def winners(rows: list) -> list[tuple[Shape, GemmChoice]]:
    """(shape, tuned choice) of the TuneResult rows whose tuned choice replaces the table's:
    it ran, and it is another choice."""
    return [(row[1], row[4]) for row in rows if row[4] != row[2] and row[5] is not None]


class ProductBench:
    """Buffers, reference product and timing of one product."""

    def __init__(self, rt: Runtime, shape: Shape, clock: Callable[[], float]):
        form, M, N, K = shape
        rng = np.random.default_rng(M * 7 + N * 3 + K)
        a = rng.standard_normal((K, M) if form == "tn" else (M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        self.want = ((a.T if form == "tn" else a).astype(np.float64) @ b.astype(np.float64))
        self.rt, self.shape, self.clock = rt, shape, clock
        self.a, self.b, self.c = rt.to_device(a), rt.to_device(b), rt.empty(M * N)

    def run(self, r: Runtime):
        form, M, N, K = self.shape
        (ops.matmul_nn if form == "nn" else ops.matmul_tn)(r, self.c, self.a, self.b, M, N, K)

    def right(self, r: Runtime) -> bool:
        """Run once (compiling what it needs) and compare with numpy's float64 product."""
        self.rt.fill_zero(self.c, self.want.size)
        self.run(r)
        got = self.rt.read(self.c, self.want.size).reshape(self.want.shape)
        scale = max(float(np.abs(self.want).max()), 1e-6)
        return bool(np.all(np.isfinite(got))) and \
            float(np.abs(got - self.want).max()) / scale < TOLERANCE

    def seconds(self, r: Runtime, rounds: int = 1) -> float:
        """Seconds per product: the least of `rounds` timings of >= 1 run and >= MIN_TIME_S
        (the least, because other work on a shared device only ever adds time)."""
        best = float("inf")
        for _ in range(rounds):
            reps, t0 = 0, self.clock()
            while reps < 1 or self.clock() - t0 < MIN_TIME_S:
                self.run(r)
                reps += 1
                if reps % 2 == 0:
                    self.rt.finish()
            self.rt.finish()
            best = min(best, (self.clock() - t0) / reps)
        return best


def candidates(rt: Runtime, table: GemmChoice, stage: int, best: GemmChoice,
               form: str) -> list[GemmChoice]:
    """The choices tried in stage 0 (variant and vector width), 1 (work-group shape of the CPU
    variants) and 2 (K slice, or tiled tile edge / fetches / split-K depth) around `best`."""
    fit = [g for g in CPU_GROUPS if g[0] * g[1] <= rt.limits.max_work_group_size][:4]
    if stage == 0:
        g = fit[0] if fit else table.group
        out = [table] + [GemmChoice("blocked", group=g), GemmChoice("vector", 8, group=g),
                         GemmChoice("vector", 16, group=g)]
        # the tiled kernels are written for GPUs' local memory, the packed ones for CPUs' caches
        out += ([GemmChoice("packed", 8), GemmChoice("packed", 16)] if rt.is_cpu else
                [GemmChoice("tiled", tile_edge=e) for e in rt.plan.edges])
        return [c for i, c in enumerate(out) if c not in out[:i]]
    if best.variant == "tiled":
        if stage == 1:
            return [replace(best, fetch4=False)]
        return [replace(best, split_depth=d) for d in SPLIT_DEPTHS]
    if best.variant == "packed":
        return []   # its blocks follow the cores (engine.opencl.gemm_packed), no group
    if stage == 1:
        return [replace(best, group=g) for g in fit]
    if best.variant == "blocked" and form == "nn":
        return []  # matmul_nn (matmul.cl) runs the whole K in one launch
    return [replace(best, k_slice=k) for k in CPU_K_SLICES]


def _measure(bench: ProductBench, rt: Runtime, plan: GemmPlan, choice: GemmChoice) -> float | None:
    """Seconds of bench under choice, or None when it fails to run or gives a wrong result."""
    r = rt.with_plan(replace(plan, shapes=((bench.shape, choice),)))
    try:
        return bench.seconds(r) if bench.right(r) else None
    except DeviceError:
        return None


def tune(rt: Runtime, cfg, batch_size: int, seconds: float = TUNE_SECONDS,
         monitor: Monitor | None = None, report: Callable[[tuple], None] | None = None,
         clock: Callable[[], float] | None = None) -> TuneResult:
    """Measure the products of (cfg, batch_size) on rt within `seconds` (module docstring).
    monitor: progress ticks (f"{PHASE}: {product label}", distinct products measured, their
    number + 1; then ": attention path") and cancellation (a cancelled run returns what it
    found, cancelled=True); report(row): each product's row (TuneResult.rows) as measured;
    clock: what candidates are timed with (default timer(rt)); the budget is wall time."""
    monitor, clock = monitor or Monitor(), clock or timer(rt)
    start, table = time.monotonic(), rt.plan
    products = sorted(model_products(cfg, batch_size), key=lambda p: -np.prod(p[1][1:]))
    seen, rows, cancelled, path = set(), [], False, None
    total = len({s for _, s in products}) + 1   # distinct products, then the attention path
    try:
        for label, shape in products:
            monitor.check()
            if shape in seen or time.monotonic() - start > seconds:
                continue
            i = len(seen)
            seen.add(shape)
            # the phase names the product (the studio and the CLI show it); ticked again
            # between candidates, so a report skipped by Monitor's rate limit comes soon
            phase = f"{PHASE}: {label}"
            monitor.tick(phase, i, total)
            row = _tune_product(rt, table, label, shape, lambda: monitor.tick(phase, i, total),
                                clock, start + seconds)
            rows.append(row)
            if report:
                report(row)
        # last: its kernels' first build can take seconds on a busy machine
        monitor.tick(f"{PHASE}: attention path", total - 1, total)
        if time.monotonic() - start <= seconds:
            path = tune_attention(rt, cfg, batch_size, clock)
    except Cancelled:
        cancelled = True
    rule = attention_gemm.choose(rt.info, cfg, batch_size, cfg.context_length, True, "auto")
    plan = replace(table, shapes=tuple(winners(rows)),  # a path only where it is not the rule's
                   attention_path=path if path not in (None, rule) else table.attention_path)
    complete = not cancelled and path is not None and len(seen) == len({s for _, s in products})
    return TuneResult(plan, rows, complete, cancelled, time.monotonic() - start)


def _tune_product(rt, table: GemmPlan, label, shape, tick, clock, deadline) -> tuple:
    """One TuneResult row for shape; tick() between candidates (progress; raises Cancelled)."""
    form = shape[0]
    bench = ProductBench(rt, shape, clock)
    first = table.choice_for(*shape)
    base = _measure(bench, rt, table, first)
    best, best_s = first, base
    # CPU time hides idle cores: no candidate with fewer work-groups than the table's launch
    # or two per compute unit, whichever is fewer
    least = min(_groups(rt, table, first, shape), 2 * rt.limits.compute_units) if rt.is_cpu else 0
    for stage in range(3):
        for c in candidates(rt, first, stage, best, form):
            tick()
            if time.monotonic() > deadline:
                break
            if c == best or _groups(rt, table, c, shape) < least:
                continue
            t = _measure(bench, rt, table, c)
            if t is not None and (best_s is None or t < best_s * (1 - MARGIN)):
                best, best_s = c, t
    if best != first and base is not None:  # (a table that fails needs no confirming)
        if time.monotonic() > deadline:  # no time left to confirm the winner: the table stays
            best, best_s = first, base
        else:  # confirm against the table, timed alternately
            times = _rounds(bench, [rt.with_plan(replace(table, shapes=((shape, c),)))
                                    for c in (first, best)])
            base, best_s = min(t[0] for t in times), min(t[1] for t in times)
            wins = sum(t[1] < t[0] for t in times)
            if best_s > base * (1 - MARGIN) or wins < len(times) - 1:
                best, best_s = first, base
    return (label, shape, first, base, best, best_s)


def _groups(rt: Runtime, plan: GemmPlan, choice: GemmChoice, shape: Shape) -> int:
    """Work-groups of one launch of shape under choice on rt's device."""
    if choice.variant == "packed":   # its blocks follow the device (engine.opencl.ops)
        _, M, N, K = shape
        return int(np.prod(gemm_packed.packed_launch(rt, choice.vector_width, M, N, K)[3]))
    g = replace(plan, shapes=((shape, choice),)).launch_for(*shape)
    return int(np.prod([n // l for n, l in zip(g.grid, g.local)]))


def side_by_side(bench: ProductBench, runtimes: list[Runtime], rounds: int = 5
                 ) -> list[float]:
    """Seconds of bench on each runtime, each the least of `rounds` timings taken in turn, so
    a burst of other work on the device weighs on all alike."""
    times = _rounds(bench, runtimes, rounds)
    return [min(t[i] for t in times) for i in range(len(runtimes))]


def _rounds(bench: ProductBench, runtimes: list[Runtime], rounds: int = 5) -> list[list]:
    """[[seconds on each runtime] per round], the runtimes timed in turn each round."""
    return [[bench.seconds(r, 1) for r in runtimes] for _ in range(rounds)]


def tune_attention(rt: Runtime, cfg, B: int, clock=None) -> str | None:
    """"fused" or "gemm", whichever runs attention forward + backward of (cfg, B) faster on
    rt, among the paths whose forward output matches numpy (the gemm path only where its
    (B, H, T, T) buffers fit: attention_gemm.gemm_fits); None if neither does. The fused path
    (memory linear in T) is timed first and kept unless the gemm path is faster by MARGIN:
    one attention path wherever it is as fast (issue 24 goal 2)."""
    clock = clock or timer(rt)
    T, C, H, KVH = cfg.context_length, cfg.d_model, cfg.n_head, cfg.n_kv_head or cfg.n_head
    hd = C // H
    paths = ["fused"] + (["gemm"] if attention_gemm.gemm_fits(rt.info, cfg, B, T, True) else [])
    rng = np.random.default_rng(0)
    W = C + 2 * KVH * hd
    qkv = rng.standard_normal((B, T, W)).astype(np.float32)
    want = causal_attention(qkv, C, H, KVH)
    bq, bdy = rt.to_device(qkv), rt.to_device(rng.standard_normal((B * T, C)).astype(np.float32))
    y, dqkv = rt.empty(B * T * C), rt.empty(B * T * W)
    best, best_s = None, float("inf")
    for path in paths:
        mod = attention if path == "fused" else attention_gemm
        state, scratch = ((rt.empty(B * H * T), rt.empty(B * H * T)) if path == "fused" else
                          (rt.empty(B * H * T * T), rt.empty(B * H * T * T)))

        def step():
            mod.attention_forward(rt, y, state, bq, B, T, C, H, KVH)
            mod.attention_backward(rt, dqkv, scratch, bdy, bq, y, state, B, T, C, H, KVH)
        try:
            step()
            got = rt.read(y, B * T * C).reshape(B, T, C)
        except DeviceError:
            continue
        if float(np.abs(got - want).max()) > TOLERANCE * max(1.0, float(np.abs(want).max())):
            continue
        t0 = clock()
        step()
        step()
        rt.finish()
        t = (clock() - t0) / 2
        if t < best_s * (1 - MARGIN) or best is None:
            best, best_s = path, t
    return best


def causal_attention(qkv: np.ndarray, C: int, H: int, KVH: int) -> np.ndarray:
    """y (B, T, C) of causal multi-head / grouped-query attention of qkv (B, T, C + 2 KVH hd)
    in float64 (Vaswani et al. 2017; layout as engine/model/attention.py)."""
    B, T, _ = qkv.shape
    hd, G = C // H, H // KVH
    x = qkv.astype(np.float64)
    q = x[..., :C].reshape(B, T, H, hd).transpose(0, 2, 1, 3)
    k = x[..., C:C + KVH * hd].reshape(B, T, KVH, hd).transpose(0, 2, 1, 3).repeat(G, axis=1)
    v = x[..., C + KVH * hd:].reshape(B, T, KVH, hd).transpose(0, 2, 1, 3).repeat(G, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


# -- the cache, for sessions and the command line -----------------------------------------
def cached_plan(rt: Runtime, cfg, batch_size: int) -> GemmPlan | None:
    """rt's table plan with the cached winners for (device, cfg, batch_size), or None. A
    malformed entry is ignored (the table runs)."""
    entry = tune_cache.lookup(tune_cache.device_key(rt), tune_cache.shape_key(cfg, batch_size))
    try:
        return rt.plan.with_tuned(entry) if entry else None
    except (KeyError, TypeError, ValueError):
        return None


def save(rt: Runtime, cfg, batch_size: int, result: TuneResult):
    """Store result.plan's winners for rt's device and (cfg, batch_size). OSError."""
    entry = result.plan.to_dict() | {"measured": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime())}
    return tune_cache.store(tune_cache.device_key(rt), tune_cache.shape_key(cfg, batch_size),
                            entry)


def runtime_for_model(rt: Runtime, cfg, batch_size: int, monitor: Monitor | None = None,
                      autotune: bool | None = None) -> Runtime:
    """rt launching by the cached plan for (cfg, batch_size) when there is one; else, when
    autotune (None: the environment variable LLM_STUDIO_AUTOTUNE is "1"; the studio's setting
    and `train --autotune` pass True), tune now (TUNE_SECONDS, progress and cancellation
    through monitor: Cancelled, nothing stored), store the result and use it; else rt
    unchanged (the hand table)."""
    plan = cached_plan(rt, cfg, batch_size)
    if autotune is None:
        autotune = os.environ.get(AUTOTUNE_ENV) == "1"
    if plan is None and autotune:
        result = tune(rt, cfg, batch_size, TUNE_SECONDS, monitor)
        if result.cancelled:
            raise Cancelled()
        try:
            save(rt, cfg, batch_size, result)
        except OSError:
            pass  # the cache is an optimisation: this run still uses what it measured
        plan = result.plan
    return rt.with_plan(plan) if plan is not None else rt


def step_speedup(result: TuneResult, cfg, batch_size: int) -> float | None:
    """How much faster one training step's products run by result.plan than by the table:
    sum(table seconds) / sum(tuned seconds) over the products measured both ways, each shape
    counted as often as a step runs it (a block's products n_layer times, the logits once per
    chunk of rows); None when no product ran both ways."""
    BT = batch_size * cfg.context_length
    chunks = BT / logit_rows(cfg.vocab_size, BT)
    uses: dict = {}
    for label, shape in model_products(cfg, batch_size):
        uses[shape] = uses.get(shape, 0) + (chunks if label.startswith("logits") else cfg.n_layer)
    table = tuned = 0.0
    for _, shape, _, t_table, _, t_tuned in result.rows:
        if t_table is not None and t_tuned is not None:
            table += uses.get(shape, 1) * t_table
            tuned += uses.get(shape, 1) * t_tuned
    return table / tuned if tuned > 0 else None
