"""The main window's panels and where they sit: settings on the left (device, model and
training, autosave), the run bar over the live plots in the middle, Data / Samples / Chat tabs on
the right. Only layout: what the panels do is wired by studio.ui.window.main_window and its parts."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QTabWidget, QVBoxLayout, QWidget

from opencl_llm_studio.studio.ui.panels.autosave_box import AutosaveBox
from opencl_llm_studio.studio.ui.panels.chat_panel import ChatPanel
from opencl_llm_studio.studio.ui.panels.data_panel import DataPanel
from opencl_llm_studio.studio.ui.panels.device_panel import DevicePanel
from opencl_llm_studio.studio.ui.panels.plots import LivePlots
from opencl_llm_studio.studio.ui.panels.run_bar import RunBar
from opencl_llm_studio.studio.ui.panels.samples_panel import SamplesPanel
from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
from opencl_llm_studio.studio.ui.widgets import ColumnScrollArea


@dataclass(frozen=True)
class Panels:
    """The window's panels, handed to the parts that use them (studio.ui.window.training_actions,
    studio.ui.window.window_actions, studio.ui.window.window_controls, studio.ui.window.runs_actions)."""
    device_panel: DevicePanel
    data_panel: DataPanel
    settings_panel: SettingsPanel
    autosave_box: AutosaveBox
    run_bar: RunBar
    plots: LivePlots
    samples_panel: SamplesPanel
    chat_panel: ChatPanel
    tabs: QTabWidget   # Data, Samples, Chat


class WindowLayout:
    """The panels placed in two splitters; `central` goes into the window."""

    def __init__(self):
        self.panels = p = Panels(DevicePanel(), DataPanel(), SettingsPanel(), AutosaveBox(),
                                 RunBar(), LivePlots(), SamplesPanel(), ChatPanel(), QTabWidget())
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(8, 8, 8, 8)
        ll.setSpacing(6)
        for w in (p.device_panel, p.settings_panel, p.autosave_box):
            ll.addWidget(w)
        # Spare height goes below the last box (the stretch outranks the boxes' Preferred
        # policy). No Maximum height on the settings panel: in a narrow column its wrapped
        # labels (estimate, errors) need more height than its size hint, and were overdrawn.
        ll.addStretch(1)
        # As narrow as its content allows (fields shrink to FIELD_MIN_WIDTH, paths are elided);
        # it opens at its preferred width, at most 30% of the window (first_sizes).
        scroll = ColumnScrollArea(left)

        p.tabs.setObjectName("sideTabs")
        data_tab = QWidget()
        dl = QVBoxLayout(data_tab)
        dl.setContentsMargins(6, 6, 6, 6)
        dl.addWidget(p.data_panel)
        dl.addWidget(p.data_panel.preview, 1)
        p.tabs.addTab(data_tab, "Data")
        p.tabs.addTab(p.samples_panel, "Samples")
        p.tabs.addTab(p.chat_panel, "Chat")
        self.work = work = QSplitter(Qt.Horizontal)
        work.addWidget(p.plots)
        work.addWidget(p.tabs)
        work.setStretchFactor(0, 1)  # extra width goes to the plots
        work.setStretchFactor(1, 0)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(8, 8, 8, 8)
        rl.setSpacing(8)
        rl.addWidget(p.run_bar)
        rl.addWidget(work, 1)
        self.central = main = QSplitter(Qt.Horizontal)
        main.addWidget(scroll)
        main.addWidget(right)
        main.setStretchFactor(1, 1)

    def first_sizes(self, width: int) -> None:
        """Size the splitters for a window `width` pixels wide (at its first show, when the
        real width is known): the settings column at its preferred width, at most 30%; the
        plots 62% of the rest, or more where the summary line (the planned run) needs it and
        the side tabs keep their minimum width."""
        main, work, p = self.central, self.work, self.panels
        column = main.widget(0)
        left = max(min(column.sizeHint().width(), int(width * 0.3)),
                   column.minimumSizeHint().width())
        rest = max(width - left, 1)
        main.setSizes([left, rest])
        line = (p.plots.summary.fontMetrics().horizontalAdvance(p.plots.summary.full_text())
                + p.plots.log_check.sizeHint().width() + 32)
        plots = max(int(rest * 0.62),
                    min(line, rest - p.tabs.minimumSizeHint().width() - work.handleWidth()))
        work.setSizes([plots, rest - plots])
