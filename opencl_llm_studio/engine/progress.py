"""Long phases: cooperative cancellation, phase progress, and the ETA of a run.

A `Monitor` travels with a TrainingSession. Every loop that can run for more than about a
second (encoding a text, validation batches, recall and sample generation) calls
`monitor.tick(phase, done, total)` once per item: that reports progress to `on_phase` (at most
`REPORT_INTERVAL_S` apart, plus the first and last item) and raises `Cancelled` once `cancel()`
was called, from any thread or a signal handler. Nothing here imports Qt; the CLI prints the
phases and the studio's worker forwards them to the progress bar.

`Pace` gives the ETA from the step rate of the steps this process ran (so a continued run is
not credited with the steps of an earlier process) over the last `window_s` seconds of
running time (paused time excluded); the CLI and the studio share it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

REPORT_INTERVAL_S = 0.1  # phase reports per second stay at ~10, however fast the items


class Cancelled(Exception):
    """The person asked to stop (Ctrl-C, SIGTERM, SIGHUP, Stop, closing the window) during a
    long phase. Not an error: the caller keeps what is already done and saves."""


class Monitor:
    """Cancellation flag and phase reporter for one session (thread-safe).

    on_phase(phase, done, total): phase is a short lowercase text ("checking recall"), done
    and total count items (tokens, batches, documents, characters); total 0 = unknown.
    event: an existing threading.Event to use as the cancel flag (the studio's Stop flag).
    """

    def __init__(self, on_phase: Callable[[str, int, int], None] | None = None,
                 event: threading.Event | None = None):
        self.on_phase = on_phase
        self._event = event if event is not None else threading.Event()
        self._last_report = 0.0
        self.phase = ""  # the phase of the latest tick

    def cancel(self) -> None:
        """Ask the running phase to stop at its next tick (safe in a signal handler)."""
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise Cancelled if cancel() was called."""
        if self._event.is_set():
            raise Cancelled()

    def tick(self, phase: str, done: int, total: int = 0) -> None:
        """One item of a phase is about to start (done = items finished so far). Reports
        progress now and then; raises Cancelled when a stop was asked for."""
        self.phase = phase
        self.check()
        if self.on_phase is None:
            return
        now = time.monotonic()
        if done == 0 or done >= total or now - self._last_report >= REPORT_INTERVAL_S:
            self._last_report = now
            self.on_phase(phase, done, total)


def format_eta(seconds: float) -> str:
    """'m:ss', or 'h:mm:ss' from one hour on; negative counts as 0."""
    seconds = max(int(seconds), 0)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Clock:
    """Seconds of training: `start_s` (what a continued run already had) plus the wall time since
    construction, minus paused time. time_fn: the wall clock (tests inject their own).
    pause()/resume() may be called repeatedly; now() is frozen while paused."""

    def __init__(self, start_s: float = 0.0, time_fn: Callable[[], float] = time.perf_counter):
        self._fn = time_fn
        self._base = float(start_s)
        self._t0 = time_fn()
        self._paused_at: float | None = None

    def now(self) -> float:
        t = self._paused_at if self._paused_at is not None else self._fn()
        return self._base + t - self._t0

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = self._fn()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._t0 += self._fn() - self._paused_at
            self._paused_at = None

    @property
    def paused(self) -> bool:
        return self._paused_at is not None


class Pace:
    """Step rate of the steps run by this process, for an honest ETA.

    Call `start(step)` when training (re)starts at `step`, `update(step)` after each step,
    `pause()` / `resume()` around a pause (the paused time does not count), and
    `eta(total_steps)` for the seconds left, None until a step was timed. The rate is taken
    over the last `window_s` seconds of running time, so it follows a change of speed.
    `clock` (seconds, monotonic) is replaceable for tests.
    """

    def __init__(self, window_s: float = 20.0, clock: Callable[[], float] = time.monotonic):
        self.window_s, self.clock = window_s, clock
        self._points: deque[tuple[float, int]] = deque()  # (running time, step)
        self._running = Clock(time_fn=clock)
        self.step = 0

    def start(self, step: int) -> None:
        """Forget earlier points (another run, or steps done before this process)."""
        self._points.clear()
        self._running = Clock(time_fn=self.clock)
        self._points.append((self._running.now(), step))
        self.step = step

    def update(self, step: int) -> None:
        self.resume()
        if not self._points:
            self.start(step)
            return
        now = self._running.now()
        self._points.append((now, step))
        while len(self._points) > 2 and now - self._points[0][0] > self.window_s:
            self._points.popleft()
        self.step = step

    def pause(self) -> None:
        self._running.pause()

    def resume(self) -> None:
        self._running.resume()

    def seconds_per_step(self) -> float | None:
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        return (t1 - t0) / (s1 - s0) if s1 > s0 and t1 > t0 else None

    def eta(self, total_steps: int, step: int | None = None) -> float | None:
        """Seconds until `total_steps` at the current rate (None: no rate yet)."""
        per_step = self.seconds_per_step()
        if per_step is None:
            return None
        return per_step * max(total_steps - (self.step if step is None else step), 0)
