"""SentencePiece tokenizer trained on the person's own text, laid out the way llama.cpp expects.

Ids: 0 `<unk>`, 1 `<s>` (BOS), 2 `</s>` (EOS), 3..258 the byte tokens `<0x00>`..`<0xFF>`, then the
learned pieces. Byte fallback makes every string encodable: a character that is no piece becomes
its UTF-8 bytes. The normalisation is "identity" with no dummy prefix and no whitespace cleanup,
so `decode(encode(s)) == s` for every string, on every vocabulary trained here:

- the space piece "▁" is always in the vocabulary (`required_chars`, and for the "char" kind a
  slot kept for it), even for a text with no space in it; without it a space would fall back to
  the bytes of U+2581 and decode as a literal "▁";
- a literal U+2581 "▁" in the text, which SentencePiece (and llama.cpp) read as a space, is
  encoded as its three UTF-8 byte tokens, which decode to "▁" itself. Training splits the text
  there too, so no learned piece spans it. llama.cpp's tokenizer (llm_tokenizer_spm) cannot tell
  the two apart and reads a literal "▁" in a prompt as a space; for every other string its ids
  equal ours (docs/DESIGN.md: with these settings llama.cpp tokenizes exactly like SentencePiece;
  with the default NFKC it did not).

Training is in memory (no files): SentencePieceTrainer with `sentence_iterator` and
`model_writer`. The texts are split at "\\n" into sentences, so no learned piece contains "\\n";
newlines always encode as the byte token `<0x0A>`. That keeps dialogue segments independent
(engine.data.dialogue) and matches llama.cpp's tokenization of text split at special tokens.
"""

from __future__ import annotations

import io
from typing import Iterable, Iterator

import sentencepiece as spm

from opencl_llm_studio.engine.config import DEFAULT_TOKENIZER, TOKENIZER_KINDS
from opencl_llm_studio.engine.errors import ConfigError, DataError
# 3 control ids <unk>, <s>, </s>, 256 byte ids: MIN_VOCAB, below which the fixed ids do not fit
from opencl_llm_studio.engine.data.longtext import SEARCH_CHARS, chunks
from opencl_llm_studio.engine.limits import LIMITS, MIN_VOCAB, N_BYTES, N_SPECIAL


# gguf.TokenType values (gguf-py constants.py), which equal SentencePiece's piece types.
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL = 1, 2, 3
TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 4, 5, 6

_WS = "\u2581"  # SentencePiece's visible space
_WS_BYTES = [N_SPECIAL + b for b in _WS.encode("utf-8")]   # <0xE2> <0x96> <0x81>


# ---------------------------------------------------------------- minimal protobuf reading
# The sentencepiece wheel ships its ModelProto bindings, but they need `protobuf`, which is not a
# dependency. Two scalar fields are read straight from the wire format instead
# (sentencepiece_model.proto: ModelProto.trainer_spec = 2 -> TrainerSpec.model_type = 3;
# ModelProto.normalizer_spec = 3 -> NormalizerSpec.add_dummy_prefix = 3, default true).

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _proto_fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) for each field of one protobuf message; values are int or bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, value


def _sub_field(buf: bytes, outer: int, inner: int, default: int) -> int:
    """The last value of scalar field `inner` inside message field `outer` of `buf`."""
    value = default
    for f, sub in _proto_fields(buf):
        if f == outer and isinstance(sub, bytes):
            for g, v in _proto_fields(sub):
                if g == inner and isinstance(v, int):
                    value = v
    return value


_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}  # TrainerSpec.ModelType


# ---------------------------------------------------------------- the tokenizer

# Bounds on SentencePiece's input (its training cannot be interrupted, so it must stay short):
# these caps bound its time for any text, one-line or many-line (benchmarks/RESULTS.md).
TRAIN_SENTENCE_CHARS = 4_096    # longer lines are cut (at spaces) into sentences of about this
TRAIN_SAMPLE_CHARS = 8_000_000  # BPE training time grows with the text; merges settle long before


def _sentences(texts: Iterable[str]) -> list[str]:
    """The training sentences: every non-empty line of every text, split at "\\n" and at a
    literal "▁" (which `encode` writes as bytes, so no piece may span or hold it); a long line
    (one-line documents) is cut into pieces of about TRAIN_SENTENCE_CHARS, so every part of it
    can be sampled and none exceeds SentencePiece's max_sentence_length."""
    return [piece for text in texts for line in text.split("\n") for part in line.split(_WS)
            if part for piece in chunks(part, TRAIN_SENTENCE_CHARS)]


def _chars(sentences: list[str]) -> set[str]:
    """The characters BPE must keep as pieces: those of the text (spaces as "▁"), and "▁".
    One set() of the joined text: per-sentence sets are far slower on big texts."""
    return (set("".join(sentences)) - {" "}) | {_WS}


def bpe_characters(text: str) -> frozenset[str]:
    """The characters of `text` that a BPE tokenizer trained on it keeps as pieces (spaces as
    "▁", and "▁" itself): Tokenizer.train needs a vocab_size of at least MIN_VOCAB + the size of
    the union of these sets over its texts (min_bpe_vocab)."""
    return frozenset(_chars(_sentences([text])))


def min_bpe_vocab(char_sets: Iterable[frozenset[str]]) -> int:
    """The smallest vocab_size Tokenizer.train accepts for BPE on texts with these
    bpe_characters: 3 control + 256 byte tokens + one per distinct character."""
    return MIN_VOCAB + len(frozenset().union(*char_sets))


def _training_sample(sentences: list[str], budget: int = TRAIN_SAMPLE_CHARS) -> list[str]:
    """Every k-th sentence so that about `budget` characters remain (all of a small text).
    Deterministic, and it keeps every distinct character: sentences holding a character the
    sample lacks are added back, so byte fallback is never needed for text seen in training."""
    total = sum(len(s) for s in sentences)
    if total <= budget:
        return sentences
    k = -(-total // budget)
    sample = sentences[::k]
    # set() of one joined string: per-sentence sets are far slower on many short lines
    missing = set("".join(sentences)) - set("".join(sample))
    for s in sentences:
        if missing and any(c in s for c in missing):
            sample.append(s)
            missing -= set(s)
    return sample


class Tokenizer:
    """A trained SentencePiece model (BPE or character-level) with byte fallback.

    Build one with `Tokenizer.train(texts, vocab_size, kind)` or `Tokenizer.from_bytes(b)`.
    `vocab_size` is what training produced, which may be smaller than asked for a small text.
    """

    unk_id = 0
    bos_id = 1
    eos_id = 2
    pre = ""   # no llama.cpp pre-tokenizer name (engine.data.open_tokenizer.OpenTokenizer.pre)
    add_bos = True   # every text starts with BOS (GGUF tokenizer.ggml.add_bos_token)

    def __init__(self, model_proto: bytes):
        """Wrap a serialized SentencePiece ModelProto (use `train` or `from_bytes`)."""
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        self.kind = _MODEL_TYPES.get(_sub_field(self._proto, 2, 3, 1), "unigram")
        self._add_dummy_prefix = bool(_sub_field(self._proto, 3, 3, 1))

    # -- construction
    @classmethod
    def train(cls, texts: list[str], vocab_size: int, kind: str = DEFAULT_TOKENIZER) -> "Tokenizer":
        """Train on `texts` (each split into lines) and return the tokenizer.

        vocab_size: the requested number of tokens including the MIN_VOCAB fixed ones; a small
        text yields fewer (hard_vocab_limit=False). kind: "bpe" (merges learned from the text) or
        "char": one piece per distinct character of the texts, whatever vocab_size asks, so
        every character of the text is one token and loss per token is loss per character
        ("\\n" is the byte token <0x0A>, one token too; a character not in the texts falls
        back to its UTF-8 bytes). Vocabulary: MIN_VOCAB fixed + the characters.
        Either kind always holds the space piece "▁", whether or not the text has a space.
        Raises ConfigError for an unknown kind or a vocab_size too small (below MIN_VOCAB; for
        BPE below MIN_VOCAB + the number of distinct characters and the space, which BPE must
        all keep as pieces).
        Raises DataError when the texts hold no characters besides newlines.
        """
        if kind not in TOKENIZER_KINDS:
            raise ConfigError(f"Unknown tokenizer kind {kind!r}.",
                              f"Use {' or '.join(repr(k) for k in TOKENIZER_KINDS)}.",
                              field="tokenizer_kind")
        if isinstance(texts, str):
            texts = [texts]
        sentences = _sentences(texts)
        if not sentences:
            raise DataError("The text to train the tokenizer on is empty.",
                            "Load a pretraining text with at least a few sentences.")
        LIMITS["vocab_size"].check(vocab_size)   # at least MIN_VOCAB
        n_chars = len(_chars(sentences))
        if kind == "char":   # every character present is a piece: one token per character
            vocab_size = MIN_VOCAB + n_chars
        if kind == "bpe":
            if vocab_size < MIN_VOCAB + n_chars:
                raise ConfigError(
                    f"vocab_size {vocab_size} is too small for BPE on this text: it has {n_chars} "
                    f"distinct characters (the space included), each of which must be a token, "
                    f"so at least {MIN_VOCAB + n_chars} are needed (3 control + 256 byte + "
                    f"{n_chars}).",
                    f"Use a vocabulary size of at least {MIN_VOCAB + n_chars}, or the 'char' kind.",
                    field="vocab_size")
        sample = _training_sample(sentences)
        try:
            model = _train_model(sample, kind, vocab_size)
        except RuntimeError:
            # a text of characters SentencePiece drops (control characters such as U+001F or
            # NUL) leaves it nothing to count; one space gives it the "▁" piece, and the text
            # encodes through the byte pieces
            try:
                model = _train_model(sample + [" "], kind, vocab_size)
            except RuntimeError as e:   # sentencepiece reports bad settings as RuntimeError
                raise ConfigError(f"SentencePiece could not train the tokenizer: {e}",
                                  "Try another vocabulary size or tokenizer kind.") from None
        tok = cls(model)
        tok._check_layout()
        return tok

    @classmethod
    def from_bytes(cls, model_proto: bytes) -> "Tokenizer":
        """Load a tokenizer saved with `to_bytes()`. Raises DataError if the bytes are no model."""
        try:
            tok = cls(model_proto)
        except (RuntimeError, ValueError, IndexError, OSError) as e:
            raise DataError(f"The tokenizer data is not a SentencePiece model ({e}).",
                            "The checkpoint or file may be damaged; train a new tokenizer."
                            ) from None
        tok._check_layout()
        return tok

    def to_bytes(self) -> bytes:
        """The serialized SentencePiece ModelProto (what `from_bytes` reads)."""
        return self._proto

    def _check_layout(self) -> None:
        """Raise DataError unless ids 0..258 are <unk>, <s>, </s>, <0x00>..<0xFF>
        (the layout llama.cpp expects)."""
        want = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(N_BYTES)]
        have = [self._sp.id_to_piece(i) for i in range(min(MIN_VOCAB, self.vocab_size))]
        if have != want:
            raise DataError("The tokenizer does not have the expected layout "
                            "(<unk>, <s>, </s>, then the 256 byte tokens).",
                            "Train a new tokenizer with this version of the studio.")

    # -- properties
    @property
    def vocab_size(self) -> int:
        """Number of tokens (ids 0..vocab_size-1), as produced by training."""
        return self._sp.get_piece_size()

    @property
    def add_space_prefix(self) -> bool:
        """Whether a space is put before the text (SentencePiece add_dummy_prefix); GGUF
        `tokenizer.ggml.add_space_prefix` must equal it. False for tokenizers trained here."""
        return self._add_dummy_prefix

    # -- encoding
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS. Never produces <unk> (byte fallback).
        A literal "▁" (U+2581) becomes its three byte tokens, so that it decodes as itself and
        not as the space SentencePiece uses it for (module docstring)."""
        if _WS not in text:
            return self._sp.encode(text)
        parts = text.split(_WS)
        ids = self._sp.encode(parts[0])
        for part in parts[1:]:
            ids += _WS_BYTES + self._sp.encode(part)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; control tokens (<s>, </s>) are dropped, <unk> becomes " ⁇ ".
        Raises IndexError for an id outside 0..vocab_size-1."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise IndexError(f"token id {bad[0]} is outside 0..{self.vocab_size - 1}")
        return self._sp.decode(ids)

    def id_to_piece(self, i: int) -> str:
        """The piece string of id `i` (spaces shown as "▁", bytes as "<0xNN>")."""
        return self._sp.id_to_piece(int(i))

    @property
    def stop_ids(self) -> list[int]:
        """Ids that end an answer: `</s>` (an imported model's OpenTokenizer lists its
        template's end-of-turn tokens too)."""
        return [self.eos_id]

    def pieces(self) -> list[str]:
        """All piece strings, index = id (GGUF tokenizer.ggml.tokens)."""
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    def scores(self) -> list[float]:
        """Piece scores, index = id (GGUF tokenizer.ggml.scores). For BPE a learned piece's score
        is minus its merge rank, which is the order llama.cpp merges in."""
        return [float(self._sp.get_score(i)) for i in range(self.vocab_size)]

    def token_types(self) -> list[int]:
        """gguf.TokenType ints, index = id (GGUF tokenizer.ggml.token_type): unknown 2,
        control 3, unused 5, byte 6, normal 1."""
        sp = self._sp

        def kind(i: int) -> int:
            if sp.is_unknown(i):
                return TOKEN_UNKNOWN
            if sp.is_control(i):
                return TOKEN_CONTROL
            if sp.is_byte(i):
                return TOKEN_BYTE
            if sp.is_unused(i):
                return TOKEN_UNUSED
            return TOKEN_NORMAL
        return [kind(i) for i in range(self.vocab_size)]

    def __getstate__(self) -> dict:      # pickle / deepcopy through the serialized model
        return {"model_proto": self._proto}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model_proto"])

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"


def _train_model(sample: list[str], kind: str, vocab_size: int) -> bytes:
    """The serialized SentencePiece model trained on `sample` in the app's layout (ids 0-2
    control, 3-258 bytes, then pieces; llama.cpp's SPM conventions). Raises RuntimeError, as
    sentencepiece reports bad settings."""
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample), model_writer=writer, required_chars=_WS,
        model_type=kind, vocab_size=vocab_size, hard_vocab_limit=False,
        byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, split_digits=True, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        # bytes; _sentences cuts lines to TRAIN_SENTENCE_CHARS (+ the cut search)
        max_sentence_length=4 * (TRAIN_SENTENCE_CHARS + SEARCH_CHARS),
        input_sentence_size=0,           # 0 = use every sentence (no sampling)
        shuffle_input_sentence=False, num_threads=1,  # deterministic
        minloglevel=2)                   # quiet: errors only
    return writer.getvalue()
