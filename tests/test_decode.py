"""KV-cache decoding gives the same logits as the full forward pass, and the same text."""

import numpy as np
import pytest

from engine.config import ModelConfig
from engine.decode import KVDecoder
from engine.model import Model


@pytest.mark.parametrize("n_prompt", [1, 5])
def test_kv_cache_logits_equal_full_forward(rt, n_prompt):
    cfg = ModelConfig(vocab_size=300, d_model=24, n_layer=2, n_head=3, context_length=12,
                      ffn_dim=40)
    model = Model(rt, cfg, seed=4)
    rng = np.random.default_rng(n_prompt)
    ids = list(rng.integers(0, cfg.vocab_size, size=n_prompt + 15))  # passes the window end
    dec = KVDecoder(model)
    got = [dec.reset(ids[:n_prompt])]
    for t in ids[n_prompt:]:
        got.append(dec.step(int(t)))
    for k, logits in enumerate(got):
        seen = ids[: n_prompt + k][-cfg.context_length:] if k + n_prompt <= 12 else dec_window(
            ids, n_prompt + k, cfg.context_length)
        full = model.logits(np.array([seen], np.int32))[0, -1]
        np.testing.assert_allclose(logits, full, atol=2e-5, err_msg=f"token {k}")


def dec_window(ids, n, T):
    """The tokens the decoder attends to after a rebuild: it keeps the newest T//2 tokens each
    time the window fills, then appends."""
    kept = list(ids[:min(n, T)])
    for t in ids[len(kept):n]:
        if len(kept) >= T:
            kept = kept[-(T // 2):]
        kept.append(t)
    return kept
