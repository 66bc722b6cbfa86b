"""The memory a LoRA tune of a model needs, before any of it is built: what the settings column
shows for "Tuning method: LoRA" (studio.ui.panels.tuning_method). Qt-free.

The engine counts a live LoraModel (engine.model.lora.LoraModel.own_bytes, the `model_part` of
engine.model.memory.training_bytes); here the same formula is applied to a stand-in that has
only what it reads: the adapters' layout (engine.model.lora_table.LoraTable), the transposed
weight scratch (as large as the largest adapter: a QuantBase needs none) and the base's bytes.
The base is not read here (a GGUF of a billion parameters would take seconds): its device bytes
are taken as the GGUF file's size, which is close for the 4- and 8-bit types the base keeps as
they are (Q8_0: 36 bytes per 32 weights on the device, 34 in the file); an F32 file is kept as
f16, half its size, so the figure is then high, never low.
"""

from __future__ import annotations

from types import SimpleNamespace

from opencl_llm_studio.engine.config import LoraConfig, ModelConfig
from opencl_llm_studio.engine.model.lora import LoraModel, w_t_floats
from opencl_llm_studio.engine.model.lora_table import LoraTable
from opencl_llm_studio.engine.model.memory import training_bytes
from opencl_llm_studio.engine.model.params import param_count


def adapter_parameters(cfg: ModelConfig, lora: LoraConfig) -> int:
    """The trainable numbers of `lora` on `cfg`: A (rank, in) and B (out, rank) of every target
    of every block (the alignment padding between them not counted). Raises ConfigError for a
    bad LoraConfig."""
    return sum(e.size for e in LoraTable(cfg, lora).entries.values())


def lora_model_bytes(cfg: ModelConfig, lora: LoraConfig, base_bytes: int,
                     rows: int) -> tuple[int, int]:
    """(total, largest single buffer) device bytes of a LoraModel of `cfg` training `rows` =
    batch size x window rows: the base (`base_bytes`, its GGUF file's size), the adapters with
    their gradients and both AdamW moments, and the adapter passes' scratch
    (LoraModel.own_bytes). The largest base buffer is taken as the embedding's share of the
    base (its largest matrix in a small model; a 4-bit file's may be 8-bit)."""
    table = LoraTable(cfg, lora)
    embedding = base_bytes * cfg.vocab_size * cfg.d_model // max(param_count(cfg), 1)
    stand_in = SimpleNamespace(cfg=cfg, lora=lora.validate(), table=table,
                               w_t=SimpleNamespace(size=4 * w_t_floats(1, table)),  # bytes
                               base=SimpleNamespace(nbytes=base_bytes, largest=embedding))
    return LoraModel.own_bytes(stand_in, rows)


def lora_training_bytes(cfg: ModelConfig, lora: LoraConfig, batch_size: int, base_bytes: int,
                        device=None, window: int | None = None) -> tuple[int, int]:
    """(total, largest single buffer) device bytes of tuning LoRA adapters on `cfg` at
    `batch_size` on `device` (an engine DeviceInfo, or None): the activations, generation set
    and KV decoder of engine.model.memory.training_bytes with the LoRA model's own bytes
    (lora_model_bytes) in place of a full model's. window: the training window in tokens
    (None: cfg.context_length, the most a tuning window can be). Raises ConfigError for a bad
    LoraConfig."""
    rows = batch_size * (window or cfg.context_length)
    return training_bytes(cfg, batch_size, device, window=window,
                          model_part=lora_model_bytes(cfg, lora, base_bytes, rows))
