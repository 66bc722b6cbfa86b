"""Model and training settings with live parameter count, memory and export-size estimates.

Validation is the engine's own (ModelConfig.validate / TrainConfig.validate): the message appears
under the field the ConfigError names (its .fields), the field is outlined, and
`validityChanged(False)` lets the window disable Train until the person fixes it. The fields'
ranges are the engine's (engine.limits.LIMITS).
"""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (QAbstractSpinBox, QCheckBox, QComboBox, QDoubleSpinBox, QGroupBox,
                               QLabel, QSpinBox, QVBoxLayout, QWidget)

from opencl_llm_studio.engine.config import DEFAULT_TOKENIZER, TOKENIZER_KINDS, ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.files.model_card import tokenizer_name
from opencl_llm_studio.engine.model.memory import training_bytes
from opencl_llm_studio.engine.training.auto_size import AUTO
from opencl_llm_studio.engine.training.presets import PRESETS
from opencl_llm_studio.studio.ui.panels.settings_fields import (  # noqa: F401 (the tables, human_* used from here)
    ADVANCED, FIELD_MIN_WIDTH, FLOAT_FIELDS, INVALID_STYLE, MODEL_FIELDS, SPIN_INT_MAX, TRAIN_FIELDS,
    add_field, float_spin, fold_button, human_bytes, human_count, make_form, note_label,
    preset_combo, restored_extra, run_seconds, show_extra)
from opencl_llm_studio.studio.ui.panels.tuning_method import TuningMethod
from opencl_llm_studio.studio.ui.widgets import enable_with_reason


MINUTES_TIP = ("Minutes of training (evaluations included); the step counts and the "
               "learning-rate schedule are fitted to end on time. Off: use the step counts.")
MORE_MINUTES_TIP = ("Minutes more of training for the opened model, on top of what it has had "
                    "(evaluations included; as `llm-studio train --continue --time-budget`). "
                    "Off: train to the step counts.")


class SettingsPanel(QWidget):
    changed = Signal()
    validityChanged = Signal(bool)
    autoRequested = Signal()   # Auto picked in the preset box (studio.ui.window.auto_actions)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.spins: dict[str, QAbstractSpinBox] = {}
        self._errors: dict[str, QLabel] = {}
        self._opened: ModelConfig | None = None   # an opened model's config (opened_model_note)
        self._chosen_tokenizer = DEFAULT_TOKENIZER  # the field's kind before a model was opened
        self._preset_extra: dict = {}
        self._preset_values: dict = {}   # the preset box's values, till a field differs
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        lay.addWidget(self._model_box(ModelConfig()))
        lay.addWidget(self._train_box(TrainConfig()))
        lay.addStretch(1)
        self._valid = True
        self._on_change()

    def _add(self, form, spin, name, field, label, step, tip, value, unit_s=1) -> None:
        self._errors[field] = add_field(form, spin, name, field, label, step, tip, value,
                                        self._on_change, unit_s)
        self.spins[name] = spin

    def _model_box(self, defaults: ModelConfig) -> QGroupBox:
        """Preset, the model's fields, tokenizer, tying, the opened model's note, the estimate."""
        box = QGroupBox("Model")
        form = make_form(box)
        self.preset_combo = preset_combo(self.apply_preset)
        form.addRow("Preset", self.preset_combo)
        self.auto_label = note_label("autoChoiceLabel")   # why Auto chose what it did
        form.addRow(self.auto_label)
        for name, field, label, step, tip in MODEL_FIELDS:
            self._add(form, QSpinBox(), name, field, label, step, tip, getattr(defaults, field))
        self.tokenizer_combo = QComboBox()
        self.tokenizer_combo.setObjectName("tokenizerCombo")
        for kind in TOKENIZER_KINDS:
            self.tokenizer_combo.addItem(tokenizer_name(kind), kind)
        self.tokenizer_combo.setCurrentIndex(TOKENIZER_KINDS.index(DEFAULT_TOKENIZER))
        self.tokenizer_combo.setToolTip(
            f"{tokenizer_name('bpe')} learns sub-word pieces from your text (byte fallback: "
            f"any text encodes). {tokenizer_name('char')}: one token per character.")
        self.tokenizer_combo.currentIndexChanged.connect(self._on_change)
        # Wide enough for its longest item where there is room, but it may be cut short: the
        # settings column can be made narrow on small screens.
        self.tokenizer_combo.setMinimumWidth(FIELD_MIN_WIDTH)
        form.addRow("Tokenizer", self.tokenizer_combo)
        self.tie_check = QCheckBox("Tie output to embedding")
        self.tie_check.setObjectName("tieEmbeddingsCheck")
        self.tie_check.setChecked(defaults.tie_embeddings)
        self.tie_check.setToolTip("Use the embedding matrix as the output layer too (fewer "
                                  "parameters)")
        self.tie_check.toggled.connect(self._on_change)
        form.addRow(self.tie_check)
        self.opened_label = note_label("openedModelLabel")
        form.addRow(self.opened_label)
        self.estimate_label = note_label("estimateLabel", "estimate", shown=True)
        form.addRow(self.estimate_label)
        return box

    def _train_box(self, defaults: TrainConfig) -> QGroupBox:
        """Learning rate, steps, batch, warmup (and its note), minutes, and folded under "More
        training settings" the ADVANCED fields; a preset's values without a field."""
        box = QGroupBox("Training")
        form = make_form(box)
        self.advanced = QGroupBox()   # folded: seed, intervals, clipping, decay
        self.advanced.setObjectName("advancedTraining")
        self.advanced.setFlat(True)
        aform = make_form(self.advanced)
        aform.setContentsMargins(0, 0, 0, 0)
        form_of = lambda name: aform if name in ADVANCED else form  # noqa: E731
        for name, field, label, step, dec, tip in FLOAT_FIELDS[:1]:
            self._add(form, float_spin(dec), name, field, label, step, tip,
                      getattr(defaults, field))
        self.tuning = TuningMethod(self.spins["learningRateSpin"], form, self)  # over the rate
        self.tuning.changed.connect(self._on_change)
        for name, field, label, step, tip in TRAIN_FIELDS:
            self._add(form_of(name), QSpinBox(), name, field, label, step, tip,
                      getattr(defaults, field))
        for name, field, label, step, dec, tip in FLOAT_FIELDS[1:]:
            self._add(form_of(name), float_spin(dec), name, field, label, step, tip,
                      getattr(defaults, field))
        # Said under the field when a short stage shortens the warmup (TrainConfig.warmup_for).
        self.warmup_note = note_label("warmupNote")
        row, _ = form.getWidgetPosition(self._errors["warmup_steps"])
        form.insertRow(row + 1, self.warmup_note)
        self._add(form, QSpinBox(), "trainMinutesSpin", "time_budget_s", "Train for",
                  1, MINUTES_TIP, round(defaults.time_budget_s / 60), unit_s=60)
        self.spins["trainMinutesSpin"].setSpecialValueText("off (use the steps)")
        self.spins["trainMinutesSpin"].setSuffix(" min")
        self.spins["sampleIntervalSpin"].setSuffix(" steps")
        self.spins["evalIntervalSpin"].setSuffix(" steps")
        self.more = fold_button("More training settings (seed, intervals, clipping, decay)",
                                "moreTrainingButton", self.advanced.setVisible)
        form.addRow(self.more)
        form.addRow(self.advanced)
        self.advanced.setVisible(False)
        # A preset's values that have no field here (beta2, min_lr_ratio): shown, kept after
        # an edit turns the box to "Custom", and saved with the fields (save / restore).
        self.extra_label = note_label("presetExtraLabel")
        form.addRow(self.extra_label)
        return box

    def apply_preset(self, name: str) -> None:
        """Set every field the preset names ("" = Custom: change nothing; Auto: autoRequested,
        which studio.ui.window.auto_actions answers with apply_values)."""
        if name == AUTO:
            self.autoRequested.emit()
        elif name:
            p = PRESETS[name]
            self.apply_values(name, {**p.model, **p.train}, self._extras(name))

    def apply_values(self, name: str, values: dict, extra: dict) -> None:
        """Put `values` (ModelConfig / TrainConfig fields) into their fields and keep `extra`
        (values without a field, e.g. beta2) as the preset box's `name`'s."""
        by_field = {s.property("field"): s for s in self.spins.values()}
        self._preset_values = dict(values)
        self._set_extra(extra)
        for field, value in values.items():
            if field in by_field:
                by_field[field].blockSignals(True)
                by_field[field].setValue(value)
                by_field[field].blockSignals(False)
        self.preset_combo.setCurrentIndex(self.preset_combo.findData(name))
        self._on_change()

    def _preset_matches(self) -> bool:
        if not self.preset_combo.currentData():
            return True
        values = {**self._values(MODEL_FIELDS), **self._values(TRAIN_FIELDS),
                  **self._values(FLOAT_FIELDS)}
        return all(values.get(k, v) == v for k, v in self._preset_values.items())

    # -- values ----------------------------------------------------------------------------
    def _values(self, fields) -> dict:
        return {f[1]: self.spins[f[0]].value() for f in fields}

    def model_config(self) -> ModelConfig:
        """The fields' model, or an opened model's own (its fields are locked; it may have
        settings without a field here, or values past a field's range: a pretrained model)."""
        if self._opened is not None:
            return self._opened
        return ModelConfig(**self._values(MODEL_FIELDS), tie_embeddings=self.tie_check.isChecked())

    def forget_opened(self) -> None:
        """New model: the fields describe the model again."""
        self._opened = None
        self.tuning.set_option(None)
        self._minutes_mean_more(False)
        self.opened_label.setVisible(False)
        self._show_tokenizer("")
        self._on_change()

    def _show_tokenizer(self, name: str) -> None:
        """The tokenizer field shows an opened model's tokenizer (its name in words, engine.
        model_card.tokenizer_name), as an item of its own when it is not one a new model can
        train; "" gives the person's own choice back."""
        combo = self.tokenizer_combo
        while combo.count() > len(TOKENIZER_KINDS):   # the last opened model's item
            combo.removeItem(combo.count() - 1)
        if not name:
            combo.setCurrentIndex(max(combo.findData(self._chosen_tokenizer), 0))
            return
        i = combo.findText(name)
        if i < 0:
            combo.addItem(name, None)
            i = combo.count() - 1
        combo.setCurrentIndex(i)

    def train_config(self) -> TrainConfig:
        auto = self.preset_combo.currentData() == AUTO   # Auto's shorter time, while picked
        seconds = run_seconds(self.spins["trainMinutesSpin"].value(), self._preset_extra, auto)
        return TrainConfig(**{**self._preset_extra, "time_budget_s": seconds},
                           **self._values(TRAIN_FIELDS), **self._values(FLOAT_FIELDS))

    def tokenizer_kind(self) -> str:
        """The kind a new model trains (engine.config.TOKENIZER_KINDS): the field's, or while a
        model is opened, the choice the field had before."""
        return self.tokenizer_combo.currentData() if self._opened is None \
            else self._chosen_tokenizer

    def _extras(self, name: str) -> dict:
        """The preset's training values that have no field here (e.g. beta2)."""
        fields = {s.property("field") for s in self.spins.values()}
        return {k: v for k, v in PRESETS[name].train.items() if k not in fields}

    def _set_extra(self, extra: dict) -> None:
        """Keep (and show) the training values without a field, e.g. a preset's beta2."""
        self._preset_extra = dict(extra)
        show_extra(self.extra_label, extra)

    def set_value(self, name: str, value) -> None:
        self.spins[name].setValue(value)

    def set_from_configs(self, model_cfg: ModelConfig, train_cfg: TrainConfig | None,
                         tokenizer: str = "", lora=None) -> None:
        """Show a loaded checkpoint's settings; tokenizer: its tokenizer in words (studio.
        protocol.SessionInfo.tokenizer; "" leaves the field); lora: its LoraOption."""
        self.tuning.set_option(lora)   # first: a LoRA choice gives its learning rate back
        self.preset_combo.setCurrentIndex(0)
        if self._opened is None:
            self._chosen_tokenizer = self.tokenizer_combo.currentData()
        self._opened = model_cfg
        if tokenizer:
            self._show_tokenizer(tokenizer)
        for name, field, *_ in MODEL_FIELDS:
            self.spins[name].setValue(getattr(model_cfg, field))
        self.tie_check.setChecked(model_cfg.tie_embeddings)
        note = opened_model_note(model_cfg, {f: self.spins[n].value()
                                             for n, f, *_ in MODEL_FIELDS})
        self.opened_label.setText(note)
        self.opened_label.setVisible(bool(note))
        if train_cfg is not None:
            for name, field, *_ in TRAIN_FIELDS + FLOAT_FIELDS:
                self.spins[name].setValue(getattr(train_cfg, field))
            # the model's own values without a field, where they differ from the defaults
            default = TrainConfig()
            keys = {k for name in PRESETS for k in self._extras(name)}
            self._set_extra({k: getattr(train_cfg, k) for k in sorted(keys)
                             if getattr(train_cfg, k) != getattr(default, k)})
        # Continue: "Train for N min more" (as `train --continue --time-budget`), off at first
        self._minutes_mean_more(True)
        self.spins["trainMinutesSpin"].setValue(0)

    def _minutes_mean_more(self, more: bool) -> None:
        """The minutes field means the whole run's time (a new model) or time more (Continue)."""
        spin = self.spins["trainMinutesSpin"]
        spin.setSuffix(" min more" if more else " min")
        spin.setToolTip(MORE_MINUTES_TIP if more else MINUTES_TIP)

    def show_run_totals(self, train_cfg: TrainConfig) -> None:
        """After a continued run: its step totals as they are now (a time budget plans them)."""
        self.spins["pretrainStepsSpin"].setValue(train_cfg.pretrain_steps)
        self.spins["tuneStepsSpin"].setValue(train_cfg.tune_steps)

    def is_valid(self) -> bool:
        return self._valid

    def error_text(self) -> str:
        return "\n".join(e.text() for e in self._errors.values() if e.text())

    # -- validation and estimates --------------------------------------------------------
    device_info = None   # the chosen device (DeviceInfo), set by the window: set_device

    def set_device(self, info) -> None:
        """The device the estimate is for (its attention path and memory: engine.model.memory)."""
        self.device_info = info
        self._on_change()

    def training_bytes(self, cfg: ModelConfig, batch_size: int) -> int:
        """The engine's own number (engine.model.memory.training_bytes, what check_fits enforces)."""
        return training_bytes(cfg, batch_size, self.device_info)[0]

    def _on_change(self, *_):
        if not self._preset_matches():
            self.preset_combo.setCurrentIndex(0)  # a field edited away from the preset
        for field, err in self._errors.items():
            err.setText("")
            err.setVisible(False)
        for spin in self.spins.values():
            spin.setProperty("invalid", False)
            spin.setStyleSheet("")
        problems = []
        try:
            cfg = self.model_config().validate()
        except ConfigError as e:
            cfg = None
            problems.append((e, [f[1] for f in MODEL_FIELDS]))
        try:
            tcfg = self.train_config().validate()
        except ConfigError as e:
            tcfg = None
            problems.append((e, [f[1] for f in TRAIN_FIELDS + FLOAT_FIELDS]))
        for err, fields in problems:
            self._show_error(err, fields)
        if cfg is not None:   # as the Tuning method trains it (full, or LoRA adapters)
            self.estimate_label.setText(self.tuning.estimate_text(
                cfg, self.spins["batchSizeSpin"].value(), self.device_info))
        else:
            self.estimate_label.setText("Fix the setting marked in red to see the model size.")
        # A preset's warmup is part of its measured schedule (capped in a short stage as any
        # warmup is): said only once the person sets the fields themselves.
        from_preset = bool(self.preset_combo.currentData())
        note = tcfg.warmup_note() if tcfg is not None and not from_preset else None
        self.warmup_note.setText(note or "")
        self.warmup_note.setVisible(bool(note))
        valid = cfg is not None and tcfg is not None
        if valid != self._valid:
            self._valid = valid
            self.validityChanged.emit(valid)
        self.changed.emit()

    def _show_error(self, err: ConfigError, candidates: list[str]) -> None:
        """Mark the fields the error names (err.fields) and put its message under the first of
        them; an error about a setting without a field here goes under the last candidate."""
        named = [f for f in err.fields if f in candidates] or candidates[-1:]
        for field in named:
            spin = next(s for s in self.spins.values() if s.property("field") == field)
            spin.setProperty("invalid", True)
            spin.setStyleSheet(INVALID_STYLE)
        label = self._errors[named[0]]
        label.setText(err.describe())
        label.setVisible(True)
        if any(self.spins[n].property("field") in named for n in ADVANCED):
            self.more.setChecked(True)   # never hide the field at fault

    # -- state -----------------------------------------------------------------------------
    def set_editable(self, on: bool, only: tuple[str, ...] | None = None,
                     why: dict[str, str] | None = None) -> None:
        """only: the spins that stay editable (continuing an opened model: the step counts);
        why: the reason a control is off, by spin name ("" for any other), in its tooltip."""
        why = why or {}
        for name, w in list(self.spins.items()) + [("", self.tokenizer_combo),
                                                   ("", self.tie_check), ("", self.preset_combo)]:
            enable_with_reason(w, on and (only is None or name in only),
                               why.get(name, why.get("", "")))
        self.tuning.set_editable(on, why.get("", ""))

    def save(self, s: QSettings) -> None:
        for name, spin in self.spins.items():
            s.setValue(f"settings/{name}", spin.value())
        s.setValue("settings/tokenizer", self.tokenizer_kind())
        s.setValue("settings/tie", self.tie_check.isChecked())
        s.setValue("settings/preset", self.preset_combo.currentData())
        s.setValue("settings/extra", json.dumps(self._preset_extra))

    def restore(self, s: QSettings) -> None:
        for name, spin in self.spins.items():
            v = s.value(f"settings/{name}")
            if v is None:
                continue
            try:
                spin.setValue(float(v) if isinstance(spin, QDoubleSpinBox) else int(float(v)))
            except (TypeError, ValueError):
                pass  # a corrupt value keeps the default
        i = self.tokenizer_combo.findData(s.value("settings/tokenizer", DEFAULT_TOKENIZER))
        self.tokenizer_combo.setCurrentIndex(max(i, 0))
        tie = s.value("settings/tie", ModelConfig().tie_embeddings)
        self.tie_check.setChecked(str(tie).lower() in ("true", "1"))
        self._set_extra(restored_extra(s.value("settings/extra", "")))
        name = s.value("settings/preset", "")
        if name in PRESETS:
            self._preset_values = {**PRESETS[name].model, **PRESETS[name].train}
            self.preset_combo.setCurrentIndex(self.preset_combo.findData(name))
        self._on_change()

def opened_model_note(cfg: ModelConfig, shown: dict) -> str:
    """What an opened model has that the fields do not show: grouped-query attention, its own
    feed-forward width, RoPE base and scaling, and values past a field's range (shown: field
    -> the value the field holds). "" when the fields say it all."""
    default = ModelConfig()
    parts = [f"{field.replace('_', ' ')} {getattr(cfg, field):,}" for field, value in shown.items()
             if value != getattr(cfg, field)]
    if cfg.kv_heads != cfg.n_head:
        parts.append(f"{cfg.kv_heads} key-value heads (grouped-query attention)")
    if cfg.ffn_dim:   # set explicitly (the app's own models take the SwiGLU default width)
        parts.append(f"feed-forward {cfg.ffn_dim}")
    if cfg.rope_base != default.rope_base:
        parts.append(f"RoPE base {cfg.rope_base:g}")
    if cfg.rope_scaling:
        parts.append(f"RoPE scaling {cfg.rope_scaling} (factor {cfg.rope_scaling_factor:g})")
    return ("This model also has: " + ", ".join(parts) + ".") if parts else ""
