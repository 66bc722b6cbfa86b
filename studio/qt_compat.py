"""Work around reference-count bugs of PySide6 6.12.0 on CPython 3.11.

Seen here (PySide6-Essentials 6.12.0, CPython 3.11.7), measured with sys.getrefcount:
- every call of a C++ method that returns void (QLabel.setText, QWidget.setEnabled, ...) hands
  Python a `None` it never took a reference for: 200 calls lower None's count by 200;
- `Signal.emit()` returns `True` the same way: 200 emits lower True's count by 200.
It looks as if the wheel assumes these objects are immortal, which they are only from CPython
3.12 on. After a few thousand calls (seconds of a live plot) CPython aborts with
"Fatal Python error: none_dealloc" (or bool_dealloc).

The fix is what CPython 3.12 does: give None, True and False reference counts no program can
exhaust. It is applied only when the leak is measured, so a fixed PySide6 or a newer Python is
left alone. Report: the studio tests crash without it.
"""

from __future__ import annotations

import ctypes
import sys

_IMMORTAL = 1 << 40  # 10^12 references: decades of stolen references at any GUI's pace
_done: set[str] = set()


def _stolen() -> dict[str, object]:
    """Which singletons this PySide6 steals references of."""
    from PySide6.QtCore import QObject, Signal

    class Probe(QObject):
        ping = Signal()

    probe = Probe()
    probe.ping.connect(probe.deleteLater)  # connected: emit() reports delivery with True
    probe.blockSignals(True)               # ...but nothing is delivered
    before = {k: sys.getrefcount(v) for k, v in (("None", None), ("True", True))}
    for _ in range(64):
        probe.setObjectName("probe")   # a void method
        probe.ping.emit()
    after = {k: sys.getrefcount(v) for k, v in (("None", None), ("True", True))}
    probe.blockSignals(False)
    probe.ping.disconnect()
    out = {}
    if before["None"] - after["None"] >= 64:
        out["None"] = None
    if before["True"] - after["True"] >= 64:
        out.update({"True": True, "False": False})
    return out


def make_none_immortal() -> set[str]:
    """Apply the workaround once where this PySide6 leaks; return the names made immortal."""
    if _done or sys.version_info >= (3, 12) or hasattr(sys, "getobjects"):
        return _done  # 3.12+: already immortal; getobjects: a trace-refs build, other layout
    for name, obj in _stolen().items():
        refcnt = ctypes.c_ssize_t.from_address(id(obj))  # ob_refcnt is PyObject's first field
        before = sys.getrefcount(obj)
        refcnt.value += _IMMORTAL
        if sys.getrefcount(obj) - before != _IMMORTAL:  # an unexpected layout: undo
            refcnt.value -= _IMMORTAL
            continue
        _done.add(name)
    return _done
