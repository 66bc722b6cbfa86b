"""Attention at long contexts (issue 13 item 2, issue 24 goal 2): engine training step time,
device memory, and one layer's attention against the batched-GEMM path and PyTorch.

    PYTHONPATH=. python benchmarks/bench_attention.py steps --configs S,M,T1024 [--device cpu]
    PYTHONPATH=. python benchmarks/bench_attention.py memory --d-model 384 --contexts 256,512,1024,2048
    PYTHONPATH=. python benchmarks/bench_attention.py layer --device NVIDIA --out layer.md

`steps`: median ms/step and tokens/s of Model.train_step (engine only, no PyTorch) for the
benchmark configurations of benchmarks/common.py plus T1024 (d128 L4 H4 T1024 B8 V512) and
T2048 (d384 L6 H6 T2048 B8 V512).
`layer`: one layer's attention forward + backward in ms, fused against batched GEMM against
PyTorch's scaled_dot_product_attention (benchmarks/attention_layer.py); `tiles`: the fused
kernels' tile candidates at d384 T2048, then `layer` with the fastest.
`split`: each fused kernel (forward, dq, dk/dv) alone against the gemm path's forward and
backward (benchmarks/attention_split.py); `sweep`: each fused kernel's tiles and work-group
shapes timed alone at d384 T2048 B8, then `split` and `layer` with the fastest first.
`steps --attention gemm|fused` forces the attention path.
`memory`: per context length, one training step of a d_model model with 1 and with 2 layers, each
in a fresh process; the device memory a layer adds is the difference. Measured with nvidia-smi
where there is one (the whole process: context, program, buffers), and always the engine's own
count (engine/model/memory.py activation_floats, which allocates exactly those buffers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from opencl_llm_studio.engine.model.attention_gemm import ATTENTION_ENV  # noqa: E402

EXTRA = {"T1024": dict(d_model=128, n_layer=4, n_head=4, context_length=1024, batch=8),
         "T2048": dict(d_model=384, n_layer=6, n_head=6, context_length=2048, batch=8)}


def config(name: str, vocab: int = 512):
    from benchmarks.common import model_config
    from opencl_llm_studio.engine.config import ModelConfig
    if name in EXTRA:
        c = dict(EXTRA[name])
        batch = c.pop("batch")
        return ModelConfig(vocab_size=vocab, **c).validate(), batch
    return model_config(name, vocab)


def time_steps(name: str, device, steps: int) -> dict:
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(device)
    cfg, B = config(name)
    model = Model(rt, cfg, seed=0)
    rng = np.random.default_rng(0)
    tc = TrainConfig()
    times = []
    for i in range(steps + 2):
        x = rng.integers(0, cfg.vocab_size, size=(B, cfg.context_length)).astype(np.int32)
        t0 = time.perf_counter()
        model.train_step(x, np.roll(x, -1, 1), 1e-3, tc)
        if i >= 2:  # the first steps compile and allocate
            times.append(time.perf_counter() - t0)
    ms = 1e3 * float(np.median(times))
    return dict(config=name, device=rt.info.name, ms=ms,
                tok_s=B * cfg.context_length / ms * 1e3, steps=steps,
                attention=model.activations(B, cfg.context_length, True).attention)


def one_step_memory(d_model: int, n_layer: int, T: int, B: int, device) -> dict:
    """Run in a child process: one training step, then the device memory in use."""
    from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
    from opencl_llm_studio.engine.model.memory import activation_floats
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    rt = Runtime(device)
    cfg = ModelConfig(vocab_size=512, d_model=d_model, n_layer=n_layer, n_head=d_model // 64,
                      context_length=T).validate()
    model = Model(rt, cfg)
    x = np.zeros((B, T), np.int32)
    model.train_step(x, x, 1e-3, TrainConfig())
    rt.finish()
    used = None
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout.split()
        used = float(out[0]) * 2**20 if out else None
    path = model.activations(B, T, with_grad=True).attention  # gemm or fused (the rule)
    counted = 4 * activation_floats(cfg, B, T, True, path)[0]
    return dict(used=used, counted=counted, attention=path)


def memory_table(args) -> str:
    rows = ["| T | B | attention | per layer, nvidia-smi (MiB) | per layer, engine count (MiB) |",
            "|---|---|---|---|---|"]
    for T in (int(t) for t in args.contexts.split(",")):
        res = []
        for L in (1, 2):
            cmd = [sys.executable, __file__, "_one", str(args.d_model), str(L), str(T),
                   str(args.batch), args.device or ""]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if out.returncode:
                raise SystemExit(out.stdout + out.stderr)
            res.append(json.loads(out.stdout.strip().splitlines()[-1]))
        smi = ("%.1f" % ((res[1]["used"] - res[0]["used"]) / 2**20)
               if res[0]["used"] is not None else "n/a")
        rows.append(f"| {T} | {args.batch} | {res[1]['attention']} | {smi} | "
                    f"{(res[1]['counted'] - res[0]['counted']) / 2**20:.1f} |")
    return "\n".join(rows)


def split_or_sweep(what: str, device, kernels: str | None = None) -> str:
    """`split` on the layer shapes, or `sweep` (of `kernels`, comma-separated keys of
    attention_flash.CANDIDATES; default all) then `split` and `layer` with the fastest tiles
    tried first (benchmarks/attention_split.py)."""
    from benchmarks import attention_layer, attention_split
    from opencl_llm_studio.engine.model import attention_flash as af
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    # NVIDIA's compiler log with registers and spills, per swept build
    rt = Runtime(device, build_options=("-cl-nv-verbose",) if device == "NVIDIA" else ())
    parts = []
    if what == "sweep":
        only = None if not kernels else {
            k: list(attention_split.configs(k, 64, rt.limits.local_mem_bytes))
            for k in kernels.split(",")}
        text, best = attention_split.sweep(rt, 384, 6, 2048, 8, only)
        parts.append(text)
        for name, t in best.items():
            af.CANDIDATES[name] = (t,) + tuple(c for c in af.CANDIDATES[name] if c != t)
    parts.append(attention_split.split_text(rt, attention_layer.SHAPES))
    if what == "sweep":
        parts.append(attention_layer.layer_table(device))
    return "\n\n".join(parts)


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "_one":
        _, _, d, L, T, B, dev = sys.argv
        print(json.dumps(one_step_memory(int(d), int(L), int(T), int(B), dev or None)))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("steps", "memory", "layer", "tiles", "split", "sweep"))
    p.add_argument("--attention", choices=("auto", "gemm", "fused"), default="auto")
    p.add_argument("--out", default=None, help="also write the table to this file")
    p.add_argument("--kernels", default=None,
                   help="sweep: these kernels only (keys of attention_flash.CANDIDATES)")
    p.add_argument("--configs", default="S,M,T1024")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default=None)
    p.add_argument("--d-model", type=int, default=384)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--contexts", default="256,512,1024,2048")
    args = p.parse_args(argv)
    if args.what in ("split", "sweep"):
        table = split_or_sweep(args.what, args.device, args.kernels)
        if args.out:
            Path(args.out).write_text(table + "\n")
        return
    if args.what in ("layer", "tiles"):
        from benchmarks import attention_layer
        table = (attention_layer.layer_table(args.device) if args.what == "layer" else
                 attention_layer.sweep_then_table(args.device))
        if args.out:
            Path(args.out).write_text(table + "\n")
        return
    if args.attention != "auto":  # "auto" keeps LLM_STUDIO_ATTENTION as the caller set it
        os.environ[ATTENTION_ENV] = args.attention
    if args.what == "memory":
        print(f"Device memory per layer, d_model {args.d_model}, head_dim 64, training step:")
        print(memory_table(args))
        return
    for name in args.configs.split(","):
        r = time_steps(name, args.device, args.steps)
        print(f"{r['config']}: {r['ms']:.1f} ms/step, {r['tok_s']:.0f} tok/s "
              f"({r['device']}, {r['attention']} attention, median of {r['steps']})",
              flush=True)


if __name__ == "__main__":
    main()
