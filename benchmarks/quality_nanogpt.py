"""Quality per minute (issue 12): nanoGPT's character-level Shakespeare recipe in PyTorch against
this engine, on the same text, split, machine and thread count, in one process (issue 20's
comparison with a Llama-style PyTorch script is benchmarks/quality.py).

Both sides train on the first 90% of the text by position and are scored on the same fixed
windows of the last 10% (nanoGPT's split and estimate_loss: eval_iters batches of batch_size x
block_size; the windows are drawn once, so every side sees the same ones, at the recipe's
block_size). Loss is nats per character (one token per character on both sides). Reported: the
training time (evaluation excluded, compilation included) and wall time (evaluation included) at
which each side first evaluates at or below the target, the best validation loss, and the loss
each side has at the others' time to target.

    # CPU recipe, 2 threads each (target 1.88)
    PYTHONPATH=. python benchmarks/quality_nanogpt.py --text input.txt --recipe cpu --threads 2 --out /tmp/q.md
    # GPU recipe on an NVIDIA GPU (target 1.47): eager, torch.compile, the engine through OpenCL
    PYTHONPATH=. python benchmarks/quality_nanogpt.py --text input.txt --recipe gpu --torch-device cuda \
        --sides eager,compile,engine --device NVIDIA --engine-preset gpu-discrete --out /tmp/q.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.common import machine_line, md_table  # noqa: E402
from benchmarks.quality_engine import engine_train  # noqa: E402

TARGETS = {"cpu": 1.88, "gpu": 1.47}


class CharData:
    """nanoGPT's data/shakespeare_char/prepare.py: vocabulary = the sorted characters of the text,
    train = the first 90% of the ids by position, val = the rest."""

    def __init__(self, text: str):
        chars = sorted(set(text))
        self.chars, self.vocab_size = chars, len(chars)
        lut = {ch: i for i, ch in enumerate(chars)}
        ids = np.fromiter((lut[ch] for ch in text), dtype=np.int64, count=len(text))
        n = int(len(ids) * 0.9)
        self.train, self.val = ids[:n], ids[n:]

    @staticmethod
    def windows(ids: np.ndarray, starts: np.ndarray, T: int):
        """(x, y) int64 (len(starts), T): ids[s:s+T] and ids[s+1:s+1+T]."""
        idx = starts[:, None] + np.arange(T)[None, :]
        return ids[idx], ids[idx + 1]

    def train_batch(self, B: int, T: int, gen):
        """nanoGPT's get_batch('train') with a torch.Generator: torch tensors (B, T)."""
        import torch
        starts = torch.randint(len(self.train) - T, (B,), generator=gen).numpy()
        x, y = self.windows(self.train, starts, T)
        return torch.from_numpy(x), torch.from_numpy(y)


class Evaluator:
    """estimate_loss()'s val half on fixed windows: eval_iters batches (B, T) drawn once (seeded)
    from the validation ids; calling it with loss_fn(x, y) -> float returns their mean."""

    def __init__(self, data: CharData, B: int, T: int, eval_iters: int, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.batches = [data.windows(data.val, rng.integers(0, len(data.val) - T, B), T)
                        for _ in range(eval_iters)]
        self.seconds = 0.0

    def __call__(self, loss_fn, as_torch: bool = True) -> float:
        t0 = time.perf_counter()
        if as_torch:
            import torch
            losses = [loss_fn(torch.from_numpy(x), torch.from_numpy(y)) for x, y in self.batches]
        else:
            losses = [loss_fn(x, y) for x, y in self.batches]
        self.seconds += time.perf_counter() - t0
        return float(np.mean(losses))


def run_side(name: str, args, data: CharData, evaluator: Evaluator, log) -> list[tuple]:
    """[(iter, train_s, wall_s, val_loss)] of one side, printed as it goes."""
    from benchmarks import nanogpt_torch as nano
    target = args.target
    stop = target if args.stop_at_target else None
    if name == "engine":
        gen = engine_train(args.engine_preset, data, evaluator, args.device, args.seed,
                           stop_below=stop, steps=args.engine_steps, overrides=args.engine_set)
    else:
        recipe = nano.RECIPES[args.recipe]
        gen = nano.train(recipe, data, evaluator, device=args.torch_device,
                         compile_model=name == "compile", dtype=args.dtype, seed=args.seed,
                         max_iters=args.max_iters, stop_below=stop)
    rows, t0 = [], time.perf_counter()
    for it, train_s, val in gen:
        rows.append((it, train_s, time.perf_counter() - t0, val))
        log(f"{name:8s} iter {it:5d} train {train_s:7.1f}s wall {rows[-1][2]:7.1f}s "
            f"val {val:.4f}")
    return rows


def first_at(rows, target):
    return next((r for r in rows if r[3] <= target), None)


def loss_at(rows, seconds):
    """The latest validation loss evaluated by `seconds` of training time (None before any)."""
    done = [r[3] for r in rows if r[1] <= seconds]
    return done[-1] if done else None


def ratio_lines(ref_rows, eng_rows, ref: str, target: float) -> list[str]:
    """The engine's training time over the reference's: to the target, and to the reference's
    best validation loss (the recipe's result, where it ends above the target)."""
    out = []
    hit, eng = first_at(ref_rows, target), first_at(eng_rows, target)
    if hit and eng:
        out.append(f"engine / {ref} training time to {target}: {eng[1] / hit[1]:.2f}")
    best = min(ref_rows, key=lambda r: r[3])
    eng = first_at(eng_rows, best[3])
    if eng:
        out.append(f"engine / {ref} training time to {ref}'s best val {best[3]:.4f} (its iter "
                   f"{best[0]}, {best[1]:.1f} s): {eng[1]:.1f} s, ratio {eng[1] / best[1]:.2f}")
    return out


def report(args, results: dict, machine: str) -> str:
    target = args.target
    hits = {name: first_at(rows, target) for name, rows in results.items()}
    lines = [f"## Quality per minute, {args.recipe.upper()} recipe (target val {target}), "
             f"{datetime.date.today()}", "", machine, "",
             f"Threads {args.threads}; evaluation: {args.eval_iters} fixed val batches; engine "
             f"preset {args.engine_preset}"
             f"{' with ' + ', '.join(args.engine_set) if args.engine_set else ''}.", ""]
    head = ["side", "iters", "time to target: train s", "wall s", "best val (iter)",
            "last val"] + [f"val at {n}'s time" for n in results]
    body = []
    for name, rows in results.items():
        hit = hits[name]
        best = min(rows, key=lambda r: r[3])
        row = [name, str(rows[-1][0]), f"{hit[1]:.1f}" if hit else "not reached",
               f"{hit[2]:.1f}" if hit else "-", f"{best[3]:.4f} ({best[0]})", f"{rows[-1][3]:.4f}"]
        for other in results:
            at = loss_at(rows, hits[other][1]) if hits[other] else None
            row.append(f"{at:.4f}" if at is not None else "-")
        body.append(row)
    lines.append(md_table(head, body))
    for ref in (n for n in results if n != "engine" and "engine" in results):
        ratios = ratio_lines(results[ref], results["engine"], ref, target)
        lines += [""] + ratios if ratios else []
    for name, rows in results.items():
        lines += ["", f"{name}: " + ", ".join(f"{r[0]}: {r[3]:.3f} @ {r[1]:.0f}s" for r in rows)]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--text", required=True,
                   help="the tinyshakespeare text (Karpathy's char-rnn input.txt, 1,115,394 chars)")
    p.add_argument("--sides", default="eager,engine",
                   help="comma-separated, run in this order: eager, compile (nanoGPT in PyTorch "
                        "eager / torch.compile), engine")
    p.add_argument("--threads", type=int, default=2,
                   help="CPU threads of each side: torch's, and PoCL's compute units")
    p.add_argument("--torch-device", default="cpu", help="cpu or cuda[:i]")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="nanoGPT's autocast dtype (its GPU default is bfloat16)")
    p.add_argument("--device", default=None, help="the engine's OpenCL device")
    p.add_argument("--engine-preset", default=None, help="engine.training.presets name (default: by recipe)")
    p.add_argument("--engine-steps", type=int, default=None,
                   help="engine steps, the cosine schedule's length (default: the preset's)")
    p.add_argument("--engine-set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a ModelConfig / TrainConfig field of the preset (repeatable)")
    p.add_argument("--eval-iters", type=int, default=None, help="default: the recipe's")
    p.add_argument("--max-iters", type=int, default=None, help="nanoGPT iterations (recipe's)")
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--stop-at-target", action="store_true", help="end each side at the target")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out", default=None, help="also write the markdown report here")
    args = p.parse_args(argv)
    args.target = args.target or TARGETS[args.recipe]
    args.engine_preset = args.engine_preset or {"cpu": "cpu", "gpu": "gpu-discrete"}[args.recipe]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # the engine's PoCL CPU device gets as many threads as torch (read when PoCL starts)
    os.environ.setdefault("POCL_CPU_MAX_CU_COUNT", str(args.threads))
    os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", str(args.threads))
    import torch
    torch.set_num_threads(args.threads)
    from benchmarks.nanogpt_torch import RECIPES
    recipe = RECIPES[args.recipe]
    args.eval_iters = args.eval_iters or recipe.eval_iters
    data = CharData(Path(args.text).read_text(encoding="utf-8"))
    evaluator = Evaluator(data, recipe.batch_size, recipe.block_size, args.eval_iters)
    log = lambda s: print(s, flush=True)  # noqa: E731
    results = {name: run_side(name, args, data, evaluator, log)
               for name in args.sides.split(",")}
    machine = f"{machine_line()}, torch {torch.__version__} on {args.torch_device}"
    text = report(args, results, machine)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
