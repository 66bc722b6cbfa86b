"""Pretraining data: a text split into documents, tokenized into one stream of int32 ids, and
random training windows drawn from it (nanoGPT's get_batch).

Stream = concat over documents of [BOS] + encode(doc) + [EOS]. The last `val_fraction` of the
documents are held out for validation; when that leaves too few tokens for a window (tiny corpora
such as the bundled one at context_length 128), validation uses the training stream and
`val_is_train` is True.
"""

from __future__ import annotations

import re

import numpy as np

from engine.errors import ConfigError, DataError
from engine.longtext import encode_documents, stream_of
from engine.progress import Monitor
from engine.tokenizer import Tokenizer

_BLANK_LINE = re.compile(r"\n[ \t\f\v]*\n")  # a line that is empty or holds only spaces/tabs


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


class PretrainData:
    """Tokenized pretraining text and its training / validation windows.

    tokenizer: a trained engine.tokenizer.Tokenizer. text: the whole pretraining text.
    context_length: T, tokens per window. val_fraction: share of the documents held out (the
    last ones; at least one when there are two or more, none when 0). seed: seeds the generator
    `train_batch` uses when given no rng.

    Attributes: documents (list[str], all), n_tokens (int, length of the whole stream),
    stream / train_stream / val_stream (int32 1-D arrays of ids), n_val_documents (int),
    val_is_train (bool: validation windows come from the training stream).
    Raises DataError for a text without documents or a stream shorter than T+1 tokens (the
    message says how many tokens there are and suggests a context length); ConfigError for
    context_length < 1 or val_fraction outside [0, 1). monitor: progress of the encoding and
    its cancellation (engine.progress.Cancelled), for texts of many megabytes.
    """

    def __init__(self, tokenizer: Tokenizer, text: str, context_length: int,
                 val_fraction: float = 0.1, seed: int = 0, monitor: Monitor | None = None):
        if context_length < 1:
            raise ConfigError(f"context_length must be at least 1, got {context_length}.",
                              "Set the context length to a positive number of tokens, e.g. 64.")
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}.",
                              "Use a small share such as 0.1 (10% of the documents).")
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.val_fraction = val_fraction
        self.rng = np.random.default_rng(seed)
        self.documents = split_documents(text)
        if not self.documents:
            raise DataError("The pretraining text is empty.",
                            "Load a text with at least a few sentences.")
        encoded = encode_documents(tokenizer, self.documents, monitor,
                                   "encoding the pretraining text")
        self.stream = stream_of(encoded)
        self.n_tokens = int(self.stream.size)
        need = context_length + 1
        if self.n_tokens < need:
            raise DataError(
                f"The pretraining text is {self.n_tokens} tokens long, shorter than one training "
                f"window of context_length + 1 = {need} tokens.",
                f"Use a context length of at most {suggest_context_length(self.n_tokens)}, or a "
                f"longer text.")
        n_docs = len(self.documents)
        n_val = 0
        if n_docs >= 2 and val_fraction > 0:
            n_val = min(n_docs - 1, max(1, round(n_docs * val_fraction)))
        n_val_tokens = sum(len(doc) for doc in encoded[n_docs - n_val:]) if n_val else 0
        if n_val and n_val_tokens >= need and self.n_tokens - n_val_tokens >= need:
            split = self.n_tokens - n_val_tokens
            self.train_stream, self.val_stream = self.stream[:split], self.stream[split:]
            self.n_val_documents, self.val_is_train = n_val, False
        else:   # too little text to hold some out: validate on what we train on
            self.train_stream = self.val_stream = self.stream
            self.n_val_documents, self.val_is_train = 0, True

    def train_batch(self, rng: np.random.Generator | None, batch_size: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """B random windows of the training stream: (inputs, targets), both int32 (B, T), with
        targets[b, t] = inputs[b, t + 1] inside the same window (next-token prediction).
        rng: the generator to draw window starts from (None: this object's, seeded by `seed`)."""
        rng = self.rng if rng is None else rng
        high = self.train_stream.size - self.context_length   # starts 0..high-1
        starts = rng.integers(0, high, size=batch_size)
        return _windows(self.train_stream, starts, self.context_length)

    def val_batches(self, batch_size: int, n_batches: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """`n_batches` validation batches (inputs, targets), each int32 (B, T), always the same:
        B * n_batches window starts spread evenly over the validation stream (windows overlap or
        repeat when the stream is short)."""
        high = self.val_stream.size - self.context_length - 1   # last valid start
        starts = np.rint(np.linspace(0, high, batch_size * n_batches)).astype(np.int64)
        return [_windows(self.val_stream, s, self.context_length)
                for s in starts.reshape(n_batches, batch_size)]

    def __repr__(self) -> str:
        return (f"PretrainData({len(self.documents)} documents, {self.n_tokens} tokens, "
                f"train {self.train_stream.size}, val {self.val_stream.size}"
                f"{' (= train)' if self.val_is_train else ''}, T={self.context_length})")
