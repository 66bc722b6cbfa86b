"""What a person can read: helpers that find text cut short or clipped in a widget tree, text
drawn inside a plot (where curves pass under it), and whether a widget lies inside a window.

Used by tests/test_studio_visibility.py; no tests here."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import (QAbstractButton, QLabel, QProgressBar, QTabBar, QToolButton,
                               QWidget)

from opencl_llm_studio.studio.ui.widgets import ElidedLabel, ElidedProgressBar



def plain_text(label: QLabel) -> str:
    """What a label shows, rich text as plain text (no-break spaces and hyphens as plain)."""
    text = label.text()
    if label.textFormat() != 0 and ("<" in text and ">" in text):  # rich text
        doc = QTextDocument()
        doc.setHtml(text)
        text = doc.toPlainText()
    return text.replace("\u00a0", " ").replace("\u2011", "-")


def shown(w: QWidget, root: QWidget) -> bool:
    """Visible in root, with an area on screen (a widget in a hidden tab is not shown)."""
    return w.isVisibleTo(root) and w.width() > 0 and w.height() > 0


def clipped_texts(root: QWidget) -> list[str]:
    """Every visible text in root that is not shown whole: an elided label or progress text,
    an unwrapped label wider than its box, a wrapped one taller than its box, a button or check
    box narrower than its text. Paths and file names (labels elided in the middle) may be
    shortened: their ends say which, the tooltip has them whole."""
    bad = []
    for w in root.findChildren(QWidget):
        if not shown(w, root) or (isinstance(w, ElidedLabel) and w._mode == Qt.ElideMiddle):
            continue
        name = w.objectName() or type(w).__name__
        if isinstance(w, ElidedLabel):
            if w.text() != w.full_text():
                bad.append(f"{name}: {w.text()!r} of {w.full_text()!r}")
        elif isinstance(w, QLabel):
            text = plain_text(w)
            if not text.strip():
                continue
            if w.wordWrap():
                need = w.heightForWidth(w.width())
                if need > w.height() + 1:
                    bad.append(f"{name}: {need} px of text in {w.height()} px: {text[:60]!r}")
            else:
                fm = w.fontMetrics()
                need = max(fm.horizontalAdvance(line) for line in text.split("\n"))
                if need > w.contentsRect().width() + 1:
                    bad.append(f"{name}: {need} px of text in {w.contentsRect().width()} px: "
                               f"{text[:60]!r}")
        elif isinstance(w, ElidedProgressBar):
            if ElidedProgressBar.text(w) != QProgressBar.text(w):
                bad.append(f"{name}: {ElidedProgressBar.text(w)!r}")
        elif isinstance(w, QAbstractButton) and not isinstance(w, QToolButton) \
                and not isinstance(w.parent(), QTabBar) and w.text():
            if w.sizeHint().width() > w.width() + 1:
                bad.append(f"{name}: {w.text()!r} needs {w.sizeHint().width()} px, has "
                           f"{w.width()}")
    return bad


def texts_inside_plots(root: QWidget) -> list[str]:
    """Text items drawn in a plot's data area (labels of lines, text items): a curve passes
    under them, or they cover each other."""
    found = []
    for plot in root.findChildren(pg.PlotWidget):
        if not shown(plot, root):
            continue
        vb = plot.getPlotItem().getViewBox()
        for item in vb.allChildren():
            if isinstance(item, (pg.TextItem, pg.InfLineLabel)) and item.isVisible() \
                    and item.toPlainText().strip():
                found.append(f"{plot.objectName()}: {item.toPlainText()!r}")
    return found


def inside(w: QWidget, window: QWidget) -> bool:
    """w is shown and its whole rectangle lies in the window's."""
    if not shown(w, window):
        return False
    top_left = w.mapTo(window, w.rect().topLeft())
    return window.rect().contains(QRect(top_left, w.size()))
