"""`llm-studio plot RUN... -o curves.png`: the Runs window's four comparison plots (loss with
held-out points, grad norm, learning rate, training health by parameter group), one colour per
run, drawn with matplotlib's Agg renderer: no window and no Qt."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.fsutil import FolderSnapshot
from opencl_llm_studio.studio.runs import (GROUP_LINES, GROUP_NAMES, HEALTH_GROUPS, X_AXES, RunInfo, curves,
                         run_colour)

DPI = 100

PLOT_SIZE = (1200, 800)  # px: `llm-studio plot`'s image, unless --width / --height


def cmd_plot(args) -> int:
    from opencl_llm_studio.studio.run_folder import is_run_folder
    from opencl_llm_studio.studio.runs import load_run
    runs = []
    for p in args.runs:
        if not is_run_folder(p):
            raise StudioError(f"{p} is not a run folder (no checkpoint.npz or metrics.jsonl).",
                              "Give folders that `llm-studio train --out` or the studio wrote.")
        runs.append(load_run(p))
    out = Path(args.output)
    if out.suffix.lower() != ".png":
        raise StudioError(f"{out} does not end in .png.", "Name the output file like curves.png.")
    write_png(runs, out, args.x, args.width, args.height)
    print(f"Wrote {out} ({len(runs)} run{'s' * (len(runs) != 1)}, x = {args.x})")
    return 0


def write_png(runs: list[RunInfo], out: Path, axis: str = "step", width: int = PLOT_SIZE[0],
              height: int = PLOT_SIZE[1]) -> None:
    """The comparison plots of `runs` against `axis` (studio.runs.X_AXES) as a width x height
    pixel PNG. Raises StudioError when `out` cannot be written (a folder made for it is
    removed again)."""
    fig = figure(runs, axis, width, height)
    made = FolderSnapshot(out.parent, only=())
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=DPI, format="png")
    except OSError as e:
        made.undo()   # no folder made for a PNG that was not written stays
        raise StudioError(f"Cannot write {out}: {e.strerror or e}.",
                          "Give a folder you can write to with -o.") from e


def figure(runs: list[RunInfo], axis: str, width: int, height: int):
    """A matplotlib Figure (not pyplot's: nothing global, no GUI backend) of the four plots."""
    from matplotlib.figure import Figure   # deferred: matplotlib loads in about a second
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    (loss, grad), (lr, health) = fig.subplots(2, 2, sharex=True)
    groups = "  ".join(GROUP_NAMES[g] for g in HEALTH_GROUPS)
    for ax, title, label, log in (
            (loss, "Loss: ━ train  ● held-out text", "loss (nats)", False),
            (grad, "Gradient norm before clipping", "grad norm", True),
            (lr, "Learning rate", "lr", True),
            (health, f"Training health: {groups}", "update / weight ratio", True)):
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(label)
        if log:
            ax.set_yscale("log")
    for ax in (lr, health):   # the top row shares their x axis
        ax.set_xlabel(X_AXES[axis])
    for i, run in enumerate(runs):
        data, colour = curves(run, axis), run_colour(i)
        for ax, key in ((loss, "loss"), (grad, "grad"), (lr, "lr")):
            _line(ax, *data[key], colour, log=ax is not loss, label=run.name if key == "loss"
                  else None)
        _line(loss, *data["val"], colour, style="dashed", marker="o")
        for g in HEALTH_GROUPS:
            _line(health, *data[f"health.update_ratio.{g}"], colour, log=True,
                  style=GROUP_LINES[g])
    if runs:
        fig.legend(loc="outside upper center", ncols=min(len(runs), 5), frameon=False)
    return fig


def _line(ax, x: np.ndarray, y: np.ndarray, colour: str, log: bool = False,
          style: str = "solid", marker=None, label=None) -> None:
    """The finite points (y > 0 on a log axis) as a line; one point alone gets a marker."""
    ok = np.isfinite(x) & np.isfinite(y) & ((y > 0) if log else True)
    if not ok.any():
        return
    lone = marker or ("o" if ok.sum() == 1 else None)
    ax.plot(x[ok], y[ok], color=colour, linewidth=1.5, linestyle=style, marker=lone,
            markersize=4, label=label)
