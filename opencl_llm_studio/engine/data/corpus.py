"""Pretraining data: a text as written, tokenized into a training stream and a held-out
validation stream of int32 ids, and the windows drawn from them (nanoGPT's get_batch).

What is trained: the text itself. train_stream = [BOS] + encode(train_text), where train_text is
the text up to the cut: blank lines, indentation and every other character are text, so a model
learns to write them. No document marks are inserted (formats with documents of their own, the
dialogues, add theirs: engine.data.dialogue). `documents` (the text's blank-line-separated
paragraphs, split_documents) are a separate notion: the recall check (engine.training.evaluate) and the
sample prompts use them, the stream never does.

Validation: the held-out text is the end of the text, val_text = text[cut:], encoded on its own
as val_stream = [BOS] + encode(val_text), so every token of it is a scored target and its bits
per byte count exactly its own UTF-8 bytes (`val_bytes`; with the char tokenizer on ASCII text
bpb = loss / ln 2, as nanoGPT's char model). The cut (`val_split`, `val_fraction` f):
- "docs" (default): at the start of the last round(f * paragraphs) paragraphs (at least one,
  never all). When that leaves fewer than context_length + 1 tokens on either side (one
  paragraph, one long line, few long paragraphs), the "tail" cut is used instead.
- "tail": at character int(len(text) * (1 - f)), nanoGPT's split (train = data[:int(n * 0.9)],
  val = the rest), moved earlier only if the held-out part would be shorter than one window.
Only when not even one window of context_length + 1 tokens can be held out beside one to train
on (or f is 0) is validation measured on the training stream: `val_source` then says
"training text" and `val_note` says why, so no caller can show it as held-out.
"""

from __future__ import annotations

import numpy as np

from opencl_llm_studio.engine.config import VAL_SPLITS
from opencl_llm_studio.engine.errors import ConfigError, DataError
from opencl_llm_studio.engine.data.longtext import encode_text
from opencl_llm_studio.engine.metrics import ValScore, score_validation
from opencl_llm_studio.engine.progress import Monitor
from opencl_llm_studio.engine.data.textio import document_spans, normalize_newlines, split_documents
from opencl_llm_studio.engine.data.tokenizer import TOKEN_BYTE, TOKEN_CONTROL, TOKEN_UNKNOWN, Tokenizer
from opencl_llm_studio.engine.limits import LIMITS

HELD_OUT, TRAINING_TEXT = "held-out", "training text"   # the values of val_source
# The final validation of a run scores the held-out text up to this many target tokens (all of
# a 10% split of a 10 MB character-level text; at d_model 128 on a 2-core CPU about 20 s).
FINAL_VAL_TOKENS = 1_000_000
PHASE = "encoding the pretraining text"


def sample_windows(n_win: int, n: int, seed: int) -> np.ndarray:
    """Indices of n of n_win windows in a systematic sample with a random start: every
    (n_win / n)-th from an offset drawn uniformly in [0, n_win / n) by `seed`, so each index
    is drawn with probability n / n_win (Cochran, "Sampling Techniques", 3rd ed., ch. 8).
    Sorted, distinct; all of them when n >= n_win."""
    if n >= n_win:
        return np.arange(n_win, dtype=np.int64)
    step = n_win / n
    offset = np.random.default_rng([seed, n_win, n]).uniform(0, step)
    return np.minimum(np.floor(offset + step * np.arange(n)).astype(np.int64), n_win - 1)


def _windows(stream: np.ndarray, starts: np.ndarray, context_length: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets (B, T) int32 for windows of T+1 tokens at `starts` (B,). A stream
    shorter than T+1 tokens (a short general text beside an open model's long window) gives
    the whole stream in every window, padded: inputs after its end 0, targets -1 (not scored;
    causal attention keeps the padding from changing the scored positions)."""
    if stream.size < context_length + 1:
        n = stream.size - 1
        x = np.zeros((len(starts), context_length), np.int32)
        y = np.full((len(starts), context_length), -1, np.int32)
        x[:, :n], y[:, :n] = stream[:-1], stream[1:]
        return x, y
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
    control tokens <s>, </s> and <unk> 0 (they stand for no text: the streams hold the text as
    written, so the targets of a stream add up to its text's UTF-8 bytes exactly).
    """
    sizes = []
    for piece, kind in zip(tokenizer.pieces(), tokenizer.token_types()):
        if kind in (TOKEN_UNKNOWN, TOKEN_CONTROL):
            sizes.append(0)
        elif kind == TOKEN_BYTE:
            sizes.append(1)
        else:
            sizes.append(len(piece.replace("\u2581", " ").encode("utf-8")))
    return np.asarray(sizes, dtype=np.int64)


class PretrainData:
    """The pretraining text as a training stream and a held-out validation stream, and their
    windows (see the module docstring for what is trained and what is held out).

    tokenizer: a trained engine.data.tokenizer.Tokenizer. text: the whole pretraining text ("\\r\\n"
    line endings read as "\\n", as engine.data.textio.read_text gives them). context_length: T, tokens
    per window. val_fraction: share held out (of the paragraphs for "docs", of the characters
    for "tail"; 0 = none). val_split: "docs" or "tail". seed: seeds the generator `train_batch`
    uses when given no rng. monitor: progress of the encoding and its cancellation
    (engine.progress.Cancelled), for texts of many megabytes.

    What is trained: train_text (str), train_stream (int32 (N,): [BOS] + its ids).
    What is scored: val_text (str), val_stream (int32: [BOS] + its ids; the same array as
    train_stream when nothing is held out), val_bytes (int: UTF-8 bytes of val_text),
    val_source ("held-out" | "training text"), val_is_train, val_note (str, for a person).
    Documents, for the recall check and sample prompts only: documents (list[str], every
    paragraph), train_documents (list[str]: the paragraphs trained on; one cut by the split
    contributes its training part), n_val_documents (int: paragraphs wholly held out).
    n_tokens (int: the text's size in tokens, its BOS and the tokens of its parts), token_bytes
    (int64 (V,), token_bytes()). short_ok: a text shorter than T+1 tokens is used as it is
    (the general text beside a model made elsewhere, whose window the person did not choose):
    every window is the whole text, padded (targets past its end -1, not scored), and val_note
    says so. Raises DataError for a whitespace-only text, and without short_ok for one shorter
    than T+1 tokens (the message says how many tokens there are and suggests a context
    length); ConfigError for a context_length or val_fraction outside engine.limits.LIMITS or an unknown
    val_split.
    """

    def __init__(self, tokenizer: Tokenizer, text: str, context_length: int,
                 val_fraction: float = 0.1, seed: int = 0, val_split: str = "docs",
                 monitor: Monitor | None = None, short_ok: bool = False):
        self.short_ok = short_ok
        LIMITS["context_length"].check(context_length)
        if not LIMITS["val_fraction"].contains(val_fraction) or val_split not in VAL_SPLITS:
            raise ConfigError(f"val_split {val_split!r} with val_fraction {val_fraction} is not "
                              "understood.",
                              f"Use docs or tail with a share {LIMITS['val_fraction'].range_text()}"
                              ", e.g. tail:0.1.", field=("val_split", "val_fraction"))
        self.tokenizer, self.context_length = tokenizer, context_length
        self.val_fraction, self.val_split = val_fraction, val_split
        self.rng = np.random.default_rng(seed)
        self.text = normalize_newlines(text)
        self._spans = document_spans(self.text)
        self.documents = [self.text[a:b] for a, b in self._spans]
        if not self.documents:
            raise DataError("The pretraining text is empty.",
                            "Load a text with at least a few sentences.")
        self.token_bytes = token_bytes(tokenizer)
        self._monitor, self._done = monitor, 0
        self._split(context_length + 1)
        if monitor is not None:
            monitor.tick(PHASE, len(self.text), len(self.text))

    # ------------------------------------------------------------------ the split
    def _encode(self, text: str) -> np.ndarray:
        """[BOS] + ids of `text`; progress counts characters over the whole text."""
        ids = encode_text(self.tokenizer, text, self._monitor, PHASE, self._done, len(self.text))
        self._done += len(text)
        return ids

    def _docs_cut(self) -> int | None:
        """Character offset where the last round(f * paragraphs) paragraphs begin."""
        n_docs = len(self._spans)
        if self.val_split != "docs" or n_docs < 2:
            return None
        n_val = min(n_docs - 1, max(1, round(n_docs * self.val_fraction)))
        return self._spans[n_docs - n_val][0]

    def _tail(self, need: int) -> tuple[int, np.ndarray] | None:
        """nanoGPT's cut int(n * (1 - f)) and the held-out ids, the cut moved earlier until
        the held-out part is at least `need` tokens (None: only the whole text would do)."""
        n = len(self.text)
        cut = min(int(n * (1.0 - self.val_fraction)), n - 1)
        while True:
            val = self._encode(self.text[cut:])
            if val.size >= need:
                return cut, val
            if cut == 0:
                return None
            k = n - cut   # held-out characters: grow them by the tokens missing, at least x2
            cut = max(0, n - max(2 * k, k + need - val.size))

    def _split(self, need: int) -> None:
        """Set the texts, the streams, val_source, val_note and the document counts: the
        first cut that leaves a window on both sides, else nothing held out."""
        if self.val_fraction > 0:
            for cut, val in self._cuts(need):
                train = self._encode(self.text[:cut])
                if train.size >= need:
                    return self._held_out(cut, train, val)
        self._not_held_out(need)

    def _cuts(self, need: int):
        """(cut, held-out ids) to try, in order: the "docs" cut when its held-out part holds a
        window, then the "tail" cut (the held-out part is encoded before the training part:
        it is the smaller one, and it decides whether the cut is kept)."""
        cut = self._docs_cut()
        if cut is not None:
            val = self._encode(self.text[cut:])
            if val.size >= need:
                yield cut, val
        tail = self._tail(need)
        if tail is not None:
            yield tail

    def _held_out(self, cut: int, train: np.ndarray, val: np.ndarray) -> None:
        self.train_text, self.val_text = self.text[:cut], self.text[cut:]
        self.train_stream, self.val_stream = train, val
        self.n_tokens = int(train.size + val.size - 1)   # one BOS, as the whole text has
        self.val_source = HELD_OUT
        n_docs = len(self._spans)
        self.n_val_documents = sum(a >= cut for a, _ in self._spans)
        self.train_documents = [self.text[a:min(b, cut)].strip() for a, b in self._spans
                                if a < cut and self.text[a:min(b, cut)].strip()]
        if self.val_split == "docs" and cut == self._docs_cut():
            how = f"the last {self.n_val_documents} of {n_docs} paragraphs"
        else:
            how = (f"the last {100 * len(self.val_text) / len(self.text):.3g}% of the text"
                   + (", the end of its only paragraph" if n_docs == 1 else ""))
        self.val_note = (f"held out: {how} ({len(self.val_text):,} characters, "
                         f"{val.size - 1:,} tokens), never trained on")

    def _not_held_out(self, need: int) -> None:
        self.train_text = self.val_text = self.text
        self.train_stream = self.val_stream = self._encode(self.text)
        self.n_tokens = int(self.train_stream.size)
        self.val_source, self.n_val_documents = TRAINING_TEXT, 0
        self.train_documents = list(self.documents)
        why = ("the validation share is 0" if self.val_fraction == 0 else
               f"the text is {self.n_tokens:,} tokens; one window of context + 1 = {need} "
               f"tokens to train on and one to hold out need {2 * need}")
        self.val_note = (f"nothing held out ({why}): the validation loss is measured on the "
                         "training text")
        if self.n_tokens < need and not self.short_ok:
            raise DataError(
                f"The pretraining text is {self.n_tokens} tokens long, shorter than one training "
                f"window of context_length + 1 = {need} tokens.",
                f"Use a context length of at most {suggest_context_length(self.n_tokens)}, or a "
                f"longer text.")
        if self.n_tokens < need:   # short_ok: used as it is (an open model's window is
            self.val_note += (     # longer than most general texts a person has at hand)
                f"; the text is shorter than one window of context + 1 = {need} tokens, so "
                f"every window is the whole text ({self.n_tokens:,} tokens), padded")

    @property
    def val_bytes(self) -> int:
        """UTF-8 bytes of the validation text (the bits-per-byte denominator of a full score)."""
        return len(self.val_text.encode("utf-8"))

    @property
    def val_is_train(self) -> bool:
        return self.val_source == TRAINING_TEXT

    def train_batch(self, rng: np.random.Generator | None, batch_size: int,
                    window: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """B random windows of the training stream: (inputs, targets), both int32 (B, T), with
        targets[b, t] = inputs[b, t + 1] inside the same window (next-token prediction).
        rng: the generator to draw window starts from (None: this object's, seeded by `seed`).
        window: T for these windows (None: context_length; the tune stage's replay passes its
        dialogues' window so that one batch has one width)."""
        rng = self.rng if rng is None else rng
        T = window or self.context_length
        high = self.train_stream.size - T   # starts 0..high-1
        starts = rng.integers(0, max(high, 1), size=batch_size)   # a short text: 0, padded
        return _windows(self.train_stream, starts, T)

    def val_batches(self, batch_size: int, max_tokens: int, window: int | None = None,
                    seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
        """The validation windows as batches (inputs, targets) int32 (B, T), always the same
        for the same window and seed (T = window, None: context_length).

        The val stream ([BOS] + the held-out text's ids, so its targets are exactly the text's
        tokens) is cut into consecutive windows of T scored targets (stride T, so every target
        token is scored once; nanoGPT's estimate_loss also scores every position). When
        the stream holds more than `max_tokens` targets, n = max(1, max_tokens // T) of those
        windows are drawn across all of it: a systematic sample, every (N / n)-th window from
        an offset drawn by `seed`, so each of the N windows is equally likely to be scored and
        the score is an unbiased estimate of the whole text's (a fixed first offset scored the
        same windows in every run: one draw, read 0.02-0.03 bits per byte low on
        tinyshakespeare in three runs, issue 36). Otherwise all of them plus one window ending
        at the stream's end whose already-scored targets are masked (-1), so the whole stream
        is covered. The last batch is padded with windows of targets -1 (ignored by the loss).
        score() scores them."""
        T, val = window or self.context_length, self.val_stream
        if val.size - 1 < T:   # shorter than one window: itself, padded (_windows)
            x, y = _windows(val, np.zeros(1, np.int64), T)
            pad = batch_size - 1
            x = np.concatenate([x, np.repeat(x, pad, axis=0)])
            y = np.concatenate([y, np.full((pad, T), -1, np.int32)])
            return [(x, y)]
        n_win = (val.size - 1) // T
        starts = np.arange(n_win, dtype=np.int64) * T
        tail = (val.size - 1) - n_win * T   # targets after the last whole window
        if n_win * T > max_tokens:
            starts, tail = starts[sample_windows(n_win, max(1, max_tokens // T), seed)], 0
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

    def val_windows(self, window: int | None = None) -> int:
        """N: the whole windows of T targets the val stream holds (those val_batches draws
        from), at least 1."""
        return max(1, (self.val_stream.size - 1) // (window or self.context_length))

    def score(self, loss_fn, batch_size: int, max_tokens: int = FINAL_VAL_TOKENS,
              monitor: Monitor | None = None, phase: str = "validation",
              window: int | None = None, seed: int = 0) -> ValScore:
        """The validation text scored with loss_fn(inputs, targets) -> mean nats over the
        targets >= 0 (e.g. engine.model.transformer.Model.loss): ValScore(loss in nats per token, bits per
        byte, tokens scored, their UTF-8 bytes) over val_batches(batch_size, max_tokens). With
        max_tokens = FINAL_VAL_TOKENS (the end of a run) the whole held-out text is scored when
        it is at most that long, and then n_bytes == val_bytes. monitor.tick(phase, i, n) runs
        before each batch (progress; raises engine.progress.Cancelled on a stop).
        window, seed: as for val_batches. loss_fn may return (B,) nats per row instead of the
        mean (Model.loss(per_row=True)): then a sample of the text also has its standard error
        (ValScore.bpb_stderr, engine.metrics.score_validation)."""
        batches = self.val_batches(batch_size, max_tokens, window, seed)

        def ticking():
            for i, batch in enumerate(batches):
                if monitor is not None:
                    monitor.tick(phase, i, len(batches))
                yield batch
        return score_validation(ticking(), loss_fn, self.token_bytes, self.val_windows(window))

    def summary(self) -> dict:
        """What was trained and what is scored, for a run's data summary: pretrain_tokens,
        pretrain_documents (paragraphs), train_tokens, train_chars, val_tokens, val_chars,
        val_bytes (targets of the validation stream and its text's size), val_source."""
        return {"pretrain_tokens": self.n_tokens, "pretrain_documents": len(self.documents),
                "train_tokens": int(self.train_stream.size), "train_chars": len(self.train_text),
                "val_tokens": int(self.val_stream.size) - 1, "val_chars": len(self.val_text),
                "val_bytes": self.val_bytes, "val_source": self.val_source}

    def __repr__(self) -> str:
        return (f"PretrainData({len(self.documents)} documents, {self.n_tokens} tokens, "
                f"train {self.train_stream.size}, val {self.val_stream.size}"
                f"{' (= train)' if self.val_is_train else ''}, T={self.context_length})")
