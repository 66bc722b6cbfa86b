"""The character tokenizer: one token per character of the text, whatever vocabulary size is
asked, and the same ids in llama.cpp after GGUF export (issue 12, item 2)."""

import numpy as np
import pytest

from opencl_llm_studio.engine.data.tokenizer import MIN_VOCAB, Tokenizer

# A passage in the style of tinyshakespeare holding all of its 65 characters ("\n", space,
# punctuation, the digit 3, both alphabets).
SHAKESPEARE_CHARS = "\n !$&',-.3:;?" + "".join(map(chr, range(65, 91))) + \
    "".join(map(chr, range(97, 123)))
TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
        "All:\nSpeak, speak!\n\nKING HENRY VI:\nWhat, ho! Is't 3 o'clock? $&-;\n\n"
        + " ".join(SHAKESPEARE_CHARS.split("\n")) + "\nJ Q X Z j q x z\n")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.train([TEXT], 512, "char")


def test_text_has_the_65_characters():
    assert set(TEXT) == set(SHAKESPEARE_CHARS) and len(set(TEXT)) == 65


@pytest.mark.parametrize("asked", [259, 300, 512, 4096])
def test_vocabulary_is_the_characters_present(asked):
    """259 fixed tokens + one piece per character but "\\n" (the byte token <0x0A>),
    whatever size is asked: 64 pieces for the 65 characters."""
    t = Tokenizer.train([TEXT], asked, "char")
    assert t.vocab_size == MIN_VOCAB + 64
    pieces = t.pieces()[MIN_VOCAB:]
    assert sorted(p.replace("\u2581", " ") for p in pieces) == sorted(set(TEXT) - {"\n"})


def test_one_token_per_character(tok):
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT)
    assert tok.decode(ids) == TEXT
    assert [tok.decode([i]) for i in ids] == list(TEXT)


def test_rare_characters_are_kept_with_a_small_vocabulary():
    """A character seen once still gets its own piece (it used to fall back to 3 bytes)."""
    text = "aaaa bbbb " * 50 + "日"
    t = Tokenizer.train([text], 260, "char")
    assert len(t.encode("日 ab")) == 4


def test_llama_cpp_gives_the_same_ids(tok, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from tests.gguf_helpers import load, make_bundle
    llm = load(llama_cpp, export_gguf(make_bundle(tok), tmp_path / "char.gguf").path)
    rng = np.random.default_rng(0)
    chars = np.array(list(SHAKESPEARE_CHARS))
    samples = [TEXT, "ROMEO:", "  two  spaces\n\nand blank lines\n"]
    samples += ["".join(rng.choice(chars, size=int(rng.integers(1, 80)))) for _ in range(100)]
    for s in samples:
        ids = llm.tokenize(s.encode(), add_bos=False, special=False)
        assert ids == tok.encode(s), repr(s)
        assert len(ids) == len(s), repr(s)
