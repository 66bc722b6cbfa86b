"""engine.data.corpus: document split, token stream, validation split, training windows."""


import numpy as np
import pytest

from opencl_llm_studio.engine.data.corpus import PretrainData, split_documents, suggest_context_length
from opencl_llm_studio.engine.errors import ConfigError, DataError
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.data.tokenizer import Tokenizer

from tests.helpers import RESOURCES as RES  # noqa: E402


@pytest.fixture(scope="module")
def pretrain():
    return read_text(RES / "pretrain.txt")


# ---------------------------------------------------------------- documents

def test_paragraphs_are_documents():
    text = "First para\nstill first.\n\nSecond.\n \t \nThird\n\n\n\nFourth.\n"
    assert split_documents(text) == ["First para\nstill first.", "Second.", "Third", "Fourth."]


def test_no_blank_lines_means_one_document_per_line():
    assert split_documents("one\ntwo\nthree") == ["one", "two", "three"]
    assert split_documents("one\ntwo\n  \nthree") == ["one\ntwo", "three"]  # "  " is blank
    assert split_documents("\none\ntwo\nthree\n\n") == ["one", "two", "three"]


def test_blank_only_at_the_ends_is_not_a_separator():
    assert split_documents("\n\nalpha\nbeta\n\n") == ["alpha", "beta"]


def test_whitespace_text_has_no_documents():
    assert split_documents(" \n\t\n") == []


def test_bundled_pretraining_text(pretrain):
    docs = split_documents(pretrain)
    assert len(docs) >= 30
    for d in docs:
        assert "\n" not in d and d.endswith(".")
        assert 8 <= len(d.split()) <= 20, d


# ---------------------------------------------------------------- stream and split

CODE = "def f(x):\n    return x\n\n\nclass A:\n\n    y = 1\n  \n\tz = 2\n"


def test_stream_is_the_text_as_written(tok):
    """Issue 20: blank lines, indentation and tabs are text; no document marks but the BOS."""
    for text in [CODE, "Alpha beta.\n\nGamma delta.\n\n\nEpsilon.\n"]:
        data = PretrainData(tok, text, context_length=4, val_fraction=0.0)
        assert data.train_stream.dtype == np.int32
        assert data.train_stream.tolist() == [tok.bos_id] + tok.encode(text)
        assert tok.decode(data.train_stream[1:].tolist()) == text
        assert tok.eos_id not in data.train_stream.tolist()
        assert data.n_tokens == 1 + len(tok.encode(text)) and data.train_text == text


def test_documents_are_for_recall_only(tok):
    data = PretrainData(tok, "Alpha beta.\n\nGamma delta.\n\nEpsilon.", 4, val_fraction=0.0)
    assert data.documents == data.train_documents == ["Alpha beta.", "Gamma delta.", "Epsilon."]


def test_last_documents_are_held_out(tok, pretrain):
    """docs:0.1: the text from the first held-out paragraph on, encoded on its own."""
    data = PretrainData(tok, pretrain, context_length=64, val_fraction=0.1)
    n_docs = len(data.documents)
    assert data.n_val_documents == round(n_docs * 0.1) >= 1
    assert not data.val_is_train
    held = data.documents[-data.n_val_documents:]
    assert data.val_text.startswith(held[0]) and data.val_text.rstrip().endswith(held[-1])
    assert data.train_text + data.val_text == pretrain
    assert data.val_stream.tolist() == [tok.bos_id] + tok.encode(data.val_text)
    assert data.train_stream.tolist() == [tok.bos_id] + tok.encode(data.train_text)
    assert data.train_documents == data.documents[:n_docs - data.n_val_documents]


def test_at_least_one_document_is_held_out(tok):
    text = "\n\n".join(f"Document number {w} talks about the sea and the sky." for w in
                       ["one", "two", "three"])
    data = PretrainData(tok, text, context_length=8, val_fraction=0.01)
    assert data.n_val_documents == 1 and not data.val_is_train


def test_too_small_documents_hold_out_characters(tok):
    """A last paragraph shorter than a window: the end of the text by characters is held out
    instead (tests/test_validation_split.py has the cases where nothing can be)."""
    text = "A long first document about rivers, mountains and oceans of the world.\n\nShort."
    data = PretrainData(tok, text, context_length=12, val_fraction=0.5)
    assert not data.val_is_train and data.n_val_documents == 1
    assert data.val_stream.size >= 13 and data.train_stream.size >= 13


def test_single_document_holds_out_its_tail(tok):
    data = PretrainData(tok, "just one document with some words in it", 4)
    assert not data.val_is_train and data.val_stream.size >= 5


def test_line_endings_read_as_newlines(tok):
    a = PretrainData(tok, "one\r\ntwo\r\n\r\nthree\rfour", 2, val_fraction=0.0)
    assert a.train_text == "one\ntwo\n\nthree\nfour"
    assert a.documents == ["one\ntwo", "three\nfour"]


def test_many_paragraphs_keep_their_blank_lines(tok):
    """A text of 7,000 paragraphs: the last 700 are held out, both parts are the text itself
    (the cut falls where the tokenizer does not merge, so the ids are the whole text's)."""
    text = "".join(f"Note {i}: the tide was {i % 13} feet.\n\n" for i in range(7000))
    data = PretrainData(tok, text, 64)
    assert data.n_val_documents == 700 and len(data.train_documents) == 6300
    assert data.val_text.startswith("Note 6300:") and data.train_text.endswith("feet.\n\n")
    joined = np.concatenate([data.train_stream, data.val_stream[1:]])
    assert joined.tolist() == [tok.bos_id] + tok.encode(text)


def test_zero_val_fraction(tok, pretrain):
    assert PretrainData(tok, pretrain, 64, val_fraction=0.0).val_is_train


@pytest.mark.parametrize("kind,vocab", [("bpe", 512), ("bpe", 1024), ("char", 512)])
@pytest.mark.parametrize("T", [64, 128])
def test_bundled_corpus_works(pretrain, kind, vocab, T):
    tk = Tokenizer.train([pretrain], vocab, kind)
    data = PretrainData(tk, pretrain, T)
    x, y = data.train_batch(np.random.default_rng(0), 4)
    assert x.shape == y.shape == (4, T)
    batches = data.val_batches(4, 8 * T)
    assert batches and all(vx.shape == (4, T) for vx, _ in batches)


# ---------------------------------------------------------------- batches

def test_train_batch_shapes_and_shift(tok, pretrain):
    data = PretrainData(tok, pretrain, context_length=32)
    x, y = data.train_batch(np.random.default_rng(1), 8)
    assert x.shape == y.shape == (8, 32) and x.dtype == y.dtype == np.int32
    assert np.array_equal(x[:, 1:], y[:, :-1])
    s = data.train_stream
    for row_x, row_y in zip(x, y):   # each row is a contiguous slice of the training stream
        win = np.concatenate([row_x, row_y[-1:]])
        starts = [i for i in range(s.size - 32) if s[i] == win[0] and np.array_equal(s[i:i + 33], win)]
        assert starts, "window not found in the training stream"


class EdgeRng:
    """Stands in for np.random.Generator: always draws the lowest or the highest start."""

    def __init__(self, highest: bool):
        self.highest = highest

    def integers(self, low, high, size):
        return np.full(size, high - 1 if self.highest else low, dtype=np.int64)


def test_windows_reach_both_ends_of_the_training_stream(tok, pretrain):
    data = PretrainData(tok, pretrain, context_length=16)
    s = data.train_stream
    x, y = data.train_batch(EdgeRng(highest=False), 1)
    assert np.array_equal(x[0], s[:16]) and np.array_equal(y[0], s[1:17])
    x, y = data.train_batch(EdgeRng(highest=True), 1)
    assert np.array_equal(x[0], s[-17:-1]) and np.array_equal(y[0], s[-16:])


def test_train_batch_is_deterministic(tok, pretrain):
    data = PretrainData(tok, pretrain, 16)
    a = data.train_batch(np.random.default_rng(7), 4)
    b = data.train_batch(np.random.default_rng(7), 4)
    c = data.train_batch(np.random.default_rng(8), 4)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_own_rng_from_seed(tok, pretrain):
    a = PretrainData(tok, pretrain, 16, seed=3).train_batch(None, 4)
    b = PretrainData(tok, pretrain, 16, seed=3).train_batch(None, 4)
    assert np.array_equal(a[0], b[0])


def test_val_batches_are_fixed(tok, pretrain):
    data = PretrainData(tok, pretrain, 16)
    first, again = data.val_batches(3, 12 * 16), data.val_batches(3, 12 * 16)
    for (x, y), (x2, y2) in zip(first, again):
        assert x.shape == y.shape == (3, 16) and x.dtype == np.int32
        assert np.array_equal(x, x2) and np.array_equal(y, y2)
        full = (y >= 0).all(axis=1)
        assert np.array_equal(x[full, 1:], y[full, :-1])
    assert np.array_equal(first[0][0][0], data.val_stream[:16])           # starts at the start
    scored = np.concatenate([y[y >= 0] for _, y in first])                # and ends at the end
    assert scored.size == data.val_stream.size - 1 and scored[-1] == data.val_stream[-1]


# ---------------------------------------------------------------- errors

def test_stream_shorter_than_a_window(tok):
    text = "Tiny text."
    n = PretrainData(tok, text, 2, val_fraction=0.0).n_tokens
    with pytest.raises(DataError, match=f"{n} tokens long.*{65}") as info:
        PretrainData(tok, text, 64)
    assert f"at most {suggest_context_length(n)}" in info.value.hint


def test_suggested_context_length_fits():
    assert suggest_context_length(1301) == 1024
    assert suggest_context_length(129) == 128 and suggest_context_length(128) == 64
    assert suggest_context_length(2) == 1


@pytest.mark.parametrize("text", ["", "  \n\n \t"])
def test_empty_text(tok, text):
    with pytest.raises(DataError, match="empty"):
        PretrainData(tok, text, 8)


def test_bad_settings(tok, pretrain):
    with pytest.raises(ConfigError, match="context_length"):
        PretrainData(tok, pretrain, 0)
    with pytest.raises(ConfigError, match="val_fraction"):
        PretrainData(tok, pretrain, 8, val_fraction=1.0)
