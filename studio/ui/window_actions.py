"""The main window's model actions and memory: chat, GGUF export, checkpoints, drag and drop,
and the settings kept between runs (QSettings). A mixin of studio.ui.main_window.MainWindow, split out to
keep each file near 300 lines; it uses the window's panels, worker host and signals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from engine.export_types import DEFAULT_DTYPE
from engine.textio import bundled_corpus
from studio.protocol import (ChatRequest, ExportRequest, LoadJob, ModelSource, RunState,
                             SaveRequest)
from studio.ui.export_dialog import ExportDialog
from studio.ui.settings_panel import human_bytes

CHECKPOINT_FILTER = ("Checkpoints and GGUF (*.npz *.gguf);;Checkpoints (*.npz);;"
                     "GGUF models (*.gguf)")


class WindowActions:
    # -- settings persistence ------------------------------------------------------------
    def _restore(self, pretrain_path, tune_path, device) -> None:
        s = self.settings
        self.settings_panel.restore(s)
        self.chat_panel.restore(s)
        self.autosave_box.restore(s)
        if device is not None:
            self.device_panel.refresh(device)
        else:
            self.device_panel.select_by_name(s.value("device/label"))
        self.plots.log_check.setChecked(str(s.value("plots/log", False)).lower() == "true")
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        for which, given in (("pretrain", pretrain_path), ("tune", tune_path)):
            saved = s.value(f"data/{which}")
            candidates = [given] if given else [saved, bundled_corpus(which)]
            for path in candidates:
                if path and Path(path).is_file() and self.data_panel.load(which, path):
                    break

    def _save_settings(self) -> None:
        s = self.settings
        self.settings_panel.save(s)
        self.chat_panel.save(s)
        self.autosave_box.save(s)
        s.setValue("device/label", self.device_panel.combo.currentText())
        s.setValue("plots/log", self.plots.log_check.isChecked())
        s.setValue("window/geometry", self.saveGeometry())
        for which in ("pretrain", "tune"):
            path = getattr(self.data_panel, f"{which}_path")
            if path is not None:
                s.setValue(f"data/{which}", str(path))
        s.sync()

    # -- chat, export, checkpoints -------------------------------------------------------
    def _chat(self, messages, knobs) -> None:
        self.controller.chat(ChatRequest.from_panel(messages, knobs))

    def _on_chat_done(self, answer) -> None:
        self.chat_panel.finish_answer(answer)
        self.chatFinished.emit(answer)

    def export_clicked(self) -> None:
        if not self.controller.has_model:
            return
        default = Path(self.settings.value("export/dir", str(Path.home()))) / "model.gguf"
        dialog = ExportDialog(self.controller.model_config, default, self)
        last = self.settings.value("export/path", "")
        if last:   # the last choice, kept also when its export failed
            dialog.preset(str(last), str(self.settings.value("export/dtype", DEFAULT_DTYPE)))
        if dialog.exec() != ExportDialog.Accepted:
            return
        path, dtype = dialog.choice()
        if path and dtype != "hf" and Path(path).exists() and QMessageBox.question(
                self, "Replace file?", f"{path} exists. Replace it?") != QMessageBox.Yes:
            return
        if path:
            self.export_to(path, dtype)

    def export_to(self, path, dtype: str = DEFAULT_DTYPE) -> None:
        """Write the GGUF (and Modelfile) on the worker thread; exportFinished reports it."""
        self.settings.setValue("export/dir", str(Path(path).parent))
        self.settings.setValue("export/path", str(path))   # the next dialog opens on it
        self.settings.setValue("export/dtype", dtype)
        self.statusBar().showMessage(f"Exporting {Path(path).name}…")
        self.controller.export(ExportRequest(str(path), dtype))

    def _on_exported(self, result) -> None:
        if result is None:  # it failed; the message is shown
            return
        size = human_bytes(result.size_bytes)
        text = f"Wrote {result.path} ({size})"
        if result.dtype == "hf":
            text += ("\nLoad it with transformers: LlamaForCausalLM.from_pretrained(folder) and "
                     "AutoTokenizer.from_pretrained(folder).")
        if result.modelfile:
            text += f"\nand the Ollama Modelfile {result.modelfile}"
        self.statusBar().showMessage(f"Exported {result.path} ({size})", 15000)
        box = QMessageBox(QMessageBox.Information, "Export finished", text, QMessageBox.Ok, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.exportFinished.emit(result)

    def save_checkpoint(self) -> None:
        if not self.controller.has_model:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save checkpoint (a folder)",
                                              str(Path.home() / "checkpoint"))
        if path:
            self.controller.save(SaveRequest(path))

    def _on_saved(self, path: str) -> None:
        if not path:  # it failed; the message is shown
            return
        self.statusBar().showMessage(f"Checkpoint saved to {path}", 10000)

    def open_checkpoint(self, path: str | None = None) -> None:
        """A run folder, its checkpoint.npz or checkpoint.prev.npz, or a GGUF this app exported:
        chat with it, export it, or Continue it."""
        if not self.controller.free:
            return
        start = str(self.run_bar.run_dir or self.autosave_box.runs_root())
        if not path:
            path, _ = QFileDialog.getOpenFileName(
                self, "Open checkpoint (checkpoint.npz in a run folder, or an exported GGUF)",
                start, CHECKPOINT_FILTER)
        if path:
            self._open_model(path)

    def open_gguf(self, path: str | None = None) -> None:
        """A GGUF this app exported; Continue trains it further on the texts loaded now."""
        if not self.controller.free:
            return
        if not path:
            start = str(self.settings.value("export/dir", str(Path.home())))
            path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF exported by this app",
                                                  start, "GGUF models (*.gguf)")
        if path:
            self._open_model(path, ModelSource.GGUF)

    def open_hf(self, path: str | None = None) -> None:
        """A Hugging Face transformers Llama folder (exported by this app, continued with its
        train_ddp.py, or any plain Llama the engine runs): chat, export or Continue."""
        if not self.controller.free:
            return
        if not path:
            start = str(self.settings.value("export/dir", str(Path.home())))
            path = QFileDialog.getExistingDirectory(self, "Open a Hugging Face model folder",
                                                    start)
        if path:
            self._open_model(path, ModelSource.HF)

    def _open_model(self, path, source: ModelSource | None = None) -> None:
        """source: the kind asked for (its errors name it); None: told by the path."""
        p = Path(path)
        job = LoadJob(str(p), device=self.device_panel.spec(), source=source)
        from engine.hf.load import has_texts, is_model_folder
        hf_without_texts = is_model_folder(p) and not has_texts(p)
        gguf = source is ModelSource.GGUF or (source is None and p.suffix.lower() == ".gguf")
        if gguf or hf_without_texts:
            if not self.data_panel.pretrain_text:
                self.show_error("Open a pretraining text first",
                                "A GGUF (or a Hugging Face folder from elsewhere) holds the model but not "
                                "its training texts: open the "
                                "pretraining text (and dialogues) to train it further.")
                return
            sp = self.settings_panel
            job = dataclasses.replace(
                job, pretrain_text=self.data_panel.pretrain_text,
                tune_text=self.data_panel.tune_text or None,
                train_config=sp.train_config() if sp.is_valid() else None)
        self.statusBar().showMessage(f"Opening {p.name}…")
        self.controller.load(job)

    # -- drag and drop, closing --------------------------------------------------------
    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls() and self.controller.state is RunState.IDLE:
            event.acceptProposedAction()

    def dropEvent(self, event):
        for url in event.mimeData().urls()[:2]:
            path = Path(url.toLocalFile())
            if path.is_dir() or path.suffix.lower() == ".npz":
                self.open_checkpoint(str(path))
            elif path.suffix.lower() == ".gguf":
                self.open_gguf(str(path))
            elif path.is_file() and self.controller.continue_from is None:  # it keeps its data
                self.data_panel.load_dropped(str(path))
        event.acceptProposedAction()
