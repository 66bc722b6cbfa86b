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
    val = ""
    if m.val_loss is not None:  # tuning: loss on the tune dialogues (they are the training set)
        val = f" val {m.val_loss:.3f}" if m.stage == "pretrain" else f" dialogues {m.val_loss:.3f}"
    line = (f"[{bar}] {done}/{total} {m.stage:8s} loss {m.loss:.3f}{val} "
            f"{m.tokens_per_s:,.0f} tok/s ETA {eta:4.0f}s")
    if out.isatty():
        out.write("\r" + line + "   ")
    elif done == total or done % max(total // 20, 1) == 0:
        out.write(line + "\n")  # a log file gets a line every 5%, not a redraw per step
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


# Options that define a new run; None means "not given" (defaults in TRAIN_DEFAULTS).
MODEL_OPTIONS = ("pretrain", "tune", "d_model", "n_layer", "n_head", "context_length",
                 "vocab_size", "lr", "batch_size", "seed", "replay")
TRAIN_DEFAULTS = dict(d_model=128, n_layer=4, n_head=4, context_length=64, vocab_size=512,
                      lr=3e-3, steps=600, tune_steps=200, batch_size=16, seed=1337, replay=0.25)


def _opt(args, name):
    value = getattr(args, name)
    return TRAIN_DEFAULTS[name] if value is None else value


def _configs(args):
    from engine.config import ModelConfig, TrainConfig
    o = lambda name: _opt(args, name)  # noqa: E731
    mc = ModelConfig(d_model=o("d_model"), n_layer=o("n_layer"), n_head=o("n_head"),
                     context_length=o("context_length"), vocab_size=o("vocab_size"))
    tc = TrainConfig(pretrain_steps=o("steps"), tune_steps=o("tune_steps"),
                     batch_size=o("batch_size"), learning_rate=o("lr"), seed=o("seed"),
                     replay_fraction=o("replay"))
    return mc.validate(), tc.validate()


def _make_run_folder(out: Path):
    """Create the run folder before any work, so an unwritable place fails at once."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise StudioError(f"Cannot write the run folder {out}: {e.strerror or e}.",
                          "Choose a folder you can write to with --out.") from None


def _write_metrics(path: Path, records: list[dict], keep_until: int | None = None):
    """Rewrite metrics.jsonl keeping steps <= keep_until (what the checkpoint covers)."""
    from engine import fsutil
    lines = []
    if keep_until is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= keep_until:
                    lines.append(line)
            except json.JSONDecodeError:
                continue
    lines += [json.dumps(r) for r in records]
    fsutil.atomic_write_text(path, "".join(line + "\n" for line in lines))  # a kill keeps the old


class _StopFlag:
    """Set by SIGINT / SIGTERM; the training loop stops between two steps, so the saved
    checkpoint is always a whole step (a signal mid-step could leave weights updated but the
    step counter not)."""

    def __init__(self):
        self.requested = False

    def __call__(self, signum, frame):
        self.requested = True


def cmd_train(args) -> int:
    """Train with --out locked (engine.run_lock): a second train into it exits 2 naming the pid."""
    from engine.run_lock import RunLock
    out = Path(args.out)
    if not out.is_dir() and (args.resume or out.exists()):
        return _train(args)  # nothing to lock: _train reports the missing folder or the file
    with RunLock(out):
        return _train(args)


def _train(args) -> int:
    from engine import checkpoint
    from engine.session import TrainingSession
    from engine.textio import read_text
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise StudioError(f"--out {out} is a file, not a folder.",
                          "Give a folder for the run (it is created if missing).")
    ck = checkpoint.checkpoint_path(out)
    if args.resume:
        session = TrainingSession.load(out, device=args.device)
        _note_fallback(session)
        ignored = [f"--{k.replace('_', '-')}" for k in MODEL_OPTIONS
                   if getattr(args, k) is not None]
        if ignored:
            print(f"note: {', '.join(ignored)} ignored: a resumed run keeps its model, data "
                  "and settings", file=sys.stderr)
        if args.steps is not None or args.tune_steps is not None:
            session.extend(args.steps, args.tune_steps)
        _write_metrics(out / "metrics.jsonl", [], keep_until=session.step)
        print(f"Resuming {out} at step {session.step}/{session.total_steps} on "
              f"{session.rt.info.name}", file=sys.stderr)
    else:
        if ck.exists():
            raise StudioError(f"{out} already holds a training run.",
                              "Add --resume to continue it, or choose another --out folder.")
        _make_run_folder(out)
        mc, tc = _configs(args)
        pre = read_text(args.pretrain or _bundled("pretrain.txt"), "pretraining text")
        tune = None
        if not args.no_tune:
            tune = read_text(args.tune or _bundled("tune.txt"), "tune (dialogue) text")
        session = TrainingSession.create(mc, tc, pre, tune, device=args.device,
                                         tokenizer_kind=args.tokenizer)
        (out / "metrics.jsonl").write_text("")
        c = session.model_config
        if c.vocab_size < mc.vocab_size:
            print(f"note: the text supports {c.vocab_size} tokens, not the {mc.vocab_size} "
                  "asked for (no more merges to learn); the model uses "
                  f"{c.vocab_size}.", file=sys.stderr)
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


def _note_fallback(session):
    if session.loaded_from_previous:
        print("note: the newest checkpoint was damaged; continuing from the one before it "
              f"(step {session.step}).", file=sys.stderr)


def _load(args):
    """A run folder / checkpoint, or a GGUF this app exported (with the bundled corpora)."""
    from engine.session import TrainingSession
    if str(args.dir).lower().endswith(".gguf"):
        from engine.textio import read_text
        return TrainingSession.from_gguf(args.dir, read_text(_bundled("pretrain.txt")),
                                         device=args.device)
    s = TrainingSession.load(args.dir, device=args.device)
    _note_fallback(s)
    return s


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
    if str(args.dir).lower().endswith(".gguf"):
        from engine.gguf_export import import_gguf
        tok = import_gguf(args.dir).tokenizer
    else:
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
    if s.tune is None:
        print("note: this model was not tuned on dialogues; answers may just continue text.")
    print("Chat with the model. /reset starts over, /help lists commands; an empty line or "
          "Ctrl-D ends.")
    while True:
        try:
            line = input("User: ").strip()
        except EOFError:
            break
        if not line:
            break
        if line in ("/reset", "/clear"):
            history.clear()
            print("(conversation cleared)")
            continue
        if line in ("/help", "/?"):
            print("/reset  forget the conversation\n/help   this list\nempty line  quit")
            continue
        history.append(Message("user", line))
        kept = s.fit_messages(history, args.max_tokens)
        if len(kept) < len(history):
            print(f"(older turns dropped to fit the {s.model_config.context_length}-token "
                  "context)")
        print("Assistant: ", end="", flush=True)
        answer = s.chat(history, on_token=lambda t: print(t, end="", flush=True), **kw)
        print()
        history.append(Message("assistant", answer))
    return 0


def cmd_studio(args) -> int:
    import os
    if (sys.platform.startswith("linux") and not os.environ.get("DISPLAY")
            and not os.environ.get("WAYLAND_DISPLAY") and not os.environ.get("QT_QPA_PLATFORM")):
        raise StudioError("No display found, so the studio window cannot open.",
                          "Run it on a desktop session, or use the headless commands: "
                          "`llm-studio train --out runs/first` (see `llm-studio --help`).")
    from studio.app import run_app
    return run_app(pretrain_path=args.pretrain, tune_path=args.tune, device=args.device)


def build_parser() -> argparse.ArgumentParser:
    S = argparse.SUPPRESS  # subcommand options fall back to the same top-level option
    p = argparse.ArgumentParser(prog="llm-studio", description=(
        "Train a small Llama-style language model from scratch on any OpenCL device. "
        "Without a command, opens the studio window."))
    p.add_argument("--pretrain", help="pretraining text file (default: the bundled corpus)")
    p.add_argument("--tune", help="dialogue file, 'User: ... Assistant: ...' or JSONL")
    p.add_argument("--device", help="OpenCL device index or name part (see `llm-studio devices`)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("devices", help="list the OpenCL devices").set_defaults(func=cmd_devices)

    d = TRAIN_DEFAULTS
    t = sub.add_parser("train", help="train headless; writes a checkpoint and metrics.jsonl",
                       description="Train a model headless. Step counts are totals per stage; "
                       "with --resume, larger totals continue a run.")
    t.add_argument("--out", required=True, help="run folder for checkpoint and metrics.jsonl")
    t.add_argument("--resume", action="store_true", help="continue the run in --out")
    t.add_argument("--pretrain", default=S, help="pretraining text (default: bundled)")
    t.add_argument("--tune", default=S, help="dialogue text (default: bundled)")
    t.add_argument("--no-tune", action="store_true", help="pretraining only")
    t.add_argument("--device", default=S, help="OpenCL device index or name part")
    t.add_argument("--d-model", type=int, help=f"embedding size ({d['d_model']})")
    t.add_argument("--n-layer", type=int, help=f"transformer blocks ({d['n_layer']})")
    t.add_argument("--n-head", type=int, help=f"attention heads ({d['n_head']})")
    t.add_argument("--context-length", type=int, help=f"tokens per window ({d['context_length']})")
    t.add_argument("--vocab-size", type=int, help=f"requested vocabulary ({d['vocab_size']})")
    t.add_argument("--tokenizer", choices=["bpe", "char"], default="bpe",
                   help="SentencePiece BPE or one token per character (bpe)")
    t.add_argument("--lr", type=float, help=f"peak learning rate ({d['lr']})")
    t.add_argument("--steps", type=int, help=f"pretraining steps, total ({d['steps']})")
    t.add_argument("--tune-steps", type=int, help=f"tuning steps, total ({d['tune_steps']})")
    t.add_argument("--batch-size", type=int, help=f"windows per step ({d['batch_size']})")
    t.add_argument("--replay", type=float,
                   help=f"share of pretraining windows in tuning batches ({d['replay']})")
    t.add_argument("--seed", type=int, help=f"weights, batches and sampling ({d['seed']})")
    t.add_argument("--checkpoint-every", type=int, default=100,
                   help="steps between checkpoints; 0 = only at the end (100)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    def gen_args(q):
        q.add_argument("dir", help="run folder, checkpoint file, or a GGUF this app exported")
        q.add_argument("--device", default=S, help="OpenCL device index or name part")
        q.add_argument("--max-tokens", type=int, default=64, help="tokens to generate (64)")
        q.add_argument("--temperature", type=float, default=0.8,
                       help="randomness; 0 = always the most likely token (0.8)")
        q.add_argument("--top-k", type=int, default=40, help="sample among the k likeliest (40)")
        q.add_argument("--top-p", type=float, default=0.95,
                       help="nucleus sampling: smallest set with this probability (0.95)")
        q.add_argument("--repeat-penalty", type=float, default=1.0,
                       help="divide the logits of tokens already generated (1.0 = off)")
        q.add_argument("--seed", type=int, default=None, help="sampling seed (random)")
        q.add_argument("--greedy", action="store_true", help="always the most likely token")

    s = sub.add_parser("sample", help="continue a prompt")
    gen_args(s)
    s.add_argument("--prompt", default="", help="text to continue (default: from scratch)")
    s.set_defaults(func=cmd_sample)
    c = sub.add_parser("chat", help="chat in the tune format (interactive, or -m for one answer)")
    gen_args(c)
    c.add_argument("-m", "--message", default=None, help="one question; prints the answer")
    c.set_defaults(func=cmd_chat)
    k = sub.add_parser("tokenize", help="show how a text is cut into tokens")
    k.add_argument("dir", help="run folder, checkpoint file, or exported GGUF")
    k.add_argument("text", help="the text to cut")
    k.set_defaults(func=cmd_tokenize)
    e = sub.add_parser("export", help="write a GGUF (and an Ollama Modelfile beside it)")
    e.add_argument("dir", help="run folder or checkpoint file")
    e.add_argument("output", help="the .gguf file to write")
    e.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f32",
                   help="weight type: f32 exact, f16 half size, q8_0 quarter size (f32)")
    e.add_argument("--force", action="store_true", help="overwrite existing files")
    e.add_argument("--device", default=S, help="OpenCL device index or name part")
    e.set_defaults(func=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
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
