"""The main window's model actions and memory: chat, GGUF export, checkpoints, drag and drop,
and the settings kept between runs (QSettings). A mixin of studio.app.MainWindow, split out to
keep each file near 300 lines; it uses the window's panels, worker host and signals."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from studio.ui.data_panel import bundled_path
from studio.ui.export_dialog import ExportDialog
from studio.ui.settings_panel import human_bytes


class WindowActions:
    # -- settings persistence ------------------------------------------------------------
    def _restore(self, pretrain_path, tune_path, device) -> None:
        s = self.settings
        self.settings_panel.restore(s)
        self.chat_panel.restore(s)
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
            candidates = [given] if given else [saved, bundled_path(f"{which}.txt")]
            for path in candidates:
                if path and Path(path).is_file() and self.data_panel.load(which, path):
                    break

    def _save_settings(self) -> None:
        s = self.settings
        self.settings_panel.save(s)
        self.chat_panel.save(s)
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
        self.host.chat(messages, knobs)

    def _on_chat_done(self, answer) -> None:
        self.chat_panel.finish_answer(answer)
        self.chatFinished.emit(answer)

    def export_clicked(self) -> None:
        if not self.has_model:
            return
        default = Path(self.settings.value("export/dir", str(Path.home()))) / "model.gguf"
        dialog = ExportDialog(self.model_config, default, self)
        if dialog.exec() != ExportDialog.Accepted:
            return
        path, dtype = dialog.choice()
        if path and Path(path).exists() and QMessageBox.question(
                self, "Replace file?", f"{path} exists. Replace it?") != QMessageBox.Yes:
            return
        if path:
            self.export_to(path, dtype)

    def export_to(self, path, dtype: str = "f32") -> None:
        """Write the GGUF (and Modelfile) on the worker thread; exportFinished reports it."""
        self._busy = "export"
        self._update_actions()
        self.settings.setValue("export/dir", str(Path(path).parent))
        self.statusBar().showMessage(f"Exporting {Path(path).name}…")
        self.host.export(str(path), dtype)

    def _on_exported(self, result) -> None:
        self._busy = ""
        self._update_actions()
        size = human_bytes(result.size_bytes)
        text = f"Wrote {result.path} ({size})"
        if getattr(result, "modelfile", None):
            text += f"\nand the Ollama Modelfile {result.modelfile}"
        self.statusBar().showMessage(f"Exported {result.path} ({size})", 15000)
        box = QMessageBox(QMessageBox.Information, "Export finished", text, QMessageBox.Ok, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()
        self.exportFinished.emit(result)

    def save_checkpoint(self) -> None:
        if not self.has_model:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save checkpoint (a folder)",
                                              str(Path.home() / "checkpoint"))
        if path:
            self._busy = "save"
            self._update_actions()
            self.host.save(path)

    def _on_saved(self, path: str) -> None:
        self._busy = ""
        self._update_actions()
        self.statusBar().showMessage(f"Checkpoint saved to {path}", 10000)

    def open_checkpoint(self, path: str | None = None) -> None:
        if self.state != "idle":
            return
        path = path or QFileDialog.getExistingDirectory(self, "Open checkpoint folder")
        if path:
            self.host.load(path)

    def _on_loaded(self, info: dict) -> None:
        self._on_session(info)
        self.settings_panel.set_from_configs(info["model_config"], info.get("train_config"))
        self.run_bar.show_text(f"Checkpoint loaded (step {info.get('step', 0)}).", reset=True)
        self._update_actions()

    # -- drag and drop, closing --------------------------------------------------------
    def dragEnterEvent(self, event):
        if event.mimeData().hasUrls() and self.state == "idle":
            event.acceptProposedAction()

    def dropEvent(self, event):
        for url in event.mimeData().urls()[:2]:
            path = Path(url.toLocalFile())
            if path.is_dir():
                self.open_checkpoint(str(path))
            elif path.is_file():
                self.data_panel.load_dropped(str(path))
        event.acceptProposedAction()
