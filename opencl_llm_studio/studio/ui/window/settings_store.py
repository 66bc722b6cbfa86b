"""The studio window's settings store: QSettings on the INI file studio.app_settings names, which
the command line reads without Qt."""

from __future__ import annotations

import sys

from PySide6.QtCore import QSettings

from opencl_llm_studio.studio import app_settings


def open_settings() -> QSettings:
    """The studio's settings store: a QSettings on settings_path() in IniFormat. Settings an
    earlier version kept in the system's native store (the macOS plist, the Windows registry;
    on Linux that store was this very file) are copied into it the first time."""
    store = QSettings(str(app_settings.settings_path()), QSettings.IniFormat)
    if sys.platform in ("darwin", "win32") and not store.allKeys():
        native = QSettings(app_settings.APP_NAME, "studio")
        for key in native.allKeys():
            store.setValue(key, native.value(key))
    return store
