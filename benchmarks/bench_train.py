"""Training throughput: the engine (OpenCL) against the same model in PyTorch eager (issue 6).

For each configuration both sides start from the engine's initial weights and see the same
batches. First the losses of the first steps are compared (same model, same optimizer: they must
agree to ~1e-4), then timed blocks of engine steps and PyTorch steps alternate in this one process,
so machine drift lands on both. Every step is timed on its own (each side reads its loss back each
step, as a training loop that reports the loss must); the table gives median and interquartile
range of the steady-state ms/step, tokens/s, model FLOP/s (6N + 12*n_layer*d_model*T per token),
% of the measured peak, kernel launches per step, and the warm-up and compile times apart.
One extra profiled engine step gives the time per kernel family.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_train.py --configs S,M --out /tmp/bench.md
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import (DESIGN_CPU_PEAK, Batches, engine_gemm_flops,  # noqa: E402
                               flops_per_token, machine_line, md_table, model_config,
                               numpy_sgemm_flops, quartiles, si, torch_mm_flops, wait_idle)
from benchmarks.profile_step import profile_engine_step  # noqa: E402
from opencl_llm_studio.engine.model.params import param_count
from opencl_llm_studio.engine.training import schedule


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="S,M", help="comma-separated subset of S,M,L,L6T256,XL")
    p.add_argument("--compile", action="store_true",
                   help="PyTorch side through torch.compile (else eager)")
    p.add_argument("--device", default=None, help="OpenCL device: index or part of its name")
    p.add_argument("--torch-device", default="cpu", help="cpu or cuda[:i]")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--steps", type=int, default=30, help="timed steps per side and config")
    p.add_argument("--block", type=int, default=5, help="steps per timed block")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per side after the check")
    p.add_argument("--check-steps", type=int, default=5, help="steps whose losses are compared")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="cap on the timed phase of one configuration, seconds (0: none)")
    p.add_argument("--data", choices=("text", "random"), default="text",
                   help="windows of resources/pretrain.txt (BPE) or uniform random ids")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--no-sdpa", action="store_true",
                   help="PyTorch attention as explicit softmax(QK^T)V instead of SDPA")
    p.add_argument("--idle-busy", type=float, default=0.0,
                   help="before each timed round wait until other processes use at most this "
                        "share of the CPUs (e.g. 0.15; 0: don't wait)")
    p.add_argument("--idle-wait-s", type=float, default=120.0, help="longest wait per round")
    p.add_argument("--no-profile", action="store_true", help="skip the per-kernel profile")
    p.add_argument("--profile-serial", action="store_true",
                   help="profile with every kernel on one queue (each kernel's own time)")
    p.add_argument("--out", default=None, help="also write the markdown report here")
    return p.parse_args(argv)


def torch_mode(args) -> str:
    return "torch.compile" if args.compile else "eager"


def log(*a):
    print(*a, flush=True)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def check_steps(ours, theirs, data, lr_at, tc, n: int) -> tuple[list, dict]:
    """Same model? Losses and grad norms of the first n steps, step by step: (rows
    (step, loss ours, torch, rel, norm ours, torch, rel), first-step seconds per side)."""
    check, first = [], {}
    for s in range(n):
        x, y = data.next()
        lr = lr_at(s)
        t0 = time.perf_counter()
        lo, go, _ = ours.train_step(x, y, lr, tc)
        t1 = time.perf_counter()
        lt, gt, _ = theirs.train_step(x, y, lr, tc)
        t2 = time.perf_counter()
        if s == 0:
            first = {"ours": t1 - t0, "torch": t2 - t1}
        check.append((s + 1, lo, lt, rel(lo, lt), go, gt, rel(go, gt)))
        log(f"  check step {s + 1}: loss ours {lo:.6f} torch {lt:.6f} (rel {rel(lo, lt):.1e})  "
            f"grad norm ours {go:.5f} torch {gt:.5f} (rel {rel(go, gt):.1e})")
    return check, first


def timed_block(rt, trainer, side: str, data, lr_at, tc, step: int, n: int, times, launches):
    """n timed training steps of one side from global `step`; seconds into times[side], and
    for ours the kernel launches per step into launches."""
    for k in range(n):
        x, y = data.next()
        n0 = rt.launches
        t0 = time.perf_counter()
        trainer.train_step(x, y, lr_at(step + k), tc)
        times[side].append(time.perf_counter() - t0)
        if side == "ours":
            launches.append(rt.launches - n0)


def timed_rounds(rt, trainers: dict, data, lr_at, tc, args, step: int):
    """Alternating timed blocks, the order flipping every round, both sides of a round on the
    same batches; stops early on args.budget_s. Returns (times per side, launches per step of
    ours, load averages seen waiting for idle, the next step)."""
    times, launches, busy = {"ours": [], "torch": []}, [], []
    rounds = max(1, math.ceil(args.steps / args.block))
    t_phase = time.perf_counter()
    for r in range(rounds):
        if args.idle_busy > 0:
            busy.append(wait_idle(args.idle_busy, args.idle_wait_s, log))
        start = data.i
        for side in (("ours", "torch") if r % 2 == 0 else ("torch", "ours")):
            data.i = start
            timed_block(rt, trainers[side], side, data, lr_at, tc, step, args.block, times,
                        launches)
        step += args.block
        spent = time.perf_counter() - t_phase
        if args.budget_s and 2 <= r + 1 < rounds and spent * (r + 2) / (r + 1) > args.budget_s:
            log(f"  budget: stopping after {r + 1} of {rounds} rounds ({spent:.0f} s)")
            break
    return times, launches, busy, step


def side_stats(times: list[float], tokens: int, fpt: float, peak: float) -> dict:
    """Quartiles (ms), tokens/s, model FLOP/s and % of peak of one side's step times."""
    p25, med, p75 = quartiles(times)
    tok_s = tokens / med
    return dict(n=len(times), p25=p25 * 1e3, med=med * 1e3, p75=p75 * 1e3, tok_s=tok_s,
                flops=tok_s * fpt, pct=100 * tok_s * fpt / peak)


def log_result(res: dict) -> None:
    o, t = res["side"]["ours"], res["side"]["torch"]
    log(f"  ours  ({res['attention']} attention) {o['med']:.1f} ms/step "
        f"(IQR {o['p25']:.1f}-{o['p75']:.1f}), "
        f"{o['tok_s']:,.0f} tok/s, {si(o['flops'], 'FLOP/s')}, {o['pct']:.1f}% of peak, "
        f"{res['launches']} launches/step")
    log(f"  torch {t['med']:.1f} ms/step (IQR {t['p25']:.1f}-{t['p75']:.1f}), "
        f"{t['tok_s']:,.0f} tok/s, {si(t['flops'], 'FLOP/s')}, {t['pct']:.1f}% of peak")
    log(f"  ours/torch tokens/s: {o['tok_s'] / t['tok_s']:.2f}x")


def build_pair(rt, cfg, tc, args):
    """The engine's model and the PyTorch one with the same weights; their set-up seconds."""
    from opencl_llm_studio.engine.model.transformer import Model
    from benchmarks.torch_model import TorchTrainer
    t0 = time.perf_counter()
    ours = Model(rt, cfg, seed=args.seed)
    rt.finish()
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = TorchTrainer(cfg, ours.weights(), tc, device=args.torch_device,
                          sdpa=not args.no_sdpa, compile=args.compile)
    theirs.synchronize()
    return ours, theirs, {"ours": t_ours, "torch": time.perf_counter() - t0}


def run_config(name, args, rt, tc_base, peak):
    import torch

    cfg, B = model_config(name, args.vocab)
    T = cfg.context_length
    tc = tc_base.replace(batch_size=B)
    total = args.check_steps + args.warmup + args.steps + 10
    lr_at = lambda s: schedule.lr_at(tc, s, 0, total, tc.learning_rate)  # noqa: E731
    data = Batches(args.data, args.vocab, B, T, args.seed)
    if args.idle_busy > 0:
        wait_idle(args.idle_busy, args.idle_wait_s, log)
    load0 = os.getloadavg()[0]
    log(f"\n== {name}: d_model {cfg.d_model}, n_layer {cfg.n_layer}, n_head {cfg.n_head}, "
        f"T {T}, B {B}, vocab {cfg.vocab_size}, params {param_count(cfg):,}")
    ours, theirs, init = build_pair(rt, cfg, tc, args)
    check, first = check_steps(ours, theirs, data, lr_at, tc, args.check_steps)
    step = args.check_steps
    for _ in range(args.warmup):
        x, y = data.next()
        ours.train_step(x, y, lr_at(step), tc)
        theirs.train_step(x, y, lr_at(step), tc)
        step += 1
    times, launches, busy, step = timed_rounds(rt, {"ours": ours, "torch": theirs}, data,
                                               lr_at, tc, args, step)
    prof = None
    if not args.no_profile:
        x, y = data.next()
        prof = profile_engine_step(rt, ours, x, y, lr_at(step), tc, args.profile_serial)
    fpt = flops_per_token(cfg)
    res = {"name": name, "cfg": cfg, "B": B, "T": T, "check": check,
           "max_loss_rel": max((c[3] for c in check), default=float("nan")),
           "max_norm_rel": max((c[6] for c in check), default=float("nan")),
           "first": first, "init": init,
           "launches": int(np.median(launches)) if launches else 0, "prof": prof,
           "side": {side: side_stats(ts, B * T, fpt, peak) for side, ts in times.items()},
           "load": (load0, os.getloadavg()[0]),
           "attention": ours.activations(B, T, with_grad=True).attention,  # gemm or fused
           "busy": max(busy) if busy else None}
    log_result(res)
    del ours, theirs
    if args.torch_device.startswith("cuda"):
        torch.cuda.empty_cache()
    res["torch_mode"] = torch_mode(args)
    return res


def report(results, header_lines, peak_note) -> str:
    rows = []
    for r in results:
        c = r["cfg"]
        label = f"{r['name']} (d{c.d_model} L{c.n_layer} H{c.n_head} T{r['T']} B{r['B']})"
        o, t = r["side"]["ours"], r["side"]["torch"]
        for side, s, launches in ((f"ours (OpenCL, {r['attention']} attention)", o,
                                   r["launches"]),
                                  (f"PyTorch {r['torch_mode']}", t, "-")):
            rows.append([label, side, f"{s['med']:.1f}", f"{s['p25']:.1f}-{s['p75']:.1f}",
                         f"{s['tok_s']:,.0f}", si(s["flops"], "FLOP/s"), f"{s['pct']:.1f}%",
                         launches, s["n"]])
        rows.append([label, "**ours / torch**", "", "", f"**{o['tok_s'] / t['tok_s']:.2f}x**",
                     "", "", "", ""])
    out = header_lines + ["", md_table(
        ["config", "implementation", "ms/step (median)", "IQR ms", "tokens/s", "model FLOP/s",
         "% of peak", "launches/step", "timed steps"], rows), "", peak_note, ""]
    out += ["Warm-up (not in the table): model set-up, first step (includes PoCL's per-kernel "
            "compile / cuBLAS and allocator warm-up):", ""]
    out.append(md_table(["config", "ours init s", "ours 1st step s", "torch init s",
                         "torch 1st step s"],
                        [[r["name"], f"{r['init']['ours']:.2f}", f"{r['first']['ours']:.2f}",
                          f"{r['init']['torch']:.2f}", f"{r['first']['torch']:.2f}"]
                         for r in results]))
    out += ["", "Machine load (1-minute load average at the start / end of each configuration; "
            "above the core count means other processes shared the cores): " + ", ".join(
                f"{r['name']} {r['load'][0]:.1f} / {r['load'][1]:.1f}" for r in results) + "."]
    if any(r.get("busy") is not None for r in results):
        out += ["", "CPU share used by other processes just before each timed round (worst "
                "round): " + ", ".join(f"{r['name']} {100 * r['busy']:.0f}%" for r in results
                                       if r.get("busy") is not None) + "."]
    out += ["", "Same model check (first steps, identical weights and batches):", ""]
    out.append(md_table(["config", "step", "loss ours", "loss torch", "rel diff",
                         "grad norm ours", "grad norm torch", "rel diff"],
                        [[r["name"], s, f"{lo:.6f}", f"{lt:.6f}", f"{dl:.1e}", f"{go:.5f}",
                          f"{gt:.5f}", f"{dg:.1e}"]
                         for r in results for (s, lo, lt, dl, go, gt, dg) in r["check"]]))
    out.append("")
    out.append("Max relative difference of the losses: " + ", ".join(
        f"{r['name']} {r['max_loss_rel']:.1e} ({'OK' if r['max_loss_rel'] < 1e-4 else 'MISMATCH'})"
        for r in results) + ".")
    for r in results:
        if r["prof"]:
            out += ["", f"Engine time by kernel, one profiled step of {r['name']}:", "",
                    r["prof"]]
    return "\n".join(out) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.opencl.runtime import Runtime

    if args.torch_device == "cpu":
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False   # fp32 on both sides
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.perf_counter()
    rt = Runtime(args.device)  # select_device: never a simulator by default
    t_build = time.perf_counter() - t0
    log(f"OpenCL device: {rt.info.label()} {rt.info.opencl_version}; program build {t_build:.2f} s")
    if args.torch_device.startswith("cuda"):
        tdev = torch.cuda.get_device_name(torch.device(args.torch_device))
    else:
        tdev = f"CPU, {torch.get_num_threads()} threads"
    log(f"PyTorch {torch.__version__} on {tdev}")

    if rt.is_cpu:
        if args.idle_busy > 0:
            wait_idle(args.idle_busy, args.idle_wait_s, log)
        sgemm = numpy_sgemm_flops()
        tmm = torch_mm_flops("cpu")
        ours = engine_gemm_flops(rt)
        peak = max(DESIGN_CPU_PEAK, sgemm, tmm, ours)
        peak_note = (f"% of peak: against {si(peak, 'FLOP/s')} fp32, the fastest sgemm measured now "
                     f"on 2048^3 (numpy {si(sgemm, 'FLOP/s')}, torch.mm {si(tmm, 'FLOP/s')}, the "
                     f"engine's matmul_nn {si(ours, 'FLOP/s')}; docs/DESIGN.md's measured peak of the 2 "
                     f"cores: 146 GFLOP/s).")
    else:
        tmm = torch_mm_flops(args.torch_device, n=8192) if args.torch_device.startswith("cuda") \
            else 0.0
        peak = tmm or 1.0
        peak_note = (f"% of peak: against torch.mm fp32 (tf32 off) on 8192^3 measured now on the "
                     f"same GPU: {si(tmm, 'FLOP/s')}.")
    log(peak_note)

    header = [f"Date: {datetime.date.today().isoformat()}. Machine: {machine_line()}.",
              f"OpenCL device: {rt.info.name} ({rt.info.type}, {rt.info.platform}, "
              f"{rt.info.opencl_version}); program build {t_build:.2f} s.",
              f"PyTorch {torch.__version__} {torch_mode(args)} on {tdev}; attention "
              f"{'explicit softmax' if args.no_sdpa else 'scaled_dot_product_attention'}.",
              f"Data: {args.data} (vocab {args.vocab}); AdamW betas (0.9, 0.95), eps 1e-8, "
              f"weight decay 0.1 on matrices, clip 1.0, the engine's WSD lr; fp32. Steps: "
              f"{args.check_steps} checked, {args.warmup} warm-up, up to {args.steps} timed per "
              f"side in alternating blocks of {args.block}.",
              f"Model FLOPs per token: 6N + 12*n_layer*d_model*T with N = all parameters."]
    tc = TrainConfig(seed=args.seed)
    results = []
    for name in [c.strip().upper() for c in args.configs.split(",") if c.strip()]:
        try:
            results.append(run_config(name, args, rt, tc, peak))
        except Exception as e:  # report what finished even when one configuration fails
            import traceback
            traceback.print_exc()
            log(f"{name}: FAILED: {type(e).__name__}: {e}")
            header.append(f"{name}: FAILED: {type(e).__name__}: {e}")
        text = report(results, header, peak_note)
        if args.out:
            Path(args.out).write_text(text)
    text = report(results, header, peak_note)
    log("\n" + text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if all(r["max_loss_rel"] < 1e-4 for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
