"""OpenCL device picker: every device found (platform, name, type, memory), the default chosen,
and a message saying how to get one when there is none."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QLabel, QVBoxLayout

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.studio.ui.widgets import enable_with_reason


def _no_device_help() -> str:
    from opencl_llm_studio.engine.opencl.device import NO_DEVICE_HINT
    return f"No OpenCL device was found. {NO_DEVICE_HINT}"


def describe_device(d) -> str:
    gib = d.global_mem_bytes / 2**30
    slow = " (simulator, very slow)" if d.is_simulator else ""
    return f"{d.name} · {d.type} · {gib:.1f} GiB{slow}"


class DevicePanel(QGroupBox):
    deviceChanged = Signal()

    def __init__(self, parent=None):
        super().__init__("Device", parent)
        self.combo = QComboBox()
        self.combo.setObjectName("deviceCombo")
        self.combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        # A long device name is cut short in the closed box (the list and the item's tooltip
        # show it whole) rather than widening the settings column.
        self.combo.setMinimumContentsLength(12)
        self.combo.currentIndexChanged.connect(lambda _: self._show_details())
        self.combo.currentIndexChanged.connect(lambda _: self.deviceChanged.emit())
        self.details = QLabel()
        self.details.setObjectName("deviceDetails")
        self.details.setWordWrap(True)
        self.details.setProperty("role", "muted")
        lay = QVBoxLayout(self)
        lay.setSpacing(4)
        lay.addWidget(self.combo)
        lay.addWidget(self.details)
        self.devices = []
        self.error = ""
        self.refresh()

    def refresh(self, preferred=None) -> None:
        """List devices; choose `preferred` (index or name, the CLI's --device) or the default."""
        from opencl_llm_studio.engine.opencl.device import list_devices, select_device
        self.combo.blockSignals(True)
        self.combo.clear()
        try:
            self.devices = list_devices()
        except StudioError as e:
            self.devices, self.error = [], e.describe()
        except Exception as e:  # a broken ICD loader must not stop the app from opening
            self.devices, self.error = [], f"{_no_device_help()}\n({type(e).__name__}: {e})"
        for d in self.devices:
            self.combo.addItem(describe_device(d), d.index)
            self.combo.setItemData(self.combo.count() - 1, f"{d.platform}: {d.name}",
                                   Qt.ToolTipRole)
        if not self.devices:
            self.combo.addItem("No OpenCL device", None)
            self.combo.setEnabled(False)
            self.error = self.error or _no_device_help()
        else:
            self.combo.setEnabled(True)
            try:
                chosen = select_device(preferred)  # the engine's default (never a simulator)
                self.combo.setCurrentIndex(max(self.combo.findData(chosen.index), 0))
                self.error = ""
            except StudioError as e:
                self.error = e.describe()
        self.combo.blockSignals(False)
        self._show_details()

    def select_by_name(self, name: str | None) -> None:
        i = self.combo.findText(name) if name else -1
        if i >= 0:
            self.combo.setCurrentIndex(i)

    def current(self):
        """The chosen DeviceInfo, or None when there is no device."""
        index = self.combo.currentData()
        return next((d for d in self.devices if d.index == index), None)

    def spec(self):
        """What engine.training.opening.create_session(device=...) takes: the device index."""
        return self.combo.currentData()

    def _show_details(self) -> None:
        d = self.current()
        if self.error:
            self.details.setText(self.error)
            self.details.setProperty("role", "error")
        elif d is not None:
            version = " ".join(d.opencl_version.split()[:2])  # "OpenCL 3.0", not the build tag
            self.details.setText(f"{d.platform} · {d.compute_units} compute units · {version}")
            self.details.setToolTip(d.opencl_version)
            self.details.setProperty("role", "muted")
        self.details.style().unpolish(self.details)
        self.details.style().polish(self.details)

    def set_editable(self, on: bool, why: str = "") -> None:
        """why: the reason the device cannot be changed now (in the tooltip)."""
        enable_with_reason(self.combo, on and bool(self.devices), why if self.devices else "")
