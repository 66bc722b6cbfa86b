"""Argument types for the `llm-studio` options: every number a person can type is checked
when the command line is read, so a zero, negative, huge, NaN or infinite value ends with
argparse's "error: argument --x: ..." and exit status 2, never a traceback or an hour-long
allocation. The ranges of the engine's settings are engine.limits.LIMITS (`limited`), the
ones ModelConfig.validate and the studio's fields use; the engine's other checks (d_model
divisible by n_head, the device memory check) still apply inside them.
"""

from __future__ import annotations

import argparse
import math

from opencl_llm_studio.engine.limits import LIMITS, Limit


def limited(field: str):
    """An argparse type for the engine setting `field`: its engine.limits.LIMITS range."""
    lim = LIMITS[field]
    if lim.integer:
        return count(*map(int, lim.bounds(1)))
    return number(lim.lo, lim.hi, lim.lo_open, lim.hi_open)


def count(lo: int, hi: int):
    """An argparse type: a whole number in [lo, hi]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: use {_range_text(lo, hi, False, False)}")
        return value
    parse.__name__ = "whole number"
    return parse


def number(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False):
    """An argparse type: a finite decimal number in the interval from lo to hi (open at an end
    when lo_open / hi_open)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        low_ok = value > lo if lo_open else value >= lo
        high_ok = value < hi if hi_open else value <= hi
        if not (math.isfinite(value) and low_ok and high_ok):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: use a number {_range_text(lo, hi, lo_open, hi_open)}")
        return value
    parse.__name__ = "number"
    return parse


def _range_text(lo: float, hi: float, lo_open: bool, hi_open: bool) -> str:
    """The words engine.limits.Limit.range_text uses for the same interval."""
    return Limit("", lo, hi, integer=False, lo_open=lo_open, hi_open=hi_open).range_text()
