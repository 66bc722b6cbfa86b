"""How much device memory a model needs, checked before anything is allocated.

Counts float32 elements of what engine.model allocates: parameters, gradients and two AdamW
moments (4 x the padded table), the training activations for (batch_size, context_length), the
evaluation set of the same shape and the generation window (1, context_length); the activation
sets are summed from their one declaration, engine.activations.BUFFERS. Attention keeps
a logsumexp (B, H, T) per layer on the fused path and the probabilities (B, H, T, T) on the
GEMM path; each activation set counts the path engine.attention_gemm.choose gives it.
"""

from __future__ import annotations

from engine import activations, attention_gemm
from engine.config import ModelConfig
from engine.device import DeviceInfo
from engine.errors import ConfigError
from engine.params import ParamTable


def activation_floats(cfg: ModelConfig, B: int, T: int, with_grad: bool,
                      path: str = "fused") -> tuple[int, int]:
    """(total, largest single buffer) in 4-byte words of engine.model.Activations(B, T) with
    attention on `path` ("fused" or "gemm"): the buffers engine.activations.BUFFERS declares."""
    total, largest = activations.set_bytes(cfg, B, T, with_grad, path)
    return total // 4, largest // 4


def training_bytes(cfg: ModelConfig, batch_size: int, device: DeviceInfo | None = None,
                   attention_path: str | None = None) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) for training `cfg` at `batch_size`; each
    activation set's attention path as engine.attention_gemm.choose picks it on `device`
    (attention_path forces one; no device: "fused")."""
    T = cfg.context_length
    table = ParamTable(cfg)
    sets = [activation_floats(cfg, B, T, grad, _path(cfg, B, T, grad, device, attention_path))
            for B, grad in ((batch_size, True), (batch_size, False), (1, False))]
    biggest_group = max(g.size for g in table.groups.values())
    total = 4 * table.size + biggest_group + sum(n for n, _ in sets)
    return 4 * total, 4 * max(max(b for _, b in sets), table.size)


def _path(cfg, B, T, grad, device, forced) -> str:
    if device is None:
        return forced or "fused"
    return attention_gemm.choose(device, cfg, B, T, grad, forced)


def check_fits(cfg: ModelConfig, batch_size: int, device: DeviceInfo,
               attention_path: str | None = None) -> int:
    """Raise ConfigError when training would not fit the device; return the bytes needed.
    attention_path: as engine.attention_gemm.choose's `forced` (default: its rule)."""
    need, biggest = training_bytes(cfg, batch_size, device, attention_path)
    have = device.global_mem_bytes
    gib = 2 ** 30
    if need > 0.9 * have or biggest > device.max_alloc_bytes:
        raise ConfigError(
            f"This model needs about {need / gib:.2f} GiB on {device.name}, which has "
            f"{have / gib:.2f} GiB (largest single buffer {biggest / gib:.2f} GiB, limit "
            f"{device.max_alloc_bytes / gib:.2f} GiB).",
            "Use a smaller batch size, context length, d_model or vocabulary.")
    return need
