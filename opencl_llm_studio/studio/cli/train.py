"""`llm-studio train`: a new run from the options, or a saved run continued (--continue in place,
--continue-from into a new folder), with a progress line, Ctrl-C that saves, and metrics.jsonl,
checkpoints and the run lock through studio.run_folder. Qt-free."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from opencl_llm_studio.engine.config import run_steps
from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.progress import Cancelled, Monitor
from opencl_llm_studio.engine.training.budget import tune_time_share
from opencl_llm_studio.studio.cli.models import note_fallback
from opencl_llm_studio.studio.cli.options import (CONTINUE_OPTIONS, MODEL_OPTIONS, configs,
                                                   shell_arg, tokenizer_kind)
from opencl_llm_studio.studio.cli.progress import ProgressLine
from opencl_llm_studio.studio.cli.runs import TrainWatch
from opencl_llm_studio.studio.run_driver import RunDriver
from opencl_llm_studio.studio.run_folder import (RUN_HINT, ModelKind, RunRecorder, holds_run,
                                                make_run_folder, path_kind, recall_text)
from opencl_llm_studio.engine.model.params import param_count


STOPPED_BEFORE = "Stopped before training began; nothing was trained in {out}."
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, n))  # SIGHUP: the terminal was closed (not on Windows)


def _catch_stop_signals(monitor: Monitor) -> dict:
    """Ctrl-C, a polite kill and a closed terminal cancel the monitor: training stops within a
    step or a fraction of a second of a long phase, then saves. Returns the old handlers."""
    def handler(signum, frame):
        monitor.cancel()
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS if hasattr(signal, "siginterrupt") else ():   # not on Windows
        signal.siginterrupt(sig, False)   # C code's system calls (the OpenCL compiler's) restart
    return previous


def cmd_train(args) -> int:
    """Train with --out locked (engine.training.run_lock): a second train into it exits 2 naming the pid.
    A train that saves nothing (refused: a bad device, a model that does not fit, bad data;
    stopped before its first step; nothing left to train) leaves --out as it was."""
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.engine.fsutil import FolderSnapshot
    from opencl_llm_studio.engine.training.run_lock import RunFolderBusy, RunLock
    out = Path(args.out)
    if args.tensorboard:   # before any work: a missing extra is said first, the folder untouched
        from opencl_llm_studio.engine.extras import require
        require("tensorboardX")
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
        return _train(args, lock)
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


def _train(args, lock=None) -> int:
    """lock: --out's RunLock, held by cmd_train (None only where --out is no folder: refused)."""
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
        except (Cancelled, StudioError) as e:
            # a StudioError after a stop signal: the signal broke what was running (a kernel
            # build whose compiler got Ctrl-C too), a stop, not a device or data fault
            if not isinstance(e, Cancelled) and not monitor.cancelled:
                raise
            line.say(STOPPED_BEFORE.format(out=out))
            return 130
        if (args.continue_run or args.continue_from) and _nothing_left(session, line):
            return 0
        return _train_loop(session, args, out, monitor, line, lock)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _open_run(args, out: Path, monitor: Monitor, line: ProgressLine):
    """The session to train: the run in --out continued, or new from the options (run folder
    made)."""
    if args.continue_from and holds_run(out):
        raise StudioError(f"{out} already holds a training run.",
                          "--continue-from trains into a new --out folder; to train the run in "
                          f"{out} itself further, use --continue.")
    if args.continue_run or args.continue_from:
        return _continue_run(args, out, monitor, line)
    if holds_run(out):
        raise StudioError(f"{out} already holds a training run.",
                          "Add --continue to train it further, or give another --out folder.")
    return _new_run(args, out, monitor, line)


def _continue_run(args, out: Path, monitor: Monitor, line: ProgressLine):
    """The saved run (--continue: --out itself; --continue-from: that run, into a new --out)
    with the options a continued run takes applied."""
    from opencl_llm_studio.engine.training.opening import load_session
    source = Path(args.continue_from) if args.continue_from else out
    _check_continuable(source)
    lora = lora_options(args)
    if lora is None:
        session = load_session(source, device=args.device, monitor=monitor,
                               autotune=args.autotune or None)
    else:
        from opencl_llm_studio.engine.training.opening import lora_session
        session, note = lora_session(source, lora, device=args.device, monitor=monitor,
                                     autotune=args.autotune or None, base_path=args.base)
        if note:
            line.say(note)
    note_fallback(session)
    _take_continue_options(session, args, line)
    if args.steps is not None or args.tune_steps is not None or args.time_budget:
        note = session.continue_training(args.steps, args.tune_steps, args.time_budget)
        if note:
            line.say(f"note: {note}")
    if args.continue_from:   # a new run: the checks passed, only now the folder
        make_run_folder(out)
    line.say(f"Continuing {source} at step {session.step}/{session.total_steps} on "
             f"{session.rt.info.name}" + (f", as a new run in {out}" if args.continue_from
                                          else ""))
    return session


def lora_options(args):
    """The LoraConfig the --lora-* options give (None without --lora-rank); ConfigError for
    a bad value, and for --lora-alpha/--lora-targets/--lora-dropout/--base without a rank."""
    from opencl_llm_studio.engine.config import LORA_TARGETS, LoraConfig
    from opencl_llm_studio.engine.errors import ConfigError
    rest = [o for o in ("lora_alpha", "lora_targets", "lora_dropout", "base")
            if getattr(args, o, None) is not None]
    if args.lora_rank is None:
        if rest:
            raise ConfigError(f"--{rest[0].replace('_', '-')} needs --lora-rank.",
                              "Add --lora-rank 8 (or 16) to tune LoRA adapters.")
        return None
    targets = (tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
               if args.lora_targets else LORA_TARGETS)
    alpha = args.lora_alpha if args.lora_alpha is not None else 2.0 * args.lora_rank
    return LoraConfig(args.lora_rank, alpha, args.lora_dropout or 0.0, targets).validate()


def _take_continue_options(session, args, line: ProgressLine) -> None:
    """--tune (new dialogues) and the CONTINUE_OPTIONS given (batch size, learning rate, ...)
    change how the run trains from here; the model and data options are said to be ignored."""
    from opencl_llm_studio.engine.data.dialogue import read_dialogues
    if args.tune is not None:   # new dialogues for the run: its tuning stage tunes on them
        text, _ = read_dialogues(args.tune)   # DataError names the file
        had = session.has_tune
        session.set_dialogues(text)
        line.say(f"Tuning on {args.tune}" + (" (instead of the run's dialogues)" if had
                                             else " (the run had no dialogues)"))
    taken = {field: getattr(args, option) for option, field in CONTINUE_OPTIONS.items()
             if getattr(args, option) is not None}
    if taken:
        session.retrain_with(**taken)
        line.say("Continuing with " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                                for k, v in taken.items()))
    ignored = [f"--{k.replace('_', '-')}" for k in MODEL_OPTIONS
               if k != "tune" and k not in CONTINUE_OPTIONS and getattr(args, k) is not None]
    if ignored:
        line.say(f"note: {', '.join(ignored)} ignored: a continued run keeps its model and data")


def _new_run(args, out: Path, monitor: Monitor, line: ProgressLine):
    """A new run from the options, its folder made once the options hold."""
    from opencl_llm_studio.engine.data.dialogue import read_dialogues
    from opencl_llm_studio.engine.training.opening import create_session
    from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
    if lora_options(args) is not None:
        from opencl_llm_studio.engine.errors import ConfigError
        raise ConfigError("LoRA tunes adapters on a model that exists; a new run has none yet.",
                          "Import a GGUF (`llm-studio import model.gguf --out RUN`), then "
                          "`llm-studio train --continue --out RUN --tune FILE --lora-rank 8`.")
    from opencl_llm_studio.engine.training.auto_size import AUTO
    pre = read_text(args.pretrain or bundled_corpus("pretrain"), "pretraining text")
    rt = auto = None
    if args.preset == AUTO:   # the device opens first: Auto measures its speed
        from opencl_llm_studio.engine.opencl.runtime import Runtime
        from opencl_llm_studio.studio.cli.auto import auto_choice
        rt = Runtime(args.device)
        auto = auto_choice(args, pre, rt, line)
    mc, tc = configs(args, auto)
    if args.preset and auto is None:
        from opencl_llm_studio.engine.training.presets import get_preset
        line.say(f"preset {args.preset}: {get_preset(args.preset).description}")
    # Your own text without --tune: pretraining only. The bundled dialogues teach the bundled
    # facts, so tuning a model of your text on them would make it write those facts.
    tuning = not args.no_tune and bool(args.tune or not args.pretrain)
    if not args.no_tune and not tuning:
        line.say("note: no --tune dialogue file, so pretraining only (the bundled dialogues go "
                 "with the bundled text); give --tune FILE to tune on your own dialogues.")
    if run_steps(tc.pretrain_steps, tc.tune_steps, tuning) == 0:
        raise StudioError("Nothing to train: the pretraining and tuning steps are both 0.",
                          "Give --steps (and --tune-steps) of at least 1.")
    make_run_folder(out)
    tune = None
    if tuning:
        tune, _ = read_dialogues(args.tune or bundled_corpus("tune"))  # DataError names the file
    session = create_session(mc, tc, pre, tune, device=args.device, runtime=rt,
                             tokenizer_kind=tokenizer_kind(args, auto), monitor=monitor,
                             autotune=args.autotune or None)   # None: the env var
    c = session.model_config
    if c.vocab_size < mc.vocab_size:
        line.say(f"note: the text supports {c.vocab_size} tokens, not the {mc.vocab_size} "
                 f"asked for (no more merges to learn); the model uses {c.vocab_size}.")
    line.say(f"Training on {session.rt.info.name}: d_model {c.d_model}, n_layer {c.n_layer}, "
             f"n_head {c.n_head}{f' ({c.kv_heads} kv)' if c.kv_heads < c.n_head else ''}, "
             f"context {c.context_length}, vocab {c.vocab_size} "
             f"({param_count(c):,} parameters), {session.pretrain.n_tokens:,} pretraining "
             f"tokens")
    return session


def _check_continuable(source: Path) -> None:
    """--continue and --continue-from take a run folder or its checkpoint file; anything else
    ends here with what the path is (studio.run_folder.path_kind) and what to do."""
    kind = path_kind(source, RUN_HINT)
    if kind not in (ModelKind.RUN_FOLDER, ModelKind.CHECKPOINT):
        raise StudioError(f"{source} is a {kind.value}, not a training run.",
                          f"Import it into a run folder first (`llm-studio import {shell_arg(source)} RUN`),"
                          " then continue RUN.")


def _train_loop(session, args, out: Path, monitor: Monitor, line: ProgressLine, lock) -> int:
    """Train to the end or to a stop through studio.run_driver (metrics.jsonl, a checkpoint
    every --checkpoint-every steps); every way out saves the steps done (SIGKILL loses at most
    --checkpoint-every steps)."""
    first_step = session.step
    line.pace.start(first_step)
    _announce(session, line)
    # a continued run: what the checkpoint covers; a new run continued from another: its history
    recorder = RunRecorder(out, args.checkpoint_every,
                           history=session.history if args.continue_from else (),
                           keep_until=None if args.continue_from else session.step,
                           lock=lock, live=True)
    driver = RunDriver(session, recorder)   # a checkpoint that cannot be written ends the command
    try:
        _steps(driver, args, monitor, line, TrainWatch(out, args.tensorboard))
        if monitor.cancelled and session.step == first_step:   # nothing new to save
            line.say(STOPPED_BEFORE.format(out=out))   # cmd_train removes what a new run made
            return 130
        if monitor.cancelled:
            mb = session.model.table.size * 12 / 2**20   # weights and both AdamW moments, float32
            took = (f", about {driver.save_s:.0f} s as the last one"
                    if driver.save_s and driver.save_s >= 1 else "")
            line.say(f"Stopping: saving the checkpoint ({mb:,.0f} MB{took})…")
        driver.autosave()
    finally:
        recorder.close()
    if monitor.cancelled:
        line.say(f"Stopped at step {session.step}; saved to {out}. Go on with --continue.")
        return 130
    _say_done(session, out, line)
    return 0


def _announce(session, line: ProgressLine) -> None:
    """What the person should know before the first step: a shortened warmup, how validation
    scores, and how a time budget ends the run."""
    tc = session.train_config
    warmup = tc.warmup_note(session.tune is not None, from_step=session.step)
    if warmup:
        line.say(f"note: {warmup}")
    line.say(f"Validation: {session.pretrain.val_note}.")
    if tc.time_budget_s:
        share = tune_time_share(tc, session.has_tune)
        split = (f", about {1 - share:.0%} of it pretraining and the rest tuning"
                 if session.has_tune else "")
        line.say(f"Time budget: training ends {tc.time_budget_s:.0f} s into the run "
                 f"(evaluations included{split}); the step count follows the measured speed.")


def _steps(driver: RunDriver, args, monitor: Monitor, line: ProgressLine, watch) -> None:
    """The training steps, each on the progress line (and TensorBoard), until the end or a
    stop (Ctrl-C: between two steps, or inside one, which is then not taken)."""
    try:
        while (m := driver.step()) is not None:
            line.step(m)
            watch(m)
            _say_checks(m, args, line)
            if monitor.cancelled:
                break
    except Cancelled:
        pass
    except StudioError:
        # after a stop signal, a kernel build of the first step that the signal broke (the
        # compiler got Ctrl-C too) is a stop, as it is while the run opens (_train)
        if not monitor.cancelled:
            raise
    finally:
        driver.close()
        watch.close()


def _say_checks(m, args, line: ProgressLine) -> None:
    """A step's samples (unless --quiet) and its stage-end recall check, as the studio's
    Samples tab shows them."""
    if m.samples and not args.quiet:
        line.say("\n".join(f"  [{m.step}] {p!r} -> {t!r}" for p, t in m.samples))
    if m.recall:
        line.say(f"step {m.step}: {recall_text(m.recall)}")


def _say_done(session, out: Path, line: ProgressLine) -> None:
    """The end of a finished run: steps, final loss, the checkpoint, the final validation."""
    from opencl_llm_studio.engine.files import checkpoint
    loss = "none" if session.last_loss is None else f"{session.last_loss:.4f}"
    line.say(f"Done: {session.step} steps, final loss {loss}. Checkpoint: "
             f"{checkpoint.checkpoint_path(out)}")
    final = _final_validation(session)
    if final:
        line.say(final)


def _final_validation(session) -> str | None:
    """The run's last validation (the Trainer scores the whole held-out text at the end, up to
    engine.data.corpus.FINAL_VAL_TOKENS), for a person: None when the last record has none."""
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


def _nothing_left(session, line: ProgressLine) -> bool:
    """A continued run already at its step totals (no time budget to re-plan them): say so and
    leave the folder as it is, instead of "Done" after re-validating and re-saving it."""
    if session.step < session.total_steps or session.train_config.time_budget_s:
        return False
    steps = session.steps
    tune = f" + {steps.tune} tuning" if session.has_tune else ""
    line.say(f"Nothing to train: the run has done all of its {session.total_steps} steps "
             f"({steps.pretrain} pretraining{tune}); nothing was changed. Give larger totals "
             "to train it further: --tune-steps once tuning began, else --steps.")
    return True
