"""Issue 21: pretrained models' tokenizers. On small local models of each family (SmolLM2's
byte-level BPE with digits split, Llama 3's regex byte-level BPE, TinyLlama's SentencePiece),
ids equal transformers' on the folder and llama.cpp's on the exported GGUF, and the tokenizer
rebuilt from the GGUF's vocabulary gives them too; the checkpoint form round-trips without
pickle."""

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("llama_cpp")

from opencl_llm_studio.engine.errors import DataError, ModelImportError  # noqa: E402
from opencl_llm_studio.engine.files.gguf_import import import_gguf
from opencl_llm_studio.engine.data.open_folder_tokenizer import read_folder
from opencl_llm_studio.engine.data.open_tokenizer import OpenTokenizer, detect_pre, tokenizer_from_bytes
from tests.open_models import STRINGS, TOKENIZER_FAMILIES, llama_vocab

PRE = {"smollm2": "smollm", "llama32": "llama-bpe", "tinyllama": "default", "qwen2": "qwen2"}
KIND = {"smollm2": "byte_bpe", "llama32": "byte_bpe", "tinyllama": "sentencepiece",
        "qwen2": "byte_bpe"}


@pytest.fixture(scope="module")
def hf_tokenizers(open_folders):
    from transformers import AutoTokenizer
    return {f: AutoTokenizer.from_pretrained(str(p)) for f, p in open_folders.items()}


@pytest.mark.parametrize("family", TOKENIZER_FAMILIES)
def test_ids_and_text_equal_transformers_on_the_folder(family, open_folders, hf_tokenizers):
    tok, ref = read_folder(open_folders[family]), hf_tokenizers[family]
    assert (tok.kind, tok.pre) == (KIND[family], PRE[family])
    assert tok.vocab_size == len(ref)
    for s in STRINGS:
        want = ref(s, add_special_tokens=False).input_ids
        assert tok.encode(s) == want, s
        assert tok.decode(want) == ref.decode(want, skip_special_tokens=True), s
    # BOS as the model expects it: Llama 3 and TinyLlama add it, SmolLM2 does not
    assert tok.add_bos == (ref("x").input_ids[0] == ref.bos_token_id)
    assert tok.eos_id == ref.eos_token_id
    # Qwen names no BOS token; its generation_config's bos_token_id (<|endoftext|>) stands in
    assert tok.bos_id == (ref.bos_token_id if ref.bos_token_id is not None
                          else ref.convert_tokens_to_ids("<|endoftext|>"))


@pytest.mark.parametrize("family", TOKENIZER_FAMILIES)
def test_ids_equal_llama_cpp_on_the_gguf(family, open_folders, open_ggufs):
    tok = read_folder(open_folders[family])
    from_gguf = import_gguf(open_ggufs[family]).tokenizer
    llm = llama_vocab(open_ggufs[family])
    assert (from_gguf.kind, from_gguf.pre) == (tok.kind, tok.pre)
    for s in STRINGS:
        want = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
        assert tok.encode(s) == want, s
        assert from_gguf.encode(s) == want, s
        assert from_gguf.decode(want) == tok.decode(want), s
    assert from_gguf.stop_ids == tok.stop_ids
    assert (from_gguf.bos_id, from_gguf.eos_id, from_gguf.add_bos) == \
        (tok.bos_id, tok.eos_id, tok.add_bos)
    assert from_gguf.chat_template == tok.chat_template


def test_sentencepiece_kind_equals_sentencepiece_itself(open_folders):
    """The Llama-2 layout's ids are SentencePiece's on the tokenizer.model (the original), for
    text without special-token texts. (transformers 5's LlamaTokenizer class with legacy=False
    rebuilds the pipeline with a Metaspace that differs from both for leading spaces and text
    after special tokens; the folder's tokenizer.json and llama.cpp agree with SentencePiece.)"""
    import sentencepiece as spm
    folder = open_folders["tinyllama"]
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    tok = read_folder(folder)
    for s in STRINGS:
        if "<" not in s:
            assert tok.encode(s) == sp.encode(s), s


@pytest.mark.parametrize("family", TOKENIZER_FAMILIES)
def test_checkpoint_bytes_round_trip(family, open_folders):
    tok = read_folder(open_folders[family])
    data = tok.to_bytes()
    assert b"pickle" not in data and data.startswith(b"{")
    back = tokenizer_from_bytes(data)
    assert isinstance(back, OpenTokenizer)
    assert [back.encode(s) for s in STRINGS] == [tok.encode(s) for s in STRINGS]
    assert (back.pieces(), back.token_types(), back.scores()) == \
        (tok.pieces(), tok.token_types(), tok.scores())
    assert (back.stop_ids, back.chat_template, back.add_bos) == \
        (tok.stop_ids, tok.chat_template, tok.add_bos)


def test_the_apps_own_tokenizer_still_loads_from_checkpoint_bytes(tok):
    back = tokenizer_from_bytes(tok.to_bytes())
    assert type(back) is type(tok) and back.encode("hello there") == tok.encode("hello there")


def test_damaged_bytes_are_a_data_error():
    with pytest.raises(DataError, match="not an open-model tokenizer"):
        OpenTokenizer.from_bytes(b'{"format": "something else"}\n{}')


def test_token_types_and_stop_tokens(open_folders):
    llama = read_folder(open_folders["llama32"])
    types = llama.token_types()
    eot = llama.token_to_id("<|eot_id|>")
    assert types[eot] == 3 and types[llama.token_to_id("Hello") or 0] in (1, 3)
    assert set(llama.stop_ids) == {llama.token_to_id(t) for t in
                                   ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")}
    smol = read_folder(open_folders["smollm2"])
    assert smol.stop_ids == sorted(smol.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>"))
    tiny = read_folder(open_folders["tinyllama"])
    ttypes = tiny.token_types()
    assert ttypes[:3] == [2, 3, 3] and ttypes[3:259] == [6] * 256 and tiny.stop_ids == [2]
    assert tiny.add_space_prefix and not smol.add_space_prefix


def test_pre_tokenizer_is_recognised_only_when_it_splits_the_same(open_folders):
    from tokenizers import Tokenizer, pre_tokenizers
    hf = Tokenizer.from_file(str(open_folders["smollm2"] / "tokenizer.json"))
    assert detect_pre(hf) == "smollm"
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    assert detect_pre(hf) == ""


def test_a_folder_without_tokenizer_json_or_with_a_wordpiece_is_refused(tmp_path, open_folders):
    with pytest.raises(ModelImportError, match="no tokenizer.json"):
        read_folder(tmp_path)
    from tokenizers import Tokenizer, models
    Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(
        str(tmp_path / "tokenizer.json"))
    with pytest.raises(ModelImportError, match="WordPiece"):
        read_folder(tmp_path)


def test_a_gpt2_pre_tokenizer_is_written_under_llama_cpps_name(tmp_path):
    """GPT-2's own byte-level split is llama.cpp's "gpt-2" (a GGUF naming "gpt2" is refused by
    llama.cpp): a tokenizer with it is recognised, exported, and tokenizes as llama.cpp does."""
    import numpy as np
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from opencl_llm_studio.engine.config import ModelConfig
    from opencl_llm_studio.engine.files.gguf_export import ModelBundle, export_gguf
    from opencl_llm_studio.engine.model.params import ParamTable
    from tests.open_models import corpus
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=hf, eos_token="<|endoftext|>",
                            bos_token="<|endoftext|>").save_pretrained(str(tmp_path))
    tok = read_folder(tmp_path)
    assert tok.pre == "gpt-2"
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layer=1, n_head=2)
    weights = ParamTable(cfg).unflatten(ParamTable(cfg).init_weights(np.random.default_rng(0)))
    path = export_gguf(ModelBundle(cfg, tok, weights), tmp_path / "gpt2.gguf").path
    llm = llama_vocab(path)
    for s in STRINGS:
        assert tok.encode(s) == llm.tokenize(s.encode("utf-8"), add_bos=False, special=True), s
    assert import_gguf(path).tokenizer.pre == "gpt-2"
