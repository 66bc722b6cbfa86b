"""Shared pieces of the benchmarks: configurations, batches, peak FLOP/s, statistics, tables."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.data.textio import bundled_corpus
from opencl_llm_studio.engine.model.params import param_count


# Issue 6: S = d128 L4 H4 T64 B12; M = d256 L4 H8 T128 B32; L = d384 L6 H6 T256 B64.
CONFIGS = {
    "S": dict(d_model=128, n_layer=4, n_head=4, context_length=64, batch=12),
    "M": dict(d_model=256, n_layer=4, n_head=8, context_length=128, batch=32),
    "L": dict(d_model=384, n_layer=6, n_head=6, context_length=256, batch=64),
    # issue 13's new-user run on an AVX2 CPU (d256 L6 T256 V2048)
    "L6T256": dict(d_model=256, n_layer=6, n_head=4, context_length=256, batch=8, vocab=2048),
    # issue 13's XL (its own vocabulary: the output projection weighs as much as a block)
    "XL": dict(d_model=768, n_layer=12, n_head=12, context_length=512, batch=16, vocab=4096),
    # issue 24 goal 5's open-model workload (SmolLM2-135M's shape, benchmarks/bench_open.py)
    "OPEN135": dict(d_model=576, n_layer=30, n_head=9, n_kv_head=3, context_length=256,
                    ffn_dim=1536, batch=16, vocab=49152),
}
DESIGN_CPU_PEAK = 146e9  # fp32 FLOP/s of the 2 test cores, measured (docs/DESIGN.md)


def model_config(name: str, vocab_size: int = 512) -> tuple[ModelConfig, int]:
    c = dict(CONFIGS[name])
    batch = c.pop("batch")
    vocab_size = c.pop("vocab", vocab_size)
    return ModelConfig(vocab_size=vocab_size, **c).validate(), batch


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token (issue 6, PaLM appendix B): 6N + 12 * n_layer * d_model * T,
    with N = every parameter (the tied embedding counted once)."""
    return 6.0 * param_count(cfg) + 12.0 * cfg.n_layer * cfg.d_model * cfg.context_length


class Batches:
    """A fixed pool of (inputs, targets) int32 (B, T) batches, served in order, cycling: windows of
    resources/pretrain.txt under a BPE tokenizer of `vocab_size` ("text"), or uniform random ids
    ("random"). Both sides of the benchmark see the same sequence."""

    def __init__(self, kind: str, vocab_size: int, B: int, T: int, seed: int, pool: int = 32):
        rng = np.random.default_rng(seed)
        if kind == "text":
            from opencl_llm_studio.engine.data.corpus import PretrainData
            from opencl_llm_studio.engine.data.tokenizer import Tokenizer
            text = bundled_corpus("pretrain").read_text(encoding="utf-8")
            tok = Tokenizer.train([text], vocab_size)
            data = PretrainData(tok, text, T, val_fraction=0.0, seed=seed)
            self.batches = [data.train_batch(rng, B) for _ in range(pool)]
        elif kind == "random":
            ids = rng.integers(0, vocab_size, size=(pool, B, T + 1), dtype=np.int32)
            self.batches = [(a[:, :-1].copy(), a[:, 1:].copy()) for a in ids]
        else:
            raise ValueError(f"unknown data kind {kind!r}")
        self.i = 0

    def reset(self):
        self.i = 0

    def next(self):
        b = self.batches[self.i % len(self.batches)]
        self.i += 1
        return b


def numpy_sgemm_flops(n: int = 2048, reps: int = 5) -> float:
    """Best fp32 FLOP/s of numpy's matmul (OpenBLAS) on n x n x n."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    a @ b
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t))
    return best


def engine_gemm_flops(rt, n: int = 2048, reps: int = 5) -> float:
    """Best fp32 FLOP/s of the engine's own matmul_nn on n x n x n (on a CPU with 16-float
    SIMD it beats numpy's OpenBLAS, whose DYNAMIC_ARCH build runs 8-float kernels here)."""
    from opencl_llm_studio.engine.opencl import ops
    rng = np.random.default_rng(0)
    a, b = (rt.to_device(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(2))
    c = rt.empty(n * n)
    ops.matmul_nn(rt, c, a, b, n, n, n)
    rt.finish()
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        ops.matmul_nn(rt, c, a, b, n, n, n)
        rt.finish()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t))
    return best


def torch_mm_flops(device: str, n: int = 2048, reps: int = 5) -> float:
    """Best fp32 FLOP/s of torch.mm (tf32 off) on n x n x n."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b
    sync()
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        sync()
        best = max(best, 10 * 2.0 * n ** 3 / (time.perf_counter() - t))
    return best


def timed_train_steps(model, cfg: ModelConfig, batch: int, context: int, warmup: int,
                      steps: int):
    """Train `model` warmup + steps steps on one batch of random ids (B x T, seed 0) at lr 1e-4:
    (inputs, targets, the AdamW settings, the steps' wall seconds after the warm-up, the last
    loss)."""
    import time
    import numpy as np
    from opencl_llm_studio.engine.config import TrainConfig
    rng = np.random.default_rng(0)
    x = rng.integers(0, cfg.vocab_size, (batch, context)).astype(np.int32)
    y = rng.integers(0, cfg.vocab_size, (batch, context)).astype(np.int32)
    opt = TrainConfig(learning_rate=1e-4).optim()
    times, loss = [], None
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss, _, _ = model.train_step(x, y, 1e-4, opt)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return x, y, opt, times, loss


def quartiles(xs) -> tuple[float, float, float]:
    """(p25, median, p75)."""
    q = np.percentile(np.asarray(xs, np.float64), [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def machine_line() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    return f"{cpu or platform.processor()} ({os.cpu_count()} logical CPUs), Python {platform.python_version()}"


def md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def si(x: float, unit: str = "") -> str:
    for scale, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def cpu_busy(interval: float = 1.0) -> float:
    """Share of all CPUs busy over `interval` seconds (from /proc/stat); 0.0 where unreadable.
    Sampled while this process sleeps, it measures everyone else."""
    def read():
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
        return sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0)  # total, idle + iowait
    try:
        t0, i0 = read()
        time.sleep(interval)
        t1, i1 = read()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_idle(max_busy: float, max_wait_s: float, log=print) -> float:
    """Wait (up to max_wait_s) until other processes use at most max_busy of the CPUs: a shared
    2-core machine is otherwise measured together with its neighbours. Returns the last reading."""
    t0 = time.perf_counter()
    busy = cpu_busy()
    warned = False
    while busy > max_busy and time.perf_counter() - t0 < max_wait_s:
        if not warned:
            log(f"  waiting for an idle machine (others use {100 * busy:.0f}% of the CPUs)")
            warned = True
        time.sleep(4.0)
        busy = cpu_busy()
    return busy
