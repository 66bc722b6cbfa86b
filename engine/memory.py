"""How much device memory a model needs, checked before anything is allocated.

Counts float32 elements of what engine.model allocates: parameters, gradients and two AdamW
moments (4 x the padded table), the training activations for (batch_size, context_length), the
evaluation set of the same shape and the generation window (1, context_length).
"""

from __future__ import annotations

from engine.config import ModelConfig
from engine.device import DeviceInfo
from engine.errors import ConfigError
from engine.params import ParamTable


def activation_floats(cfg: ModelConfig, B: int, T: int, with_grad: bool) -> tuple[int, int]:
    """(total floats, largest single buffer in floats) of engine.model.Activations(B, T)."""
    C, F, V, H, L = cfg.d_model, cfg.hidden_dim, cfg.vocab_size, cfg.n_head, cfg.n_layer
    BT, lse = B * T, B * H * T  # attention keeps a logsumexp per query row, no (T, T) matrix
    per_layer = BT * (C + C + 3 * C + C + C + C + 2 * F + F) + 2 * BT + lse
    total = 2 * BT + (L + 1) * BT * C + L * per_layer + BT * C + BT * C + BT + BT * V + BT
    if with_grad:
        total += 3 * BT * C + 3 * BT * C + lse + 2 * BT * F + BT * F + 3 * BT + 1
    return total, max(BT * V, BT * 2 * F, BT * 3 * C)


def training_bytes(cfg: ModelConfig, batch_size: int) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) for training `cfg` at `batch_size`."""
    T = cfg.context_length
    table = ParamTable(cfg)
    train, big1 = activation_floats(cfg, batch_size, T, True)
    evals, _ = activation_floats(cfg, batch_size, T, False)
    gen, _ = activation_floats(cfg, 1, T, False)
    biggest_group = max(g.size for g in table.groups.values())
    total = 4 * table.size + biggest_group + train + evals + gen
    return 4 * total, 4 * max(big1, table.size)


def check_fits(cfg: ModelConfig, batch_size: int, device: DeviceInfo) -> int:
    """Raise ConfigError when training would not fit the device; return the bytes needed."""
    need, biggest = training_bytes(cfg, batch_size)
    have = device.global_mem_bytes
    gib = 2 ** 30
    if need > 0.9 * have or biggest > device.max_alloc_bytes:
        raise ConfigError(
            f"This model needs about {need / gib:.2f} GiB on {device.name}, which has "
            f"{have / gib:.2f} GiB (largest single buffer {biggest / gib:.2f} GiB, limit "
            f"{device.max_alloc_bytes / gib:.2f} GiB).",
            "Use a smaller batch size, context length, d_model or vocabulary.")
    return need
