"""What a part of the main window may ask of the window itself. The parts
(studio.ui.window.training_actions, studio.ui.window.window_actions, studio.ui.window.runs_actions) take the panels
and the RunController they use explicitly, and the window only through this interface;
studio.ui.window.main_window.MainWindow implements it."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QWidget


class WindowFace(Protocol):
    # The window's own signals, emitted by the parts once the window has shown the result:
    trainingFinished: SignalInstance   # RunResult of any run's end
    modelOpened: SignalInstance        # SessionInfo of an opened checkpoint / GGUF / HF folder
    chatFinished: SignalInstance       # the answer, or None
    exportFinished: SignalInstance     # ExportResult

    def status(self, text: str, timeout_ms: int = 0) -> None:
        """Show `text` in the status bar for timeout_ms (0: until replaced)."""

    def show_error(self, title: str, message: str) -> None:
        """A non-blocking error dialog; the app stays open."""

    def update_actions(self) -> None:
        """Re-apply the controls of the run state (studio.ui.window.window_controls)."""

    def widget(self) -> QWidget:
        """The window as a widget: the parent of dialogs, the screen to fit them to."""
