"""The main window: settings on the left, live plots in the middle, samples / chat / data on the
right. All engine work happens on the worker thread (studio.worker); studio.run_controller owns
the run and its RunState. This module only lays out the panels, wires signals, applies the
control table of the current state (studio.protocol.CONTROLS) and shows errors without ever
closing the app. Training runs are driven by studio.training_actions, model files by
studio.window_actions."""

from __future__ import annotations

import sys

from PySide6.QtCore import QSettings, QSize, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QMainWindow, QMessageBox, QSplitter,
                               QTabWidget, QVBoxLayout, QWidget)

from studio.app_settings import APP_NAME, open_settings
from studio.open_model_action import open_model
from studio.protocol import FileTask, RunState
from studio.run_controller import RunController
from studio.runs_actions import install_runs
from studio.training_actions import TrainingActions
from studio.ui import theme
from studio.ui.autosave_box import AutosaveBox
from studio.ui.chat_panel import ChatPanel
from studio.ui.data_panel import DataPanel
from studio.ui.device_panel import DevicePanel
from studio.ui.plots import LivePlots
from studio.ui.run_bar import RunBar
from studio.ui.samples_panel import SamplesPanel
from studio.ui.settings_panel import SettingsPanel
from studio.ui.widgets import ColumnScrollArea, enable_with_reason, fit_to_screen
from studio.window_actions import WindowActions

# Why Export is off (its tooltip):
NO_MODEL_WHY = "No model yet: train one or open a checkpoint."
BUSY_MODEL_WHY = "Training is running: pause it to export the current weights."
TASK_WHY = "Wait for the export, save or opening in progress."
# Why an input of a run is off (its tooltip):
BUSY_WHY = "Fixed while a run is going (paused too): Stop it, or let it finish, to change this."
OPENED_WHY = ("The opened model fixes this: only its step counts can change. New model (beside "
              "Continue) trains one from scratch with other settings.")
PREFERRED_SIZE = QSize(1400, 880)  # where the screen has room; less on a smaller one
NO_TUNE_WHY = ("This run was trained without dialogues: it has no tuning stage to go on with. "
               "New model (beside Continue) trains one with tuning.")


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


class MainWindow(TrainingActions, WindowActions, QMainWindow):
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
        self._build()
        self._menus()
        install_runs(self)  # View › Runs…, training-health warnings
        fit_to_screen(self, PREFERRED_SIZE)
        self._restore(pretrain_path, tune_path, device)  # a saved geometry wins, clipped below
        self._keep_on_screen()
        self._update_actions()
        self._preview_run()

    # -- layout -----------------------------------------------------------------------------
    def _build(self) -> None:
        self.device_panel = DevicePanel()
        self.data_panel = DataPanel()
        self.settings_panel = SettingsPanel()
        self.autosave_box = AutosaveBox()
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(8, 8, 8, 8)
        ll.setSpacing(6)
        for w in (self.device_panel, self.settings_panel, self.autosave_box):
            ll.addWidget(w)
        # Spare height goes below the last box (the stretch outranks the boxes' Preferred
        # policy). No Maximum height on the settings panel: in a narrow column its wrapped
        # labels (estimate, errors) need more height than its size hint, and were overdrawn.
        ll.addStretch(1)
        # As narrow as its content allows (fields shrink to FIELD_MIN_WIDTH, paths are elided);
        # it opens at its preferred width, at most 30% of the window (showEvent).
        scroll = ColumnScrollArea(left)

        self.run_bar = RunBar()
        self.plots = LivePlots()
        self.samples_panel = SamplesPanel()
        self.chat_panel = ChatPanel()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("sideTabs")
        data_tab = QWidget()
        dl = QVBoxLayout(data_tab)
        dl.setContentsMargins(6, 6, 6, 6)
        dl.addWidget(self.data_panel)
        dl.addWidget(self.data_panel.preview, 1)
        self.tabs.addTab(data_tab, "Data")
        self.tabs.addTab(self.samples_panel, "Samples")
        self.tabs.addTab(self.chat_panel, "Chat")
        work = QSplitter(Qt.Horizontal)
        work.addWidget(self.plots)
        work.addWidget(self.tabs)
        work.setStretchFactor(0, 1)  # extra width goes to the plots
        work.setStretchFactor(1, 0)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(8, 8, 8, 8)
        rl.setSpacing(8)
        rl.addWidget(self.run_bar)
        rl.addWidget(work, 1)
        main = QSplitter(Qt.Horizontal)
        main.addWidget(scroll)
        main.addWidget(right)
        main.setStretchFactor(1, 1)
        self._splitters = (main, work)
        self.setCentralWidget(main)

        rb = self.run_bar
        rb.train_button.clicked.connect(self.start_training)
        rb.pause_button.clicked.connect(self.toggle_pause)
        rb.stop_button.clicked.connect(self.stop_training)
        rb.new_button.clicked.connect(self.new_model)
        rb.export_button.clicked.connect(self.export_clicked)
        self.device_panel.deviceChanged.connect(
            lambda: self.settings_panel.set_device(self.device_panel.current()))
        self.settings_panel.set_device(self.device_panel.current())
        self.settings_panel.changed.connect(self._update_actions)
        self.settings_panel.changed.connect(self._preview_run)
        self.data_panel.dataChanged.connect(self._update_actions)
        self.data_panel.errorOccurred.connect(self.show_error)
        self.chat_panel.sendRequested.connect(self._chat)

        self.controller = c = RunController(self)
        w = c.worker
        # Explicitly queued: these run in the GUI thread whatever PySide guesses for a callable.
        for signal, slot in ((w.preparing, self._on_preparing), (w.metrics, self._on_metrics),
                             (w.error, self.show_error), (w.token, self.chat_panel.append_token),
                             (w.chatDone, self._on_chat_done), (w.autosaved, self._on_autosaved)):
            signal.connect(slot, Qt.QueuedConnection)
        for signal, slot in ((c.changed, self._update_actions), (c.sessionReady, self._on_session),
                             (c.paused, self._on_paused), (c.resumed, self._on_resumed),
                             (c.ended, self._on_ended), (c.loaded, self._on_loaded),
                             (c.exported, self._on_exported), (c.saved, self._on_saved)):
            signal.connect(slot)  # the controller lives in this thread: direct

    def _menus(self) -> None:
        m = self.menuBar().addMenu("&File")
        self._open_actions: list[QAction] = []  # idle only
        self._data_actions: list[QAction] = []  # idle, and not for an opened model
        for text, slot, key in (
                ("Open pretraining text…", lambda: self.data_panel._ask("pretrain"), "Ctrl+O"),
                ("Open tune dialogues…", lambda: self.data_panel._ask("tune"), None),
                (None, None, None),
                ("Open model…", lambda: open_model(self), "Ctrl+Shift+O"),
                ("Open checkpoint…", self.open_checkpoint, None),
                ("Open exported GGUF…", self.open_gguf, None),
                ("Open Hugging Face folder…", self.open_hf, None),
                ("New model (train from scratch)", self.new_model, None),
                ("Save checkpoint…", self.save_checkpoint, "Ctrl+S"),
                ("Export GGUF or Hugging Face…", self.export_clicked, "Ctrl+E"),
                (None, None, None),
                ("Quit", self.close, QKeySequence.Quit)):
            if text is None:
                m.addSeparator()
                continue
            act = QAction(text, self)
            act.triggered.connect(slot)
            if key:
                act.setShortcut(key)
            m.addAction(act)
            if text.startswith("Save checkpoint"):
                self.save_action = act
            elif text.startswith("Export GGUF"):
                self.export_action = act
            elif text.startswith(("Open model", "Open checkpoint", "Open exported",
                                  "Open Hugging")):
                self._open_actions.append(act)
            elif text.startswith(("Open pretraining", "Open tune")):
                self._data_actions.append(act)
            elif text.startswith("New model"):
                self.new_model_action = act

    # -- state ---------------------------------------------------------------------------
    def _update_actions(self) -> None:
        """Apply the controls of the run state (studio.protocol.CONTROLS), narrowed by what the
        state does not know: the settings, data and device, the model, a file task in progress."""
        c, rb = self.controller, self.run_bar
        ctl, free = c.controls, c.task is FileTask.NONE
        why = self._train_problem()
        rb.train_button.setEnabled(ctl.train and free and why is None)
        rb.set_hint(why if ctl.hint else None)
        rb.pause_button.setEnabled(ctl.pause)
        rb.pause_button.setText("Resume" if ctl.resume else "Pause")
        rb.stop_button.setEnabled(ctl.stop)
        use = ctl.use_model and free and c.has_model
        for w in (self.export_action, self.save_action):
            w.setEnabled(use)
        enable_with_reason(rb.export_button, use, NO_MODEL_WHY if not c.has_model else
                           BUSY_MODEL_WHY if not ctl.use_model else TASK_WHY)
        self._apply_editable(ctl.edit)
        opening = ctl.open_model and free
        for w in [rb.new_button, *self._open_actions]:
            w.setEnabled(opening)
        self.new_model_action.setEnabled(opening and c.continue_from is not None)
        if use:
            self.chat_panel.set_available(True)
        else:
            self.chat_panel.set_available(
                False, ctl.chat_note or "No model yet: train one or open a checkpoint.")

    def _train_problem(self) -> str | None:
        """Why Train (or Continue) cannot start with what is on screen, or None."""
        if not self.settings_panel.is_valid():
            return "Fix the setting marked in red to train."
        if self.device_panel.spec() is None:
            return "No OpenCL device: see the Device box."
        if self.controller.continue_from is not None:
            return self._continue_problem()
        sp = self.settings_panel
        return self.data_panel.problem(sp.spins["tuneStepsSpin"].value(),
                                       sp.spins["vocabSizeSpin"].value(), sp.tokenizer_kind())

    def _apply_editable(self, edit: bool) -> None:
        """The inputs of a run; an opened model fixes everything but how far to train it. A
        control that is off says why in its tooltip."""
        opened = self.controller.continue_from
        only, why = None, {"": BUSY_WHY}
        if opened is not None:
            only = ("pretrainStepsSpin",) + (("tuneStepsSpin",) if opened.has_tune else ())
            if edit:
                why = {"": OPENED_WHY, "tuneStepsSpin": NO_TUNE_WHY}
        self.settings_panel.set_editable(edit, only, why)
        for w in (self.data_panel, self.device_panel):
            w.set_editable(edit and opened is None, why[""])
        for act in self._data_actions:
            act.setEnabled(edit and opened is None)
        self.autosave_box.set_editable(edit, BUSY_WHY)
        # Continue in place or as a new run: a choice only for a model with its run folder
        self.run_bar.as_new_run_check.setEnabled(
            edit and opened is not None and opened.run_dir is not None)

    def _preview_run(self) -> None:
        """Before the first run, frame the plots for the run the settings describe."""
        sp = self.settings_panel
        if (self.controller.state is not RunState.IDLE or self.plots.point_count()
                or not sp.is_valid()):
            return
        self.frame_run(preview=True)

    def _keep_on_screen(self) -> None:
        """A geometry saved on a larger screen is cut down to the screen the window opens on."""
        area = self.screen().availableGeometry()
        if self.width() > area.width() or self.height() > area.height():
            fit_to_screen(self, self.size(), area)

    def show_error(self, title: str, message: str) -> None:
        """Errors never close the app: a non-blocking dialog with what to do."""
        self.last_error = (title, message)
        self.statusBar().showMessage(title, 8000)
        box = QMessageBox(QMessageBox.Warning, title, message, QMessageBox.Ok, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.errorShown.emit(title, message)

    def showEvent(self, event):
        super().showEvent(event)
        if not self._sized:  # splitter sizes need the real width
            self._sized = True
            main, work = self._splitters
            column = main.widget(0)
            left = max(min(column.sizeHint().width(), int(self.width() * 0.3)),
                       column.minimumSizeHint().width())
            rest = max(self.width() - left, 1)
            main.setSizes([left, rest])
            # The plots get 62%, or more where the summary line (the planned run) needs it
            # and the side tabs keep their minimum width.
            p = self.plots
            line = (p.summary.fontMetrics().horizontalAdvance(p.summary.full_text())
                    + p.log_check.sizeHint().width() + 32)
            plots = max(int(rest * 0.62),
                        min(line, rest - self.tabs.minimumSizeHint().width() - work.handleWidth()))
            work.setSizes([plots, rest - plots])

    def closeEvent(self, event):
        """Closing during training sets the stop flag and waits for the step to end."""
        self._save_settings()
        self.plots.timer.stop()
        if self.controller.state is not RunState.IDLE:  # the worker saves before its thread ends
            self.statusBar().showMessage("Stopping training and saving…")
        self.controller.shutdown()
        super().closeEvent(event)


def configure_application(app: QApplication) -> None:
    """Name the application once, not as organization and application both: Qt puts its data
    under <organization>/<application>, which made the runs folder ".../OpenCL LLM Studio/OpenCL
    LLM Studio/runs". Settings go to <config>/OpenCL LLM Studio/studio.conf (MainWindow)."""
    app.setOrganizationName("")
    app.setApplicationName(APP_NAME)
    app.setStyle("Fusion")


def run_app(pretrain_path=None, tune_path=None, device=None) -> int:
    """Open the main window (the `llm-studio` command without a subcommand)."""
    app = QApplication.instance() or QApplication(sys.argv)
    configure_application(app)
    window = MainWindow(pretrain_path=pretrain_path, tune_path=tune_path, device=device)
    window.show()
    return app.exec()
