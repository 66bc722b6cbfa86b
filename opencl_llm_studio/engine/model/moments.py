"""How a model keeps its AdamW moments: float32, or bfloat16 for a model whose float32 training
state would not fit a laptop.

Full fine-tuning in float32 holds 16 bytes a parameter before activations (weights, gradients,
two moments): 5.8 GB for a 360M model, past what an 8 GB laptop can give. Moments in bfloat16
(the top 16 bits of a float32: its range, 8 bits of precision) take 12 bytes a parameter, and
written back with stochastic rounding (kernels/optimizer.cl) they stay unbiased, so even v's
small updates at beta2 near 1 accumulate (Zamirai et al. 2020, "Revisiting BFloat16 Training";
torchao's AdamW with bf16_stochastic_round). The weights and the update itself stay float32.
A checkpoint stores moments as float32 either way (exact: every bfloat16 is a float32).

TrainConfig.adam_moments chooses: "f32", "bf16", or "auto": bf16 from BF16_FROM_PARAMS
parameters, where the float32 state passes 4 GB (half an 8 GB laptop), f32 below.
"""

from __future__ import annotations

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.model.dropout import lowbias32
from opencl_llm_studio.engine.model.params import param_count

BF16_FROM_PARAMS = 250_000_000
BYTES = {"f32": 4, "bf16": 2}


def resolve(setting: str, cfg: ModelConfig) -> str:
    """"f32" or "bf16": the moments of a model of `cfg` under TrainConfig.adam_moments."""
    if setting != "auto":
        return setting
    return "bf16" if param_count(cfg) >= BF16_FROM_PARAMS else "f32"


def moment_key(seed: int, t: int) -> int:
    """The stochastic-rounding key of AdamW step t's bf16 moments: a fresh 32-bit draw per
    (seed, step), mixed as dropout's keys are (engine.model.dropout.StepDropout.key)."""
    return lowbias32(lowbias32(seed) ^ lowbias32(t + 0x9E3779B9))


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bits (uint16), rounded to nearest even (NaN stays NaN)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, (b >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)


def from_bf16(h: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) as float32 values (exact)."""
    return (np.asarray(h, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
