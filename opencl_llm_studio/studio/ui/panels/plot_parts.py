"""What the live plots are made of besides the widget (studio.ui.panels.plots.LivePlots): colours,
curve names and the titles that hold the legend and the dashed lines' meaning, the help note,
the growing Series, the dot of a lone point, and where the stage names go on the top axis."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFont, QFontMetrics

PALETTE = {
    "loss": "#1f77b4", "val": "#d62728", "tune_val": "#ff7f0e",
    "grad": "#2ca02c", "clip": "#7f7f7f", "lr": "#9467bd", "ref": "#8c8c8c",
}
# What each loss curve measures, for the legend, the summary line and the help note. "val" is
# measured on held-out documents of the pretraining text (never trained on; facts only where the
# text is made of facts); "tune_val" on the tune dialogues themselves (the tuning stage has no
# held-out set).
CURVE_NAMES = {"loss": "train", "val": "held-out text",
               "tune_val": "tune dialogues (training set)"}
# The "val" curve when nothing could be held out (StepMetrics.val_source == "training text").
VAL_ON_TRAINING_TEXT = "training text (nothing held out)"
LOSS_HELP = (
    "<b>What the loss curves show</b><br>"
    f"<span style='color:{PALETTE['loss']}'>━ train</span>: the loss on the batch the model "
    "has just trained on.<br>"
    f"<span style='color:{PALETTE['tune_val']}'>▼ tune dialogues</span>: the loss on the "
    "dialogues the model is tuned on (there is no held-out set of dialogues), so it falls "
    "with the training loss.<br>"
    f"<span style='color:{PALETTE['val']}'>● held-out text</span>: the loss on documents of "
    "the pretraining text that the model never trains on. On a small text the model learns its "
    "training text by heart; where the held-out documents cannot be guessed from the others "
    "(unseen facts, say) it grows confidently wrong about them and this curve <b>rises</b>, "
    "even above the dashed line. That is memorisation, expected on a tiny corpus, not a bug; "
    "much more text is what brings it down.<br>"
    "<span style='color:#8c8c8c'>- - ln(vocab)</span>: the loss of guessing uniformly among "
    "all tokens, where training starts.")
TITLE_STYLE = "font-size:11pt; color:#333333"
STAGE_NAMES = ("◂ pretrain", "tune ▸")   # left and right of the stage boundary
STAGE_GAP_PX = 5
# Curves drawn with a pen only: a single point gets a dot (show_lone_point).
LINE_ONLY = ("loss", "grad", "lr")


def legend_key(key: str, mark: str, name: str | None = None) -> str:
    """One legend entry, kept on one line when the legend wraps."""
    text = f"{mark} {name or CURVE_NAMES[key]}".replace(" ", "&nbsp;").replace("-", "&#8209;")
    return f"<span style='color:{PALETTE[key]}'>{text}</span>"


def loss_title(val_name: str | None = None, reference: str = "") -> str:
    """The loss plot's title: its legend, and the dashed line's meaning (reference: its label,
    e.g. "ln(vocab) = 6.24: random guessing"; "" before it is known)."""
    keys = [legend_key("loss", "━"), legend_key("val", "●", val_name),
            legend_key("tune_val", "▼")]
    if reference:
        keys.append(legend_key("ref", "┄", reference))
    return (f"<span style='{TITLE_STYLE}'>Loss (cross-entropy)</span> &nbsp; "
            "<a href='help' style='font-size:9pt; color:#5f6b7a'>Why&nbsp;does&nbsp;the&nbsp;"
            "held&#8209;out&nbsp;loss&nbsp;rise?</a><br><span style='font-size:9pt'>"
            + " &nbsp; ".join(keys) + "</span>")


def grad_title(reference: str = "") -> str:
    """The grad-norm plot's title, with the dashed clip line's label (reference)."""
    text = f"<span style='{TITLE_STYLE}'>Gradient norm before clipping</span>"
    if reference:
        key = legend_key("clip", "┄", reference)
        text += f" &nbsp; <span style='font-size:9pt'>{key}</span>"
    return text


def show_lone_point(curve: pg.PlotDataItem, n: int, colour: str) -> None:
    """A curve drawn with a pen only shows nothing for a single point (a 1-step run): it gets
    a dot while it has one point, and loses it once a line can be drawn. Only for curves
    made without symbols (see LINE_ONLY)."""
    if n == 1:
        curve.setSymbol("o")
        curve.setSymbolSize(7)
        curve.setSymbolBrush(colour)
        curve.setSymbolPen(None)
    elif curve.opts.get("symbol") is not None:
        curve.setSymbol(None)


class Series:
    """A growing (x, y) pair of float arrays; capacity doubles so appends are amortised O(1)."""

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self._t = np.empty(capacity, dtype=np.float64)   # wall seconds (elapsed_s) of each x
        self.n = 0

    def append(self, x: float, y: float, t: float = math.nan) -> None:
        if self.n == len(self._x):
            self._x = np.concatenate([self._x, np.empty_like(self._x)])
            self._y = np.concatenate([self._y, np.empty_like(self._y)])
            self._t = np.concatenate([self._t, np.empty_like(self._t)])
        self._x[self.n] = x
        self._y[self.n] = y
        self._t[self.n] = t
        self.n += 1

    def clear(self) -> None:
        self.n = 0

    @property
    def x(self) -> np.ndarray:
        return self._x[: self.n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self.n]

    @property
    def t(self) -> np.ndarray:
        return self._t[: self.n]


def stage_ticks(view_box: pg.ViewBox, x: float, font: QFont) -> list[tuple[float, str]]:
    """Top-axis ticks that name the stages each side of the boundary at step x: a tick label
    is centred on its tick, so each name's tick is put where its near end is STAGE_GAP_PX from
    the line, at the view's current scale (font: the one the axis draws with)."""
    (x0, x1), width = view_box.viewRange()[0], view_box.width()
    per_px = (x1 - x0) / width if width > 0 and x1 > x0 else 0.0
    fm = QFontMetrics(font)
    return [(x + side * (fm.horizontalAdvance(name) / 2 + STAGE_GAP_PX) * per_px, name)
            for name, side in zip(STAGE_NAMES, (-1, 1))]
