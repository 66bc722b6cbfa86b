"""The `llm-studio` command: the studio window without a subcommand, the engine headless with one.

Every error a person can cause ends with a message, a hint and exit status 2 — no traceback.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from engine.errors import StudioError

EXIT_USER_ERROR = 2


def _bundled(name: str) -> Path:
    import resources
    return Path(resources.__file__).parent / name


def _progress(m, t0: float, out) -> None:
    done, total = m.step, m.total_steps
    frac = done / max(total, 1)
    elapsed = time.perf_counter() - t0
    eta = elapsed / max(frac, 1e-9) * (1 - frac)
    bar = "#" * int(24 * frac) + "-" * (24 - int(24 * frac))
    val = f" val {m.val_loss:.3f}" if m.val_loss is not None else ""
    out.write(f"\r[{bar}] {done}/{total} {m.stage:8s} loss {m.loss:.3f}{val} "
              f"{m.tokens_per_s:,.0f} tok/s ETA {eta:4.0f}s   ")
    out.flush()


def cmd_devices(args) -> int:
    from engine.device import NO_DEVICE_HINT, list_devices, select_device
    devices = list_devices()
    if not devices:
        print("No OpenCL device found.\n" + NO_DEVICE_HINT)
        return 1
    default = select_device(None).index
    for d in devices:
        mark = "*" if d.index == default else " "
        print(f"{mark} {d.index}: {d.name} | {d.type} | {d.platform} | {d.compute_units} CUs | "
              f"{d.global_mem_bytes / 2**30:.1f} GiB | {d.opencl_version}")
    print("* = default (first GPU, else first CPU); choose with --device INDEX or NAME")
    return 0


def _configs(args):
    from engine.config import ModelConfig, TrainConfig
    mc = ModelConfig(d_model=args.d_model, n_layer=args.n_layer, n_head=args.n_head,
                     context_length=args.context_length, vocab_size=args.vocab_size)
    tc = TrainConfig(pretrain_steps=args.steps, tune_steps=args.tune_steps,
                     batch_size=args.batch_size, learning_rate=args.lr, seed=args.seed,
                     replay_fraction=args.replay)
    return mc.validate(), tc.validate()


def _write_metrics(path: Path, records: list[dict], keep_until: int | None = None):
    """Rewrite metrics.jsonl keeping steps <= keep_until (what the checkpoint covers)."""
    lines = []
    if keep_until is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= keep_until:
                    lines.append(line)
            except json.JSONDecodeError:
                continue
    lines += [json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines))


class _StopFlag:
    """Set by SIGINT / SIGTERM; the training loop stops between two steps, so the saved
    checkpoint is always a whole step (a signal mid-step could leave weights updated but the
    step counter not)."""

    def __init__(self):
        self.requested = False

    def __call__(self, signum, frame):
        self.requested = True


def cmd_train(args) -> int:
    from engine import checkpoint
    from engine.session import TrainingSession
    from engine.textio import read_text
    out = Path(args.out)
    ck = checkpoint.checkpoint_path(out)
    if args.resume:
        session = TrainingSession.load(out, device=args.device)
        if args.steps_given or args.tune_steps_given:
            session.extend(args.steps if args.steps_given else None,
                           args.tune_steps if args.tune_steps_given else None)
        _write_metrics(out / "metrics.jsonl", [], keep_until=session.step)
        print(f"Resuming {out} at step {session.step}/{session.total_steps} on "
              f"{session.rt.info.name}", file=sys.stderr)
    else:
        if ck.exists():
            raise StudioError(f"{out} already holds a training run.",
                              "Add --resume to continue it, or choose another --out folder.")
        mc, tc = _configs(args)
        pre = read_text(args.pretrain or _bundled("pretrain.txt"), "pretraining text")
        tune = None
        if not args.no_tune:
            tune = read_text(args.tune or _bundled("tune.txt"), "tune (dialogue) text")
        session = TrainingSession.create(mc, tc, pre, tune, device=args.device,
                                         tokenizer_kind=args.tokenizer)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text("")
        c = session.model_config
        print(f"Training on {session.rt.info.name}: d_model {c.d_model}, n_layer {c.n_layer}, "
              f"n_head {c.n_head}, context {c.context_length}, vocab {c.vocab_size} "
              f"({c.param_count():,} parameters), {session.pretrain.n_tokens:,} pretraining "
              f"tokens", file=sys.stderr)
    t0 = time.perf_counter()
    # Ctrl-C and a polite kill (SIGTERM) stop after the current step and save; SIGKILL loses
    # at most --checkpoint-every steps.
    stop = _StopFlag()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    metrics_file = (out / "metrics.jsonl").open("a")
    try:
        for m in session.train():
            metrics_file.write(json.dumps(m.to_dict()) + "\n")
            metrics_file.flush()
            if not args.quiet:
                _progress(m, t0, sys.stderr)
            if m.samples and not args.quiet:
                for prompt, text in m.samples:
                    sys.stderr.write(f"\n  [{m.step}] {prompt!r} -> {text!r}")
                sys.stderr.write("\n")
            if args.checkpoint_every and m.step % args.checkpoint_every == 0:
                session.save(out)
            if stop.requested:
                session.save(out)
                print(f"\nStopped at step {session.step}; saved to {out}. Continue with "
                      "--resume.", file=sys.stderr)
                return 130
    finally:
        metrics_file.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    session.save(out)
    print(f"\nDone: {session.step} steps, final loss {session.last_loss:.4f}. Checkpoint: "
          f"{checkpoint.checkpoint_path(out)}", file=sys.stderr)
    return 0


def _load(args):
    """A run folder / checkpoint, or a GGUF this app exported (with the bundled corpora)."""
    from engine.session import TrainingSession
    if str(args.dir).lower().endswith(".gguf"):
        from engine.textio import read_text
        return TrainingSession.from_gguf(args.dir, read_text(_bundled("pretrain.txt")),
                                         device=args.device)
    return TrainingSession.load(args.dir, device=args.device)


def _sampling_kwargs(args):
    return dict(max_new_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, repetition_penalty=args.repeat_penalty, seed=args.seed,
                greedy=args.greedy)


def cmd_sample(args) -> int:
    s = _load(args)
    print(args.prompt, end="", flush=True)
    s.generate(args.prompt, on_token=lambda t: print(t, end="", flush=True),
               **_sampling_kwargs(args))
    print()
    return 0


def cmd_tokenize(args) -> int:
    from engine import checkpoint
    from engine.tokenizer import Tokenizer
    tok = Tokenizer.from_bytes(checkpoint.load(args.dir)["tokenizer"])
    ids = tok.encode(args.text)
    print(" ".join(str(i) for i in ids))
    print(" ".join(repr(tok.id_to_piece(i)) for i in ids))
    print(f"{len(ids)} tokens for {len(args.text)} characters")
    return 0


def cmd_export(args) -> int:
    s = _load(args)
    r = s.export_gguf(args.output, dtype=args.dtype, force=args.force)
    print(f"Wrote {r.path} ({r.size_bytes / 1024:.0f} KiB, {r.dtype})"
          + (f" and {r.modelfile_path}" if r.modelfile_path else ""))
    return 0


def cmd_chat(args) -> int:
    from engine.dialogue import Message
    s = _load(args)
    kw = _sampling_kwargs(args)
    if args.message is not None:
        s.chat([Message("user", args.message)], on_token=lambda t: print(t, end="", flush=True),
               **kw)
        print()
        return 0
    history: list = []
    print("Chat with the model; an empty line or Ctrl-D ends.")
    while True:
        try:
            line = input("User: ").strip()
        except EOFError:
            break
        if not line:
            break
        history.append(Message("user", line))
        print("Assistant: ", end="", flush=True)
        answer = s.chat(history, on_token=lambda t: print(t, end="", flush=True), **kw)
        print()
        history.append(Message("assistant", answer))
    return 0


def cmd_studio(args) -> int:
    from studio.app import run_app
    return run_app(pretrain_path=args.pretrain, tune_path=args.tune, device=args.device)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-studio", description=(
        "Train a small Llama-style language model from scratch on any OpenCL device. "
        "Without a command, opens the studio window."))
    p.add_argument("--pretrain", help="pretraining text file (default: the bundled corpus)")
    p.add_argument("--tune", help="dialogue file, 'User: ... Assistant: ...' or JSONL")
    p.add_argument("--device", help="OpenCL device index or name part (see `llm-studio devices`)")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("devices", help="list the OpenCL devices").set_defaults(func=cmd_devices)

    t = sub.add_parser("train", help="train headless; writes a checkpoint and metrics.jsonl")
    t.add_argument("--pretrain", default=None, help="pretraining text (default: bundled)")
    t.add_argument("--tune", default=None, help="dialogue text (default: bundled)")
    t.add_argument("--no-tune", action="store_true", help="pretraining only")
    t.add_argument("--device", default=None)
    t.add_argument("--d-model", type=int, default=128, help="embedding size (default 128)")
    t.add_argument("--n-layer", type=int, default=4, help="transformer blocks (default 4)")
    t.add_argument("--n-head", type=int, default=4, help="attention heads (default 4)")
    t.add_argument("--context-length", type=int, default=64, help="tokens per window (64)")
    t.add_argument("--vocab-size", type=int, default=512, help="requested vocabulary (512)")
    t.add_argument("--tokenizer", choices=["bpe", "char"], default="bpe")
    t.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (3e-3)")
    t.add_argument("--steps", type=int, default=600, help="pretraining steps (600)")
    t.add_argument("--tune-steps", type=int, default=200, help="tuning steps (200)")
    t.add_argument("--batch-size", type=int, default=16, help="windows per step (16)")
    t.add_argument("--replay", type=float, default=0.25,
                   help="share of pretraining windows in tuning batches (0.25)")
    t.add_argument("--seed", type=int, default=1337)
    t.add_argument("--checkpoint-every", type=int, default=100, help="steps (0 = only at end)")
    t.add_argument("--out", required=True, help="run folder for checkpoint and metrics.jsonl")
    t.add_argument("--resume", action="store_true", help="continue the run in --out")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    def gen_args(q):
        q.add_argument("dir", help="run folder (or checkpoint file)")
        q.add_argument("--device", default=None)
        q.add_argument("--max-tokens", type=int, default=64)
        q.add_argument("--temperature", type=float, default=0.8)
        q.add_argument("--top-k", type=int, default=40)
        q.add_argument("--top-p", type=float, default=0.95)
        q.add_argument("--repeat-penalty", type=float, default=1.0)
        q.add_argument("--seed", type=int, default=None)
        q.add_argument("--greedy", action="store_true", help="always the most likely token")

    s = sub.add_parser("sample", help="continue a prompt")
    gen_args(s)
    s.add_argument("--prompt", required=True)
    s.set_defaults(func=cmd_sample)
    c = sub.add_parser("chat", help="chat in the tune format (interactive, or -m for one answer)")
    gen_args(c)
    c.add_argument("-m", "--message", default=None, help="one question; prints the answer")
    c.set_defaults(func=cmd_chat)
    k = sub.add_parser("tokenize", help="show how a text is cut into tokens")
    k.add_argument("dir")
    k.add_argument("text")
    k.set_defaults(func=cmd_tokenize)
    e = sub.add_parser("export", help="write a GGUF (and an Ollama Modelfile)")
    e.add_argument("dir")
    e.add_argument("output", help="the .gguf file to write")
    e.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f32")
    e.add_argument("--force", action="store_true", help="overwrite an existing file")
    e.add_argument("--device", default=None)
    e.set_defaults(func=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "train":
        args.steps_given = "--steps" in argv
        args.tune_steps_given = "--tune-steps" in argv
    try:
        return (args.func if args.command else cmd_studio)(args)
    except StudioError as e:
        print(f"\nerror: {e}", file=sys.stderr)
        if e.hint:
            print(e.hint, file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
