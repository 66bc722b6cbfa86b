"""A full fine-tuning step of a 135M-class open model (issue 21 item 6): the engine against
transformers + PyTorch doing the same step on the same device, tokens/s and peak memory.

Shape of SmolLM2-135M: d_model 576, 30 blocks, 9 heads with 3 key-value heads, SwiGLU 1536,
vocabulary 49,152, tied embeddings, RoPE base 100000; random weights (speed does not depend on
them). Both sides: fp32, AdamW (decoupled decay on matrices), grad-norm clip 1, one batch of
B x T random ids, STEPS timed steps after WARMUP. Peak memory: the engine's own count of what it
allocates (engine.model.memory.training_bytes) and, on a GPU, torch.cuda.max_memory_allocated for
PyTorch; on a CPU, each side's peak resident set in its own process.

    PYTHONPATH=. python benchmarks/bench_open.py --side engine --batch 8 --context 64
    PYTHONPATH=. python benchmarks/bench_open.py --side torch --batch 8 --context 64 --threads 2
    PYTHONPATH=. python benchmarks/bench_open.py --side engine --device NVIDIA --batch 16 ...
    PYTHONPATH=. python benchmarks/bench_open.py --side both --rounds 3 --idle-busy 0.3

--side both runs the two sides in separate processes, alternating (the order flips every round,
each run waits until other processes use at most --idle-busy of the CPUs: on a shared machine a
neighbour's load lands on both sides), one JSON line per run and a last line with the median
engine / PyTorch ratio of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import timed_train_steps  # noqa: E402
from opencl_llm_studio.engine.config import ModelConfig  # noqa: E402

SMOL = ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                   context_length=2048, ffn_dim=1536, tie_embeddings=True, rope_base=100000.0)


def engine_side(args) -> dict:
    from opencl_llm_studio.engine.model.memory import training_bytes
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(args.device)
    cfg = SMOL.replace(context_length=args.context)
    model = Model(rt, cfg, seed=0)
    x, y, opt, times, loss = timed_train_steps(model, cfg, args.batch, args.context,
                                               args.warmup, args.steps)
    if args.profile:  # one more step, its kernels timed one by one (serial: no overlap)
        from benchmarks.profile_step import profile_engine_step
        Path(args.profile).write_text(
            f"Engine step, {cfg.n_layer} blocks d{cfg.d_model} vocab {cfg.vocab_size}, batch "
            f"{args.batch} x {args.context}, {rt.info.name}:\n\n"
            + profile_engine_step(rt, model, x, y, 1e-4, opt, serial=True) + "\n")
    return {"side": "engine", "device": rt.info.name, "loss": loss,
            "s_per_step": float(np.median(times)),
            "counted_gib": training_bytes(cfg, args.batch, rt.info)[0] / 2**30}


def engine_decode(args) -> dict:
    """--decode N: ms per token of greedy KV-cache decoding (engine.generation.decode.KVDecoder)
    of N tokens after an 8-token prompt, the median of 3 runs, at context --context."""
    from opencl_llm_studio.engine.generation.decode import KVDecoder
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(args.device)
    cfg = SMOL.replace(context_length=args.context)
    model, runs = Model(rt, cfg, seed=0), []
    decoder = KVDecoder(model)
    for _ in range(3):
        logits = decoder.reset(list(range(1, 9)))
        t0 = time.perf_counter()
        for _ in range(args.decode):
            logits = decoder.step(int(np.argmax(logits)))
        runs.append((time.perf_counter() - t0) / args.decode)
    return {"side": "engine", "device": rt.info.name, "ms_per_token": 1e3 * float(np.median(runs))}


def torch_decode(args) -> dict:
    """--decode N on PyTorch's side: transformers' generate (greedy, KV cache) of N new tokens
    after the same 8-token prompt, ms per token, the median of 3 runs (fp32, eval mode)."""
    import torch
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(args.torch_device)
    model = _torch_model(args).eval()
    ids = torch.arange(1, 9).reshape(1, 8).to(dev)
    runs = []
    with torch.no_grad():
        for _ in range(3):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=args.decode, min_new_tokens=args.decode,
                           do_sample=False, use_cache=True)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            runs.append((time.perf_counter() - t0) / args.decode)
    return {"side": "torch", "device": str(dev), "ms_per_token": 1e3 * float(np.median(runs))}


def _torch_model(args):
    """transformers' LlamaForCausalLM of SMOL's shape, fp32, on --torch-device."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    c = SMOL
    cfg = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.ffn_dim,
                      num_hidden_layers=c.n_layer, num_attention_heads=c.n_head,
                      num_key_value_heads=c.n_kv_head, max_position_embeddings=args.context,
                      rope_theta=c.rope_base, tie_word_embeddings=True, rms_norm_eps=c.rms_eps)
    return LlamaForCausalLM(cfg).float().to(torch.device(args.torch_device))


def torch_side(args) -> dict:
    import torch
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(args.torch_device)
    c = SMOL
    model = _torch_model(args).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-4, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, c.vocab_size, (args.batch, args.context), generator=g).to(dev)
    def step() -> float:
        """One full step; its loss."""
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return float(out.loss.detach())

    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    if args.profile:  # one more step under torch.profiler: time per operator, device side
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            step()
        key = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        Path(args.profile).write_text(prof.key_averages().table(sort_by=key, row_limit=40))
    peak = (torch.cuda.max_memory_allocated() / 2**30) if dev.type == "cuda" else None
    return {"side": "torch", "device": str(dev), "loss": loss,
            "s_per_step": float(np.median(times)), "cuda_peak_gib": peak}


def _busy_seconds() -> float:
    """CPU seconds all processes have been busy since boot (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def _children_seconds() -> float:
    """CPU seconds used by this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def alternate(args) -> int:
    """--side both: each round one engine and one PyTorch process (order flipped every round);
    prints their JSON lines (others_busy_during: the share of the CPUs other processes used
    while it ran; above ~0.1 the run shared its cores) and the median ratio of tokens/s
    (engine / PyTorch) over rounds."""
    from benchmarks.common import wait_idle
    base = [f"--{k}={getattr(args, k.replace('-', '_'))}" for k in
            ("batch", "context", "steps", "warmup", "threads", "torch-device")]
    base += [f"--device={args.device}"] if args.device else []
    ratios = []
    for r in range(args.rounds):
        got = {}
        for side in (("engine", "torch") if r % 2 == 0 else ("torch", "engine")):
            busy = wait_idle(args.idle_busy, args.idle_wait_s, log=lambda m: None) \
                if args.idle_busy > 0 else None
            t0, cpu0, self0 = time.perf_counter(), _busy_seconds(), _children_seconds()
            out = subprocess.run([sys.executable, __file__, "--side", side, *base], check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
            wall, others = time.perf_counter() - t0, _busy_seconds() - cpu0
            others -= _children_seconds() - self0
            got[side] = json.loads(out)
            got[side].update(round=r + 1, others_busy_before=busy, load_1min=os.getloadavg()[0],
                             others_busy_during=others / (wall * os.cpu_count()))
            print(json.dumps(got[side]), flush=True)
        ratios.append(got["engine"]["tokens_per_s"] / got["torch"]["tokens_per_s"])
    print(json.dumps({"engine_over_torch": float(np.median(ratios)), "rounds": ratios}))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--side", choices=("engine", "torch", "both"), required=True)
    p.add_argument("--rounds", type=int, default=3, help="--side both: engine/PyTorch pairs")
    p.add_argument("--idle-busy", type=float, default=0.0,
                   help="--side both: wait before each run until others use at most this "
                        "share of the CPUs (0: do not wait)")
    p.add_argument("--idle-wait-s", type=float, default=120.0, help="longest wait per run")
    p.add_argument("--device", default=None, help="OpenCL device (engine side)")
    p.add_argument("--torch-device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--decode", type=int, default=0,
                   help="--side engine|torch: time N tokens of greedy KV-cache decoding instead "
                        "of training steps (ms per token)")
    p.add_argument("--profile", default=None,
                   help="--side engine|torch: after the timed steps, profile one more step and "
                        "write its time per kernel (engine, serial) or operator (PyTorch) here")
    args = p.parse_args(argv)
    if args.side == "both":
        return alternate(args)
    if args.decode:
        r = engine_decode(args) if args.side == "engine" else torch_decode(args)
        r.update(context=args.context, new_tokens=args.decode,
                 peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        print(json.dumps(r))
        return 0
    r = engine_side(args) if args.side == "engine" else torch_side(args)
    r.update(batch=args.batch, context=args.context,
             tokens_per_s=args.batch * args.context / r["s_per_step"],
             peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
