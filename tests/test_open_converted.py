"""Issue 21: GGUFs as people download them, written by llama.cpp's own converter
(tests/fixtures/converted, F16): the import reads their settings (grouped-query attention,
llama3 RoPE scaling from rope_freqs, tied or untied output) and weights so that the engine's
layout gives llama.cpp's logits on the same file, and their vocabularies tokenize as llama.cpp
does; exported again, llama.cpp runs the result the same."""

from pathlib import Path

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("tokenizers")

from opencl_llm_studio.engine.data.chat_template import ChatFormat  # noqa: E402
from opencl_llm_studio.engine.data.dialogue import Message  # noqa: E402
from opencl_llm_studio.engine.files.gguf_export import export_gguf  # noqa: E402
from opencl_llm_studio.engine.files.gguf_import import import_gguf  # noqa: E402
from tests.open_models import (FAMILIES, STRINGS, llama_model, llama_vocab, nmse,  # noqa: E402
                               numpy_logits)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "converted"
PROMPT = "Hello world! 12345 你好 def f(x): return x"
# family -> (n_head, kv_heads, tie_embeddings, rope_scaling, tokenizer kind, pre)
EXPECT = {"smollm2": (6, 2, True, "", "byte_bpe", "smollm"),
          "llama32": (8, 2, True, "llama3", "byte_bpe", "llama-bpe"),
          "tinyllama": (8, 1, False, "", "sentencepiece", "default")}


def _ids(tok, text=PROMPT):
    return ([tok.bos_id] if tok.add_bos else []) + tok.encode(text)


@pytest.mark.parametrize("family", FAMILIES)
def test_converted_gguf_imports_as_llama_cpp_runs_it(family, tmp_path):
    path = FIXTURES / f"{family}.f16.gguf"
    bundle = import_gguf(path)
    c, tok = bundle.config, bundle.tokenizer
    assert (c.n_head, c.kv_heads, c.tie_embeddings, c.rope_scaling, tok.kind, tok.pre) == \
        EXPECT[family]
    ids = _ids(tok)
    llm = llama_model(path)
    llm.eval(ids)
    want = np.array(llm.scores[:len(ids)])
    assert nmse(numpy_logits(bundle, ids), want) < 1e-6      # llama.cpp rounds f16 activations
    out = export_gguf(bundle, tmp_path / "again.gguf").path
    again = llama_model(out)
    again.eval(ids)
    assert nmse(np.array(again.scores[:len(ids)]), numpy_logits(bundle, ids)) < 1e-8


@pytest.mark.parametrize("family", FAMILIES)
def test_converted_vocabulary_tokenizes_as_llama_cpp(family):
    path = FIXTURES / f"{family}.f16.gguf"
    tok = import_gguf(path).tokenizer
    llm = llama_vocab(path)
    for s in STRINGS:
        want = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
        assert tok.encode(s) == want, s
        text = llm.detokenize(want, special=False).decode("utf-8", "replace")
        if tok.add_space_prefix:   # llama.cpp keeps the prefix space SentencePiece adds
            text = text.removeprefix(" ")
        assert tok.decode(want) == text, s
    chat = ChatFormat(tok)
    prompt = chat.prompt_ids([Message("user", "Hi there")])
    assert prompt == llm.tokenize(chat.render([Message("user", "Hi there")], True).encode(),
                                  add_bos=False, special=True)
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    eog = {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert set(tok.stop_ids) == eog     # the tokens llama.cpp ends generation on


@pytest.mark.parametrize("dtype,bound", [("f16", 1e-5), ("q8_0", 1e-3)])
def test_export_types_run_in_llama_cpp(dtype, bound, tmp_path):
    bundle = import_gguf(FIXTURES / "llama32.f16.gguf")
    path = export_gguf(bundle, tmp_path / f"m.{dtype}.gguf", dtype=dtype).path
    back = import_gguf(path)
    assert back.config == bundle.config and back.tokenizer.stop_ids == bundle.tokenizer.stop_ids
    ids = _ids(bundle.tokenizer)
    llm = llama_model(path)
    llm.eval(ids)
    assert nmse(np.array(llm.scores[:len(ids)]), numpy_logits(bundle, ids)) < bound
