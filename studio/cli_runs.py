"""`llm-studio runs [ROOT]` (a table of run folders), `llm-studio plot RUN... -o curves.png`
(the Runs panel's comparison plots as a PNG, no window) and what `train` adds per step: health
warnings on stderr and, with --tensorboard, TensorBoard event files (tensorboardX, optional)."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

from engine.errors import StudioError
from engine.fsutil import FolderSnapshot
from studio.cli_input import limited

PLOT_SIZE = (1200, 800)  # px: `llm-studio plot`'s image, unless --width / --height
TB_HINT = "Install it with `pip install 'opencl-llm-studio[tensorboard]'` (or tensorboardX)."


def default_root() -> Path:
    """The studio's runs folder (Autosave › Runs folder; studio.app_settings)."""
    from studio.app_settings import runs_root
    return runs_root()


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def run_table(runs) -> str:
    """The runs as an aligned text table (one line per run)."""
    from studio.ui.runs_panel import fmt_duration
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
    from studio.runs import scan
    root = Path(args.root) if args.root else default_root()
    if not root.is_dir():
        raise StudioError(f"{root} is not a folder.",
                          "Give the folder that holds run folders (`llm-studio runs ROOT`).")
    runs = scan([root])
    if not runs:
        print(f"No runs in {root}.")
        return 0
    print(run_table(runs))
    return 0


def cmd_plot(args) -> int:
    from studio.runs import is_run_folder, load_run
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


def write_png(runs, out: Path, axis: str = "step", width: int = PLOT_SIZE[0],
              height: int = PLOT_SIZE[1]) -> None:
    """Render the comparison plots offscreen (no window) and save them as a PNG."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import qInstallMessageHandler
    from PySide6.QtWidgets import QApplication
    qInstallMessageHandler(_quiet_offscreen)
    app = QApplication.instance() or QApplication(["llm-studio"])  # noqa: F841 (kept alive)
    w = compare_image_widget(runs, axis, width, height)
    made = FolderSnapshot(out.parent, only=())
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if not w.grab().save(str(out)):
            raise OSError("the image could not be written")
    except OSError as e:
        made.undo()   # no folder made for a PNG that was not written stays
        raise StudioError(f"Cannot write {out}: {getattr(e, 'strerror', None) or e}.",
                          "Give a folder you can write to with -o.") from e
    finally:
        w.close()


def compare_image_widget(runs, axis: str = "step", width: int = PLOT_SIZE[0],
                         height: int = PLOT_SIZE[1]):
    """The Runs window's plots and legend for `runs`, shown and drawn at width x height, without
    its x-axis and health boxes (an image shows curves, not controls). Needs a QApplication."""
    from PySide6.QtWidgets import QApplication
    from studio.ui.compare_plot import ComparePlots
    w = ComparePlots(controls=False)
    w.setStyleSheet("background: white")
    w.setContentsMargins(8, 8, 8, 8)
    w.resize(width, height)
    w.set_axis(axis)
    w.set_runs(runs)
    w.show()
    QApplication.processEvents()
    w.redraw()
    QApplication.processEvents()
    return w


def _quiet_offscreen(mode, context, message) -> None:
    """Qt's messages on stderr, less the offscreen platform's notes that mean nothing here."""
    if "propagateSizeHints" not in message:
        sys.stderr.write(message + "\n")


class TrainWatch:
    """Called by `train` with each StepMetrics: prints health warnings, writes TensorBoard
    scalars (when asked) into RUN/tensorboard. close() flushes."""

    def __init__(self, out: Path, tensorboard: bool):
        self.writer = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise StudioError("--tensorboard needs the tensorboardX package, which is not "
                                  "installed.", TB_HINT) from None
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
    from studio.runs import X_AXES
    r = sub.add_parser("runs", help="list training runs (a table)",
                       description="List the run folders under ROOT (default: the studio's "
                       "runs folder) with status, losses and wall time.")
    r.add_argument("root", nargs="?", help="folder of run folders")
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
