"""Reading a person's text files (pretraining text, tune dialogues) into one `str`.

Everything a person can get wrong about a file is raised as `DataError` with what is wrong and a
hint: missing, a folder, unreadable, too large, empty, binary, or not UTF-8. Line endings are
normalised silently (CRLF and CR become "\\n") and a UTF-8 byte-order mark is dropped.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from opencl_llm_studio.engine.errors import DataError

log = logging.getLogger(__name__)

MAX_BYTES = 64 * 2**20  # default size limit: 64 MiB of text is far more than a laptop trains on

_UTF8_BOM = b"\xef\xbb\xbf"
# Control bytes that plain text may contain: tab, LF, VT, FF, CR, ESC (terminal colour codes).
_TEXT_CONTROLS = frozenset(b"\t\n\x0b\x0c\r\x1b")
_CONTROL_BYTES = bytes(sorted(set(range(0x20)) - _TEXT_CONTROLS | {0x7F}))
# A byte of 0x80-0x9F (C1 controls in Latin-1, cp1252 punctuation) or two non-ASCII bytes in a row.
_NOT_LATIN1 = re.compile(rb"[\x80-\x9f]|[\x80-\xff]{2}")
_BINARY_CONTROL_FRACTION = 0.10  # more than this share of control bytes: not text
# Signatures (first bytes) of files people often pick by mistake, for a more useful hint. Those that are printable text
# ("%PDF", "GGUF", "{\\rtf") are taken with the bytes that must follow them, so a text that
# merely begins with the word ("GGUF files hold ...") is still read as text.
_MAGIC = (
    (re.compile(rb"%PDF-\d"), "a PDF document"),
    (re.compile(rb"PK\x03\x04"), "a ZIP archive (or a .docx/.odt/.xlsx document, which are ZIP files)"),
    (re.compile(rb"\xd0\xcf\x11\xe0"), "an old Microsoft Office document (.doc/.xls)"),
    (re.compile(rb"\{\\rtf\d"), "an RTF document"),
    (re.compile(rb"\x89PNG"), "a PNG image"),
    (re.compile(rb"\xff\xd8\xff"), "a JPEG image"),
    (re.compile(rb"\x1f\x8b"), "a gzip-compressed file"),
    (re.compile(rb"GGUF[\x01-\x03]\x00\x00\x00"), "a GGUF model file"),   # + uint32 version 1-3
)
_SAVE_AS_TEXT = ("Open it in a text editor (or the program that made it) and save or export it as "
                 "plain text (.txt) with UTF-8 encoding.")


_BLANK_LINE = re.compile(r"\n[ \t\f\v]*\n")  # a line that is empty or holds only spaces/tabs
_NEWLINE = re.compile(r"\n")


def normalize_newlines(text: str) -> str:
    """`text` with "\\r\\n" and "\\r" line endings as "\\n"."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def document_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of each document of `text` ("\\n" line endings), with
    surrounding whitespace excluded: the paragraphs separated by blank lines (lines with only
    spaces/tabs count as blank), or, in a text without any blank line, each non-empty line."""
    sep = _BLANK_LINE if _BLANK_LINE.search(text.strip()) else _NEWLINE
    spans, start = [], 0
    for end, nxt in [(m.start(), m.end()) for m in sep.finditer(text)] + [(len(text), 0)]:
        part = text[start:end]
        if part.strip():
            lead = len(part) - len(part.lstrip())
            spans.append((start + lead, start + len(part.rstrip())))
        start = nxt
    return spans


def split_documents(text: str) -> list[str]:
    """Split a text into documents, each stripped of surrounding whitespace (document_spans).

    Paragraphs separated by blank lines are the documents; a text without any blank line is one
    document per non-empty line. "\\r\\n" and "\\r" line endings count as "\\n". Returns []
    for a whitespace-only text. For the recall check and sample prompts: training reads the
    text as written (PretrainData)."""
    text = normalize_newlines(text)
    return [text[a:b] for a, b in document_spans(text)]


BUNDLED = {"pretrain": "pretrain.txt", "tune": "tune.txt"}  # the default corpora, in resources/


def bundled_corpus(which: str) -> Path:
    """Path of a bundled default text: which "pretrain" (short facts) or "tune" (dialogues),
    package data of `opencl_llm_studio.resources`, found through importlib.resources wherever the
    package is installed. KeyError for another name."""
    from opencl_llm_studio import resources
    return resources.path(BUNDLED[which])


def _fmt_size(n: int) -> str:
    """Human-readable size in binary units: 1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def _read_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    """The file's bytes (at most `max_bytes`).
    Raises DataError when missing, a folder, unreadable or too large."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise DataError(f"The {what} file {str(path)!r} does not exist.",
                        "Check the path, or pick the file again with the file dialog.",
                        "Check the path (a relative one starts in the current folder, "
                        f"{os.getcwd()}).") from None
    except OSError as e:
        raise DataError(f"The {what} file {str(path)!r} cannot be accessed: {e.strerror or e}.",
                        "Check the path and that you have permission to read it.") from None
    if path.is_dir():
        raise DataError(f"The {what} path {str(path)!r} is a folder, not a file.",
                        "Choose a single plain-text (.txt) file inside it.",
                        "Give a single plain-text (.txt) file inside it.")
    if st.st_size > max_bytes:
        raise DataError(
            f"The {what} file {str(path)!r} is {_fmt_size(st.st_size)}, larger than the limit of "
            f"{_fmt_size(max_bytes)}.",
            "Use a smaller excerpt of the text; a small model learns little more from a huge file.")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # +1: devices and pipes report size 0 but may be endless
    except PermissionError:
        raise DataError(f"The {what} file {str(path)!r} cannot be read: permission denied.",
                        "Give your user read permission on the file, or copy it somewhere you own."
                        ) from None
    except OSError as e:
        raise DataError(f"The {what} file {str(path)!r} cannot be read: {e.strerror or e}.",
                        "Check that the file is a regular, readable text file.") from None
    if len(data) > max_bytes:
        raise DataError(f"The {what} file {str(path)!r} is larger than the limit of "
                        f"{_fmt_size(max_bytes)}.",
                        "Use a smaller excerpt of the text.")
    return data


def _check_not_binary(data: bytes, path: Path, what: str) -> None:
    """Raise DataError when the bytes are clearly not text (NUL bytes, many control bytes)."""
    for magic, kind in _MAGIC:
        if magic.match(data):
            raise DataError(f"The {what} file {str(path)!r} is {kind}, not plain text.",
                            _SAVE_AS_TEXT)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(f"The {what} file {str(path)!r} is saved as UTF-16, not UTF-8.",
                        "Open it in a text editor and save it with the encoding 'UTF-8'.")
    nul = data.find(b"\x00")
    if nul >= 0 and max(data[0::2].count(0), data[1::2].count(0)) > 0.4 * len(data):
        raise DataError(f"The {what} file {str(path)!r} looks like UTF-16 text, not UTF-8.",
                        "Open it in a text editor and save it with the encoding 'UTF-8'.")
    if nul >= 0:
        raise DataError(
            f"The {what} file {str(path)!r} looks binary: it contains a NUL byte (at byte offset "
            f"{nul}), which text files never do.", _SAVE_AS_TEXT)
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    if controls > _BINARY_CONTROL_FRACTION * len(data):
        raise DataError(
            f"The {what} file {str(path)!r} looks binary: {controls} of its {len(data)} bytes are "
            f"control bytes.", _SAVE_AS_TEXT)


def _surely_latin1(data: bytes) -> bool:
    """True when invalid-UTF-8 bytes are certainly ISO-8859-1 (Latin-1) text.

    Certain means: every non-ASCII byte is a printable Latin-1 character (0xA0-0xFF, so no
    cp1252-only byte 0x80-0x9F) and stands alone between ASCII bytes, as accented letters do in
    Western European text ("caf\\xe9"). UTF-8 sequences and Cyrillic/Greek/CJK single- and
    double-byte encodings put non-ASCII bytes next to each other, so they are never taken.
    """
    return _NOT_LATIN1.search(data) is None


def read_text(path: str | os.PathLike, what: str = "pretraining text",
              max_bytes: int = MAX_BYTES, notes: list[str] | None = None) -> str:
    """Read a plain-text file as `str`, UTF-8 with or without BOM, line endings normalised to "\\n".

    path: the file. what: how to name it in messages ("pretraining text", "tune dialogues").
    max_bytes: size limit in bytes (default 64 MiB). notes: a list that gets a sentence for each
    thing done that the person should know (the Latin-1 reading below), for a GUI to show.
    Raises DataError (message + hint) when the file is missing, a folder, unreadable, larger than
    `max_bytes` (size and limit are named), empty or whitespace-only, binary (NUL bytes or more
    than 10% control bytes, or a known document/image format), or not UTF-8 (the byte offset of
    the first bad byte is named). One exception to the last: bytes that are certainly Latin-1
    (see `_surely_latin1`) are decoded as Latin-1 and a warning is logged.
    """
    path = Path(path)
    data = _read_bytes(path, what, max_bytes)
    if not data.strip():
        raise DataError(
            f"The {what} file {str(path)!r} is empty." if not data else
            f"The {what} file {str(path)!r} contains only whitespace.",
            "Put some text in it (a few sentences at least) and save it.")
    _check_not_binary(data, path, what)
    start = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        if not start and _surely_latin1(data):
            log.warning("%s file %s is not UTF-8; read it as Latin-1 (ISO-8859-1)", what, path)
            if notes is not None:
                notes.append("not UTF-8: read as Latin-1 (ISO-8859-1)")
            text = data.decode("latin-1")
        else:
            offset = start + e.start
            line = data[:offset].count(b"\n") + 1
            raise DataError(
                f"The {what} file {str(path)!r} is not valid UTF-8: byte 0x{data[offset]:02X} at "
                f"byte offset {offset} (line {line}) cannot be decoded.",
                "Open it in a text editor and save it again with the encoding UTF-8 (most "
                "editors offer it when saving).") from None
    text = normalize_newlines(text)
    if not text.strip():
        raise DataError(f"The {what} file {str(path)!r} contains only whitespace.",
                        "Put some text in it (a few sentences at least) and save it.")
    return text


def sha256_text(text: str | None) -> str:
    """Hex SHA-256 of the text's UTF-8 bytes ("" for None): a run's data summary names its
    texts by it (checkpoint header "data")."""
    return hashlib.sha256((text or "").encode()).hexdigest()
