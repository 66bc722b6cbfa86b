"""The settings column's Tuning method: "Full fine-tuning" (every weight trains, in float32) or
"LoRA" (low-rank adapters, Hu et al. 2021, on the chosen linear layers of each block while the
imported GGUF stays quantized), with the adapters' rank, alpha, layers and dropout (the CLI's
--lora-rank, --lora-alpha, --lora-targets, --lora-dropout); and the memory estimate, which
follows the choice.

LoRA can start only on a run imported from a GGUF and not trained since (the engine's
lora_session keeps that file as the base), and a LoRA run keeps its adapters' shape: the worker
tells which (studio.protocol.LoraOption, with each opened model and each run's end), and the
choice is off with the reason in its tooltip elsewhere. With no model at hand (a new model)
the rows are hidden. Picking LoRA raises the learning-rate
field by LORA_LR_FACTOR, as the engine does (LoRA wants several times full fine-tuning's rate), so the
field shows the rate the run will train at. Used by studio.ui.panels.settings_panel.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel,
                               QSpinBox, QWidget)

from opencl_llm_studio.engine.config import LORA_LR_FACTOR, LORA_TARGETS, LoraConfig, ModelConfig
from opencl_llm_studio.engine.files.export_types import estimated_bytes
from opencl_llm_studio.engine.limits import LIMITS
from opencl_llm_studio.engine.model.memory import training_bytes
from opencl_llm_studio.engine.model.params import param_count
from opencl_llm_studio.studio.lora_estimate import adapter_parameters, lora_training_bytes
from opencl_llm_studio.studio.protocol import LoraOption
from opencl_llm_studio.studio.ui.panels.settings_fields import (FIELD_MIN_WIDTH, human_bytes,
                                                                 human_count, note_label)
from opencl_llm_studio.studio.ui.widgets import enable_with_reason

NEW_MODEL_WHY = ("LoRA tunes a model imported from a GGUF file, which stays quantized as its "
                 "base: open one with File › Open model…, then choose LoRA. A new model trains "
                 "all of its weights.")
FIXED_WHY = ("A LoRA run keeps its adapters' shape (rank {rank}, alpha {alpha:g}): its "
             "checkpoint holds adapters of that shape over {base}. To tune another rank, open "
             "the GGUF again with File › Open model….")
METHOD_TIP = ("Full fine-tuning trains every weight (float32 on the device). LoRA trains small "
              "low-rank adapters on each linear layer while the GGUF stays quantized: far less "
              "memory; export the adapters alone, or merged into the model.")
RANK_TIP = ("Rank of the adapters A (rank, in) and B (out, rank) on each linear layer. "
            + LIMITS["lora_rank"].hint)
ALPHA_TIP = ("Scale of the adapters' output, alpha / rank; " + LIMITS["lora_alpha"].hint
             + " It follows the rank until you change it.")
DROPOUT_TIP = ("Dropout on each adapter's input while it trains (PEFT's lora_dropout); "
               + LIMITS["lora_dropout"].hint)
LAYERS_TIP = ("Which linear layers of each block get adapters. Every one, the feed-forward "
              "included, learns best (LoRA without regret, 2025); fewer layers train fewer "
              "parameters.")
FULL, LORA = "full", "lora"
WORDS_ROLE = Qt.ItemDataRole.UserRole + 1   # a layers choice's words in the note
# The "LoRA layers" choices: (label, engine target names, the note's words). The first is the
# engine's default; q and v alone are the LoRA paper's (Hu et al. 2021, section 7.1).
LAYER_CHOICES = (
    ("All linear", LORA_TARGETS, "every linear layer"),
    ("Attention", ("attn_q", "attn_k", "attn_v", "attn_output"),
     "the attention layers (q, k, v, output)"),
    ("Attention q, v", ("attn_q", "attn_v"), "q and v only (the LoRA paper's choice)"),
    ("Feed-forward", ("ffn_gate", "ffn_up", "ffn_down"),
     "the feed-forward layers (gate, up, down)"),
)


class TuningMethod(QObject):
    """The Tuning method rows, put into `form` above the learning rate (which LoRA changes):
    the method, the rank and alpha (shown for LoRA), a note; `changed` after any edit of them. learning_rate: the settings'
    learning-rate field, scaled by LORA_LR_FACTOR when the person picks LoRA and back when
    they pick Full fine-tuning."""

    changed = Signal()

    def __init__(self, learning_rate: QDoubleSpinBox, form: QFormLayout, parent=None):
        super().__init__(parent)
        self.learning_rate = learning_rate
        self.option: LoraOption | None = None   # None: no opened model (a new model)
        self._editable = True
        self._busy_why = ""
        self._alpha_follows = True              # alpha = 2 x rank until the person sets it
        self.combo = QComboBox()
        self.combo.setObjectName("tuningMethodCombo")
        self.combo.addItem("Full fine-tuning", FULL)
        self.combo.addItem("LoRA", LORA)
        self.combo.setToolTip(METHOD_TIP)
        self.combo.setMinimumWidth(FIELD_MIN_WIDTH)
        self.combo.currentIndexChanged.connect(self._method_picked)
        default = LoraConfig()
        self.rank = _spin(QSpinBox(), "loraRankSpin", "lora_rank", default.rank, RANK_TIP)
        self.rank.valueChanged.connect(self._rank_changed)
        self.alpha = _spin(QDoubleSpinBox(), "loraAlphaSpin", "lora_alpha", default.alpha,
                           ALPHA_TIP)
        self.alpha.valueChanged.connect(self._alpha_changed)
        self.layers = QComboBox()
        self.layers.setObjectName("loraLayersCombo")
        for i, (label, targets, words) in enumerate(LAYER_CHOICES):
            self.layers.addItem(label, targets)
            self.layers.setItemData(i, words, WORDS_ROLE)
            self.layers.setItemData(i, ", ".join(targets), Qt.ItemDataRole.ToolTipRole)
        self.layers.setToolTip(LAYERS_TIP)
        self.layers.setMinimumWidth(FIELD_MIN_WIDTH)
        self.layers.currentIndexChanged.connect(self._layers_changed)
        self.dropout = _spin(QDoubleSpinBox(), "loraDropoutSpin", "lora_dropout", default.dropout,
                             DROPOUT_TIP)
        self.dropout.setSingleStep(0.05)
        self.dropout.valueChanged.connect(lambda _v: self.changed.emit())
        self.layers_row = QWidget()
        layers_row = QHBoxLayout(self.layers_row)
        layers_row.setContentsMargins(0, 0, 0, 0)
        layers_row.addWidget(self.layers, 2)
        layers_row.addWidget(QLabel("dropout"))
        layers_row.addWidget(self.dropout, 1)
        self.lora_row = QWidget()
        row = QHBoxLayout(self.lora_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.rank, 1)
        self.alpha_label = QLabel("alpha")
        row.addWidget(self.alpha_label)
        row.addWidget(self.alpha, 1)
        self.note = note_label("loraNote")
        self._form = form
        row, _ = form.getWidgetPosition(learning_rate)
        form.insertRow(row, "Tuning method", self.combo)
        form.insertRow(row + 1, "LoRA rank", self.lora_row)
        form.insertRow(row + 2, "LoRA layers", self.layers_row)
        form.insertRow(row + 3, self.note)
        self._apply()

    # -- what the model at hand allows ------------------------------------------------------
    def set_option(self, option: LoraOption | None) -> None:
        """What the worker says of the model at hand (None: no model opened): a LoRA run shows
        its rank and alpha, fixed; a model LoRA cannot tune shows Full fine-tuning, with the
        reason in the tooltip. A LoRA choice that does not become a LoRA run gives the learning
        rate back."""
        if self.is_lora() and not self.fixed() and not (option and option.config):
            self._scale_learning_rate(1 / LORA_LR_FACTOR)
        self.option = option
        with QSignalBlocker(self.combo), QSignalBlocker(self.rank), QSignalBlocker(self.alpha), \
                QSignalBlocker(self.layers), QSignalBlocker(self.dropout):
            self.combo.setCurrentIndex(self.combo.findData(LORA if self.fixed() else FULL))
            if self.fixed():
                kept = LoraConfig.from_dict(option.config)
                self.rank.setValue(kept.rank)
                self.alpha.setValue(kept.alpha)
                self.layers.setCurrentIndex(self._layers_index(kept.targets))
                self.dropout.setValue(kept.dropout)
        self._apply()
        self.changed.emit()

    def set_editable(self, on: bool, busy_why: str = "") -> None:
        """Off while a run is going (busy_why says so); on, as the model at hand allows."""
        self._editable, self._busy_why = on, busy_why
        self._apply()

    def fixed(self) -> bool:
        """The model at hand is a LoRA run (its adapters' shape is fixed)."""
        return bool(self.option and self.option.config)

    def available(self) -> bool:
        """LoRA can start on the model at hand (a GGUF import at step 0)."""
        return bool(self.option and not self.option.why_not and not self.option.config)

    def is_lora(self) -> bool:
        return self.combo.currentData() == LORA

    def lora_config(self) -> LoraConfig | None:
        """The adapters Continue trains: a LoRA run's own, the fields' where LoRA is picked on
        a model it can start on, else None (full fine-tuning)."""
        if self.fixed():
            return LoraConfig.from_dict(self.option.config)
        if self.is_lora() and self.available():
            return LoraConfig(rank=self.rank.value(), alpha=self.alpha.value(),
                              dropout=self.dropout.value(),
                              targets=tuple(self.layers.currentData()))
        return None

    def job_lora(self) -> dict | None:
        """ContinueJob.lora: lora_config() as its dict, or None."""
        lora = self.lora_config()
        return lora.to_dict() if lora is not None else None

    # -- the estimate -----------------------------------------------------------------------
    def estimate_text(self, cfg: ModelConfig, batch_size: int, device) -> str:
        """The estimate line: parameters, device memory to train (engine.model.memory, the
        number check_fits enforces) and export sizes; with LoRA, the adapters' parameters,
        the memory of tuning them over the quantized base (studio.lora_estimate) and the
        adapter GGUF's size (float32)."""
        lora = self.lora_config()
        if lora is None:
            return (f"<b>{human_count(param_count(cfg))}</b> parameters · "
                    f"≈ {human_bytes(training_bytes(cfg, batch_size, device)[0])} to train · "
                    f"GGUF ≈ {human_bytes(estimated_bytes(cfg, 'f32'))} (f32), "
                    f"{human_bytes(estimated_bytes(cfg, 'f16'))} (f16)")
        n, base = adapter_parameters(cfg, lora), self.option.base_bytes
        need = lora_training_bytes(cfg, lora, batch_size, base, device)[0]
        return (f"<b>{human_count(n)}</b> LoRA parameters (model "
                f"{human_count(param_count(cfg))}) · ≈ {human_bytes(need)} to tune, "
                f"{human_bytes(base)} of it the quantized base · adapter GGUF ≈ "
                f"{human_bytes(4 * n)}")

    # -- edits ------------------------------------------------------------------------------
    def _method_picked(self, _index: int) -> None:
        self._scale_learning_rate(LORA_LR_FACTOR if self.is_lora() else 1 / LORA_LR_FACTOR)
        self._apply()
        self.changed.emit()

    def _scale_learning_rate(self, factor: float) -> None:
        """LoRA's rate is LORA_LR_FACTOR times the run's (engine lora_session does the same)."""
        self.learning_rate.setValue(self.learning_rate.value() * factor)

    def _rank_changed(self, rank: int) -> None:
        if self._alpha_follows:
            with QSignalBlocker(self.alpha):
                self.alpha.setValue(2.0 * rank)
        self.changed.emit()

    def _alpha_changed(self, _alpha: float) -> None:
        self._alpha_follows = False
        self.changed.emit()

    def _layers_changed(self, _index: int) -> None:
        self.note.setText(self._note() if self.is_lora() else "")
        self.changed.emit()

    def _layers_index(self, targets) -> int:
        """The LAYER_CHOICES row of `targets`; another set (a run made with the CLI's
        --lora-targets) gets a row of its own, named by its layers."""
        targets = tuple(targets)
        for i in range(self.layers.count()):
            if tuple(self.layers.itemData(i)) == targets:
                return i
        self.layers.addItem(", ".join(targets), targets)
        self.layers.setItemData(self.layers.count() - 1, ", ".join(targets), WORDS_ROLE)
        return self.layers.count() - 1

    def _apply(self) -> None:
        """Enable the choice where LoRA can run, with the reason where not; show the rank and
        the note for LoRA only."""
        o = self.option
        why = (self._busy_why if not self._editable else NEW_MODEL_WHY if o is None
               else self._fixed_why() if o.config else o.why_not)
        enable_with_reason(self.combo, self._editable and self.available(), why)
        for w in (self.rank, self.alpha, self.layers, self.dropout):
            enable_with_reason(w, self._editable and self.available(), why)
        lora = self.is_lora()
        # Only with a model at hand: a new model has nothing LoRA could tune, and the column
        # must fit a 1366 x 768 screen without scrolling (tests/test_studio_visibility.py)
        for w, shown in ((self.combo, o is not None), (self.lora_row, lora),
                         (self.layers_row, lora)):
            w.setVisible(shown)
            self._form.labelForField(w).setVisible(shown)
        self.note.setText(self._note() if lora else "")
        self.note.setVisible(lora)

    def _fixed_why(self) -> str:
        kept = LoraConfig.from_dict(self.option.config)
        return FIXED_WHY.format(rank=kept.rank, alpha=kept.alpha,
                                base=self.option.base_name or "its base GGUF")

    def _note(self) -> str:
        base = (self.option.base_name if self.option else "") or "the GGUF"
        if self.fixed():
            return (f"This run tunes LoRA adapters over {base}, which stays quantized; "
                    "Continue trains them further.")
        where = self.layers.currentData(WORDS_ROLE)
        return (f"Adapters on {where} in each block; {base} stays quantized and only "
                f"the adapters train. The learning rate below was raised {LORA_LR_FACTOR}x, as "
                "LoRA wants.")


def _spin(spin, name: str, field: str, value, tip: str):
    """A spin box over LIMITS[field]'s range (as settings_fields.add_field's)."""
    spin.setObjectName(name)
    decimals = spin.decimals() if isinstance(spin, QDoubleSpinBox) else 0
    lo, hi = LIMITS[field].bounds(10.0 ** -decimals)
    spin.setRange(lo, hi)
    spin.setValue(value)
    spin.setToolTip(tip)
    spin.setProperty("field", field)
    spin.setMinimumWidth(FIELD_MIN_WIDTH // 2)
    return spin
