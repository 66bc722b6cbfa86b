"""How far the periodic validation sits from the whole held-out text (issue 36): train a preset
on a text and, at every periodic evaluation, also score the whole held-out text; print both,
the sample's standard error, and the seconds each took.

    PYTHONPATH=. python benchmarks/val_sample.py --text ../shared/data/tinyshakespeare.txt \
        --preset cpu --out /tmp/val_sample.md
    PYTHONPATH=. python benchmarks/val_sample.py --text FILE --preset gpu-discrete --device NVIDIA

The text is split as nanoGPT does (`--val-split tail:0.1`), characters as tokens
(`--tokenizer char`). --eval-tokens overrides the preset's periodic sample (train_config
.eval_tokens); --seed draws another sample of windows (and another run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.data.corpus import FINAL_VAL_TOKENS  # noqa: E402
from opencl_llm_studio.engine.training.opening import create_session  # noqa: E402
from opencl_llm_studio.engine.training.presets import get_preset  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--device", default=None)
    ap.add_argument("--eval-tokens", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--out", default=None, help="also write the table here (Markdown)")
    args = ap.parse_args(argv)
    mc, tc = get_preset(args.preset).configs(ModelConfig(), TrainConfig(tune_steps=0))
    tc = tc.replace(val_split="tail", val_fraction=0.1, sample_interval=0, evaluate_recall=False,
                    seed=args.seed, **({"eval_tokens": args.eval_tokens}
                                       if args.eval_tokens else {}))
    s = create_session(mc, tc, Path(args.text).read_text(encoding="utf-8"), device=args.device,
                       tokenizer_kind="char")
    rows = [f"{args.preset} on {Path(args.text).name}, {s.model.rt.info.label()}, eval_tokens "
            f"{tc.eval_tokens}, seed {args.seed}, held-out tokens "
            f"{s.pretrain.val_stream.size - 1}", "",
            "| step | periodic bpb | ± stderr | whole bpb | periodic - whole | periodic s | "
            "whole s |", "|---|---|---|---|---|---|---|"]
    gaps, within = [], 0
    for m in s.train():
        if m.val_bpb is None or m.step == s.total_steps:
            continue
        t0 = time.perf_counter()
        sample = s.pretrain_val()
        t1 = time.perf_counter()
        whole = s.pretrain_val(FINAL_VAL_TOKENS)
        t2 = time.perf_counter()
        gap = sample.bpb - whole.bpb
        gaps.append(gap)
        within += abs(gap) <= 2 * sample.bpb_stderr
        rows.append(f"| {m.step} | {sample.bpb:.4f} | {sample.bpb_stderr:.4f} | "
                    f"{whole.bpb:.4f} | {gap:+.4f} | {t1 - t0:.2f} | {t2 - t1:.2f} |")
        print(rows[-1], flush=True)
    rows += ["", f"{len(gaps)} evaluations: largest |periodic - whole| "
             f"{max(map(abs, gaps)):.4f}, within 0.01 at {sum(abs(g) <= 0.01 for g in gaps)}, "
             f"within 2 stderr at {within}; the run took {s.elapsed_s():.1f} s"]
    print(rows[-1])
    if args.out:
        Path(args.out).write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
