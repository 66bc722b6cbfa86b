"""Widgets of the studio."""

from studio.qt_compat import make_none_immortal

make_none_immortal()  # before any widget exists: see studio/qt_compat.py
