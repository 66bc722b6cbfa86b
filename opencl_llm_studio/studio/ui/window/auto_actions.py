"""Auto in the settings' preset box (issue 36): the model's size, context, batch, learning rate
and tokenizer for the pretraining text, the chosen device and the "Train for" minutes
(engine.training.auto_size.choose), put into the fields before Train, each still editable (an
edit turns the box to Custom, as with any preset).

The device's training speed is measured once per device on the worker's thread (a SpeedJob:
about a second once its kernels are built; the controls wait for it) and kept for the window's
life; while the box says Auto the choice follows the text, the minutes and the device as they
change. "Train for" off is set to AUTO_MINUTES: Auto sizes for a time. A part of
studio.ui.window.main_window.MainWindow, composed like the others.
"""

from __future__ import annotations

from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.training.auto_size import AUTO, choose
from opencl_llm_studio.studio.protocol import SpeedJob
from opencl_llm_studio.studio.ui.run.run_controller import RunController
from opencl_llm_studio.studio.ui.window.window_layout import Panels

AUTO_MINUTES = 5          # "Train for" when Auto is picked with it off
MEASURING = "Auto: measuring {device}'s training speed…"
BUSY = "Auto waits for the task in progress: pick Auto again when it ends."


class AutoActions:
    def __init__(self, panels: Panels, controller: RunController):
        self.panels = panels
        self.controller = controller
        self.reports: dict = {}   # device spec -> SpeedReport
        self._measuring = None    # the device spec being measured
        sp = panels.settings_panel
        sp.autoRequested.connect(self.request)
        controller.speedMeasured.connect(self._on_speed)
        sp.spins["trainMinutesSpin"].valueChanged.connect(self._follow)
        panels.data_panel.dataChanged.connect(self._follow)
        panels.device_panel.deviceChanged.connect(self._follow)
        sp.changed.connect(self._hide_when_left)

    def _hide_when_left(self) -> None:
        """A field edited away from Auto's values (the box says Custom): its note goes (and
        its shorter time: settings_fields.run_seconds)."""
        if not self._active():
            self._note("")

    def _active(self) -> bool:
        return self.panels.settings_panel.preset_combo.currentData() == AUTO

    def _follow(self, *_) -> None:
        """The text, minutes or device changed: choose again while the box says Auto."""
        if self._active():
            self.request()

    def _note(self, text: str, role: str = "muted", tip: str = "") -> None:
        label = self.panels.settings_panel.auto_label
        label.setText(text)
        label.setToolTip(tip)
        label.setProperty("role", role)
        label.style().polish(label)
        label.setVisible(bool(text))

    def request(self) -> None:
        """Choose now with the device's kept speed, or measure it first (SpeedJob)."""
        p = self.panels
        spins = p.settings_panel.spins
        if spins["trainMinutesSpin"].value() == 0:
            spins["trainMinutesSpin"].setValue(AUTO_MINUTES)   # _follow comes back here
            return
        spec = p.device_panel.spec()
        if spec in self.reports:
            self._choose(self.reports[spec])
        elif self.controller.measure_speed(SpeedJob(spec)):
            self._measuring = spec
            device = p.device_panel.current()
            self._note(MEASURING.format(device=device.name if device else "the device"))
        else:
            self._note(BUSY, "error")

    def _on_speed(self, report) -> None:
        if report is None:   # the error dialog says why
            self._note("Auto could not measure the device (see the message).", "error")
            return
        self.reports[self._measuring] = report
        if self._active():   # on the device now chosen (measured first if it changed meanwhile)
            self.request()

    def _choose(self, report) -> None:
        p = self.panels
        sp = p.settings_panel
        text = p.data_panel.pretrain_text
        held_out = sp.train_config().val_fraction
        asked = 60.0 * sp.spins["trainMinutesSpin"].value()
        try:
            choice = choose(int(len(text) * (1.0 - held_out)), asked, report.speed,
                            report.device)
        except ConfigError as e:
            self._note(f"Auto: {e}", "error")
            return
        fields = {s.property("field") for s in sp.spins.values()}
        values = {k: v for k, v in {**choice.model, **choice.train}.items()
                  if k in fields and k != "time_budget_s"}
        extra = {k: v for k, v in choice.train.items() if k not in fields}
        used = choice.train["time_budget_s"]
        if used < asked:   # the text cannot use the minutes: the run ends at Auto's plan
            extra["time_budget_s"] = used
        i = sp.tokenizer_combo.findData(choice.tokenizer)
        if i >= 0:
            sp.tokenizer_combo.setCurrentIndex(i)
        sp.apply_values(AUTO, values, extra)
        # two short lines in the form (the fields show the values); why, in the tooltip
        span = f"{used:.0f} s" if used < 60 else f"{used / 60:.1f} min"
        when = (f"in {used / 60:g} min" if used >= asked else
                f"in {span} of the {asked / 60:g} min: the text supports no more")
        self._note(f"Auto: {choice.n_params / 1e6:.2f} M parameters, about "
                   f"{choice.tokens / 1e6:.1f} M tokens ({choice.epochs:,.1f} epochs of the "
                   f"text) {when}. Hover for why.",
                   tip="Auto chose " + choice.summary() + ".\n\n" + "\n".join(choice.lines))
