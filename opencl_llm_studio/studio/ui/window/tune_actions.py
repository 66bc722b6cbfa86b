"""The Device menu: tune the kernels for this model (issue 24 goal 4), and tune before training.

Device › Tune kernels for this model… times the GEMM and attention choices of the model the
settings describe (d_model, heads, key-value heads, context, vocabulary, batch; an opened
model's own) on the chosen device, on the worker's thread (studio.ui.run.worker_tune), within
engine.model.gemm_tune.TUNE_SECONDS: the run bar shows the product being measured and the time
against the bound, Stop cancels it (nothing is stored), and the end says what it found. `label`
(the window puts it at the right end of its menu bar) says whether the device and shape on
screen are tuned (the kernel tuning cache, engine.opencl.tune_cache). "Tune kernels before
training…" (kept in the settings) makes Train and Continue tune first on a device and shape not yet
tuned, as LLM_STUDIO_AUTOTUNE=1 does for the command line. A part of
studio.ui.window.main_window.MainWindow, composed like the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QAction, QResizeEvent
from PySide6.QtWidgets import QApplication, QLabel, QMenuBar

from opencl_llm_studio.studio.protocol import FileTask, RunState, TuneJob, TuneProgress, TuneReport
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.widgets import enable_with_reason
from opencl_llm_studio.studio.ui.window.reasons import NO_DEVICE_WHY, TASK_WHY
from opencl_llm_studio.studio.ui.window.window_face import WindowFace
from opencl_llm_studio.studio.ui.window.window_layout import Panels

AUTOTUNE_KEY = "device/autotune"   # the setting's key in the studio's settings file
TUNE_TIP = ("Time the matrix-product and attention kernels for this model on this device (up "
            "to {s:g} s; Stop cancels) and keep the fastest: training this shape here uses "
            "them. As `llm-studio tune-kernels`.")
AUTOTUNE_TEXT = "Tune kernels before training on a device not yet tuned (up to {s:g} s)"
RUN_WHY = "Training is running: Stop it, or let it finish, to tune the kernels."
TUNING_WHY = "The kernels are being tuned: Stop cancels it."
INVALID_WHY = "Fix the setting marked in red to tune the kernels for it."


@dataclass(frozen=True)
class DeviceMenu:
    """The Device menu's actions (studio.ui.window.window_controls enables them)."""
    tune_action: QAction
    autotune_action: QAction


class TuneActions:
    def __init__(self, window: WindowFace, panels: Panels, controller: RunController,
                 settings: QSettings):
        from opencl_llm_studio.engine.model.gemm_tune import TUNE_SECONDS
        self.window = window
        self.panels = panels
        self.controller = controller
        self.settings = settings
        self.seconds = TUNE_SECONDS
        self._keys: dict[int, str | None] = {}   # device index -> tune_cache device key
        self.label = QLabel()   # tuned or not, for the device and model on screen
        self.label.setObjectName("kernelTuningLabel")
        self.label.setProperty("role", "muted")
        self.label.setContentsMargins(0, 0, 8, 0)
        self._progress: TuneProgress | None = None
        self._progress_at = 0.0     # monotonic time the latest progress came
        self._cancelling = False    # Stop was pressed: the bar says so until the end
        self._timer = QTimer()      # the elapsed time moves on between progress reports
        self._timer.setInterval(250)
        self._timer.timeout.connect(self._show_progress)
        parent = window.widget()
        self.menu = DeviceMenu(QAction("Tune kernels for this model…", parent),
                               QAction(AUTOTUNE_TEXT.format(s=self.seconds), parent))
        self.menu.tune_action.setToolTip(TUNE_TIP.format(s=self.seconds))
        self.menu.tune_action.triggered.connect(self.tune)
        auto = self.menu.autotune_action
        auto.setCheckable(True)
        auto.setChecked(str(settings.value(AUTOTUNE_KEY, False)).lower() == "true")
        auto.setToolTip("Train and Continue first measure the kernels (once per device and "
                        "model shape); as LLM_STUDIO_AUTOTUNE=1 or `train --autotune`.")
        auto.toggled.connect(lambda on: settings.setValue(AUTOTUNE_KEY, on))
        c = controller
        c.tuneProgress.connect(self._on_progress)
        c.tuned.connect(self._on_tuned)
        c.changed.connect(self.show_status)   # a run that tuned first, an opened model
        panels.run_bar.stop_button.clicked.connect(self.cancel)
        panels.device_panel.deviceChanged.connect(self.show_status)
        panels.settings_panel.changed.connect(self.show_status)

    def build_menu(self, menu_bar: QMenuBar) -> DeviceMenu:
        m = menu_bar.addMenu("&Device")
        m.setToolTipsVisible(True)   # a disabled action says why
        m.addAction(self.menu.tune_action)
        m.addAction(self.menu.autotune_action)
        return self.menu

    def autotune(self) -> bool:
        """Train and Continue tune first (the setting)."""
        return self.menu.autotune_action.isChecked()

    # -- what is tuned ----------------------------------------------------------------------
    def shape(self):
        """(ModelConfig, batch size) on screen (an opened model's own), or None."""
        sp = self.panels.settings_panel
        if not sp.is_valid():
            return None
        return sp.model_config(), sp.train_config().batch_size

    def why_not(self) -> str | None:
        """Why the tune action is off now, or None."""
        c = self.controller
        if c.task is FileTask.TUNE:
            return TUNING_WHY
        if c.state is not RunState.IDLE:
            return RUN_WHY
        if c.task is not FileTask.NONE:
            return TASK_WHY
        if self.panels.device_panel.spec() is None:
            return NO_DEVICE_WHY
        return INVALID_WHY if self.shape() is None else None

    def update(self) -> None:
        """Enable the actions (studio.ui.window.window_controls calls this with the other controls)."""
        why = self.why_not()
        enable_with_reason(self.menu.tune_action, why is None, why or "")
        self.menu.autotune_action.setEnabled(self.controller.state is RunState.IDLE)

    def show_status(self) -> None:
        """`label` says whether the device and model shape on screen are tuned."""
        from opencl_llm_studio.engine.opencl import tune_cache
        device, shape = self.panels.device_panel.current(), self.shape()
        if device is None or shape is None:
            self._set_label("", "")
            return
        key = self._device_key(device)
        entry = key and tune_cache.lookup(key, tune_cache.shape_key(*shape))
        if entry:
            when = str(entry.get("measured", ""))[:10]
            self._set_label(f"Kernels tuned for this model{f' ({when})' if when else ''}",
                            f"Training this model shape on {device.name} uses the kernels "
                            "measured then.")
        else:
            self._set_label("Kernels: built-in table",
                            f"Not tuned for this model on {device.name}: Device › Tune kernels "
                            "for this model… measures faster ones.")

    def _set_label(self, text: str, tip: str) -> None:
        self.label.setText(text)
        self.label.setToolTip(tip)
        self.label.setVisible(bool(text))
        # a menu bar sizes its corner widget only when the bar itself is laid out: without
        # this a longer text ("Kernels tuned for this model (date)") was cut to the old width
        bar = self.label.parentWidget()
        if isinstance(bar, QMenuBar):
            QApplication.sendEvent(bar, QResizeEvent(bar.size(), bar.size()))

    def _device_key(self, device) -> str | None:
        if device.index not in self._keys:
            from opencl_llm_studio.engine.opencl import tune_cache
            try:
                self._keys[device.index] = tune_cache.device_key_of(device)
            except Exception:   # a device that cannot be asked: shown as not tuned
                self._keys[device.index] = None
        return self._keys[device.index]

    # -- tuning -----------------------------------------------------------------------------
    def tune(self) -> None:
        """Device › Tune kernels for this model…: on the worker's thread."""
        if self.why_not() is not None:
            return
        cfg, batch = self.shape()
        self._progress, self._progress_at = None, time.monotonic()
        self._cancelling = False
        self.panels.run_bar.show_text("Tuning kernels: opening the device…", reset=True,
                                      note="Stop cancels the tuning; nothing is stored then.")
        self.controller.tune_kernels(TuneJob(cfg, batch, self.panels.device_panel.spec(),
                                             self.seconds))
        self._timer.start()

    def cancel(self) -> None:
        """Stop while tuning."""
        if self.controller.task is FileTask.TUNE:
            self._cancelling = True
            self.panels.run_bar.show_text("Cancelling the tuning…")
            self.controller.cancel_tuning()

    def _on_progress(self, progress: TuneProgress) -> None:
        self._progress, self._progress_at = progress, time.monotonic()
        self._show_progress()

    def _show_progress(self) -> None:
        p, bar = self._progress, self.panels.run_bar
        if self.controller.task is not FileTask.TUNE or self._cancelling:
            return
        if p is None or p.total == 0:
            bar.progress.setFormat("Tuning kernels: opening the device, building its kernels…")
            return
        elapsed = p.elapsed_s + time.monotonic() - self._progress_at
        bar.progress.setRange(0, int(self.seconds * 10))
        bar.progress.setValue(min(int(elapsed * 10), int(self.seconds * 10)))
        bar.progress.setFormat(f"Tuning kernels · {p.what} ({p.done + 1}/{p.total}) · "
                               f"{elapsed:.0f} s of {self.seconds:g} s")

    def _on_tuned(self, report: TuneReport | None) -> None:
        self._timer.stop()
        bar = self.panels.run_bar
        if report is None:   # the error is shown
            bar.show_text("Tuning failed", reset=True, note="See the message.")
        elif report.cancelled:
            bar.show_text("Tuning cancelled", reset=True, note="Nothing was stored.")
            self.window.status("Kernel tuning cancelled; nothing was stored.", 10000)
        else:
            text = report_text(report)
            bar.show_text(f"Kernels tuned in {report.seconds:.0f} s", reset=True, note=text)
            self.window.status(text, 30000)
        self.show_status()


def report_text(r: TuneReport) -> str:
    """What a finished tuning found, in a sentence or two."""
    head = f"Tuned on {r.device} in {r.seconds:.0f} s: "
    if r.speedup is not None and r.changed:
        found = (f"the step's products {r.speedup:.2f}x faster than the built-in table "
                 f"({r.changed} of {r.measured} products changed)")
        use = "training this shape on this device uses it."
    else:
        found = f"the built-in table was already the fastest for all {r.measured} products measured"
        use = "training here keeps it, without tuning again."
    rest = "" if r.complete else (" Time ran out before every product was measured: the "
                                  "rest keep the table's choice.")
    return f"{head}{found}; {use}{rest}"
