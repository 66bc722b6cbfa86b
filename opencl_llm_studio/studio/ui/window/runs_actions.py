"""The Runs window of the main window (View › Runs, Ctrl+R) and the training-health warnings.

A part of studio.ui.window.main_window.MainWindow, composed: it holds what it is given (the window as
studio.ui.window.window_face.WindowFace, the RunController, the autosave box, the run bar and the file
part) and listens to the controller only, never to the worker.
The Runs panel lists the runs folder of Autosave; Open, Continue and Export go through the main
window's own File › Open checkpoint path (studio.ui.window.window_actions), so they behave exactly like
it (Continue then waits for Train, with the step counts on the left; Export opens the export
dialog once the model is open). A health warning from the engine (StepMetrics.warnings) is shown
once in the status bar and as a non-blocking message: training goes on, the person decides.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenuBar, QMessageBox

from opencl_llm_studio.studio.ui.panels.autosave_box import AutosaveBox
from opencl_llm_studio.studio.ui.panels.run_bar import RunBar
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.panels.runs_panel import RunsPanel
from opencl_llm_studio.studio.ui.widgets import fit_to_screen
from opencl_llm_studio.studio.ui.window.window_actions import WindowActions
from opencl_llm_studio.studio.ui.window.window_face import WindowFace


class RunsActions:
    def __init__(self, window: WindowFace, menu_bar: QMenuBar, controller: RunController,
                 autosave_box: AutosaveBox, run_bar: RunBar, files: WindowActions):
        self.window = window
        self.controller = controller
        self.autosave_box = autosave_box   # its runs folder is the one listed
        self.run_bar = run_bar             # its Train button, named in the Continue prompt
        self.files = files                 # File › Open checkpoint, Export
        self.panel: RunsPanel | None = None  # made at its first showing
        self.action = act = QAction("Runs…", window.widget())
        act.setObjectName("runsAction")
        act.setShortcut("Ctrl+R")
        act.setToolTip("Every training run: compare curves, continue, export, rename, delete")
        act.triggered.connect(self.show)
        menu_bar.addMenu("&View").addAction(act)
        controller.metrics.connect(self.warn)
        controller.ended.connect(self.refresh)
        # Open / Continue / Export follow the run state while the window is open (Train pressed,
        # a checkpoint loading), as the main window's own File menu does.
        controller.changed.connect(self.follow)

    def show(self) -> RunsPanel:
        """Open (or raise) the Runs window, listing the Autosave runs folder."""
        panel = self.panel
        if panel is None:
            parent = self.window.widget()
            panel = RunsPanel(self.autosave_box.runs_root())
            panel.setWindowFlag(Qt.Window)
            panel.setParent(parent, Qt.Window)
            panel.setWindowTitle("Runs")
            panel.setObjectName("runsPanel")
            fit_to_screen(panel, QSize(1200, 820), parent.screen().availableGeometry())
            panel.openRequested.connect(self.open)
            panel.continueRequested.connect(lambda p: self.open(p, then=self._ask_for_steps))
            panel.exportRequested.connect(lambda p: self.open(p, then=self.files.export_clicked))
            self.panel = panel
        else:
            panel.set_root(self.autosave_box.runs_root())
        panel.set_busy(not self.controller.free)
        panel.show()
        panel.raise_()
        return panel

    def refresh(self, _result=None) -> None:
        """A run ended: list it."""
        if self.panel is not None and self.panel.isVisible():
            self.panel.set_busy(not self.controller.free)
            self.panel.refresh()

    def follow(self) -> None:
        if self.panel is not None:
            self.panel.set_busy(not self.controller.free)

    def open(self, path: str, then: Callable[[], object] | None = None) -> None:
        """Open `path` as File › Open checkpoint does; then() once the model is open."""
        c = self.controller
        if not c.free:
            self.window.status("Stop or finish the training first.", 6000)
            return
        if then is not None:
            # the controller's loaded comes for every load, None when it failed (the window's
            # own handler, connected first, has shown the model or the error): the hook lasts
            # one load
            def after(info):
                c.loaded.disconnect(after)
                if info is not None:
                    then()
            c.loaded.connect(after)
        self.files.open_checkpoint(path)
        self.window.widget().activateWindow()

    def _ask_for_steps(self) -> None:
        button = self.run_bar.train_button  # it reads "Continue" for an opened run
        button.setFocus()
        self.window.status(f"Raise the step counts on the left, then press "
                           f"{button.text().lstrip('▶ ')} to train this run further in its "
                           "folder (tick “as a new run” to keep it as it is).", 12000)

    def warn(self, records) -> None:
        """The engine's training-health warnings of these StepMetrics."""
        for m in records:
            for text in m.warnings or ():
                self.window.status(f"Training health: {text}", 30000)
                box = QMessageBox(QMessageBox.Warning, "Training health", text, QMessageBox.Ok,
                                  self.window.widget())
                box.setAttribute(Qt.WA_DeleteOnClose)
                box.setObjectName("healthWarning")
                box.open()
