"""Train / Pause / Stop, the progress bar (step, stage, tokens/s, ETA, or the long phase inside
a step), Export, and the run folder the run autosaves into (with buttons to open it and copy
its path). The ETA is engine.progress.Pace's, the same as the CLI's."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout,
                               QWidget)

from opencl_llm_studio.engine.progress import Pace, format_eta
from opencl_llm_studio.studio.ui.widgets import ElidedLabel, ElidedProgressBar

NEW_TIP = "Train a new model from scratch with these settings"
STOP_TIP = "Stop after the current step; the weights are kept"
STOP_TUNING_TIP = "Cancel the kernel tuning; nothing is stored"
AS_NEW_RUN_TIP = ("Off: Continue in place, in the opened run's folder (as `llm-studio train "
                  "--out RUN --continue`). On: Continue as a new run, in a new folder that "
                  "starts with the run's history; the opened run stays as it is (as "
                  "`--continue-from RUN --out NEW`).")
NO_FOLDER_WHY = ("A GGUF or Hugging Face folder has no run folder to continue in: training "
                 "goes into a new run.")


class RunBar(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.train_button = QPushButton("▶  Train")
        self.train_button.setObjectName("trainButton")
        self.train_button.setToolTip(NEW_TIP)
        self.new_button = QPushButton("New model")
        self.new_button.setObjectName("newModelButton")
        self.new_button.setToolTip("Forget the opened model's run and train a new model from "
                                   "scratch with the settings on the left")
        self.new_button.hide()
        self.as_new_run_check = QCheckBox("as a new run")
        self.as_new_run_check.setObjectName("asNewRunCheck")
        self.as_new_run_check.setToolTip(AS_NEW_RUN_TIP)
        self.as_new_run_check.hide()
        self.pause_button = QPushButton("Pause")
        self.pause_button.setObjectName("pauseButton")
        self.pause_button.setToolTip("Pause between steps; chat and export work while paused")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip(STOP_TIP)
        self.export_button = QPushButton("Export GGUF…")
        self.export_button.setObjectName("exportButton")
        self.export_button.setToolTip("Write the model as a GGUF file (llama.cpp, Ollama, "
                                      "LM Studio) plus an Ollama Modelfile")
        self.progress = ElidedProgressBar()
        self.progress.setObjectName("progressBar")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("Ready")
        self.progress.setMinimumWidth(140)  # its text shortens with "…" below its length
        self.hint = QLabel("")
        self.hint.setObjectName("trainHint")
        self.hint.setWordWrap(True)
        self.hint.setProperty("role", "error")
        # What to do next, under the bar (wrapped): the bar keeps a short status that fits it.
        self.note = QLabel("")
        self.note.setObjectName("runNote")
        self.note.setWordWrap(True)
        self.note.setProperty("role", "muted")

        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.train_button)
        row.addWidget(self.as_new_run_check)
        row.addWidget(self.new_button)
        row.addWidget(self.pause_button)
        row.addWidget(self.stop_button)
        row.addWidget(self.progress, 1)
        row.addSpacing(12)
        row.addWidget(self.export_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(row)
        lay.addWidget(self.hint)
        lay.addWidget(self.note)
        self.hint.hide()
        self.note.hide()
        self._pace = Pace()  # the CLI's pace: the last 20 s of steps (engine.progress)
        self._step_text = ""  # "step 79 / 80", kept while a phase runs inside that step

        self.run_dir: Path | None = None
        self.folder_label = ElidedLabel()
        self.folder_label.setObjectName("runFolderLabel")
        self.folder_label.setProperty("role", "muted")
        self.folder_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.open_folder_button = QPushButton("Open folder")
        self.open_folder_button.setObjectName("openRunFolderButton")
        self.open_folder_button.setToolTip("Show the run folder (checkpoint.npz, metrics.jsonl) "
                                           "in the file manager")
        self.open_folder_button.clicked.connect(self.open_run_folder)
        self.copy_path_button = QPushButton("Copy path")
        self.copy_path_button.setObjectName("copyRunPathButton")
        self.copy_path_button.setToolTip("Copy the run folder's path, e.g. for "
                                         "`llm-studio chat <folder>`")
        self.copy_path_button.clicked.connect(self.copy_run_path)
        folder_row = QHBoxLayout()
        folder_row.setSpacing(6)
        folder_row.addWidget(self.folder_label, 1)
        for b in (self.open_folder_button, self.copy_path_button):
            b.setProperty("role", "small")
            folder_row.addWidget(b)
        self._folder_widgets = (self.folder_label, self.open_folder_button,
                                self.copy_path_button)
        lay.addLayout(folder_row)
        for w in self._folder_widgets:
            w.hide()

    # -- continue mode, run folder -----------------------------------------------------------
    def set_continue(self, step: int | None, in_place: bool = True) -> None:
        """step: the opened model's step (Train continues it); None: Train starts a new model.
        in_place: the model has a run folder to Continue in place (else only as a new run)."""
        if step is None:
            self.train_button.setText("▶  Train")
            self.train_button.setToolTip(NEW_TIP)
        else:
            self.train_button.setText("▶  Continue")
            self.train_button.setToolTip(f"Keep training the opened model from step {step} "
                                         "up to the step counts on the left")
        check = self.as_new_run_check   # enabled by the window with the other inputs
        if not in_place:
            check.setChecked(True)
        check.setToolTip(AS_NEW_RUN_TIP if in_place else f"{NO_FOLDER_WHY}\n\n{AS_NEW_RUN_TIP}")
        check.setVisible(step is not None)
        self.new_button.setVisible(step is not None)

    def continue_as_new_run(self) -> bool:
        """Continue as a new run (the box ticked), rather than in place."""
        return self.as_new_run_check.isChecked()

    def show_run_folder(self, path, saved_step: int | None, saving: bool = True,
                        opened: bool = False) -> None:
        """The run folder and the step of its checkpoint (None: none written yet); opened: the
        folder of a checkpoint just opened, not one this session writes."""
        self.run_dir = Path(path)
        shown = str(self.run_dir)
        home = str(Path.home())
        if shown.startswith(home + "/"):
            shown = "~" + shown[len(home):]
        if saved_step is not None:
            state = f"checkpoint at step {saved_step}"
        else:
            state = "first checkpoint still to come" if saving else "no checkpoint written"
        self.folder_label.setText(f"{'Opened' if opened else 'Autosave'}: {shown} · {state}")
        self.folder_label.setToolTip(str(self.run_dir))
        for w in self._folder_widgets:
            w.show()

    def hide_run_folder(self) -> None:
        """No run folder goes with what is on screen (an opened GGUF or transformers folder)."""
        self.run_dir = None
        for w in self._folder_widgets:
            w.hide()

    def open_run_folder(self) -> None:
        if self.run_dir is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.run_dir)))

    def copy_run_path(self) -> None:
        if self.run_dir is not None:
            QGuiApplication.clipboard().setText(str(self.run_dir))

    def set_hint(self, text: str | None, error: bool = True) -> None:
        """Why Train waits, under the bar: red for a fault, muted for a next step."""
        self.hint.setText(text or "")
        self.hint.setVisible(bool(text))
        role = "error" if error else "muted"
        if self.hint.property("role") != role:
            self.hint.setProperty("role", role)
            self.hint.style().unpolish(self.hint)
            self.hint.style().polish(self.hint)

    def reset_pace(self) -> None:
        """Forget the pace: a new run or a continued one (only this run's steps count)."""
        self._pace = Pace(clock=self._pace.clock)
        self._step_text = ""

    def pause_pace(self) -> None:
        """Paused: the time until resume_pace() does not count in the ETA."""
        self._pace.pause()

    def resume_pace(self) -> None:
        self._pace.resume()

    def show_step(self, m) -> None:
        """Progress from one StepMetrics: step, stage, tokens/s, ETA from the recent pace."""
        self.set_note(None)
        self.progress.setRange(0, max(m.total_steps, 1))
        self.progress.setValue(min(m.step, m.total_steps))
        self._pace.update(m.step)
        # a time budget knows its end; a step plan's comes from the recent pace
        eta = m.time_left_s
        if eta is None:
            eta = self._pace.eta(m.total_steps, m.step)
        self._step_text = f"step {m.step} / {m.total_steps}"
        self.progress.setFormat(f"{self._step_text} · {m.stage} · {m.tokens_per_s:,.0f} tok/s"
                                f" · ETA {'…' if eta is None else format_eta(eta)}")

    def show_phase(self, text: str) -> None:
        """A long phase after a step (validation, samples, recall): 'step 80 / 80 · text'."""
        self.progress.setFormat(f"{self._step_text} · {text}" if self._step_text else text)

    def show_text(self, text: str, reset: bool = False, note: str | None = None) -> None:
        """A short status in the bar (it must fit: "Finished 950 steps · saved"), and what the
        person can do now under it (note, wrapped; None: no note)."""
        if reset:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.progress.setFormat(text)
        self.set_note(note)

    def set_note(self, text: str | None) -> None:
        self.note.setText(text or "")
        self.note.setVisible(bool(text))
