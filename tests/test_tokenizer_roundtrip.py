"""decode(encode(s)) == s on every vocabulary the studio can train, and llama.cpp agrees.

Issue 11: a corpus with no space (digits only, one repeated letter) gave a vocabulary without the
space piece "▁", so a later space was byte-encoded as U+2581 and came back as "▁". The class:
any corpus, either tokenizer kind, any vocabulary size, any string (the literal "▁" included).
"""

import pytest
from hypothesis import assume, given, settings, strategies as st

from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.files.gguf_export import export_gguf
from opencl_llm_studio.engine.data.tokenizer import MIN_VOCAB, Tokenizer

WS = "\u2581"

# Corpora a person may load that lack what an ordinary English text has.
WEIRD_CORPORA = {
    "digits": "0123456789\n31415926535\n" * 20,
    "one_letter": "aaaaaaaaaaaaaaaa\n" * 30,
    "tabs_newlines": "\t\t\n\n\t \n" * 10,
    "spaces_only": "    \n " * 10,
    "cjk": "東京は日本の首都です。\n北京是中国的首都。\n" * 10,
    "emoji": "😀👍🏽👩‍👩‍👧🎉\n" * 10,
    "literal_ws": f"a{WS}b{WS}{WS}c\n{WS}start and end{WS}\n" * 10,
    "nbsp": "no\u00a0break\u00a0space\u202fnarrow\n" * 10,
    "tiny": "x",
    "one_char": "\u00e9",
    "plain": "The cat sat on the mat. The dog sat on the log.\n" * 10,
}

WEIRD_STRINGS = [
    "", " ", "  ", "12 34", "a b", " leading", "trailing ", "x  y", "\t\n \n", WS, f"a{WS}b",
    f"{WS} {WS}", f" {WS}", f"{WS}{WS}x", "\u00a0", "no\u00a0break", "東京 京都", "😀 👍🏽",
    "<s> </s> <unk> <0x41>", "\r\n\r", "\x00\x01\x7f", "User: hi\nAssistant: hello",
    "\u2028\u2029\u200b", "e\u0301 \u00e9",
]

_STRINGS = st.one_of(st.sampled_from(WEIRD_STRINGS),
                     st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
                     st.text(st.sampled_from([" ", WS, "\n", "\t", "a", "1", "\u00a0", "東", "😀"]),
                             max_size=20))


def train(corpus: str, kind: str, vocab_size: int) -> Tokenizer:
    try:
        return Tokenizer.train([corpus], vocab_size, kind)
    except ConfigError:   # BPE needs a token per distinct character: take the least that fits
        return Tokenizer.train([corpus], MIN_VOCAB + len(set(corpus.replace(" ", WS)) | {WS}),
                               kind)


@pytest.fixture(scope="module", params=[(n, k, v) for n in WEIRD_CORPORA for k in ("bpe", "char")
                                        for v in (260, 300, 512)],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}")
def weird_tok(request):
    name, kind, vocab = request.param
    return train(WEIRD_CORPORA[name], kind, vocab)


def assert_round_trip(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.unk_id not in ids
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text, [tok.id_to_piece(i) for i in ids]


def test_space_piece_always_exists(weird_tok):
    assert WS in weird_tok.pieces()
    assert [weird_tok.id_to_piece(i) for i in weird_tok.encode("12 34")].count(WS) == 1


@settings(max_examples=40, deadline=None)
@given(text=_STRINGS)
def test_round_trip_on_weird_vocabularies(weird_tok, text):
    assert_round_trip(weird_tok, text)


@pytest.mark.parametrize("text", WEIRD_STRINGS)
def test_weird_strings_on_weird_vocabularies(weird_tok, text):
    assert_round_trip(weird_tok, text)


@settings(max_examples=60, deadline=None)
@given(corpus=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200),
       kind=st.sampled_from(["bpe", "char"]), vocab=st.integers(260, 600), text=_STRINGS)
def test_round_trip_on_random_corpora(corpus, kind, vocab, text):
    assume(corpus.replace("\n", "").replace(WS, ""))   # some text besides newlines and "▁"
    tok = train(corpus, kind, vocab)
    assert WS in tok.pieces()
    for s in (text, corpus, corpus + " " + text):
        assert_round_trip(tok, s)


def test_literal_ws_is_bytes_and_space_is_the_piece():
    tok = train(WEIRD_CORPORA["plain"], "bpe", 300)
    assert tok.encode(WS) == [3 + 0xE2, 3 + 0x96, 3 + 0x81]
    assert tok.encode(" ") == [tok.pieces().index(WS)]
    assert tok.decode(tok.encode(f"a{WS}b c")) == f"a{WS}b c"


@pytest.mark.parametrize("asked", [259, 260, 1000])
def test_char_vocab_holds_the_space_and_every_character(asked):
    """A char vocabulary is every character of the text plus the space, whatever size is asked
    (tests/test_char_tokenizer.py), so a later space never decodes as U+2581."""
    cjk = "".join(chr(0x4E00 + i) for i in range(50))
    tok = Tokenizer.train([cjk * 3], asked, "char")
    assert set(tok.pieces()[259:]) == set(cjk) | {WS} and tok.vocab_size == 259 + 51
    assert tok.decode(tok.encode(cjk[:3] + " " + cjk[3:6])) == cjk[:3] + " " + cjk[3:6]


# ---------------------------------------------------------------- llama.cpp on the exported GGUF

@pytest.mark.parametrize("name,kind", [("digits", "bpe"), ("one_letter", "char"), ("cjk", "bpe"),
                                       ("literal_ws", "bpe"), ("emoji", "char"),
                                       ("spaces_only", "bpe")])
def test_llama_cpp_same_ids(name, kind, tmp_path):
    """llama.cpp tokenizes like the engine. The one exception is a literal "▁", which
    llama.cpp's SPM tokenizer reads as a space (it escapes spaces to "▁" before matching):
    there its ids are those of the space. It decodes our ids (bytes for a literal "▁") to the
    very text, so what the model writes reads the same in llama.cpp."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from tests.gguf_helpers import load, make_bundle
    tok = train(WEIRD_CORPORA[name], kind, 300)
    llm = load(llama_cpp, export_gguf(make_bundle(tok), tmp_path / "m.gguf").path)
    for s in WEIRD_STRINGS + WEIRD_CORPORA[name].split("\n")[:3]:
        if not s:
            continue
        theirs = llm.tokenize(s.encode(), add_bos=False, special=False)
        assert theirs == tok.encode(s.replace(WS, " ")), s
        ids = tok.encode(s)
        assert llm.detokenize(ids).decode("utf-8") == s == tok.decode(ids)


@pytest.mark.parametrize("kind", ["bpe", "char"])
@pytest.mark.parametrize("corpus", ["\x1f", "\x00", "\x00\x1f\x1e", "\x1f\n\x1f"])
def test_a_text_of_dropped_control_characters_still_trains(corpus, kind):
    """SentencePiece drops control characters such as U+001F and NUL, so a text of only those
    left it nothing to count (its char trainer stopped on "sum > 0", found by the random test
    above): the tokenizer still trains, holds the space piece and encodes the text in bytes."""
    tok = train(corpus, kind, 262)
    assert WS in tok.pieces()
    assert_round_trip(tok, corpus)
