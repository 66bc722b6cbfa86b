"""The main window's model files, chat and menu: File menu, chat, GGUF / Hugging Face export,
checkpoints (save, open), opening a GGUF or Hugging Face folder, and dropped files. A part of
studio.ui.window.main_window.MainWindow, composed: it holds the panels, the RunController and the window
(studio.ui.window.window_face.WindowFace) it is given; every request goes to the controller, every
answer comes back from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenuBar, QMessageBox

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE
from opencl_llm_studio.studio.adapter_files import AdapterExport
from opencl_llm_studio.studio.protocol import ChatRequest, ExportRequest, LoadJob, ModelSource, SaveRequest
from opencl_llm_studio.studio.run_folder import HF_KINDS, ModelKind, path_kind
from opencl_llm_studio.studio.ui.dialogs.export_dialog import FOLDER_FORMATS, ExportDialog
from opencl_llm_studio.studio.ui.window.open_model_action import OpenModelAction
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.panels.settings_panel import human_bytes
from opencl_llm_studio.studio.ui.window.window_face import WindowFace
from opencl_llm_studio.studio.ui.window.window_layout import Panels

CHECKPOINT_FILTER = ("Checkpoints and GGUF (*.npz *.gguf);;Checkpoints (*.npz);;"
                     "GGUF models (*.gguf)")


@dataclass(frozen=True)
class FileMenu:
    """The File menu's actions whose state follows the run (studio.ui.window.window_controls)."""
    save_action: QAction
    export_action: QAction
    new_model_action: QAction
    open_actions: tuple[QAction, ...]   # open a model: idle only
    data_actions: tuple[QAction, ...]   # (open pretraining text, open tune dialogues): idle; an
    #                                     opened model takes only dialogues, and only without any


class WindowActions:
    def __init__(self, window: WindowFace, panels: Panels, controller: RunController,
                 settings: QSettings):
        self.window = window
        self.panels = panels
        self.controller = controller
        self.settings = settings      # the last export folder, file and dtype
        self.pretrained = OpenModelAction(window, panels, controller, settings, self.open_model)
        c = controller
        panels.chat_panel.sendRequested.connect(self.chat)
        c.token.connect(panels.chat_panel.append_token)
        c.chatDone.connect(self.on_chat_done)
        c.exported.connect(self.on_exported)
        c.saved.connect(self.on_saved)

    def build_menu(self, menu_bar: QMenuBar, new_model: Callable[[], None],
                   quit: Callable[[], object]) -> FileMenu:
        """The File menu; new_model and quit come from the training part and the window."""
        m = menu_bar.addMenu("&File")
        data_panel, parent = self.panels.data_panel, self.window.widget()
        made = {}
        for text, slot, key in (
                ("Open pretraining text…", lambda: data_panel._ask("pretrain"), "Ctrl+O"),
                ("Open tune dialogues…", lambda: data_panel._ask("tune"), None),
                (None, None, None),
                ("Open model…", self.pretrained.ask, "Ctrl+Shift+O"),
                ("Open checkpoint…", self.open_checkpoint, None),
                ("Open exported GGUF…", self.open_gguf, None),
                ("Open Hugging Face folder…", self.open_hf, None),
                ("New model (train from scratch)", new_model, None),
                ("Save checkpoint…", self.save_checkpoint, "Ctrl+S"),
                ("Export GGUF or Hugging Face…", self.export_clicked, "Ctrl+E"),
                (None, None, None),
                ("Quit", quit, QKeySequence.Quit)):
            if text is None:
                m.addSeparator()
                continue
            act = QAction(text, parent)
            act.triggered.connect(slot)
            if key:
                act.setShortcut(key)
            m.addAction(act)
            made[text.split("…")[0].split(" (")[0]] = act
        return FileMenu(made["Save checkpoint"], made["Export GGUF or Hugging Face"],
                        made["New model"],
                        (made["Open model"], made["Open checkpoint"], made["Open exported GGUF"],
                         made["Open Hugging Face folder"]),
                        (made["Open pretraining text"], made["Open tune dialogues"]))

    # -- chat, export, checkpoints -------------------------------------------------------
    def chat(self, messages, knobs) -> None:
        self.controller.chat(ChatRequest.from_panel(messages, knobs))

    def on_chat_done(self, answer) -> None:
        self.panels.chat_panel.finish_answer(answer)
        self.window.chatFinished.emit(answer)

    def export_clicked(self) -> None:
        if not self.controller.has_model:
            return
        default = Path(self.settings.value("export/dir", str(Path.home()))) / "model.gguf"
        dialog = ExportDialog(self.controller.model_config, default, self.window.widget(),
                              lora=self.controller.lora)
        last = self.settings.value("export/path", "")
        if last:   # the last choice, kept also when its export failed
            dialog.preset(str(last), str(self.settings.value("export/dtype", DEFAULT_DTYPE)))
        if dialog.exec() != ExportDialog.Accepted:
            return
        path, dtype = dialog.choice()
        if path and dtype not in FOLDER_FORMATS and Path(path).exists() and QMessageBox.question(
                self.window.widget(), "Replace file?",
                f"{path} exists. Replace it?") != QMessageBox.Yes:
            return
        if path:
            self.export_to(path, dtype)

    def export_to(self, path, dtype: str = DEFAULT_DTYPE) -> None:
        """Write the GGUF (and Modelfile) on the worker thread; exportFinished reports it."""
        self.settings.setValue("export/dir", str(Path(path).parent))
        self.settings.setValue("export/path", str(path))   # the next dialog opens on it
        self.settings.setValue("export/dtype", dtype)
        self.window.status(f"Exporting {Path(path).name}…")
        self.controller.export(ExportRequest(str(path), dtype))

    def on_exported(self, result) -> None:
        if result is None:  # it failed; the message is shown
            return
        size = human_bytes(result.size_bytes)
        text = f"Wrote {result.path} ({size})"
        if result.dtype == "hf":
            text += ("\nLoad it with transformers: LlamaForCausalLM.from_pretrained(folder) and "
                     "AutoTokenizer.from_pretrained(folder).")
        if isinstance(result, AdapterExport):   # a LoRA run's adapters: how to load them
            text += f"\n{result.usage}"
        if result.modelfile:
            text += f"\nand the Ollama Modelfile {result.modelfile}"
        elif result.dtype != "hf" and result.no_modelfile_note():
            text += f"\n{result.no_modelfile_note()}"
        self.window.status(f"Exported {result.path} ({size})", 15000)
        box = QMessageBox(QMessageBox.Information, "Export finished", text, QMessageBox.Ok,
                          self.window.widget())
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.window.exportFinished.emit(result)

    def save_checkpoint(self) -> None:
        if not self.controller.has_model:
            return
        path, _ = QFileDialog.getSaveFileName(self.window.widget(), "Save checkpoint (a folder)",
                                              str(Path.home() / "checkpoint"))
        if path:
            self.controller.save(SaveRequest(path))

    def on_saved(self, path: str) -> None:
        if not path:  # it failed; the message is shown
            return
        self.window.status(f"Checkpoint saved to {path}", 10000)

    def open_checkpoint(self, path: str | None = None) -> None:
        """A run folder, its checkpoint.npz or checkpoint.prev.npz, or a GGUF this app exported:
        chat with it, export it, or Continue it."""
        if not self.controller.free:
            return
        start = str(self.panels.run_bar.run_dir or self.panels.autosave_box.runs_root())
        if not path:
            path, _ = QFileDialog.getOpenFileName(
                self.window.widget(),
                "Open checkpoint (checkpoint.npz in a run folder, or an exported GGUF)",
                start, CHECKPOINT_FILTER)
        if path:
            self.open_model(path)

    def open_gguf(self, path: str | None = None) -> None:
        """A GGUF this app exported; Continue trains it further on the texts loaded now."""
        if not self.controller.free:
            return
        if not path:
            start = str(self.settings.value("export/dir", str(Path.home())))
            path, _ = QFileDialog.getOpenFileName(self.window.widget(),
                                                  "Open a GGUF exported by this app",
                                                  start, "GGUF models (*.gguf)")
        if path:
            self.open_model(path, ModelSource.GGUF)

    def open_hf(self, path: str | None = None) -> None:
        """A Hugging Face transformers Llama folder (exported by this app, continued with its
        train_ddp.py, or any plain Llama the engine runs): chat, export or Continue."""
        if not self.controller.free:
            return
        if not path:
            start = str(self.settings.value("export/dir", str(Path.home())))
            path = QFileDialog.getExistingDirectory(self.window.widget(),
                                                    "Open a Hugging Face model folder", start)
        if path:
            self.open_model(path, ModelSource.HF)

    def open_model(self, path, source: ModelSource | None = None) -> None:
        """source: the kind asked for (its errors name it); None: told by the path."""
        p = Path(path)
        job = LoadJob(str(p), device=self.panels.device_panel.spec(), source=source)
        from opencl_llm_studio.engine.files.hf.load import has_texts
        kind = _kind_or_none(p)   # None: the worker says what the path is not
        hf_without_texts = kind in HF_KINDS and not has_texts(p)
        gguf = source is ModelSource.GGUF or (source is None and kind is ModelKind.GGUF)
        if gguf or hf_without_texts:
            if not self.panels.data_panel.pretrain_text:
                self.window.show_error(
                    "Open a pretraining text first",
                    "A GGUF (or a Hugging Face folder from elsewhere) holds the model but not its "
                    "training texts: open the pretraining text (and dialogues) to train it "
                    "further.")
                return
            sp = self.panels.settings_panel
            job = dataclasses.replace(
                job, pretrain_text=self.panels.data_panel.pretrain_text,
                tune_text=self.panels.data_panel.tune_text or None,
                train_config=sp.train_config() if sp.is_valid() else None)
        self.window.status(f"Opening {p.name}…")
        self.controller.load(job)

    # -- drag and drop -------------------------------------------------------------------
    def drop(self, paths: list[Path]) -> None:
        """Files dropped on the window: a run folder or checkpoint opens, a GGUF opens, any
        other file is a text for the data panel (not for an opened model: it keeps its data)."""
        for path in paths[:2]:
            kind = _kind_or_none(path)
            if kind is ModelKind.GGUF:
                self.open_gguf(str(path))
            elif kind is not None or path.is_dir():  # a folder without a model: the worker says so
                self.open_checkpoint(str(path))
            elif path.is_file() and self.controller.continue_from is None:
                self.panels.data_panel.load_dropped(str(path))


def _kind_or_none(path: Path) -> ModelKind | None:
    """path_kind(path), or None for a path that holds no model."""
    try:
        return path_kind(path)
    except StudioError:
        return None
