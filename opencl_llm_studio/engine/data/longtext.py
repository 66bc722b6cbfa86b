"""Long texts in bounded pieces: a 16 MB one-line document is cut into chunks so that encoding
it reports progress and can be cancelled between chunks, and so that SentencePiece training
sees every part of it (it drops a sentence above `max_sentence_length`).

Cuts fall at the start of a run of spaces (a space after a non-space) or after a newline. The
tokenizer never merges across those places (SentencePiece splits words before "▁" and no piece
holds "\\n"; tests/test_long_phases.py checks that the chunked encoding equals the whole one),
so encoding chunk by chunk gives the same ids. A text with no such place within
`SEARCH_CHARS` of the target length is cut there anyway (a run of letters or digits
thousands of characters long, where a token boundary moves by at most one piece).
"""

from __future__ import annotations

import re
from typing import Iterator

import numpy as np

from opencl_llm_studio.engine.progress import Monitor

ENCODE_CHUNK_CHARS = 65_536   # encode this much between two cancellation checks (a stop is felt)
SEARCH_CHARS = 4_096          # how far past the target length to look for a safe cut
_CUT = re.compile(r"(?<=[^ ]) |(?<=\n)")


def chunks(text: str, max_chars: int) -> Iterator[str]:
    """`text` in consecutive pieces of about `max_chars` characters (at most max_chars +
    SEARCH_CHARS), cut where the tokenizer does not merge. "".join(chunks(t, n)) == t."""
    i, n = 0, len(text)
    while n - i > max_chars:
        end = i + max_chars + SEARCH_CHARS
        m = _CUT.search(text, i + max_chars, min(n, end))
        if m is None and end >= n:  # no safe cut before the end: keep the rest whole
            break
        j = m.start() if m else i + max_chars
        yield text[i:j]
        i = j
    if i < n or n == 0:
        yield text[i:]


def encode_text(tokenizer, text: str, monitor: Monitor | None = None,
                phase: str = "encoding the text", done: int = 0, total: int | None = None
                ) -> np.ndarray:
    """[BOS] + tokenizer.encode(text) as int32 (1 + n_tokens,), encoded chunk by chunk
    (chunks() cuts only where the tokenizer does not merge, so the ids equal one encode call
    on the whole text). monitor.tick(phase, done + characters encoded, total) runs before each
    chunk and raises engine.progress.Cancelled when a stop was asked for; `done` and `total`
    (default len(text)) let several texts share one progress count."""
    total = len(text) if total is None else total
    parts = [np.array([tokenizer.bos_id], np.int32)]
    for piece in chunks(text, ENCODE_CHUNK_CHARS):
        if monitor is not None:
            monitor.tick(phase, min(done, total), total)
        parts.append(np.asarray(tokenizer.encode(piece), np.int32))
        done += len(piece)
    return np.concatenate(parts)
