"""What the main window keeps between sessions (QSettings): the panels' fields, the device,
the log-scale check, the window geometry and the texts last opened (else the bundled ones)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget

from opencl_llm_studio.engine.data.textio import bundled_corpus
from opencl_llm_studio.studio.ui.window.window_layout import Panels


def restore_settings(settings: QSettings, panels: Panels, window: QWidget, pretrain_path=None,
                     tune_path=None, device=None) -> None:
    """Fill the panels from `settings`; a text path or device given on the command line wins
    over the saved one."""
    s, p = settings, panels
    p.settings_panel.restore(s)
    p.chat_panel.restore(s)
    p.autosave_box.restore(s)
    if device is not None:
        p.device_panel.refresh(device)
    else:
        p.device_panel.select_by_name(s.value("device/label"))
    p.plots.log_check.setChecked(str(s.value("plots/log", False)).lower() == "true")
    geometry = s.value("window/geometry")
    if geometry is not None:
        window.restoreGeometry(geometry)
    for which, given in (("pretrain", pretrain_path), ("tune", tune_path)):
        saved = s.value(f"data/{which}")
        candidates = [given] if given else [saved, bundled_corpus(which)]
        for path in candidates:
            if path and Path(path).is_file() and p.data_panel.load(which, path):
                break


def save_settings(settings: QSettings, panels: Panels, window: QWidget) -> None:
    s, p = settings, panels
    p.settings_panel.save(s)
    p.chat_panel.save(s)
    p.autosave_box.save(s)
    s.setValue("device/label", p.device_panel.combo.currentText())
    s.setValue("plots/log", p.plots.log_check.isChecked())
    s.setValue("window/geometry", window.saveGeometry())
    for which in ("pretrain", "tune"):
        path = getattr(p.data_panel, f"{which}_path")
        if path is not None:
            s.setValue(f"data/{which}", str(path))
    s.sync()
