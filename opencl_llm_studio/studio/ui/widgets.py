"""Small widgets that never widen the window: text that changes while training (paths, the
step summary, the progress text) is shortened to the width it gets, the whole text in a tooltip.

A plain QLabel's minimum width is its whole text, and a layout passes that up to the window: one
long path or status line makes the whole window wider, and a line that grows during a run makes
the window grow by itself."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel, QProgressBar, QScrollArea, QSizePolicy, QStyle


class ElidedLabel(QLabel):
    """One line (or a few, each shortened alone) that shortens to the width it gets (in the
    middle by default, for paths), never widening the window; full_text() and the tooltip keep
    the whole text."""

    def __init__(self, parent=None, mode=Qt.ElideMiddle, min_width: int = 80):
        super().__init__(parent)
        self._full = ""
        self._mode = mode
        self.setMinimumWidth(min_width)
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)

    def setText(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def minimumSizeHint(self) -> QSize:
        return QSize(self.minimumWidth(), super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # asks for no more than its minimum: the rest is a bonus
        return QSize(self.minimumWidth(), super().sizeHint().height())

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        """Each line on its own (a text of several lines keeps them)."""
        width = max(self.contentsRect().width(), self.minimumWidth())
        fm = self.fontMetrics()
        super().setText("\n".join(fm.elidedText(line, self._mode, width)
                                  for line in self._full.split("\n")))


class ElidedProgressBar(QProgressBar):
    """A progress bar whose text (step, stage, tokens/s, ETA or a status sentence) is cut short
    with "…" when the bar is narrow, instead of being clipped at both ends; the whole text is
    in the tooltip."""

    def setFormat(self, text: str) -> None:
        super().setFormat(text)
        self.setToolTip(text)

    def text(self) -> str:  # virtual: what paintEvent draws
        full = super().text()
        room = self.width() - 16
        if room <= 0 or self.fontMetrics().horizontalAdvance(full) <= room:
            return full
        return self.fontMetrics().elidedText(full, Qt.ElideRight, room)


class ColumnScrollArea(QScrollArea):
    """A column that scrolls vertically, as narrow as its content can be laid out (never cut
    off at the right: no horizontal scrolling) and as wide as it would like to be. Both come
    from the content's own size hints, so they are right once the style sheet has been applied
    and follow the content when it changes."""

    def __init__(self, content, parent=None):
        super().__init__(parent)
        self.setWidget(content)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)

    def _extra(self) -> int:
        return self.style().pixelMetric(QStyle.PM_ScrollBarExtent) + 2 * self.frameWidth() + 2

    def minimumSizeHint(self) -> QSize:
        return QSize(self.widget().minimumSizeHint().width() + self._extra(),
                     super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(self.widget().sizeHint().width() + self._extra(), super().sizeHint().height())


def enable_with_reason(widget, on: bool, why: str = "") -> None:
    """Enable or disable `widget`; disabled with a reason, its tooltip starts with the reason
    (Qt shows tooltips on disabled widgets), then its own tip, which comes back when enabled."""
    base = widget.property("ownToolTip")
    if base is None:
        base = widget.toolTip()
        widget.setProperty("ownToolTip", base)
    widget.setEnabled(on)
    widget.setToolTip(base if on or not why else f"{why}\n\n{base}".rstrip())


TITLE_BAR = 32  # px a window manager's title bar and frame take above a window's contents


def fit_to_screen(window, preferred: QSize, area: QRect | None = None) -> None:
    """Size a top-level window to `preferred`, or less where the screen it opens on is smaller
    (area: that screen's available geometry, less panels and docks; None: asked from Qt), and
    place it inside that area. A fixed size put the Export button and the lr plot off a
    1366 x 768 screen."""
    if area is None:
        screen = window.screen() or QGuiApplication.primaryScreen()
        area = screen.availableGeometry()
    w = max(min(preferred.width(), area.width()), 1)
    h = max(min(preferred.height(), area.height() - TITLE_BAR), 1)
    window.resize(w, h)
    x = area.x() + max((area.width() - window.width()) // 2, 0)
    y = area.y() + max((area.height() - TITLE_BAR - window.height()) // 2, 0)
    window.move(x, y)
