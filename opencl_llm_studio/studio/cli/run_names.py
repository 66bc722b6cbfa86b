"""Run names: one notion of "my runs" for the command line and the window.

A run argument written as a plain name, without a path separator (`first`, not `runs/first` or
`./first`), is a run in the runs folder: the studio's (Autosave › Runs folder;
studio.app_settings.runs_root), which the window's Runs table and `llm-studio runs` list. Any
argument with a separator, or starting with `~`, is a path as written (`~` expanded). An existing
file or folder of that name in the current folder is still found when the runs folder has no run
of that name, so `llm-studio chat model.gguf` reads ./model.gguf.

`resolve(args)` rewrites the parsed arguments that name runs, before any command runs.
"""

from __future__ import annotations

import os
from pathlib import Path

# (subcommand, argument dest) -> the run must exist already ("old") or is made ("new")
RUN_ARGS = {
    ("sample", "dir"): "old", ("chat", "dir"): "old", ("tokenize", "dir"): "old",
    ("export", "dir"): "old", ("scale-out", "dir"): "old", ("import", "model"): "old",
    ("import", "out"): "new", ("plot", "runs"): "old", ("train", "continue_from"): "old",
}


def is_name(text: str) -> bool:
    """True for a plain run name: no path separator, not `.`/`..`, no leading `~`."""
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return (bool(text) and text not in (".", "..") and not text.startswith("~")
            and not any(s in text for s in seps))


def runs_root() -> Path:
    from opencl_llm_studio.studio.app_settings import runs_root as root
    return root()


def existing(text: str) -> str:
    """The path of a run (or model file) the user names: runs folder first for a plain name,
    then the current folder; a path as written."""
    if not is_name(text):
        return os.path.expanduser(text)
    mine = runs_root() / text
    if mine.exists() or not Path(text).exists():
        return str(mine)   # also when neither exists: the error then names the runs folder
    return text


def new(text: str) -> str:
    """Where a new run named by the user goes: the runs folder for a plain name."""
    return str(runs_root() / text) if is_name(text) else os.path.expanduser(text)


def resolve(args) -> None:
    """Rewrite the run arguments of the parsed `args` in place (see the module)."""
    if args.command == "train":
        again = args.continue_run or args.resume
        args.out = existing(args.out) if again else new(args.out)
    for (cmd, dest), kind in RUN_ARGS.items():
        value = getattr(args, dest) if cmd == args.command else None
        if value is None:
            continue
        fix = existing if kind == "old" else new
        setattr(args, dest, [fix(v) for v in value] if isinstance(value, list) else fix(value))
