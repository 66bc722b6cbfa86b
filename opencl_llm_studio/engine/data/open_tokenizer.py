"""A pretrained open model's tokenizer (SmolLM2, Llama 3.x, TinyLlama, ...) through `tokenizers`.

`OpenTokenizer` presents the API of engine.data.tokenizer.Tokenizer (encode, decode, bos_id, eos_id,
vocab_size, pieces(), scores(), token_types(), to_bytes()/from_bytes(), kind) over a Hugging Face
`tokenizers.Tokenizer`, for two families:

- kind "byte_bpe": byte-level BPE (GPT-2's byte-to-unicode alphabet; GGUF tokenizer.ggml.model
  "gpt2"), with one of the pre-tokenizers llama.cpp names (`pre`: "smollm", "llama-bpe",
  "qwen2", "gpt-2"; the regexes are llama.cpp's, src/llama-vocab.cpp llm_tokenizer_bpe);
- kind "sentencepiece": SentencePiece BPE with byte fallback in the Llama-2 layout (<unk>, <s>,
  </s>, <0x00>..<0xFF>; GGUF model "llama"), as transformers' LlamaTokenizerFast runs it.

It is built from a model folder's tokenizer.json
(engine.data.open_folder_tokenizer.read_folder) or from a GGUF's vocabulary
(engine.files.gguf_vocab). Ids equal transformers' on the folder and llama.cpp's on the GGUF
(tests/test_open_tokenizer.py). Text is split at special tokens first, as both do.

Saved form (`to_bytes`, no pickle): one line of JSON (the header: kind, pre, special ids, chat
template, stop ids, SentencePiece scores) then the tokenizer.json text.
"""

from __future__ import annotations

import json
from typing import Iterable

from opencl_llm_studio.engine.errors import DataError, ModelImportError

FORMAT = "opencl-llm-studio-open-tokenizer/1"
KINDS = ("byte_bpe", "sentencepiece")
_WS = "\u2581"

# gguf.TokenType values (as engine.data.tokenizer)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_BYTE = 1, 2, 3, 4, 6

# llama.cpp's pre-tokenizer regexes (src/llama-vocab.cpp, llm_tokenizer_bpe), applied in order
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_TAIL = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PRE_REGEXES = {
    "gpt-2": (_GPT2,),
    "smollm": (r"\p{N}", _GPT2),
    "llama-bpe": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|" + _TAIL,),
    "qwen2": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|" + _TAIL,),
}
# llama.cpp merges a whole pre-token found in the vocabulary directly for these (ignore_merges)
IGNORE_MERGES = ("llama-bpe",)
# Tokens that end a turn or a text (ChatML, Llama 3, Zephyr, Phi, Gemma): a special token of one
# of these names is a stop token, as llama.cpp marks end-of-generation tokens by name.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|endoftext|>",
               "<|end|>", "<end_of_turn>", "</s>")
# A text with the characters pre-tokenizers disagree on (to recognise a folder's pre-tokenizer)
CHECK_TEXT = ("Hello World! I'm 12345 years old, aren't you? 3.14159\n\n  \t indented\r\n"
              "def f(x):\n    return x**2  # code\n你好世界 🦙🚀 ÅÉ ﬁ '''quoted''' 1,000,000")


def tokenizers_module():
    """The `tokenizers` package; ModelImportError with the install hint when it is missing."""
    try:
        import tokenizers
    except ImportError:
        raise ModelImportError("Open models need the `tokenizers` package.",
                               "pip install 'opencl-llm-studio[hf]'") from None
    return tokenizers


def byte_bpe_pre_tokenizer(pre: str):
    """The `tokenizers` pre-tokenizer of llama.cpp's `pre` name: its regexes in order, each
    splitting the pieces of the one before (isolated), then the byte-to-unicode mapping.
    Raises KeyError for a name not in PRE_REGEXES."""
    t = tokenizers_module()
    splits = [t.pre_tokenizers.Split(t.Regex(r), behavior="isolated") for r in PRE_REGEXES[pre]]
    return t.pre_tokenizers.Sequence(
        splits + [t.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def detect_pre(hf) -> str:
    """llama.cpp's pre-tokenizer name whose splits of CHECK_TEXT equal `hf`'s, or "" if none."""
    if hf.pre_tokenizer is None:
        return ""
    want = [w for w, _ in hf.pre_tokenizer.pre_tokenize_str(CHECK_TEXT)]
    for name in PRE_REGEXES:
        got = [w for w, _ in byte_bpe_pre_tokenizer(name).pre_tokenize_str(CHECK_TEXT)]
        if got == want:
            return name
    return ""


class OpenTokenizer:
    """A pretrained tokenizer (module docstring). Build with `from_bytes`,
    engine.data.open_folder_tokenizer.read_folder or engine.files.gguf_vocab.tokenizer_from_gguf.

    hf: tokenizers.Tokenizer. kind: one of KINDS. pre: llama.cpp pre-tokenizer name ("" when
    unknown; "default" for sentencepiece). bos_id / eos_id / unk_id: ids or None (eos_id is
    required). add_bos: whether the model expects BOS before a text (llama.cpp
    tokenizer.ggml.add_bos_token). chat_template: Jinja text or "". stop_ids: ids that end a turn.
    scores: SentencePiece piece scores (index = id) or None (derived from the merges).
    """

    def __init__(self, hf, kind: str, pre: str, bos_id: int | None, eos_id: int,
                 unk_id: int | None = None, add_bos: bool = False, chat_template: str = "",
                 stop_ids: Iterable[int] = (), scores: list[float] | None = None):
        if kind not in KINDS:
            raise DataError(f"Unknown open tokenizer kind {kind!r}.", f"Use one of {KINDS}.")
        self._hf, self.kind, self.pre = hf, kind, pre
        self.bos_id, self.eos_id, self.unk_id = bos_id, eos_id, unk_id
        self.add_bos, self.chat_template = bool(add_bos), chat_template or ""
        self.stop_ids = sorted({int(i) for i in stop_ids} | {eos_id})
        self._scores = list(scores) if scores is not None else None
        self._added = {t.content: t for t in hf.get_added_tokens_decoder().values()}

    # -- construction
    @classmethod
    def from_bytes(cls, data: bytes) -> "OpenTokenizer":
        """Load what `to_bytes` wrote. Raises DataError when the bytes are not that."""
        head, _, body = bytes(data).partition(b"\n")
        try:
            h = json.loads(head.decode("utf-8"))
            if h.get("format") != FORMAT:
                raise ValueError(f"format {h.get('format')!r}")
            hf = tokenizers_module().Tokenizer.from_str(body.decode("utf-8"))
            return cls(hf, h["kind"], h["pre"], h["bos_id"], h["eos_id"], h["unk_id"],
                       h["add_bos"], h["chat_template"], h["stop_ids"], h["scores"])
        except Exception as e:   # json, KeyError, and tokenizers' own (plain) Exception
            raise DataError(f"The tokenizer data is not an open-model tokenizer ({e}).",
                            "The checkpoint may be damaged; import the model again.") from None

    def to_bytes(self) -> bytes:
        """Header JSON line + tokenizer.json (what `from_bytes` reads)."""
        head = {"format": FORMAT, "kind": self.kind, "pre": self.pre, "bos_id": self.bos_id,
                "eos_id": self.eos_id, "unk_id": self.unk_id, "add_bos": self.add_bos,
                "chat_template": self.chat_template, "stop_ids": self.stop_ids,
                "scores": self._scores}
        return (json.dumps(head, ensure_ascii=True).encode("ascii") + b"\n"
                + self._hf.to_str().encode("utf-8"))

    @property
    def hf(self):
        """The wrapped tokenizers.Tokenizer (for writing tokenizer.json)."""
        return self._hf

    # -- properties
    @property
    def vocab_size(self) -> int:
        """Number of token ids (added tokens included)."""
        return self._hf.get_vocab_size(with_added_tokens=True)

    @property
    def add_space_prefix(self) -> bool:
        """Whether a "▁" is put before the text (SentencePiece add_dummy_prefix / llama.cpp
        tokenizer.ggml.add_space_prefix); always False for byte-level BPE."""
        if self.kind != "sentencepiece":
            return False
        tokens = self._hf.encode("x", add_special_tokens=False).tokens
        return bool(tokens) and tokens[0].startswith(_WS)

    # -- encoding
    def encode(self, text: str) -> list[int]:
        """Token ids of `text` without BOS/EOS; special-token texts in it (e.g. "<|im_end|>")
        become their ids, as transformers (add_special_tokens=False) and llama.cpp
        (parse_special=True) do."""
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """(ids, (start, end) character span of each token in `text`), as `encode`."""
        enc = self._hf.encode(text, add_special_tokens=False)
        return enc.ids, [tuple(o) for o in enc.offsets]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`, special (control) tokens dropped. IndexError for an id out of range."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise IndexError(f"token id {bad[0]} is outside 0..{self.vocab_size - 1}")
        return self._hf.decode(ids, skip_special_tokens=True)

    def token_to_id(self, piece: str) -> int | None:
        """Id of the token whose text is `piece`, or None."""
        return self._hf.token_to_id(piece)

    def id_to_piece(self, i: int) -> str:
        """The token string of id `i` (byte-level or "▁" form, as in tokenizer.json)."""
        return self._hf.id_to_token(int(i))

    def pieces(self) -> list[str]:
        """All token strings, index = id (GGUF tokenizer.ggml.tokens)."""
        return [self._hf.id_to_token(i) or f"[PAD{i}]" for i in range(self.vocab_size)]

    def merges(self) -> list[str]:
        """The BPE merges as "left right" strings, highest priority first (GGUF
        tokenizer.ggml.merges)."""
        model = json.loads(self._hf.to_str())["model"]
        return [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    def scores(self) -> list[float]:
        """Piece scores, index = id (GGUF tokenizer.ggml.scores). SentencePiece: the stored
        scores, else minus the rank of the first merge that makes the piece (the order llama.cpp
        merges in); 0 for other pieces. Byte-level BPE: all 0 (llama.cpp uses the merges)."""
        if self._scores is not None:
            return list(self._scores)
        out = [0.0] * self.vocab_size
        if self.kind == "sentencepiece":
            vocab = self._hf.get_vocab(with_added_tokens=False)
            seen = set()
            for rank, m in enumerate(self.merges()):
                piece = m.replace(" ", "")
                if piece not in seen and piece in vocab:
                    seen.add(piece)
                    out[vocab[piece]] = -float(rank + 1)
        return out

    def token_types(self) -> list[int]:
        """gguf.TokenType ints, index = id: special added tokens control (3), other added tokens
        user-defined (4); SentencePiece: <unk> unknown (2), "<0xNN>" byte tokens (6); else
        normal (1)."""
        types = []
        for i, p in enumerate(self.pieces()):
            added = self._added.get(p)
            if i == self.unk_id and self.kind == "sentencepiece":   # byte BPE has no <unk>
                types.append(TOKEN_UNKNOWN)
            elif added is not None:
                types.append(TOKEN_CONTROL if added.special else TOKEN_USER_DEFINED)
            elif self.kind == "sentencepiece" and len(p) == 6 and p.startswith("<0x") \
                    and p.endswith(">"):
                types.append(TOKEN_BYTE)
            else:
                types.append(TOKEN_NORMAL)
        return types

    def __repr__(self) -> str:
        return f"OpenTokenizer(kind={self.kind!r}, pre={self.pre!r}, vocab_size={self.vocab_size})"


def tokenizer_from_bytes(data: bytes):
    """The tokenizer a checkpoint stored: an OpenTokenizer (its header line starts with '{') or
    the app's own SentencePiece engine.data.tokenizer.Tokenizer. Raises DataError."""
    if bytes(data[:1]) == b"{":
        return OpenTokenizer.from_bytes(data)
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer
    return Tokenizer.from_bytes(data)
