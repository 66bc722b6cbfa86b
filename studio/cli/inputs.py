"""Argument types for the `llm-studio` options: every number a person can type is checked
when the command line is read, so a zero, negative, huge, NaN or infinite value ends with
argparse's "error: argument --x: ..." and exit status 2, never a traceback or an hour-long
allocation. The ranges are the widest the engine can run (upper bounds keep a typo such as an
extra zero from asking for terabytes); the engine's own checks (ModelConfig.validate, the
device memory check) still apply inside them.
"""

from __future__ import annotations

import argparse
import math

MAX_STEPS = 10**9          # a billion optimizer steps: years on any device
MAX_SEED = 2**32 - 1       # numpy / the studio's seed range
MAX_TOKENS = 1_000_000     # tokens one generation may ask for
MAX_VOCAB = 1_000_000      # SentencePiece vocabularies stay far below this
MAX_WIDTH = 65_536         # d_model, context_length, batch_size
MAX_LAYERS = 1_024


def count(lo: int, hi: int):
    """An argparse type: a whole number in [lo, hi]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range: use {lo} to {hi:,}")
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
                f"{text} is out of range: use a number {'above' if lo_open else 'from'} {lo} "
                f"{'and below' if hi_open else 'to'} {hi}")
        return value
    parse.__name__ = "number"
    return parse
