"""The main window is built from parts with explicit references, not mixins, and every worker
signal reaches it through the RunController (issue 23, item 1): a click goes window ->
controller -> host -> worker, and what the worker reports comes back worker -> controller ->
window."""

import ast
import importlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from PySide6.QtCore import SIGNAL, QMetaMethod, QObject, QSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("opencl_llm_studio/studio", "opencl_llm_studio/engine")


def _multi_base_classes():
    """(module name, class name) of every class in studio/ and engine/ with more than one base,
    found in the source (only those modules are imported)."""
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [n.name for n in ast.walk(tree)
                     if isinstance(n, ast.ClassDef) and len(n.bases) > 1]
            if names:
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                yield from ((module, name) for name in names)


def _mixin_bases(cls) -> list[type]:
    """The plain project classes a class of several bases borrows methods from: bases of `cls`
    defined in studio/ or engine/ that are not QObjects (a Qt class's own QObject base, and a
    class of library bases only such as (str, Enum), are not mixins)."""
    if len(cls.__bases__) < 2:
        return []
    return [b for b in cls.__bases__ if b.__module__.startswith("opencl_llm_studio.")
            and not issubclass(b, QObject)]


def test_no_mixin_classes_in_studio_or_engine():
    found = {}
    for module, name in _multi_base_classes():
        cls = getattr(importlib.import_module(module), name)
        bases = _mixin_bases(cls)
        if bases:
            found[f"{module}.{name}"] = [b.__name__ for b in bases]
    assert not found, f"mixin-style classes (compose a part instead): {found}"


def test_the_mixin_rule_can_fail():
    """The rule above sees a mixin: a QObject, or a plain engine class, that borrows methods
    from a plain project class; library bases alone are not one."""
    import enum

    from opencl_llm_studio.engine.data.dialogue import Message   # any plain project classes
    from opencl_llm_studio.studio.protocol import ChatRequest
    Mixed = type("Mixed", (ChatRequest, QObject), {"__module__": "studio.fake"})
    assert _mixin_bases(Mixed) == [ChatRequest]
    Plain = type("Plain", (Message, ChatRequest), {"__module__": "engine.fake"})
    assert _mixin_bases(Plain) == [Message, ChatRequest]
    assert _mixin_bases(QObject) == []

    class Kind(str, enum.Enum):
        A = "a"
    assert _mixin_bases(Kind) == []


PARTS = {"opencl_llm_studio/studio/ui/window/training_actions.py": "TrainingActions",
         "opencl_llm_studio/studio/ui/window/window_actions.py": "WindowActions",
         "opencl_llm_studio/studio/ui/window/window_controls.py": "WindowControls",
         "opencl_llm_studio/studio/ui/window/runs_actions.py": "RunsActions",
         "opencl_llm_studio/studio/ui/run/worker_tasks.py": "ModelTasks",
         "opencl_llm_studio/studio/ui/window/tune_actions.py": "TuneActions",
         "opencl_llm_studio/studio/ui/run/worker_tune.py": "KernelTuning"}


@pytest.mark.parametrize("path,name", sorted(PARTS.items()))
def test_each_part_declares_every_attribute_it_uses(path, name):
    """Every self.X a part reads is one of its methods or set in its __init__ (a mixin read
    its host's attributes, which it never declared)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    assert init is not None, f"{name} has no __init__ taking what it uses"
    declared = {t.attr for n in ast.walk(init) for t in (
        n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign)
        else []) for t in ast.walk(t) if isinstance(t, ast.Attribute)
        and isinstance(t.value, ast.Name) and t.value.id == "self"}
    used = {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "self"}
    assert used - methods - declared == set(), f"{name} uses undeclared attributes"


@pytest.fixture
def window(qtbot, tmp_path):
    from opencl_llm_studio.studio.ui.window.main_window import MainWindow
    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    yield win
    win.close()


def _worker_signals(worker) -> list[tuple[str, str]]:
    """(name, signature) of each signal TrainingWorker declares."""
    mo = worker.metaObject()
    methods = (mo.method(i) for i in range(mo.methodOffset(), mo.methodCount()))
    return [(bytes(m.name()).decode(), bytes(m.methodSignature()).decode())
            for m in methods if m.methodType() == QMetaMethod.Signal]


def test_the_controller_is_the_only_receiver_of_the_worker(window):
    """Each worker signal has one receiver, the controller, which re-emits it under its name;
    no window or part slot is connected to the worker."""
    worker, c = window.controller.host.worker, window.controller
    signals = _worker_signals(worker)
    assert {"metrics", "preparing", "error", "token", "chatDone", "autosaved", "sessionReady",
            "finished", "stopped", "failed"} <= {name for name, _ in signals}
    receivers = {name: worker.receivers(SIGNAL(sig)) for name, sig in signals}
    assert receivers == {name: 1 for name, _ in signals}
    missing = [name for name, _ in signals if not hasattr(type(c), name)]
    assert not missing, f"the controller does not pass on {missing}"


def test_metrics_reach_the_plots_through_the_controller(qtbot, window):
    from opencl_llm_studio.engine.metrics import StepMetrics
    worker, c = window.controller.host.worker, window.controller
    before = window.plots.point_count()
    m = StepMetrics(1, 600, "pretrain", 4.4, 1.0, 0.003, 1.0, 1.0,
                    warnings=["the learning rate is far too high"])
    with qtbot.waitSignal(c.metrics, timeout=3000) as passed:
        worker.metrics.emit([m])   # as the worker's thread sends it: queued
    assert passed.args == [[m]]
    qtbot.waitUntil(lambda: window.plots.point_count() > before, timeout=3000)
    # the Runs part heard it from the controller too: the health warning is shown
    assert "far too high" in window.statusBar().currentMessage()


def test_worker_errors_and_chat_pieces_come_through_the_controller(qtbot, window):
    worker, c = window.controller.host.worker, window.controller
    with qtbot.waitSignal(window.errorShown, timeout=3000) as shown:
        with qtbot.waitSignal(c.error, timeout=3000):
            worker.error.emit("Export failed", "The disk is full.")
    assert shown.args == ["Export failed", "The disk is full."]
    with qtbot.waitSignal(c.token, timeout=3000):
        worker.token.emit("Paris")


DROPPED = """
import gc, os, sys, weakref
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
app = QApplication([])
from opencl_llm_studio.studio.ui.window.main_window import MainWindow
win = MainWindow(settings=QSettings(sys.argv[1], QSettings.IniFormat))
thread, alive = win.controller.host.thread, weakref.ref(win)
del win
app.processEvents()
gc.collect()
print(alive() is None, thread.isRunning())
"""


def test_a_window_dropped_unclosed_is_freed_and_ends_its_thread(tmp_path):
    """The garbage collector frees a dropped window (the mixin window never was: held through
    Qt connections the collector cannot see, likely its lambdas capturing the window), and
    freeing it unclosed ends the worker's thread first (Qt aborts the process when a running
    QThread is destroyed)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", DROPPED, str(tmp_path / "s.ini")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "False"], r.stdout + r.stderr[-2000:]
