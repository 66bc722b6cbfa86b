"""engine.data.tokenizer.Tokenizer: id layout, round trips, serialization, errors."""

import io

import gguf
import pytest
import sentencepiece as spm
from hypothesis import given, settings, strategies as st

from opencl_llm_studio.engine.errors import ConfigError, DataError
from opencl_llm_studio.engine.data.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def bpe(texts):
    return Tokenizer.train(texts, 512, "bpe")


@pytest.fixture(scope="module")
def char(texts):
    return Tokenizer.train(texts, 512, "char")


@pytest.fixture(scope="module", params=["bpe", "char"])
def tok(request, bpe, char):
    return {"bpe": bpe, "char": char}[request.param]


# ---------------------------------------------------------------- layout

def test_id_layout(tok):
    pieces = tok.pieces()
    assert pieces[:3] == ["<unk>", "<s>", "</s>"]
    assert pieces[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert (tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert len(pieces) == tok.vocab_size > 259
    assert len(set(pieces)) == len(pieces), "llama.cpp aborts on a repeated token string"
    assert tok.id_to_piece(3) == "<0x00>" and tok.id_to_piece(258) == "<0xFF>"


def test_token_types_are_gguf_values(tok):
    types = tok.token_types()
    T = gguf.TokenType
    assert types[:3] == [T.UNKNOWN, T.CONTROL, T.CONTROL]
    assert types[3:259] == [T.BYTE] * 256
    assert types[259:] == [T.NORMAL] * (tok.vocab_size - 259)
    assert (T.NORMAL, T.UNKNOWN, T.CONTROL, T.BYTE) == (1, 2, 3, 6)


def test_bpe_scores_give_merge_order(bpe):
    scores = bpe.scores()
    assert len(scores) == bpe.vocab_size
    learned = scores[259:]
    assert all(a > b for a, b in zip(learned, learned[1:])), "llama.cpp merges by score"


def test_char_pieces_are_single_characters(char):
    assert char.kind == "char"
    assert all(len(p) == 1 for p in char.pieces()[259:])
    assert "é" in char.pieces()


def test_vocab_is_what_training_produced(texts, bpe, char):
    assert bpe.vocab_size == 512 and bpe.kind == "bpe"
    assert char.vocab_size < 512            # the corpus has fewer distinct characters
    big = Tokenizer.train(texts, 8192)
    assert 512 < big.vocab_size < 8192      # merges run out (hard_vocab_limit=False)


def test_no_piece_holds_newline_or_inner_space(tok):
    # engine.data.dialogue encodes segments separately; that needs these two properties.
    for p in tok.pieces()[259:]:
        assert "\n" not in p
        assert "\u2581" not in p.lstrip("\u2581"), f"space after a character in {p!r}"


# ---------------------------------------------------------------- encode / decode

ROUND_TRIP = [
    "", "a", "\n", "\n\n", "line one\nline two\n", "\ttab\tand\ttabs", "many     spaces",
    "  leading and trailing  ", " ", "Café crème, naïve, Ærøskøbing", "東京は日本の首都です。",
    "emoji 😀👍🏽 and ZWJ 👩‍👩‍👧", "absent: ψ Ж ℵ ∮ \u00a0nbsp \u2028sep", "\r\n windows \r",
    "12345 and 3.14159", "<s> </s> <unk> <0x41>", "\x00\x01\x7f control", "User: hi\nAssistant:",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip_examples(tok, text):
    ids = tok.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    assert tok.unk_id not in ids
    assert tok.decode(ids) == text


def test_newline_is_the_byte_token(tok):
    assert tok.encode("\n") == [3 + 0x0A]
    assert tok.encode("a\nb")[1] == 3 + 0x0A


def test_no_space_prefix(bpe):
    assert bpe.add_space_prefix is False
    assert not bpe.id_to_piece(bpe.encode("Paris")[0]).startswith("\u2581")
    assert bpe.id_to_piece(bpe.encode(" Paris")[0]).startswith("\u2581")


def test_learned_pieces_are_used(bpe):
    ids = bpe.encode("The capital of France")
    assert len(ids) < len("The capital of France") / 2
    assert all(i >= 259 for i in ids)


def test_decode_drops_control_tokens(tok):
    ids = [tok.bos_id] + tok.encode("hi there") + [tok.eos_id]
    assert tok.decode(ids) == "hi there"


def test_decode_rejects_bad_ids(tok):
    with pytest.raises(IndexError, match="outside"):
        tok.decode([tok.vocab_size])
    with pytest.raises(IndexError):
        tok.decode([-1])


def test_u2581_round_trips(bpe):
    # A literal "▁" (U+2581) is written as its bytes; only the space becomes the "▁" piece.
    assert bpe.decode(bpe.encode("a\u2581b c")) == "a\u2581b c"


_ANY = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(text=_ANY)
def test_any_string_round_trips_bpe(bpe, text):
    ids = bpe.encode(text)
    assert bpe.unk_id not in ids
    assert bpe.decode(ids) == text


@settings(max_examples=150, deadline=None)
@given(text=_ANY)
def test_any_string_round_trips_char(char, text):
    assert char.decode(char.encode(text)) == text


# ---------------------------------------------------------------- serialization

def test_bytes_round_trip(tok):
    again = Tokenizer.from_bytes(tok.to_bytes())
    assert again.to_bytes() == tok.to_bytes()
    assert again.pieces() == tok.pieces() and again.scores() == tok.scores()
    assert again.token_types() == tok.token_types()
    assert (again.kind, again.vocab_size, again.add_space_prefix) == \
        (tok.kind, tok.vocab_size, tok.add_space_prefix)
    s = "Paris is the capital of France.\n😀"
    assert again.encode(s) == tok.encode(s)


def test_pickle_and_copy(tok):
    import copy
    import pickle
    for again in (pickle.loads(pickle.dumps(tok)), copy.deepcopy(tok)):
        assert again.to_bytes() == tok.to_bytes() and again.encode("a b\n") == tok.encode("a b\n")


def test_training_is_deterministic(texts, bpe):
    assert Tokenizer.train(texts, 512, "bpe").to_bytes() == bpe.to_bytes()


def test_add_space_prefix_reads_the_model():
    # A model trained elsewhere with SentencePiece's default dummy prefix must report it.
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["hello world", "the cat sat on the mat"] * 20), model_writer=buf,
        model_type="bpe", vocab_size=300, byte_fallback=True, add_dummy_prefix=True,
        hard_vocab_limit=False, minloglevel=2)
    tok = Tokenizer.from_bytes(buf.getvalue())
    assert tok.add_space_prefix is True and tok.kind == "bpe"


def test_from_bytes_rejects_garbage():
    with pytest.raises(DataError, match="not a SentencePiece model"):
        Tokenizer.from_bytes(b"this is not a model")


def test_from_bytes_rejects_other_layout():
    buf = io.BytesIO()   # no byte fallback: ids 3.. are learned pieces, not bytes
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["hello world", "the cat sat on the mat"] * 20), model_writer=buf,
        model_type="bpe", vocab_size=40, hard_vocab_limit=False, minloglevel=2)
    with pytest.raises(DataError, match="expected layout"):
        Tokenizer.from_bytes(buf.getvalue())


# ---------------------------------------------------------------- errors

def test_vocab_below_fixed_ids(texts):
    with pytest.raises(ConfigError, match="below 259") as info:
        Tokenizer.train(texts, 258)
    assert "259" in info.value.hint


def test_bpe_vocab_too_small_for_the_characters():
    text = "abc def"   # a b c d e f and the space: 7 characters
    assert Tokenizer.train([text], 266).vocab_size == 266
    with pytest.raises(ConfigError, match="7 distinct characters.*at least 266") as info:
        Tokenizer.train([text], 265)
    assert "266" in info.value.hint and "char" in info.value.hint


def test_char_vocab_keeps_every_character():
    """One token per character whatever vocab_size asks (tests/test_char_tokenizer.py)."""
    tok = Tokenizer.train(["aaaaaa bbbbb cc d"], 261, "char")   # a 6, b 5, space 3, c 2, d 1
    assert tok.vocab_size == 264 and tok.pieces()[259:] == ["a", "b", "\u2581", "c", "d"]
    assert tok.encode("dcba") == [263, 262, 260, 259]


def test_unknown_kind(texts):
    with pytest.raises(ConfigError, match="Unknown tokenizer kind"):
        Tokenizer.train(texts, 512, "unigram")


@pytest.mark.parametrize("texts", [[], [""], ["\n\n\n"], ["", "\n"]])
def test_empty_text(texts):
    with pytest.raises(DataError, match="empty"):
        Tokenizer.train(texts, 512)
