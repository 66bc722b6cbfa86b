"""KV-cache decoding gives the same logits as the full forward pass, and the same text."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.generation.decode import KVDecoder
from opencl_llm_studio.engine.model.transformer import Model


@pytest.mark.parametrize("n_prompt,n_head,n_kv_head,scaling", [
    (1, 3, 0, ""), (5, 3, 0, ""),
    (5, 6, 2, ""), (1, 6, 1, "llama3")])  # grouped-query, multi-query with Llama 3.1 RoPE
def test_kv_cache_logits_equal_full_forward(rt, n_prompt, n_head, n_kv_head, scaling):
    cfg = ModelConfig(vocab_size=300, d_model=24, n_layer=2, n_head=n_head, context_length=12,
                      ffn_dim=40, n_kv_head=n_kv_head, rope_scaling=scaling,
                      rope_scaling_factor=4.0, rope_original_context=4)
    model = Model(rt, cfg, seed=4)
    rng = np.random.default_rng(n_prompt)
    ids = list(rng.integers(0, cfg.vocab_size, size=cfg.context_length))
    dec = KVDecoder(model)
    got = [dec.reset(ids[:n_prompt])]
    for t in ids[n_prompt:]:
        got.append(dec.step(int(t)))
    for k, logits in enumerate(got):
        full = model.logits(np.array([ids[: n_prompt + k]], np.int32))[0, -1]
        np.testing.assert_allclose(logits, full, atol=2e-5, err_msg=f"token {k}")
    with pytest.raises(ValueError, match="window is full"):   # the caller picks the next window
        dec.step(0)


@pytest.mark.parametrize("n_prompt,window,kept", [(1, 16, True), (5, 16, True), (17, 32, False),
                                                   (40, 64, False), (58, 64, False)])
def test_a_short_prompt_is_prefilled_in_a_short_window(rt, n_prompt, window, kept):
    """The prefill runs over prefill_length(n) positions, not the whole context (a 40-token
    prompt of a 1,024-token model cost 1,024 positions), and the tokens after it, which read
    the copied k and v rows, still equal the full forward pass."""
    from opencl_llm_studio.engine.generation.decode import prefill_length
    cfg = ModelConfig(vocab_size=300, d_model=24, n_layer=3, n_head=6, n_kv_head=2,
                      context_length=64, ffn_dim=40)
    model = Model(rt, cfg, seed=5)
    ids = list(np.random.default_rng(n_prompt).integers(0, cfg.vocab_size, size=n_prompt + 6))
    assert prefill_length(n_prompt, cfg.context_length) == window
    dec = KVDecoder(model)
    seen = []
    run = model.last_logits
    model.last_logits = lambda w, length, acts=None: seen.append(w.shape) or run(w, length, acts)
    got = [dec.reset(ids[:n_prompt])] + [dec.step(int(t)) for t in ids[n_prompt:]]
    assert seen == [(1, window)]
    assert (dec._short is not None) == kept   # a set over a quarter of the window is let go
    for k, logits in enumerate(got):
        full = model.logits(np.array([ids[: n_prompt + k]], np.int32))[0, -1]
        np.testing.assert_allclose(logits, full, atol=2e-5, err_msg=f"token {k}")


@pytest.fixture(scope="module")
def session(rt):
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.training.opening import create_session
    text = "The cat sat on the mat. The dog sat on the log. A bird sang in the tree.\n" * 5
    cfg = ModelConfig(vocab_size=300, d_model=24, n_layer=2, n_head=4, context_length=12,
                      ffn_dim=40)
    return create_session(cfg, TrainConfig(pretrain_steps=0, tune_steps=0,
                                                   val_fraction=0.0), text, runtime=rt)


@pytest.mark.parametrize("n_prompt,greedy", [(3, True), (11, True), (30, True), (5, False)])
def test_kv_and_full_window_paths_agree_past_the_window(session, n_prompt, greedy):
    """Both paths see the same windows when prompt + answer pass context_length (12): the
    newest T//2 + 1 tokens go on. (They disagreed before: the full path slid by one token, the
    KV cache by half a window.)"""
    from opencl_llm_studio.engine.generation.sampling import SamplingParams
    sp = SamplingParams(temperature=1.5, greedy=greedy)
    prompt = list(np.random.default_rng(n_prompt).integers(3, 300, size=n_prompt))
    n = 40
    kv = session.generate_ids(prompt, n, sp, seed=1, kv_cache=True)
    full = session.generate_ids(prompt, n, sp, seed=1, kv_cache=False)
    assert kv == full
    ref, ids = [], prompt[-12:]     # the windows by hand, from the float32 full forward
    for _ in range(len(kv)):
        nxt = int(session.model.logits(np.array([ids], np.int32))[0, -1].argmax())
        ref.append(nxt)
        ids = ids + [nxt] if len(ids) < 12 else ids[-6:] + [nxt]
    if greedy:
        assert kv == ref[:len(kv)]


def test_slide_none_stops_at_the_window(session):
    out = session.generate_ids([1, 10, 11], 40, slide=lambda window, new: None)
    assert len(out) <= 12 - 3 + 1 and session.last_finish in ("context", "stop")
