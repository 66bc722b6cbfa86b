"""Choosing the next token from logits on the host (numpy): greedy, temperature, top-k, top-p,
repetition penalty. Conventions: temperature scaling then top-k then nucleus (top-p) filtering
(Holtzman et al. 2019), as llama.cpp's default sampler chain; repetition penalty as CTRL
(Keskar et al. 2019): positive logits of seen tokens divided by the penalty, negative multiplied.
"""

from __future__ import annotations

import numpy as np

# SamplingParams and MAX_NEW_TOKENS live with the other configs (engine/config.py), which the
# CLI's parser and the chat panel read for their defaults without importing numpy.
from opencl_llm_studio.engine.config import MAX_NEW_TOKENS, SamplingParams  # noqa: F401  (re-exported)


def next_token(logits: np.ndarray, sp: SamplingParams, rng: np.random.Generator,
               history: list[int] | None = None) -> int:
    """logits (V,) -> token id."""
    z = np.asarray(logits, np.float64).copy()
    if sp.repetition_penalty != 1.0 and history:
        seen = np.unique(np.asarray(history, np.int64))
        z[seen] = np.where(z[seen] > 0, z[seen] / sp.repetition_penalty,
                           z[seen] * sp.repetition_penalty)
    if sp.greedy or sp.temperature <= 0:
        return int(np.argmax(z))
    z /= sp.temperature
    if 0 < sp.top_k < z.size:
        kth = np.partition(z, -sp.top_k)[-sp.top_k]
        z[z < kth] = -np.inf
    p = np.exp(z - z.max())
    p /= p.sum()
    if sp.top_p < 1.0:
        order = np.argsort(-p)
        cum = np.cumsum(p[order])
        keep = order[: int(np.searchsorted(cum, sp.top_p) + 1)]
        mask = np.zeros_like(p, bool)
        mask[keep] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    return int(rng.choice(p.size, p=p))
