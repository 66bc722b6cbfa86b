"""Pretraining data: a text split into documents, tokenized into one stream of int32 ids, and
random training windows drawn from it (nanoGPT's get_batch).

Stream = concat over documents of [BOS] + encode(doc) + [EOS]. Validation text is held out of
training whenever the text allows it (`val_split`):
- "docs" (default): the last `val_fraction` of the documents. When that leaves fewer than
  context_length + 1 tokens on either side (one document, one long line, few long documents),
  the last `val_fraction` of the tokens is held out instead, cutting inside a document.
- "tail": the last `val_fraction` of the tokens by position, as nanoGPT splits its text
  (train = data[:int(n * 0.9)], val = the rest) -- with the character tokenizer one token is
  one character, so the split is nanoGPT's up to the document marks.
Only when not even one window of context_length + 1 tokens can be held out beside one to train
on (or val_fraction is 0) is validation measured on the training stream: `val_source` then says
"training text" and `val_note` says why, so no caller can show it as held-out.
"""

from __future__ import annotations

import re

import numpy as np

from engine.errors import ConfigError, DataError
from engine.longtext import encode_documents, stream_of
from engine.progress import Monitor
from engine.tokenizer import Tokenizer

_BLANK_LINE = re.compile(r"\n[ \t\f\v]*\n")  # a line that is empty or holds only spaces/tabs
HELD_OUT, TRAINING_TEXT = "held-out", "training text"   # the values of val_source


def split_documents(text: str) -> list[str]:
    """Split a text into documents, each stripped of surrounding whitespace.

    Paragraphs separated by blank lines (lines with only spaces/tabs count as blank) are the
    documents. A text without any blank line is one document per non-empty line. Expects "\\n"
    line endings (engine.textio.read_text gives those). Returns [] for a whitespace-only text.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _BLANK_LINE.search(text.strip()):
        parts = _BLANK_LINE.split(text)
    else:
        parts = text.split("\n")
    return [p.strip() for p in parts if p.strip()]


def _windows(stream: np.ndarray, starts: np.ndarray, context_length: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets (B, T) int32 for windows of T+1 tokens at `starts` (B,)."""
    idx = starts[:, None] + np.arange(context_length + 1)[None, :]   # (B, T+1)
    win = stream[idx]
    return win[:, :-1].copy(), win[:, 1:].copy()


def suggest_context_length(n_tokens: int) -> int:
    """The largest power of two (at least 1) that leaves a window of T+1 tokens in n_tokens."""
    t = 1
    while 2 * t + 1 <= n_tokens:
        t *= 2
    return t


def token_bytes(tokenizer: Tokenizer) -> np.ndarray:
    """UTF-8 bytes of text each token id stands for, int64 (vocab_size,), for bits per byte.

    A piece counts the bytes of its text ("\u2581" is the space, 1 byte); a byte token 1; the
    document marks <s> and </s> 1 each, for the separator they replace in the text (a blank line
    between paragraphs is "\n\n": 2 bytes for the </s> <s> pair, so on a plain ASCII text with
    the character tokenizer every token is one byte, as in nanoGPT's char model); <unk> 0 (byte
    fallback never produces it).
    """
    sizes = []
    for i, (piece, kind) in enumerate(zip(tokenizer.pieces(), tokenizer.token_types())):
        if kind == 2:                       # <unk>
            sizes.append(0)
        elif kind in (3, 6):                # control (<s>, </s>), byte
            sizes.append(1)
        else:
            sizes.append(len(piece.replace("\u2581", " ").encode("utf-8")))
    return np.asarray(sizes, dtype=np.int64)


class PretrainData:
    """Tokenized pretraining text and its training / validation windows.

    tokenizer: a trained engine.tokenizer.Tokenizer. text: the whole pretraining text.
    context_length: T, tokens per window. val_fraction: share held out (documents for "docs",
    tokens for "tail"; 0 = none). val_split: "docs" or "tail" (see the module docstring).
    seed: seeds the generator `train_batch` uses when given no rng.

    Attributes: documents (list[str], all), n_tokens (int, length of the whole stream),
    stream / train_stream / val_stream (int32 1-D arrays of ids), n_val_documents (int: whole
    documents held out), train_documents (list[str]: the text trained on, by document; a
    document cut by a token split contributes its training part), val_source ("held-out" |
    "training text"), val_is_train (bool: val_source == "training text"), val_note (str: what
    is held out, for a person), token_bytes (int64 (V,), see token_bytes()).
    Raises DataError for a text without documents or a stream shorter than T+1 tokens (the
    message says how many tokens there are and suggests a context length); ConfigError for
    context_length < 1, val_fraction outside [0, 1) or an unknown val_split. monitor: progress
    of the encoding and its cancellation (engine.progress.Cancelled), for texts of many megabytes.
    """

    def __init__(self, tokenizer: Tokenizer, text: str, context_length: int,
                 val_fraction: float = 0.1, seed: int = 0, val_split: str = "docs",
                 monitor: Monitor | None = None):
        if context_length < 1:
            raise ConfigError(f"context_length must be at least 1, got {context_length}.",
                              "Set the context length to a positive number of tokens, e.g. 64.")
        if not 0.0 <= val_fraction < 1.0 or val_split not in ("docs", "tail"):
            raise ConfigError(f"val_split {val_split!r} with val_fraction {val_fraction} is not "
                              "understood.",
                              "Use docs or tail with a share in [0, 1), e.g. tail:0.1.")
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.val_fraction, self.val_split = val_fraction, val_split
        self.rng = np.random.default_rng(seed)
        self.documents = split_documents(text)
        if not self.documents:
            raise DataError("The pretraining text is empty.",
                            "Load a text with at least a few sentences.")
        encoded = encode_documents(tokenizer, self.documents, monitor,
                                   "encoding the pretraining text")
        self.stream = stream_of(encoded)
        self.n_tokens = int(self.stream.size)
        self.token_bytes = token_bytes(tokenizer)
        need = context_length + 1
        if self.n_tokens < need:
            raise DataError(
                f"The pretraining text is {self.n_tokens} tokens long, shorter than one training "
                f"window of context_length + 1 = {need} tokens.",
                f"Use a context length of at most {suggest_context_length(self.n_tokens)}, or a "
                f"longer text.")
        self._split(encoded, need)

    def _split(self, encoded: list[list[int]], need: int) -> None:
        """Set the streams, val_source, val_note and the document counts."""
        n, f, n_docs = self.n_tokens, self.val_fraction, len(self.documents)
        split, how = None, ""
        if self.val_split == "docs" and n_docs >= 2 and f > 0:
            n_val = min(n_docs - 1, max(1, round(n_docs * f)))
            n_val_tokens = sum(len(doc) for doc in encoded[n_docs - n_val:])
            if n_val_tokens >= need and n - n_val_tokens >= need:
                split, how = n - n_val_tokens, f"the last {n_val} of {n_docs} documents"
        if split is None and f > 0:   # by position: nanoGPT's cut, at least one window each side
            cut = min(int(n * (1.0 - f)), n - need)
            if cut >= need:
                split = cut
                how = (f"the last {100 * (n - cut) / n:.3g}% of the tokens"
                       + (", the end of the only document" if n_docs == 1 else ""))
        if split is None:
            self.train_stream = self.val_stream = self.stream
            self.val_source, self.n_val_documents = TRAINING_TEXT, 0
            self.train_documents = list(self.documents)
            why = ("the validation share is 0" if f == 0 else
                   f"the text is {n:,} tokens; one window of context + 1 = {need} tokens to "
                   f"train on and one to hold out need {2 * need}")
            self.val_note = (f"nothing held out ({why}): the validation loss is measured on the "
                             "training text")
            return
        self.train_stream, self.val_stream = self.stream[:split], self.stream[split:]
        self.val_source = HELD_OUT
        self.val_note = f"held out: {how} ({n - split:,} tokens), never trained on"
        self._split_documents(encoded, split)

    def _split_documents(self, encoded: list[list[int]], split: int) -> None:
        """train_documents and n_val_documents for a split at token index `split`."""
        self.train_documents, start, n_val = [], 0, 0
        for doc, ids in zip(self.documents, encoded):
            end = start + len(ids)
            if end <= split:
                self.train_documents.append(doc)
            elif start < split:   # cut inside: the model trained on its beginning only
                head = self.tokenizer.decode(ids[1:split - start]).strip()
                if head:
                    self.train_documents.append(head)
            else:
                n_val += 1
            start = end
        self.n_val_documents = n_val

    @property
    def val_is_train(self) -> bool:
        return self.val_source == TRAINING_TEXT

    def train_batch(self, rng: np.random.Generator | None, batch_size: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """B random windows of the training stream: (inputs, targets), both int32 (B, T), with
        targets[b, t] = inputs[b, t + 1] inside the same window (next-token prediction).
        rng: the generator to draw window starts from (None: this object's, seeded by `seed`)."""
        rng = self.rng if rng is None else rng
        high = self.train_stream.size - self.context_length   # starts 0..high-1
        starts = rng.integers(0, high, size=batch_size)
        return _windows(self.train_stream, starts, self.context_length)

    def val_batches(self, batch_size: int, max_tokens: int
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The validation windows as batches (inputs, targets) int32 (B, T), always the same.

        The val stream is cut into consecutive windows of T scored targets (stride T, so every
        target token is scored once; nanoGPT's estimate_loss also scores every position). When
        the stream holds more than `max_tokens` targets, n = max(1, max_tokens // T) of those
        windows are taken, evenly spaced; otherwise all of them plus one window ending at the
        stream's end whose already-scored targets are masked (-1), so the whole stream is
        covered. The last batch is padded with windows of targets -1 (ignored by the loss).
        scored_tokens(batches) counts the targets scored."""
        T, val = self.context_length, self.val_stream
        n_win = (val.size - 1) // T
        starts = np.arange(n_win, dtype=np.int64) * T
        tail = (val.size - 1) - n_win * T   # targets after the last whole window
        if n_win * T > max_tokens:
            n = max(1, max_tokens // T)
            starts, tail = starts[np.rint(np.linspace(0, n_win - 1, n)).astype(np.int64)], 0
        x, y = _windows(val, starts, T)
        if tail:
            tx, ty = _windows(val, np.array([val.size - 1 - T]), T)
            ty[:, :T - tail] = -1
            x, y = np.concatenate([x, tx]), np.concatenate([y, ty])
        pad = -len(x) % batch_size
        if pad:
            x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)])
            y = np.concatenate([y, np.full((pad, T), -1, np.int32)])
        return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(x), batch_size)]

    def __repr__(self) -> str:
        return (f"PretrainData({len(self.documents)} documents, {self.n_tokens} tokens, "
                f"train {self.train_stream.size}, val {self.val_stream.size}"
                f"{' (= train)' if self.val_is_train else ''}, T={self.context_length})")
