"""A trained session exported to GGUF: import gives identical logits, and llama.cpp's chat with
the GGUF's own template answers a tune question exactly as the studio's chat does."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.training.opening import session_from_gguf
from tests.helpers import trained_session


@pytest.fixture(scope="module")
def trained(rt, tmp_path_factory):
    mc = ModelConfig(d_model=64, n_layer=2, n_head=4, context_length=64, vocab_size=512)
    tc = TrainConfig(pretrain_steps=150, tune_steps=100, batch_size=8, learning_rate=4e-3,
                     eval_interval=1000, sample_interval=0)
    s = trained_session(rt, mc, tc)
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    result = s.export_gguf(path)
    assert result.size_bytes == path.stat().st_size > 0
    return s, path


def test_export_import_identical_logits(rt, trained):
    s, path = trained
    back = session_from_gguf(path, s.pretrain_text, s.tune_text, runtime=rt)
    ids = np.array([s.tokenizer.encode("Paris is the capital of France.")], np.int32)
    np.testing.assert_array_equal(back.model.logits(ids), s.model.logits(ids))
    assert back.tokenizer.to_bytes() == s.tokenizer.to_bytes()
    assert back.model_config == s.model_config


def test_an_opened_gguf_starts_where_its_training_stood(rt, trained):
    """session_from_gguf takes the exported step and stage totals (the CLI and the
    studio alike; it started at step 0 with the settings' totals), and a model trained past
    them gets totals that cover its steps."""
    s, path = trained
    back = session_from_gguf(path, s.pretrain_text, s.tune_text, runtime=rt)
    assert (back.step, back.train_config.pretrain_steps, back.train_config.tune_steps) == \
        (250, 150, 100)
    back.adopt_progress(300, 150, 100)
    assert back.step == 300 and back.total_steps == 300 and back.train_config.tune_steps == 150


def test_llama_cpp_chat_answers_like_the_studio(trained):
    llama_cpp = pytest.importorskip("llama_cpp")
    s, path = trained
    question, _expected = s.tune.questions()[0]
    ours = s.chat(question, greedy=True, max_new_tokens=48)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, seed=0)
    msgs = [{"role": m.role, "content": m.content} for m in question]
    r = llm.create_chat_completion(messages=msgs, temperature=0.0, top_k=1, max_tokens=48)
    theirs = r["choices"][0]["message"]["content"].strip()
    assert theirs == ours
    assert r["choices"][0]["finish_reason"] == "stop"  # stopped at </s>, not at max_tokens


def test_llama_cpp_greedy_continuation_matches_engine(trained):
    llama_cpp = pytest.importorskip("llama_cpp")
    s, path = trained
    prompt = [s.tokenizer.bos_id] + s.tokenizer.encode("The human heart")
    ours = s.generate_ids(prompt, max_new_tokens=24, sampling=__import__(
        "opencl_llm_studio.engine.generation.sampling", fromlist=["SamplingParams"]).SamplingParams(greedy=True))
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False)
    theirs = []
    for tok in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        if tok == s.tokenizer.eos_id or len(theirs) == 24:
            break
        theirs.append(tok)
    assert theirs == ours
