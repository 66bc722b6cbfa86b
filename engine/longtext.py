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

from engine.progress import Monitor

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


def encode_documents(tokenizer, documents: list[str], monitor: Monitor | None = None,
                     phase: str = "encoding the text") -> list[list[int]]:
    """[BOS] + ids + [EOS] per document, chunk by chunk; monitor.tick reports the characters
    done and raises engine.progress.Cancelled when a stop was asked for."""
    total = sum(len(d) for d in documents)
    done, out = 0, []
    for doc in documents:
        ids = [tokenizer.bos_id]
        for piece in chunks(doc, ENCODE_CHUNK_CHARS):
            if monitor is not None:
                monitor.tick(phase, done, total)
            ids += tokenizer.encode(piece)
            done += len(piece)
        ids.append(tokenizer.eos_id)
        out.append(ids)
    if monitor is not None:
        monitor.tick(phase, total, total)
    return out


def stream_of(encoded: list[list[int]]) -> np.ndarray:
    """The documents' ids as one int32 array (no Python-level loop per token)."""
    if not encoded:
        return np.zeros(0, np.int32)
    return np.concatenate([np.asarray(d, np.int32) for d in encoded])
