"""The kernel tuner against the hand table (issue 24 goal 4), per product, side by side.

For each configuration: engine.model.gemm_tune.tune() within --seconds on the device (optionally
presented with another device's limits: --limits native_float_width=4 is a CPU or integrated
GPU that reports 4-float vectors, where the table falls back to scalar tiles), then every
distinct product of one training step timed with the table's choice and the tuned one in turn
(engine.model.gemm_tune.side_by_side: the least of 5 alternating timings each, so load from other
work weighs on both alike; on a CPU device in this process's CPU time, engine.model.gemm_tune.timer,
which other programs' load does not inflate; GFLOP/s are then per CPU-second of all cores).
Prints GFLOP/s of both and their ratio, and the step's GEMM time (each product counted as
often as a step runs it) under both. Nothing is cached.

    PYTHONPATH=. python benchmarks/bench_tune.py --configs S,M --seconds 30
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import md_table, model_config  # noqa: E402


def limits_arg(text: str) -> dict:
    """"name=value,name=value" -> {name: int(value)} (DeviceLimits fields)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        out[name.strip()] = int(value)
    return out


def compare(rt, cfg, B, seconds: float) -> tuple[list, str]:
    """(markdown rows, summary line) of table vs tuned for one configuration."""
    from opencl_llm_studio.engine.model.gemm_tune import ProductBench, model_products, side_by_side, timer, tune
    result = tune(rt, cfg, B, seconds)
    tuned_rt = rt.with_plan(result.plan)
    rows, totals, done = [], [0.0, 0.0], {}
    for label, shape in model_products(cfg, B):
        same = rt.plan.choice_for(*shape) == result.plan.choice_for(*shape)
        if shape not in done:
            bench = ProductBench(rt, shape, timer(rt))
            try:  # one choice: one kernel, timed once (the ratio is 1 by construction)
                done[shape] = side_by_side(bench, [rt] if same else [rt, tuned_rt]) * \
                    (2 if same else 1)
            except Exception as e:  # the table's launch may not run on a presented profile
                done[shape] = [None, side_by_side(bench, [tuned_rt])[0]]
                print(f"  {label}: the table's launch failed: {e}", flush=True)
        t_table, t_tuned = done[shape]
        totals[0] += t_table if t_table is not None else float("nan")
        totals[1] += t_tuned
        flops = 2.0 * shape[1] * shape[2] * shape[3]
        gf = lambda t: "fails" if t is None else f"{flops / t / 1e9:.1f}"  # noqa: E731
        ratio = "same" if same else f"{t_table / t_tuned:.2f}" if t_table is not None else "-"
        row = [label, f"{shape[0]} {shape[1]}x{shape[2]}x{shape[3]}",
               rt.plan.choice_for(*shape).label(), gf(t_table),
               result.plan.choice_for(*shape).label(), gf(t_tuned), ratio]
        rows.append(row)
        print("  " + " | ".join(row), flush=True)
    summary = (f"step GEMM time: table {totals[0] * 1e3:.2f} ms, tuned {totals[1] * 1e3:.2f} ms "
               f"(table / tuned {totals[0] / totals[1]:.2f}); tuning took {result.seconds:.1f} s"
               f"{'' if result.complete else ' (time ran out before every product)'}; "
               f"attention path tuned: {result.plan.attention_path or 'rule'}")
    return rows, summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="S,M")
    ap.add_argument("--device", default=None)
    ap.add_argument("--seconds", type=float, default=30.0, help="tuning time per configuration")
    ap.add_argument("--limits", type=limits_arg, default={},
                    help="present other device limits: native_float_width=4,"
                         "max_work_group_size=8,local_mem_bytes=16384")
    ap.add_argument("--out", default=None, help="also write the tables to this markdown file")
    args = ap.parse_args(argv)
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(args.device, limits=args.limits or None)
    lines = [f"Tuner vs hand table on {rt.info.name} ({rt.info.platform}, driver "
             f"{rt.device.driver_version})" + (f", limits {args.limits}" if args.limits else "")
             + f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."]
    print(lines[0], flush=True)
    head = ["product", "shape (M x N x K)", "table choice", "table GFLOP/s", "tuned choice",
            "tuned GFLOP/s", "table/tuned time"]
    for name in [c.strip().upper() for c in args.configs.split(",") if c.strip()]:
        cfg, B = model_config(name)
        print(f"\n{name}: d{cfg.d_model} T{cfg.context_length} B{B} V{cfg.vocab_size}", flush=True)
        rows, summary = compare(rt.with_plan(replace(rt.plan)), cfg, B, args.seconds)
        print("  " + summary, flush=True)
        lines += ["", f"### {name}", "", md_table(head, rows), "", summary]
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
