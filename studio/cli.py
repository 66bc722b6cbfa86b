"""The `llm-studio` command: the studio window without a subcommand, the engine headless with one.

Every error a person can cause ends with a message, a hint and exit status 2 — no traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from engine.config import (CHECKPOINT_EVERY, DEFAULT_TOKENIZER, MAX_NEW_TOKENS,
                           TOKENIZER_KINDS, ModelConfig, SamplingParams, TrainConfig, run_steps)
from engine.errors import StudioError
from engine.export_types import DEFAULT_DTYPE, DTYPE_NAMES
from engine.model_card import tokenizer_name
from studio.cli_runs import TrainWatch
from studio.cli_runs import register as register_runs
from studio.cli_hf import register as register_hf
from engine.progress import Cancelled, Monitor
from studio.cli_input import (MAX_LAYERS, MAX_SEED, MAX_STEPS, MAX_TOKENS, MAX_VOCAB,
                              MAX_WIDTH, count, number)
from studio.cli_progress import ProgressLine

EXIT_USER_ERROR = 2



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
    print("* = default (first GPU, else first CPU); another one: --device INDEX or NAME")
    return 0


# Options that define a new run; None means "not given" (defaults in TRAIN_DEFAULTS).
MODEL_OPTIONS = ("pretrain", "tune", "d_model", "n_layer", "n_head", "n_kv_head", "context_length",
                 "vocab_size", "lr", "batch_size", "seed", "replay", "val_split", "dropout",
                 "preset")
# option -> (ModelConfig or TrainConfig, field)
_FIELDS = dict(d_model=("model", "d_model"), n_layer=("model", "n_layer"),
               n_head=("model", "n_head"), n_kv_head=("model", "n_kv_head"),
               context_length=("model", "context_length"),
               vocab_size=("model", "vocab_size"), lr=("train", "learning_rate"),
               steps=("train", "pretrain_steps"), tune_steps=("train", "tune_steps"),
               batch_size=("train", "batch_size"), seed=("train", "seed"),
               replay=("train", "replay_fraction"), dropout=("train", "dropout"),
               time_budget=("train", "time_budget_s"))


def _train_defaults() -> dict:
    """option -> default: the engine's ModelConfig and TrainConfig defaults, never a copy."""
    parts = {"model": ModelConfig(), "train": TrainConfig()}
    out = {option: getattr(parts[part], field) for option, (part, field) in _FIELDS.items()}
    out["val_split"] = f"{parts['train'].val_split}:{parts['train'].val_fraction:g}"
    return out


TRAIN_DEFAULTS = _train_defaults()


def _opt(args, name):
    value = getattr(args, name)
    return TRAIN_DEFAULTS[name] if value is None else value


def _configs(args):
    """ModelConfig, TrainConfig: explicit options, else the --preset's values (engine.presets),
    else TRAIN_DEFAULTS. --val-split KIND:SHARE sets val_split and val_fraction."""
    from engine.config import parse_val_split
    from engine.presets import get_preset
    preset = get_preset(args.preset) if args.preset else None
    parts = {"model": dict(preset.model), "train": dict(preset.train)} if preset else \
        {"model": {}, "train": {}}
    for option, (part, field) in _FIELDS.items():
        value = getattr(args, option)
        if value is not None:
            parts[part][field] = value
        else:
            parts[part].setdefault(field, TRAIN_DEFAULTS[option])
    if args.val_split is not None or "val_split" not in parts["train"]:
        split, fraction = parse_val_split(_opt(args, "val_split"))
        parts["train"].update(val_split=split, val_fraction=fraction)
    return ModelConfig(**parts["model"]).validate(), TrainConfig(**parts["train"]).validate()


def _make_run_folder(out: Path):
    """Create the run folder before any work, so an unwritable place fails at once."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise StudioError(f"Cannot write the run folder {out}: {e.strerror or e}.",
                          "Give a folder you can write to with --out.") from None


STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, n))  # SIGHUP: the terminal was closed (not on Windows)


def _catch_stop_signals(monitor: Monitor) -> dict:
    """Ctrl-C, a polite kill and a closed terminal cancel the monitor: training stops within a
    step or a fraction of a second of a long phase, then saves. Returns the old handlers."""
    def handler(signum, frame):
        monitor.cancel()
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def cmd_train(args) -> int:
    """Train with --out locked (engine.run_lock): a second train into it exits 2 naming the pid.
    A train that saves nothing (refused: a bad device, a model that does not fit, bad data;
    stopped before its first step; nothing left to train) leaves --out as it was."""
    from engine import checkpoint
    from engine.fsutil import FolderSnapshot
    from engine.run_lock import RunFolderBusy, RunLock
    out = Path(args.out)
    if args.resume:  # the old spelling of --continue ("resume" is going on after a pause)
        print("note: --resume is now --continue; the old spelling still works.", file=sys.stderr)
        args.continue_run = True
    if not out.is_dir() and (args.continue_run or out.exists()):
        return _train(args)  # nothing to lock: _train reports the missing folder or the file
    before, saved = FolderSnapshot(out), _file_mark(checkpoint.checkpoint_path(out))
    lock = RunLock(out, elsewhere="give another folder with --out")
    try:
        lock.acquire()
    except RunFolderBusy:
        raise          # another process's folder: nothing in it is this one's to remove
    except BaseException:
        before.undo()  # folders made before the lock file could not be written
        raise
    try:
        return _train(args)
    finally:
        lock.release()   # first: Windows cannot delete an open file
        if _file_mark(checkpoint.checkpoint_path(out)) == saved:   # nothing was saved
            before.undo()   # under the lock, whatever appeared in --out was this process's


def _file_mark(path: Path):
    """(size, mtime_ns) of a file, or None: whether a save happened since."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _train(args) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise StudioError(f"--out {out} is a file, not a folder.",
                          "Give a folder for the run (it is created if missing).")
    line = ProgressLine(sys.stderr, quiet=args.quiet)
    monitor = Monitor(on_phase=None if args.quiet else line.phase)
    previous = _catch_stop_signals(monitor)
    try:
        try:
            session = _open_run(args, out, monitor, line)
        except Cancelled:
            line.say(f"Stopped before training began; nothing was trained in {out}.")
            return 130
        if (args.continue_run or args.continue_from) and _nothing_left(session, line):
            return 0
        return _train_loop(session, args, out, monitor, line)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _open_run(args, out: Path, monitor: Monitor, line: ProgressLine):
    """The session to train: the run in --out continued, or new from the options (run folder
    made)."""
    from engine import checkpoint
    from engine.dialogue import read_dialogues
    from engine.session import TrainingSession
    from engine.textio import bundled_corpus, read_text
    source = Path(args.continue_from) if args.continue_from else out
    if args.continue_from and checkpoint.checkpoint_path(out).exists():
        raise StudioError(f"{out} already holds a training run.",
                          "--continue-from trains into a new --out folder; to train the run in "
                          f"{out} itself further, use --continue.")
    if args.continue_run or args.continue_from:
        session = TrainingSession.load(source, device=args.device, monitor=monitor)
        _note_fallback(session)
        ignored = [f"--{k.replace('_', '-')}" for k in MODEL_OPTIONS
                   if getattr(args, k) is not None]
        if ignored:
            line.say(f"note: {', '.join(ignored)} ignored: a continued run keeps its model, data "
                     "and settings")
        if args.steps is not None or args.tune_steps is not None or args.time_budget:
            note = session.continue_training(args.steps, args.tune_steps, args.time_budget)
            if note:
                line.say(f"note: {note}")
        if args.continue_from:   # a new run: the checks passed, only now the folder
            _make_run_folder(out)
        line.say(f"Continuing {source} at step {session.step}/{session.total_steps} on "
                 f"{session.rt.info.name}" + (f", as a new run in {out}" if args.continue_from
                                              else ""))
        return session
    if checkpoint.checkpoint_path(out).exists():
        raise StudioError(f"{out} already holds a training run.",
                          "Add --continue to train it further, or give another --out folder.")
    mc, tc = _configs(args)
    if args.preset:
        from engine.presets import get_preset
        line.say(f"preset {args.preset}: {get_preset(args.preset).description}")
    if run_steps(tc.pretrain_steps, tc.tune_steps, not args.no_tune) == 0:
        raise StudioError("Nothing to train: the pretraining and tuning steps are both 0.",
                          "Give --steps (and --tune-steps) of at least 1.")
    _make_run_folder(out)
    pre = read_text(args.pretrain or bundled_corpus("pretrain"), "pretraining text")
    tune = None
    if not args.no_tune:
        tune, _ = read_dialogues(args.tune or bundled_corpus("tune"))  # DataError names the file
    session = TrainingSession.create(mc, tc, pre, tune, device=args.device,
                                     tokenizer_kind=args.tokenizer, monitor=monitor)
    c = session.model_config
    if c.vocab_size < mc.vocab_size:
        line.say(f"note: the text supports {c.vocab_size} tokens, not the {mc.vocab_size} "
                 f"asked for (no more merges to learn); the model uses {c.vocab_size}.")
    line.say(f"Training on {session.rt.info.name}: d_model {c.d_model}, n_layer {c.n_layer}, "
             f"n_head {c.n_head}{f' ({c.kv_heads} kv)' if c.kv_heads < c.n_head else ''}, "
             f"context {c.context_length}, vocab {c.vocab_size} "
             f"({c.param_count():,} parameters), {session.pretrain.n_tokens:,} pretraining "
             f"tokens")
    return session


def _train_loop(session, args, out: Path, monitor: Monitor, line: ProgressLine) -> int:
    """Train to the end or to a stop; every way out saves the steps done (SIGKILL loses at
    most --checkpoint-every steps)."""
    from engine import checkpoint
    from studio.run_folder import MetricsLog, recall_text
    line.pace.start(session.step)
    tc = session.train_config
    warmup = tc.warmup_note(session.tune is not None, from_step=session.step)
    if warmup:
        line.say(f"note: {warmup}")
    line.say(f"Validation: {session.pretrain.val_note}.")
    if tc.time_budget_s:
        split = (f", about {1 - session.tune_time_share():.0%} of it pretraining and the rest "
                 "tuning" if session.has_tune else "")
        line.say(f"Time budget: training ends {tc.time_budget_s:.0f} s into the run "
                 f"(evaluations included{split}); the step count follows the measured speed.")
    # a continued run: what the checkpoint covers; a new run continued from another: its history
    metrics = (MetricsLog(out, history=session.history) if args.continue_from
               else MetricsLog(out, keep_until=session.step))
    watch = TrainWatch(out, args.tensorboard)  # health warnings; TensorBoard events
    save_s = None   # seconds the last checkpoint took (said when a stop saves)
    try:
        try:
            for m in session.train():
                metrics.write(m)
                metrics.flush()
                line.step(m)
                watch(m)
                if m.samples and not args.quiet:
                    line.say("\n".join(f"  [{m.step}] {p!r} -> {t!r}" for p, t in m.samples))
                if m.recall:   # the stage-end check, as the studio's Samples tab shows it
                    line.say(f"step {m.step}: {recall_text(m.recall)}")
                if monitor.cancelled:
                    break
                if args.checkpoint_every and m.step % args.checkpoint_every == 0:
                    save_s = _timed_save(session, out)
        except Cancelled:  # a stop between two steps, or inside one (the step is not taken)
            pass
    finally:
        metrics.close()
        watch.close()
    if monitor.cancelled:
        mb = session.model.table.size * 12 / 2**20   # weights and both AdamW moments, float32
        took = f", about {save_s:.0f} s as the last one" if save_s and save_s >= 1 else ""
        line.say(f"Stopping: saving the checkpoint ({mb:,.0f} MB{took})…")
    session.save(out)
    if monitor.cancelled:
        line.say(f"Stopped at step {session.step}; saved to {out}. Go on with --continue.")
        return 130
    loss = "none" if session.last_loss is None else f"{session.last_loss:.4f}"
    line.say(f"Done: {session.step} steps, final loss {loss}. Checkpoint: "
             f"{checkpoint.checkpoint_path(out)}")
    final = _final_validation(session)
    if final:
        line.say(final)
    return 0


def _final_validation(session) -> str | None:
    """The run's last validation (the Trainer scores the whole held-out text at the end, up to
    engine.corpus.FINAL_VAL_TOKENS), for a person: None when the last record has none."""
    last = session.history[-1] if session.history else {}
    loss = last.get("val_loss") if last.get("stage") == "pretrain" else last.get("pretrain_val_loss")
    if loss is None or "val_bpb" not in last:
        return None
    where = ("held-out text" if last.get("val_source") != "training text"
             else "training text (nothing could be held out)")
    tokens = last.get("val_tokens")
    size = session.pretrain.summary()["val_tokens"]
    cover = "all of it" if tokens is not None and tokens >= size else f"{tokens:,} tokens"
    return (f"Final validation on the {where}: {loss:.4f} nats per token, "
            f"{last['val_bpb']:.4f} bits per byte ({cover}).")


def _timed_save(session, out: Path) -> float:
    """session.save(out); its wall seconds."""
    t0 = time.perf_counter()
    session.save(out)
    return time.perf_counter() - t0


def _nothing_left(session, line: ProgressLine) -> bool:
    """A continued run already at its step totals (no time budget to re-plan them): say so and
    leave the folder as it is, instead of "Done" after re-validating and re-saving it."""
    if session.step < session.total_steps or session.train_config.time_budget_s:
        return False
    tc = session.train_config
    tune = f" + {tc.tune_steps} tuning" if session.has_tune else ""
    line.say(f"Nothing to train: the run has done all of its {session.total_steps} steps "
             f"({tc.pretrain_steps} pretraining{tune}); nothing was changed. Give larger totals "
             "to train it further: --tune-steps once tuning began, else --steps.")
    return True


def _note_fallback(session):
    if session.loaded_from_previous:
        print("note: the newest checkpoint was damaged; continuing from the one before it "
              f"(step {session.step}).", file=sys.stderr)


def _load(args):
    """A run folder / checkpoint, or a GGUF this app exported (with the bundled corpora)."""
    from engine.session import TrainingSession
    if str(args.dir).lower().endswith(".gguf"):
        from engine.textio import bundled_corpus, read_text
        return TrainingSession.from_gguf(args.dir, read_text(bundled_corpus("pretrain")),
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
    from engine.open_tokenizer import tokenizer_from_bytes   # the app's or an imported model's
    if str(args.dir).lower().endswith(".gguf"):
        from engine.gguf_export import import_gguf
        tok = import_gguf(args.dir).tokenizer
    else:
        tok = tokenizer_from_bytes(checkpoint.load(args.dir)["tokenizer"])
    ids = tok.encode(args.text)
    print(" ".join(str(i) for i in ids))
    print(" ".join(repr(tok.id_to_piece(i)) for i in ids))
    print(f"{len(ids)} tokens for {len(args.text)} characters")
    return 0


def cmd_export(args) -> int:
    s = _load(args)
    if args.format == "hf":
        from studio.cli_hf import export_hf
        return export_hf(s, args)
    r = s.export_gguf(args.output, dtype=args.dtype, force=args.force)
    print(f"Wrote {r.path} ({r.size_bytes / 1024:.0f} KiB, {r.dtype})"
          + (f" and {r.modelfile_path}" if r.modelfile_path else ""))
    return 0


def cmd_chat(args) -> int:
    from engine.dialogue import Message
    s = _load(args)
    kw = _sampling_kwargs(args)
    if args.message is not None:
        reply = s.chat([Message("user", args.message)],
                       on_token=lambda t: print(t, end="", flush=True), **kw)
        print()
        for note in reply.notes():
            print(f"({note})")
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
        print("Assistant: ", end="", flush=True)
        reply = s.chat(history, on_token=lambda t: print(t, end="", flush=True), **kw)
        print()
        for note in reply.notes():   # turns left out of the prompt, an answer cut by the window
            print(f"({note})")
        history.append(Message("assistant", reply.strip()))   # as tune turns are: stripped
    return 0


def cmd_studio(args) -> int:
    from studio.preflight import check_display
    check_display()  # missing xcb libraries or a wrong DISPLAY: a message and exit 2, not abort
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

    from engine.presets import PRESETS
    d = TRAIN_DEFAULTS
    t = sub.add_parser("train", help="train headless; writes a checkpoint and metrics.jsonl",
                       description="Train a model headless. Step counts are totals per stage; "
                       "with --continue, larger totals train a saved run further.")
    t.add_argument("--out", required=True, help="run folder for checkpoint and metrics.jsonl")
    t.add_argument("--continue", dest="continue_run", action="store_true",
                   help="train the run saved in --out further (to the step totals given)")
    t.add_argument("--continue-from", metavar="RUN",
                   help="train the run saved in RUN further as a new run in --out, which "
                   "starts with RUN's history; RUN stays as it is (the studio's Continue "
                   "\"as a new run\"; --continue is Continue in place)")
    t.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)  # old --continue
    t.add_argument("--pretrain", default=S, help="pretraining text (default: bundled)")
    t.add_argument("--tune", default=S, help="dialogue text (default: bundled)")
    t.add_argument("--no-tune", action="store_true", help="pretraining only")
    t.add_argument("--device", default=S, help="OpenCL device index or name part")
    t.add_argument("--d-model", type=count(2, MAX_WIDTH), help=f"embedding size ({d['d_model']})")
    t.add_argument("--n-layer", type=count(1, MAX_LAYERS),
                   help=f"transformer blocks ({d['n_layer']})")
    t.add_argument("--n-head", type=count(1, MAX_WIDTH), help=f"attention heads ({d['n_head']})")
    t.add_argument("--n-kv-head", type=count(0, MAX_WIDTH),
                   help="key/value heads, a divisor of n_head: grouped-query attention "
                        f"(0 = n_head, {d['n_kv_head']})")
    t.add_argument("--context-length", type=count(1, MAX_WIDTH),
                   help=f"tokens per window ({d['context_length']})")
    t.add_argument("--vocab-size", type=count(259, MAX_VOCAB),
                   help=f"requested vocabulary ({d['vocab_size']})")
    t.add_argument("--tokenizer", choices=TOKENIZER_KINDS, default=DEFAULT_TOKENIZER,
                   help=" or ".join(f"{k}: {tokenizer_name(k)}" for k in TOKENIZER_KINDS)
                   + f" ({DEFAULT_TOKENIZER})")
    t.add_argument("--lr", type=number(0, 1, lo_open=True, hi_open=True),
                   help=f"peak learning rate ({d['lr']})")
    t.add_argument("--steps", type=count(0, MAX_STEPS),
                   help=f"pretraining steps, total ({d['steps']})")
    t.add_argument("--tune-steps", type=count(0, MAX_STEPS),
                   help=f"tuning steps, total ({d['tune_steps']})")
    t.add_argument("--batch-size", type=count(1, MAX_WIDTH),
                   help=f"windows per step ({d['batch_size']})")
    t.add_argument("--replay", type=number(0, 1),
                   help=f"share of pretraining windows in tuning batches ({d['replay']})")
    t.add_argument("--seed", type=count(0, MAX_SEED),
                   help=f"weights, batches and sampling ({d['seed']})")
    t.add_argument("--val-split", metavar="KIND:SHARE",
                   help="held-out text, the end of the text: docs:F = the last share F of "
                   "the paragraphs (the last characters when one paragraph), tail:F = the last "
                   f"share F of the characters, nanoGPT's split ({d['val_split']})")
    t.add_argument("--time-budget", type=number(0, 1e9), metavar="SECONDS",
                   help="train for this many seconds (evaluations included) and fit the step "
                   "count and lr schedule to it; --steps is then only the first plan. With "
                   "--continue: seconds more (off)")
    t.add_argument("--dropout", type=number(0, 1, hi_open=True), help="drop probability after the attention output "
                   f"and feed-forward projections, training only ({d['dropout']})")
    t.add_argument("--preset", choices=list(PRESETS), help="small-text settings for a CPU, an "
                   "integrated or a discrete GPU (engine/presets.py); explicit options win")
    t.add_argument("--checkpoint-every", type=count(0, MAX_STEPS), default=CHECKPOINT_EVERY,
                   help=f"steps between checkpoints; 0 = only at the end ({CHECKPOINT_EVERY})")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard event files into OUT/tensorboard (tensorboardX)")
    t.set_defaults(func=cmd_train)

    def gen_args(q):
        q.add_argument("dir", help="run folder, checkpoint file, or a GGUF this app exported")
        q.add_argument("--device", default=S, help="OpenCL device index or name part")
        sp = SamplingParams()  # the engine's defaults
        q.add_argument("--max-tokens", type=count(1, MAX_TOKENS), default=MAX_NEW_TOKENS,
                       help=f"tokens to generate ({MAX_NEW_TOKENS})")
        q.add_argument("--temperature", type=number(0, 100), default=sp.temperature,
                       help=f"randomness; 0 = always the most likely token ({sp.temperature})")
        q.add_argument("--top-k", type=count(0, MAX_VOCAB), default=sp.top_k,
                       help=f"sample among the k likeliest ({sp.top_k})")
        q.add_argument("--top-p", type=number(0, 1, lo_open=True), default=sp.top_p,
                       help=f"nucleus sampling: smallest set with this probability ({sp.top_p})")
        q.add_argument("--repeat-penalty", type=number(0, 100, lo_open=True),
                       default=sp.repetition_penalty,
                       help="divide the logits of tokens already generated "
                            f"({sp.repetition_penalty} = off)")
        q.add_argument("--seed", type=count(0, MAX_SEED), default=None,
                       help="sampling seed (random)")
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
    e = sub.add_parser("export", help="write a GGUF (and an Ollama Modelfile beside it), or a "
                       "Hugging Face transformers folder (--format hf)")
    e.add_argument("dir", help="run folder or checkpoint file")
    e.add_argument("output", help="the .gguf file to write (a folder with --format hf)")
    e.add_argument("--format", choices=["gguf", "hf"], default="gguf",
                   help="gguf (llama.cpp, Ollama, LM Studio) or hf (transformers) (gguf)")
    e.add_argument("--dtype", choices=DTYPE_NAMES, default=DEFAULT_DTYPE,
                   help="weight type: f32 exact, f16 half size, q8_0 quarter size (f32)")
    e.add_argument("--force", action="store_true", help="overwrite existing files")
    e.add_argument("--device", default=S, help="OpenCL device index or name part")
    e.set_defaults(func=cmd_export)
    register_runs(sub, S)
    register_hf(sub, S)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        return (args.func if args.command else cmd_studio)(args)
    except StudioError as e:
        print(f"\nerror: {e}", file=sys.stderr)
        if e.cli_hint:
            print(e.cli_hint, file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
