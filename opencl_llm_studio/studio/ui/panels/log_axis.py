"""A y axis whose log mode labels only 1, 2 and 5 times a power of ten.

pyqtgraph's log axis labels every minor tick (2..9 x 10^n) once the range is under a few
decades; in a plot 150-250 px high (the Runs window's learning-rate plot, the live plots with
Log scale) "0.001 0.0009 0.0008 ..." then overlap into an unreadable smear. Labelling the 1-2-5
series keeps the ticks and a readable label every third of a decade or so.
"""

from __future__ import annotations

import math

import pyqtgraph as pg

LABELLED = (1, 2, 5)   # mantissas that keep their label
FEW = 4                # this many ticks or fewer: label them all (a range under ~1 decade)


def is_labelled(log_value: float) -> bool:
    """log_value = log10 of a tick: its mantissa (1 <= m < 10) is in LABELLED."""
    m = 10 ** (log_value - math.floor(log_value))
    m = 1.0 if m > 9.995 else m  # 10^(n - tiny) is the next decade
    return abs(m - round(m)) < 1e-3 and round(m) in LABELLED


class LogAxis(pg.AxisItem):
    """An AxisItem for plots that may be log scaled; linear mode is pyqtgraph's as is."""

    def logTickValues(self, minVal, maxVal, size, stdTicks):
        """pyqtgraph's levels, each tick once: its minor level repeats the decades of the major
        one (1 x 10^n), and their labels were drawn twice, one over the other."""
        seen, levels = set(), []
        for spacing, values in super().logTickValues(minVal, maxVal, size, stdTicks):
            kept = [v for v in values if round(v, 9) not in seen]
            seen.update(round(v, 9) for v in values)
            levels.append((spacing, kept))
        return levels

    def logTickStrings(self, values, scale, spacing):
        strings = super().logTickStrings(values, scale, spacing)
        if len(values) <= FEW:
            return strings
        return [s if is_labelled(v) else "" for s, v in zip(strings, values)]
