"""The main window, built from parts with explicit references: settings on the left, live plots
in the middle, samples / chat / data on the right (studio.ui.window.window_layout).

One click of Train: TrainingActions.start_training (studio.ui.window.training_actions) -> RunController
.train (studio.ui.run.run_controller) -> WorkerHost (studio.ui.run.worker_host) -> TrainingWorker.start
on the worker's thread (studio.ui.run.worker). What the worker reports comes back the same way:
worker -> controller (its only receiver, which re-emits each signal) -> the parts. The parts:
  - TrainingActions: Train / Continue, Pause, Stop, New model; metrics, samples, a run's end;
  - WindowActions (studio.ui.window.window_actions): File menu, chat, export, checkpoints, drops;
  - TuneActions (studio.ui.window.tune_actions): the Device menu (tune the kernels, tune before
    training) and whether the device and model on screen are tuned;
  - RunsActions (studio.ui.window.runs_actions): View › Runs and the training-health warnings;
  - WindowControls (studio.ui.window.window_controls): which controls the run state enables.
Each takes the panels, the controller and the window (studio.ui.window.window_face.WindowFace) it
uses. The window itself only builds them, keeps its settings (studio.ui.window.window_settings) and
shows errors without ever closing the app."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QSize, Qt, Signal
from PySide6.QtWidgets import QMainWindow, QMessageBox, QWidget

from opencl_llm_studio.studio.app_settings import APP_NAME
from opencl_llm_studio.studio.ui.window.auto_actions import AutoActions
from opencl_llm_studio.studio.ui.window.settings_store import open_settings
from opencl_llm_studio.studio.protocol import RunState
from opencl_llm_studio.studio.ui import theme
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.window.runs_actions import RunsActions
from opencl_llm_studio.studio.ui.window.training_actions import TrainingActions
from opencl_llm_studio.studio.ui.window.tune_actions import TuneActions
from opencl_llm_studio.studio.ui.widgets import fit_to_screen
from opencl_llm_studio.studio.ui.window.window_actions import WindowActions
from opencl_llm_studio.studio.ui.window.window_controls import WindowControls
from opencl_llm_studio.studio.ui.window.window_layout import WindowLayout
from opencl_llm_studio.studio.ui.window.window_settings import restore_settings, save_settings

PREFERRED_SIZE = QSize(1400, 880)  # where the screen has room; less on a smaller one

_gc = None


def _collect_garbage_in_gui_thread():
    """Python's cyclic garbage collector runs in whichever thread allocates when a threshold is
    crossed. When that is the training worker and the garbage holds Qt objects, their C++
    destructors take Qt's connection lock and then wait for the GIL, while the GUI thread holds
    the GIL and waits for that lock: a deadlock (seen here in the stop/close stress test). So
    automatic collection is switched off and the GUI thread collects on a timer instead
    (pyqtgraph's GarbageCollector, made for exactly this)."""
    global _gc
    if _gc is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector
        _gc = GarbageCollector(interval=0.5)


class MainWindow(QMainWindow):
    trainingFinished = Signal(object)  # RunResult of any run's end, after the window showed it
    modelOpened = Signal(object)       # SessionInfo of an opened checkpoint / GGUF / HF folder
    chatFinished = Signal(object)      # the answer, or None
    exportFinished = Signal(object)    # ExportResult
    errorShown = Signal(str, str)      # title, message

    def __init__(self, pretrain_path=None, tune_path=None, device=None,
                 settings: QSettings | None = None):
        super().__init__()
        self._sized = False  # the splitters get their sizes at the first show (real width)
        _collect_garbage_in_gui_thread()
        theme.apply_plot_theme()
        self.settings = settings or open_settings()
        self.last_error: tuple[str, str] | None = None
        self.setWindowTitle(APP_NAME)
        self.setAcceptDrops(True)
        self.setStyleSheet(theme.STYLESHEET)
        self.window_layout = layout = WindowLayout()
        self.setCentralWidget(layout.central)
        self.panels = p = layout.panels
        # the panels by name, for the window's readers (tests, benchmarks)
        self.device_panel, self.data_panel = p.device_panel, p.data_panel
        self.settings_panel, self.autosave_box = p.settings_panel, p.autosave_box
        self.run_bar, self.plots, self.tabs = p.run_bar, p.plots, p.tabs
        self.samples_panel, self.chat_panel = p.samples_panel, p.chat_panel

        self.controller = c = RunController(self)
        for signal in (p.settings_panel.changed, p.data_panel.dataChanged, c.changed):
            signal.connect(self.update_actions)   # first: the parts see the controls applied
        self.tuning = TuneActions(self, p, c, self.settings)
        self.training = TrainingActions(self, p, c, self.tuning.autotune)
        self.auto = AutoActions(p, c)
        self.files = WindowActions(self, p, c, self.settings)
        self.menu = self.files.build_menu(self.menuBar(), self.training.new_model, self.close)
        self.device_menu = self.tuning.build_menu(self.menuBar())
        # at the menu bar's right end: a status bar made now would take height from the column
        self.menuBar().setCornerWidget(self.tuning.label, Qt.TopRightCorner)
        self.controls = WindowControls(p, c, self.menu, self.tuning)
        self.runs = RunsActions(self, self.menuBar(), c, p.autosave_box, p.run_bar, self.files)
        p.run_bar.export_button.clicked.connect(self.files.export_clicked)
        p.device_panel.deviceChanged.connect(
            lambda: p.settings_panel.set_device(p.device_panel.current()))
        p.settings_panel.set_device(p.device_panel.current())
        p.data_panel.errorOccurred.connect(self.show_error)
        c.error.connect(self.show_error)

        fit_to_screen(self, PREFERRED_SIZE)
        # a saved geometry wins, clipped below
        restore_settings(self.settings, p, self, pretrain_path, tune_path, device)
        # after the start's own loads: a status bar made for them would take height from the
        # settings column (test_studio_visibility); bound: no lambda holds self
        p.data_panel.fileLoaded.connect(self.status_for_a_while)
        self._keep_on_screen()
        self.update_actions()
        self.tuning.show_status()
        self.training.preview_run()

    # -- what the parts may ask of the window (studio.ui.window.window_face.WindowFace) ---------------
    def widget(self) -> QWidget:
        return self

    def status(self, text: str, timeout_ms: int = 0) -> None:
        self.statusBar().showMessage(text, timeout_ms)

    def status_for_a_while(self, text: str) -> None:
        self.status(text, 8000)

    def update_actions(self) -> None:
        self.controls.update()

    def show_error(self, title: str, message: str) -> None:
        """Errors never close the app: a non-blocking dialog with what to do."""
        self.last_error = (title, message)
        self.statusBar().showMessage(title, 8000)
        box = QMessageBox(QMessageBox.Warning, title, message, QMessageBox.Ok, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.errorShown.emit(title, message)

    # -- the window's own events -----------------------------------------------------------
    def _keep_on_screen(self) -> None:
        """A geometry saved on a larger screen is cut down to the screen the window opens on."""
        area = self.screen().availableGeometry()
        if self.width() > area.width() or self.height() > area.height():
            fit_to_screen(self, self.size(), area)

    def showEvent(self, event):
        super().showEvent(event)
        if not self._sized:  # splitter sizes need the real width
            self._sized = True
            self.window_layout.first_sizes(self.width())

    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls() and self.controller.state is RunState.IDLE:
            event.acceptProposedAction()

    def dropEvent(self, event):
        self.files.drop([Path(url.toLocalFile()) for url in event.mimeData().urls()])
        event.acceptProposedAction()

    def closeEvent(self, event):
        """Closing during training sets the stop flag and waits for the step to end."""
        save_settings(self.settings, self.panels, self)
        self.plots.timer.stop()
        if self.controller.state is not RunState.IDLE:  # the worker saves before its thread ends
            self.statusBar().showMessage("Stopping training and saving…")
        self.controller.shutdown()
        super().closeEvent(event)
