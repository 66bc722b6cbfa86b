"""`llm-studio runs [ROOT]` (a table of run folders), the `runs` and `plot` subcommands
(studio.cli.plot draws the PNG) and what `train` adds per step: health warnings on stderr and,
with --tensorboard, TensorBoard event files (tensorboardX, optional). Qt-free."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.extras import missing_extra
from opencl_llm_studio.studio.cli.inputs import limited
from opencl_llm_studio.studio.cli.plot import PLOT_SIZE



def default_root() -> Path:
    """The studio's runs folder (Autosave › Runs folder; studio.app_settings)."""
    from opencl_llm_studio.studio.app_settings import runs_root
    return runs_root()


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def run_table(runs) -> str:
    """The runs as an aligned text table (one line per run)."""
    from opencl_llm_studio.studio.runs import fmt_duration
    head = ("name", "date", "status", "device", "params", "tokenizer", "steps", "loss",
            "held-out", "bpb", "wall", "clip/skip")
    rows = [head]
    for r in runs:
        rows.append((r.name, time.strftime("%Y-%m-%d %H:%M", time.localtime(r.date)) if r.date
                     else "-", r.status, r.device or "-", _fmt(r.params, ","),
                     r.tokenizer or "-", f"{r.step}/{r.total_steps}", _fmt(r.loss, ".3f"),
                     _fmt(r.val_loss, ".3f"), _fmt(r.val_bpb, ".3f"), fmt_duration(r.wall_s),
                     f"{r.clipped}/{r.skipped}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in rows)


def cmd_runs(args) -> int:
    from opencl_llm_studio.studio.runs import scan
    root = Path(args.root).expanduser() if args.root else default_root()
    if args.root and not root.is_dir():   # a folder the user named: a typo is worth saying
        raise StudioError(f"{root} is not a folder.",
                          "Give the folder that holds run folders (`llm-studio runs ROOT`).")
    runs = scan([root]) if root.is_dir() else []   # the runs folder is made by the first run
    if not runs:
        print(f"No runs yet in {root}. `llm-studio train --out NAME` trains one there "
              "(the studio's runs go there too).")
        return 0
    print(run_table(runs))
    return 0


class TrainWatch:
    """Called by `train` with each StepMetrics: prints health warnings, writes TensorBoard
    scalars (when asked) into RUN/tensorboard. close() flushes."""

    def __init__(self, out: Path, tensorboard: bool):
        self.writer = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ModuleNotFoundError as e:   # the [tensorboard] extra's install command
                raise (missing_extra(e) or e) from None
            self.writer = SummaryWriter(str(Path(out) / "tensorboard"))

    def __call__(self, m) -> None:
        for text in m.warnings or ():
            print(f"\nwarning (step {m.step}): {text}", file=sys.stderr)
        if self.writer is not None:
            write_scalars(self.writer, m.to_dict())

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def write_scalars(writer, d: dict) -> None:
    """One metrics.jsonl record as TensorBoard scalars (tags as in the README's table)."""
    step = d["step"]
    for k in ("loss", "val_loss", "pretrain_val_loss", "val_bpb", "grad_norm", "lr",
              "tokens_per_s"):
        if isinstance(d.get(k), (int, float)):
            writer.add_scalar(f"{d.get('stage', 'pretrain')}/{k}" if k == "val_loss" else k,
                              d[k], step)
    for measure, groups in (d.get("health") or {}).items():
        if isinstance(groups, dict):
            for g, v in groups.items():
                if isinstance(v, (int, float)):
                    writer.add_scalar(f"health/{measure}/{g}", v, step)


def register(sub, S) -> None:
    """Add `runs` and `plot` to the CLI's subparsers (S: argparse.SUPPRESS)."""
    from opencl_llm_studio.studio.cli.plot import cmd_plot
    from opencl_llm_studio.studio.runs import X_AXES
    r = sub.add_parser("runs", help="list training runs (a table)",
                       description="List the run folders under ROOT (default: the studio's "
                       "runs folder) with status, losses and wall time.")
    r.add_argument("root", nargs="?", help="folder of run folders (default: the runs folder, "
                   "where `train --out NAME` and the studio put runs)")
    r.set_defaults(func=cmd_runs)
    p = sub.add_parser("plot", help="write the curves of runs side by side to a PNG",
                       description="Loss, held-out loss, grad norm, lr and training health of "
                       "one or more runs, one colour per run, as a PNG (no window).")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders")
    p.add_argument("-o", "--output", required=True, help="the .png file to write")
    p.add_argument("--x", choices=list(X_AXES), default="step",
                   help="x axis: step, tokens (seen) or wall (time) (step)")
    p.add_argument("--width", type=limited("plot_width"), default=PLOT_SIZE[0],
                   help=f"pixels ({PLOT_SIZE[0]})")
    p.add_argument("--height", type=limited("plot_height"), default=PLOT_SIZE[1],
                   help=f"pixels ({PLOT_SIZE[1]})")
    p.set_defaults(func=cmd_plot)
