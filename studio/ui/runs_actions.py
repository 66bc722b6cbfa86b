"""The Runs window of the main window (View › Runs, Ctrl+R) and the training-health warnings.

The Runs panel lists the runs folder of Autosave; Open, Continue and Export go through the main
window's own File › Open checkpoint path, so they behave exactly like it (Continue then waits for
Train, with the step counts on the left; Export opens the export dialog once the model is open).
A health warning from the engine (StepMetrics.warnings) is shown once in the status bar and as a
non-blocking message: training goes on, the person decides.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QSize, Qt, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMessageBox

from studio.ui.runs_panel import RunsPanel
from studio.ui.widgets import fit_to_screen


def install_runs(window) -> None:
    """Add View › Runs… to `window` (studio.ui.main_window.MainWindow) and the health-warning display."""
    window.runs_panel = None
    act = QAction("Runs…", window)
    act.setObjectName("runsAction")
    act.setShortcut("Ctrl+R")
    act.setToolTip("Every training run: compare curves, continue, export, rename, delete")
    act.triggered.connect(lambda: show_runs(window))
    window.menuBar().addMenu("&View").addAction(act)
    window.runs_action = act
    # A QObject of the GUI thread receives the worker's signal: connected to a plain callable,
    # a queued signal would run it in the worker's thread.
    window.runs_hooks = _Hooks(window)
    window.controller.worker.metrics.connect(window.runs_hooks.warn, Qt.QueuedConnection)
    window.trainingFinished.connect(window.runs_hooks.refresh)
    # Open / Continue / Export follow the run state while the window is open (Train pressed,
    # a checkpoint loading), as the main window's own File menu does.
    window.controller.changed.connect(window.runs_hooks.follow)


def show_runs(window) -> RunsPanel:
    """Open (or raise) the Runs window, listing the Autosave runs folder."""
    panel = window.runs_panel
    if panel is None:
        panel = RunsPanel(window.autosave_box.runs_root())
        panel.setWindowFlag(Qt.Window)
        panel.setParent(window, Qt.Window)
        panel.setWindowTitle("Runs")
        panel.setObjectName("runsPanel")
        fit_to_screen(panel, QSize(1200, 820), window.screen().availableGeometry())
        panel.openRequested.connect(lambda p: _open(window, p))
        panel.continueRequested.connect(lambda p: _open(window, p, then=_ask_for_steps))
        panel.exportRequested.connect(lambda p: _open(window, p, then=_export))
        window.runs_panel = panel
    else:
        panel.set_root(window.autosave_box.runs_root())
    panel.set_busy(not window.controller.free)
    panel.show()
    panel.raise_()
    return panel


class _Hooks(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.window = window

    @Slot(object)
    def warn(self, records) -> None:
        _warn(self.window, records)

    @Slot(object)
    def refresh(self, _result=None) -> None:
        panel = self.window.runs_panel
        if panel is not None and panel.isVisible():
            panel.set_busy(not self.window.controller.free)
            panel.refresh()

    @Slot()
    def follow(self) -> None:
        panel = self.window.runs_panel
        if panel is not None:
            panel.set_busy(not self.window.controller.free)


def _open(window, path: str, then: Callable[[object], None] | None = None) -> None:
    """Open `path` as File › Open checkpoint does; then(window) once the model is open."""
    if not window.controller.free:
        window.statusBar().showMessage("Stop or finish the training first.", 6000)
        return
    if then is not None:
        # the controller's loaded comes for every load, None when it failed (the window's own
        # handler, connected first, has shown the model or the error): the hook lasts one load
        def after(info):
            window.controller.loaded.disconnect(after)
            if info is not None:
                then(window)
        window.controller.loaded.connect(after)
    window.open_checkpoint(path)
    window.activateWindow()


def _export(window) -> None:
    window.export_clicked()


def _ask_for_steps(window) -> None:
    button = window.run_bar.train_button  # it reads "Continue" for an opened run
    button.setFocus()
    window.statusBar().showMessage(f"Raise the step counts on the left, then press "
                                   f"{button.text().lstrip('▶ ')} to train this run further "
                                   "in its folder (tick “as a new run” to keep it as it is).",
                                   12000)


def _warn(window, records) -> None:
    for m in records:
        for text in m.warnings or ():
            window.statusBar().showMessage(f"Training health: {text}", 30000)
            box = QMessageBox(QMessageBox.Warning, "Training health", text, QMessageBox.Ok,
                              window)
            box.setAttribute(Qt.WA_DeleteOnClose)
            box.setObjectName("healthWarning")
            box.open()
