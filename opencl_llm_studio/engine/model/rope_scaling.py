"""Meta's Llama 3.1 RoPE frequency scaling ("llama3") as per-frequency divisors, both ways.

A GGUF carries the scaling as the tensor `rope_freqs.weight`: one divisor per rotated pair
(head_dim / 2 of them), which llama.cpp's RoPE divides each frequency theta_i = base^(-2i/head_dim)
by. Its values are those llama.cpp's converter computes (conversion/llama.py,
LlamaModel.generate_extra_tensors; transformers' modeling_rope_utils._compute_llama3_parameters
gives the same scaled frequencies): 1 for wavelengths below original_context / high_freq_factor,
`factor` above original_context / low_freq_factor, and 1 / ((1 - s) / factor + s) between, with
s = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
"""

from __future__ import annotations

import math

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig

LLAMA3_DEFAULTS = (1.0, 4.0, 8192)   # low_freq_factor, high_freq_factor, original context


def _factors(head_dim: int, base: float, factor: float, low: float, high: float,
             original: float, dtype=np.float32) -> np.ndarray:
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            s = (original / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.asarray(out, dtype)


def llama3_factors(cfg: ModelConfig, dtype=np.float32) -> np.ndarray:
    """(head_dim // 2,) divisors of the RoPE frequencies for cfg's llama3 scaling (float32: the
    GGUF tensor rope_freqs.weight; engine.model.attention.rope_inv_freq divides by them in float64).
    ValueError when cfg has no llama3 scaling."""
    if cfg.rope_scaling != "llama3":
        raise ValueError(f"rope_scaling is {cfg.rope_scaling!r}, not 'llama3'")
    return _factors(cfg.head_dim, cfg.rope_base, cfg.rope_scaling_factor,
                    cfg.rope_low_freq_factor, cfg.rope_high_freq_factor,
                    cfg.rope_original_context, dtype)


def llama3_from_factors(factors: np.ndarray, head_dim: int, base: float,
                        original: int | None = None) -> dict | None:
    """ModelConfig fields (rope_scaling, rope_scaling_factor, rope_low_freq_factor,
    rope_high_freq_factor, rope_original_context) whose llama3_factors equal `factors`, or None
    when every divisor is 1 (no scaling). Tries Llama 3.x's own settings (LLAMA3_DEFAULTS,
    `original` when the GGUF names it), then fits the smooth band's line with
    low_freq_factor = 1 (only the band's slope and intercept change the frequencies).
    Raises ValueError when no llama3 scaling gives these divisors."""
    f = np.asarray(factors, np.float64).reshape(-1)
    if f.shape[0] != head_dim // 2:
        raise ValueError(f"{f.shape[0]} RoPE divisors for head_dim {head_dim}")
    if np.allclose(f, 1.0):
        return None
    factor = float(f.max())
    low, high, orig = LLAMA3_DEFAULTS
    candidates = [(low, high, original or orig), (low, high, orig)]
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    band = (f > 1 + 1e-6) & (f < factor * (1 - 1e-6))
    if band.sum() >= 2 and factor > 1:
        s = (1.0 / f[band] - 1.0 / factor) / (1.0 - 1.0 / factor)   # the smooth weight
        inv_wavelen = freqs[band] / (2 * math.pi)
        a, b = np.polyfit(inv_wavelen, s, 1)        # s = a / wavelen + b
        if b < 0:
            fit_high = 1.0 - 1.0 / b                # b = -low / (high - low), low = 1
            candidates.append((1.0, fit_high, -a / b))
    for low, high, orig in candidates:
        orig = int(round(orig))
        if np.allclose(_factors(head_dim, base, factor, low, high, orig), f, rtol=1e-5):
            return {"rope_scaling": "llama3", "rope_scaling_factor": factor,
                    "rope_low_freq_factor": float(low), "rope_high_freq_factor": float(high),
                    "rope_original_context": orig}
    raise ValueError("the RoPE divisors (rope_freqs) are not a llama3 scaling")
