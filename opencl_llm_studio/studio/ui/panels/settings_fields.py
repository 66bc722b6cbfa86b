"""The settings column's fields: which config field each spin box edits (the tables), how a
field is built (its range from engine.limits.LIMITS, its error label), and the numbers shown
beside them in words. Used by studio.ui.panels.settings_panel.SettingsPanel."""

from __future__ import annotations

import json
import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QLabel,
                               QToolButton)

from opencl_llm_studio.engine.config import PRETRAINED_TUNE_LR, TrainConfig
from opencl_llm_studio.engine.limits import LIMITS
from opencl_llm_studio.engine.training.auto_size import AUTO
from opencl_llm_studio.engine.training.presets import PRESETS

# (objectName, config field, label, step, tooltip); the range: engine.limits.LIMITS[field]
MODEL_FIELDS = [
    ("dModelSpin", "d_model", "Embedding size (d_model)", 16,
     "Width of every token vector. Must be divisible by the number of heads."),
    ("nLayerSpin", "n_layer", "Blocks (n_layer)", 1,
     "Transformer blocks: attention + SwiGLU feed-forward each."),
    ("nHeadSpin", "n_head", "Attention heads (n_head)", 1,
     "Each head looks at d_model / n_head channels (head_dim, must be even for RoPE)."),
    ("contextLengthSpin", "context_length", "Context length", 16,
     "Tokens the model sees at once; also the longest prompt + answer in chat."),
    ("vocabSizeSpin", "vocab_size", "Vocabulary size", 64,
     "Requested tokenizer size; a small text may give fewer pieces."),
]
TRAIN_FIELDS = [
    ("pretrainStepsSpin", "pretrain_steps", "Pretraining steps", 50,
     "Optimizer updates on the pretraining text."),
    ("tuneStepsSpin", "tune_steps", "Tuning steps", 50,
     "Optimizer updates on the User/Assistant dialogues after pretraining."),
    ("batchSizeSpin", "batch_size", "Batch size", 1, "Windows per optimizer step."),
    ("warmupSpin", "warmup_steps", "Warmup steps", 10,
     "Linear warmup of the learning rate at the start of each stage (at most a fifth of "
     "the stage's steps)."),
    ("seedSpin", "seed", "Seed", 1, "Same seed, same weights, batches and samples."),
    ("sampleIntervalSpin", "sample_interval", "Samples every", 10,
     "Generate sample texts every N steps (0 = never)."),
    ("evalIntervalSpin", "eval_interval", "Validate every", 10,
     "Compute the validation loss every N steps."),
]
# (objectName, field, label, step, decimals, tooltip); the range: engine.limits.LIMITS[field]
FLOAT_FIELDS = [
    ("learningRateSpin", "learning_rate", "Learning rate", 5e-4, 6,
     "Peak AdamW learning rate of each stage: a warmup, a stable phase, then a decay over the "
     f"stage's last {TrainConfig.decay_fraction:.0%} (WSD). {TrainConfig.learning_rate:g} suits "
     f"small models; an opened model tunes at {PRETRAINED_TUNE_LR:g}."),
    ("gradClipSpin", "grad_clip", "Gradient clipping", 0.1, 2,
     "Clip the global gradient norm to this value (0 = off)."),
    ("weightDecaySpin", "weight_decay", "Weight decay", 0.01, 3,
     "AdamW decoupled weight decay on matrices."),
    ("dropoutSpin", "dropout", "Dropout", 0.05, 2,
     "Share of the attention and feed-forward outputs zeroed at random while training (never "
     "when generating, validating or exporting). 0 = off; 0.1-0.2 helps when the validation "
     "loss rises while the training loss falls."),
]

# Shown under "More training settings" (folded by default, so the column fits a laptop screen)
ADVANCED = ("seedSpin", "sampleIntervalSpin", "evalIntervalSpin", "gradClipSpin",
            "weightDecaySpin")

SPIN_INT_MAX = 2**31 - 1  # QSpinBox holds an int: the seed field stops here (engine: 2**32 - 1)
FIELD_MIN_WIDTH = 96  # px; what decides how narrow the settings column can be made
INVALID_STYLE = "background: #fde7e5; color: #8c1d18;"  # the field at fault turns pink


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def human_count(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    if n >= 1e6:
        return f"{n / 1e6:.2f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} K"
    return str(n)


def make_form(box: QGroupBox) -> QFormLayout:
    """The compact right-aligned form of a settings group box."""
    form = QFormLayout(box)
    form.setLabelAlignment(Qt.AlignRight | Qt.AlignVCenter)
    form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
    form.setContentsMargins(6, 6, 6, 6)
    form.setHorizontalSpacing(10)
    form.setVerticalSpacing(3)  # 6 made the column scroll at 1280 x 800 and 1366 x 768
    return form


def add_field(form: QFormLayout, spin, name: str, field: str, label: str, step, tip: str, value,
              on_change, unit_s: int = 1) -> QLabel:
    """Add a spin box for config `field` to `form`, its range engine.limits.LIMITS[field]
    (unit_s: the field's seconds per shown unit, 60 for minutes), and under it a hidden error
    label; returns the label."""
    spin.setObjectName(name)
    decimals = spin.decimals() if isinstance(spin, QDoubleSpinBox) else 0
    lo, hi = LIMITS[field].bounds(10.0 ** -decimals)
    hi = hi if decimals else min(hi, SPIN_INT_MAX)
    if decimals:
        spin.setRange(lo / unit_s, hi / unit_s)
    else:   # whole units inside the range
        spin.setRange(math.ceil(lo / unit_s), math.floor(hi / unit_s))
    spin.setSingleStep(step)
    spin.setValue(value)
    spin.setToolTip(tip)
    spin.setProperty("field", field)
    spin.setKeyboardTracking(True)
    # Not the width of the range's longest value (2147483647 for the seed): the column may
    # be narrowed on a small screen; the fields share the column's width anyway.
    spin.setMinimumWidth(FIELD_MIN_WIDTH)
    spin.valueChanged.connect(on_change)
    form.addRow(label, spin)
    err = QLabel()
    err.setObjectName(name.replace("Spin", "Error"))
    err.setProperty("role", "error")
    err.setWordWrap(True)
    form.addRow(err)
    # Not QFormLayout.setRowVisible: in PySide6 6.12 it corrupts reference counts.
    err.setVisible(False)
    return err


def float_spin(decimals: int) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setDecimals(decimals)
    return spin


def note_label(name: str, role: str = "muted", shown: bool = False) -> QLabel:
    """A wrapped label of a style role ("muted", "estimate"); hidden until it has something
    unless `shown`."""
    label = QLabel()
    label.setObjectName(name)
    label.setProperty("role", role)
    label.setWordWrap(True)
    label.setVisible(shown)
    return label


AUTO_TIP = ("Measures this device's training speed (about a second), then picks the model's "
            "size, context, batch, learning rate and tokenizer for the pretraining text and the "
            "\"Train for\" minutes (a data-constrained scaling law; engine/training/auto_size.py). "
            "Every field stays yours to change.")


def run_seconds(minutes: int, extra: dict, auto: bool) -> float:
    """"Train for" in seconds, or while Auto is picked (`auto`) its shorter plan where its
    values hold one (`time_budget_s`: a text that cannot use the minutes, engine.training.
    auto_size); an edit away from Auto gives the person's own model their minutes."""
    budget = 60.0 * minutes
    cap = extra.get("time_budget_s") if auto else None
    return min(budget, cap) if cap and budget else budget


def show_extra(label: QLabel, extra: dict) -> None:
    """`label` lists the training values in use that have no field (a preset's beta2, ...)."""
    extra = {k: v for k, v in extra.items() if k != "time_budget_s"}   # Auto's note says it
    label.setText("Also in use: " + ", ".join(f"{k} {v:g}" if isinstance(v, float) else
                                              f"{k} {v}" for k, v in sorted(extra.items())))
    label.setToolTip("Training values the preset sets that have no field here; they stay in "
                     "use after you edit a field, until another preset is chosen or a model "
                     "is opened.")
    label.setVisible(bool(extra))


def preset_combo(on_chosen) -> QComboBox:
    """The presets of engine/training/presets.py ("Custom" first); on_chosen(name) when the
    person picks one."""
    combo = QComboBox()
    combo.setObjectName("presetCombo")
    combo.addItem("Custom", "")
    for p in PRESETS.values():
        combo.addItem(p.title, p.name)
        combo.setItemData(combo.count() - 1, p.description, Qt.ToolTipRole)
    combo.addItem("Auto (text, device, minutes)", AUTO)
    combo.setItemData(combo.count() - 1, AUTO_TIP, Qt.ToolTipRole)
    combo.setToolTip("Settings measured for small texts on each kind of device; hover an item "
                     "for the loss and time it reaches.")
    combo.setMinimumWidth(FIELD_MIN_WIDTH)
    combo.activated.connect(lambda i: on_chosen(combo.itemData(i)))
    return combo


def fold_button(text: str, name: str, on_toggled) -> QToolButton:
    """A flat arrow button that folds a part of the form open and shut."""
    more = QToolButton()
    more.setObjectName(name)
    more.setText(text)
    more.setCheckable(True)
    more.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
    more.setArrowType(Qt.RightArrow)
    more.setAutoRaise(True)

    def toggled(on: bool) -> None:
        more.setArrowType(Qt.DownArrow if on else Qt.RightArrow)
        on_toggled(on)
    more.toggled.connect(toggled)
    return more


def restored_extra(text) -> dict:
    """The saved training values without a field (JSON); those TrainConfig does not know, or a
    corrupt entry, are dropped (the defaults apply)."""
    try:
        saved = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    fields = TrainConfig.__dataclass_fields__
    return {k: v for k, v in saved.items() if k in fields
            and isinstance(v, (int, float)) and not isinstance(v, bool)} \
        if isinstance(saved, dict) else {}
