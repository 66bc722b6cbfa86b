"""The progress line of `llm-studio train` on stderr (steps, ETA, and long phases)."""

from __future__ import annotations

import shutil

from opencl_llm_studio.engine.progress import Pace, format_eta


class ProgressLine:
    """The one-line progress display of `train` on stderr.

    On a terminal the line is redrawn in place ("\\r"), padded with spaces over whatever a
    longer earlier line left, and cut to the terminal's width (a wrapped line could not be
    redrawn). Into a file or pipe, a line every 5% of the steps. Writing never raises: when the
    terminal is gone (SIGHUP), training still stops and saves."""

    def __init__(self, out, quiet: bool = False):
        self.out, self.quiet = out, quiet
        self.tty = _isatty(out)
        self.shown = 0          # characters of the line on screen now
        self.dead = False       # the stream failed (terminal closed): write nothing more
        self.last_step = ""     # the step part, kept while a phase runs inside a step
        self.pace = Pace()

    def _write(self, text: str) -> None:
        if self.dead:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # terminal closed, stream closed
            self.dead = True

    def show(self, line: str) -> None:
        """Redraw the line (terminal only)."""
        if self.quiet or not self.tty:
            return
        width = shutil.get_terminal_size((100, 24)).columns - 1
        line = line[:width]
        self._write("\r" + line + " " * max(self.shown - len(line), 0))
        self.shown = len(line)

    def say(self, text: str) -> None:
        """A message on lines of its own, below the progress line (also with --quiet)."""
        if self.shown:
            self._write("\n")
            self.shown = 0
        self._write(text + "\n")

    def phase(self, name: str, done: int, total: int) -> None:
        """A long phase (engine.progress.Monitor's on_phase)."""
        pct = f" {100 * done // total}%" if total > 1 else ""
        count = f" {done}/{total}" if 1 < total < 10_000 else ""
        self.show(f"{self.last_step}{' · ' if self.last_step else ''}{name}{count or pct}…")

    def step(self, m) -> None:
        done, total = m.step, m.total_steps
        self.pace.update(done)
        frac = done / max(total, 1)
        bar = "#" * int(24 * frac) + "-" * (24 - int(24 * frac))
        val = ""
        if m.val_loss is not None:  # tuning: loss on the tune dialogues (the training set)
            val = val_text(m) if m.stage == "pretrain" else f" dialogues {m.val_loss:.3f}"
        eta = self.pace.eta(total, done)
        line = (f"[{bar}] {done}/{total} {m.stage:8s} loss {m.loss:.3f}{val} "
                f"{m.tokens_per_s:,.0f} tok/s ETA {'…' if eta is None else format_eta(eta)}")
        self.last_step = f"[{bar}] {done}/{total}"
        if self.quiet:
            return
        if self.tty:
            self.show(line)
        elif done == total or done % max(total // 20, 1) == 0:
            self._write(line + "\n")  # a log file gets a line every 5%, not a redraw per step


def _isatty(out) -> bool:
    try:
        return out.isatty()
    except (OSError, ValueError):
        return False


def val_text(m) -> str:
    """' val 1.234 (1.780 bpb)', ' val 1.234 (1.780 ± 0.004 bpb)' for a sample of the text (its
    standard error), or ' val on training text 1.234 (...)' when nothing could be held out
    (engine.data.corpus): a number measured on the training text is never called val."""
    name = "val" if m.val_source != "training text" else "val on training text"
    bpb = ""
    if m.val_bpb is not None:
        err = m.val_bpb_stderr
        bpb = f" ({m.val_bpb:.3f}{f' ± {err:.3f}' if err else ''} bpb)"
    return f" {name} {m.val_loss:.3f}{bpb}"
