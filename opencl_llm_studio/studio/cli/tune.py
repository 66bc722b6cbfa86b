"""`llm-studio tune-kernels`: measure the fastest GEMM launches for a device and a model shape
(engine/model/gemm_tune.py) and cache them, so training on that device and shape uses them."""

from __future__ import annotations

import sys

from opencl_llm_studio.studio.cli.inputs import limited


def register_tune(sub, S) -> None:
    """Add the tune-kernels command to the subparsers `sub` (S: argparse.SUPPRESS)."""
    from opencl_llm_studio.engine.model.gemm_tune import TUNE_SECONDS
    from opencl_llm_studio.engine.training.presets import PRESETS
    t = sub.add_parser("tune-kernels", help="time GEMM configurations on this device for a "
                       "model's own products and cache the fastest (used by training)")
    t.add_argument("--device", default=S, help="OpenCL device index or name part")
    t.add_argument("--preset", choices=list(PRESETS),
                   help="the model and batch of a training preset; explicit options win")
    for name, text in (("d-model", "embedding size"), ("n-head", "attention heads"),
                       ("n-kv-head", "key/value heads (0 = n_head)"),
                       ("context-length", "tokens per window"), ("vocab-size", "vocabulary"),
                       ("batch-size", "windows per step")):
        t.add_argument(f"--{name}", type=limited(name.replace("-", "_")),
                       help=f"{text} (the preset's, else the training default)")
    t.add_argument("--seconds", type=limited("tune_seconds"), default=TUNE_SECONDS,
                   help=f"time to spend measuring ({TUNE_SECONDS:g})")
    t.add_argument("--no-save", action="store_true", help="measure and print; cache nothing")
    t.set_defaults(func=cmd_tune_kernels)


def _shape(args):
    """(ModelConfig, batch size) from --preset and the explicit options."""
    from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
    from opencl_llm_studio.engine.training.presets import get_preset
    mc, tc = get_preset(args.preset).configs() if args.preset else (ModelConfig(), TrainConfig())
    fields = {f: getattr(args, f) for f in ("d_model", "n_head", "n_kv_head", "context_length",
                                            "vocab_size") if getattr(args, f) is not None}
    return mc.replace(**fields).validate(), args.batch_size or tc.batch_size


def _ms(seconds) -> str:
    return "fails" if seconds is None else f"{seconds * 1e3:.2f} ms"


def cmd_tune_kernels(args) -> int:
    from opencl_llm_studio.engine.model import gemm_tune
    from opencl_llm_studio.engine.progress import Monitor
    from opencl_llm_studio.engine.opencl.runtime import Runtime
    cfg, B = _shape(args)
    rt = Runtime(args.device)
    print(f"Tuning the products of d_model {cfg.d_model}, {cfg.n_head} heads, context "
          f"{cfg.context_length}, vocabulary {cfg.vocab_size}, batch {B} on {rt.info.name} "
          f"for at most {args.seconds:g} s:", flush=True)

    def report(row):
        label, (form, M, N, K), first, t0, best, t1 = row
        gain = f" ({t0 / t1:.2f}x)" if t0 and t1 and best != first else ""
        print(f"  {label:<12} {form} {M}x{N}x{K}: table {first.label()} {_ms(t0)}; "
              f"tuned {best.label()} {_ms(t1)}{gain}", flush=True)

    monitor = Monitor()
    try:
        result = gemm_tune.tune(rt, cfg, B, args.seconds, monitor, report)
    except KeyboardInterrupt:
        print("Cancelled; nothing was saved.", file=sys.stderr)
        return 130
    path = result.plan.attention_path or "the rule's"
    gain = gemm_tune.step_speedup(result, cfg, B)
    if gain is not None:
        print(f"A training step's products: {gain:.2f}x the table's speed tuned.")
    print(f"Attention path: {path}. {len(result.rows)} products measured in "
          f"{result.seconds:.1f} s" + ("" if result.complete else
                                       " (time ran out: the rest keep the table's choice)"))
    if not args.no_save:
        where = gemm_tune.save(rt, cfg, B, result)
        print(f"Saved to {where}; training this shape on this device uses it.")
    return 0
