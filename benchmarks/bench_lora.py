"""A LoRA tuning step on a quantized base at real open-model shapes (issue 34): peak resident
memory and tokens/s, against a full fine-tuning step of the same model (float32 weights,
gradients and AdamW moments) where it fits.

Shapes (random weights: memory and speed do not depend on them): SmolLM2-135M, SmolLM2-360M and
TinyLlama-1.1B (d_model, blocks, heads / key-value heads, SwiGLU, vocabulary as their configs).
The base is written once as a GGUF of --qtype (gguf-py quantizes Q4_0 / Q4_1 / Q8_0; the K types
it cannot make), then each measured side runs in its own process, which reads the base the way
a LoRA run does (engine.files.gguf_base.open_quant_base: the file's blocks, never float32) and
takes WARMUP + STEPS steps of batch B x T random ids, LoRA rank 8 on all 7 linear weights.
Peak memory: the process's peak resident set (a CPU device's buffers are host memory).

    PYTHONPATH=. python benchmarks/bench_lora.py --model 135m --side lora --batch 8 --context 256
    PYTHONPATH=. python benchmarks/bench_lora.py --model all --side both
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import timed_train_steps  # noqa: E402
from opencl_llm_studio.engine.config import LoraConfig, ModelConfig  # noqa: E402

SHAPES = {
    "135m": ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                        context_length=1024, ffn_dim=1536, rope_base=100000.0),
    "360m": ModelConfig(vocab_size=49152, d_model=960, n_layer=32, n_head=15, n_kv_head=5,
                        context_length=1024, ffn_dim=2560, rope_base=100000.0),
    "1.1b": ModelConfig(vocab_size=32000, d_model=2048, n_layer=22, n_head=32, n_kv_head=4,
                        context_length=1024, ffn_dim=5632, tie_embeddings=False),
}


def write_base(cfg: ModelConfig, path: Path, qtype_name: str) -> Path:
    """A GGUF holding random weights of cfg (matrices in qtype, norms F32), tensors only."""
    import gguf
    from opencl_llm_studio.engine.model.params import ParamTable
    qtype = gguf.GGMLQuantizationType[qtype_name]
    w = gguf.GGUFWriter(str(path), "llama")
    rng = np.random.default_rng(0)
    for name, shape in ParamTable(cfg).shapes().items():
        if len(shape) == 1:
            w.add_tensor(name, np.ones(shape, np.float32))
            continue
        v = rng.normal(0, 0.02, shape).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(v, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def run_side(args) -> dict:
    from opencl_llm_studio.engine.files.gguf_base import base_reference, open_quant_base
    from opencl_llm_studio.engine.model.lora import LoraModel
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    cfg = SHAPES[args.model].replace(context_length=args.context)
    rt = Runtime(args.device)
    if args.decode_panels:
        from opencl_llm_studio.engine.model import quant
        quant.MATVEC_MAX_ROWS = 0
    t0 = time.perf_counter()
    if args.side == "lora":
        base = open_quant_base(rt, cfg, base_reference(args.base))
        model = LoraModel(rt, cfg, base, LoraConfig(rank=args.rank), seed=0)
    else:
        model = Model(rt, cfg, seed=0)
    load_s = time.perf_counter() - t0
    times = timed_train_steps(model, cfg, args.batch, args.context, args.warmup, args.steps)[3]
    s = float(np.median(times))
    decode = decode_tokens_per_s(model, args.decode) if args.decode else None
    return {"model": args.model, "side": args.side, "device": rt.info.name, "batch": args.batch,
            "decode_tokens_per_s": decode,
            "context": args.context, "rank": args.rank, "load_s": round(load_s, 2),
            "s_per_step": round(s, 3), "tokens_per_s": round(args.batch * args.context / s, 1),
            "trainable": int(model.table.n_params),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def decode_tokens_per_s(model, n: int) -> float:
    """Greedy KV decoding of n tokens (at most the window less the prompt and one) after an
    8-token prompt (engine.generation.decode): its tokens per second, the prefill and a first,
    untimed token (its kernels' first build) not counted."""
    from opencl_llm_studio.engine.generation.decode import KVDecoder
    dec = KVDecoder(model)
    n = min(n, model.cfg.context_length - 9)   # the window holds prompt and tokens
    logits = dec.reset(list(range(1, 9)))
    logits = dec.step(int(np.argmax(logits)))
    t = time.perf_counter()
    for _ in range(n):
        logits = dec.step(int(np.argmax(logits)))
    return round(n / (time.perf_counter() - t), 2)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=[*SHAPES, "all"], default="135m")
    p.add_argument("--side", choices=("lora", "full", "both"), default="lora")
    p.add_argument("--qtype", default="Q4_0", help="the base's type (Q4_0, Q4_1, Q8_0)")
    p.add_argument("--base", help="(internal) the base GGUF of --side lora")
    p.add_argument("--device", default=None)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--decode", type=int, default=32, help="tokens of KV decoding to time (0: none)")
    p.add_argument("--decode-panels", action="store_true",
                   help="decode the quantized base by dequantized panels, not in place (the "
                   "path before kernels/quant_matvec.cl; to compare)")
    p.add_argument("--full-up-to", default="135m",
                   help="--side both: run the full fine-tuning side for these shapes and smaller")
    args = p.parse_args(argv)
    if args.base or (args.side != "both" and args.model != "all" and args.side == "full"):
        print(json.dumps(run_side(args)), flush=True)
        return 0
    models = list(SHAPES) if args.model == "all" else [args.model]
    sides = ("lora", "full") if args.side == "both" else (args.side,)
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            base = write_base(SHAPES[name], Path(tmp) / f"{name}.gguf", args.qtype)
            for side in sides:
                if side == "full" and list(SHAPES).index(name) > list(SHAPES).index(
                        args.full_up_to):
                    continue
                cmd = [sys.executable, __file__, "--model", name, "--side", side,
                       "--batch", str(args.batch), "--context", str(args.context),
                       "--rank", str(args.rank), "--steps", str(args.steps),
                       "--warmup", str(args.warmup), "--base", str(base),
                       "--decode", str(args.decode)]
                cmd += ["--decode-panels"] if args.decode_panels else []
                cmd += ["--device", args.device] if args.device else []
                out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                line = json.loads(out.stdout.strip().splitlines()[-1])
                line["qtype"] = args.qtype
                print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
