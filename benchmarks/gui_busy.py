"""How long the GUI thread stays away from its event loop by its own doing, not the machine's load.

A *busy stretch* starts when the GUI thread begins delivering an event (any event of any object in
that thread: timers, queued signals from the worker, paints, layouts; seen by an event filter on
the application) and ends when its event dispatcher is about to block waiting for the next one
(QAbstractEventDispatcher.aboutToBlock). Time spent waiting for events is never counted. Per
stretch the meter keeps:
- cpu: the GUI thread's own CPU time (time.thread_time), the work it did; the machine's load
  does not change it;
- held: the wall time minus the time the thread sat runnable on the run queue while other
  processes had the cores (Linux: /proc/self/task/<tid>/schedstat, second field; elsewhere the
  wall time). It adds the thread's waits: a sleep, a device wait, a lock, and the GIL, which a
  training thread that itself waits for a core holds longer under load;
- wall: the wall time, what a person sees, which load inflates.

Measured on the 2-core machine at load average ~10 (other jobs plus two `while 1: pass`) during
a default-size run: the worst stretch was 4.3 s wall, 2.1 s held, 66 ms of CPU, and the old
measure (gaps of a 10 ms timer) reached 5.9 s. Used by tests/test_studio.py (bounds on cpu and
held) and benchmarks/gui_latency.py (the 200 ms aim, measured, with all three).
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QAbstractEventDispatcher, QObject, QTimer
from PySide6.QtWidgets import QApplication


class GuiBusyMeter(QObject):
    """`with GuiBusyMeter() as m:` ... then m.cpu, m.held, m.wall (seconds per busy stretch, as
    above), m.first (the event that began each), m.timer_gaps (seconds between ticks of a 10 ms
    timer, wall clock). Create and use in the GUI thread."""

    def __init__(self, tick_ms: int = 10):
        super().__init__()
        self.cpu: list[float] = []
        self.held: list[float] = []
        self.wall: list[float] = []
        self.first: list[str] = []
        self.ticks: list[float] = []
        self._start = None  # (wall, cpu, run-queue) at the first event of the stretch
        self._schedstat = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self._timer = QTimer()
        self._timer.setInterval(tick_ms)
        self._timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))

    def _run_queue_s(self) -> float:
        """Seconds the GUI thread has spent runnable but not running, so far (0 where unknown)."""
        try:
            with open(self._schedstat) as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):  # not Linux, or no schedstats
            return 0.0

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if self._start is None:
            self._start = (time.perf_counter(), time.thread_time(), self._run_queue_s())
            self.first.append(f"{type(obj).__name__}:{event.type().name}")
        return False  # observe only

    def _about_to_block(self) -> None:
        if self._start is None:
            return
        wall0, cpu0, queued0 = self._start
        self._start = None
        wall = time.perf_counter() - wall0
        self.wall.append(wall)
        self.cpu.append(time.thread_time() - cpu0)
        self.held.append(max(wall - (self._run_queue_s() - queued0), 0.0))

    def __enter__(self) -> "GuiBusyMeter":
        QApplication.instance().installEventFilter(self)
        QAbstractEventDispatcher.instance().aboutToBlock.connect(self._about_to_block)
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.stop()
        QAbstractEventDispatcher.instance().aboutToBlock.disconnect(self._about_to_block)
        QApplication.instance().removeEventFilter(self)

    def worst(self, kind: str = "cpu") -> float:
        """The longest stretch by `kind`: "cpu", "held" or "wall" (seconds)."""
        return max(getattr(self, kind), default=0.0)

    def describe(self, kind: str = "cpu") -> str:
        """'66 ms CPU, 2053 ms held, 4277 ms wall, began with FileSlot:LayoutRequest' for the
        longest stretch by `kind`."""
        values = getattr(self, kind)
        if not values:
            return "no busy stretch"
        i = values.index(max(values))
        return (f"{self.cpu[i] * 1000:.0f} ms CPU, {self.held[i] * 1000:.0f} ms held, "
                f"{self.wall[i] * 1000:.0f} ms wall, began with {self.first[i]}")

    @property
    def timer_gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.ticks, self.ticks[1:])]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100, nearest rank) of values; 0 for none."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))] if s else 0.0
