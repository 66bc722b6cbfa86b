"""engine.data.textio.read_text: good files read back exactly; every bad file gives a clear DataError."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from opencl_llm_studio.engine.data import textio
from opencl_llm_studio.engine.errors import DataError
from opencl_llm_studio.engine.data.textio import read_text


def write(tmp_path, data: bytes, name="corpus.txt"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def raises(path, match, **kw) -> DataError:
    with pytest.raises(DataError, match=match) as info:
        read_text(path, **kw)
    assert info.value.hint, "every DataError carries a hint"
    return info.value


# ---------------------------------------------------------------- good files

def test_reads_utf8_exactly(tmp_path):
    text = "Paris is in France.\n\nCafé, naïve, 東京, 😀\ttab  two spaces \n"
    assert read_text(write(tmp_path, text.encode())) == text


def test_bom_is_dropped(tmp_path):
    assert read_text(write(tmp_path, b"\xef\xbb\xbfhello\n")) == "hello\n"


def test_line_endings_are_normalised(tmp_path):
    assert read_text(write(tmp_path, b"a\r\nb\rc\n\r\nd")) == "a\nb\nc\n\nd"


def test_accepts_str_path_and_certain_latin1(tmp_path):
    p = write(tmp_path, "Le caf\xe9 est \xe0 c\xf4t\xe9 de l'\xe9glise.\n".encode("latin-1"))
    assert read_text(str(p)) == "Le café est à côté de l'église.\n"


_TEXT_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff")
_TEXT = st.text(st.one_of(_TEXT_CHARS, st.sampled_from("\n\r\t ")), min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(text=_TEXT.filter(lambda s: s.strip()))
def test_any_utf8_text_round_trips(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("rt") / "t.txt"
    p.write_bytes(text.encode("utf-8"))
    assert read_text(p) == text.replace("\r\n", "\n").replace("\r", "\n")


# ---------------------------------------------------------------- bad files

def test_missing_file(tmp_path):
    raises(tmp_path / "nope.txt", "does not exist")


def test_directory(tmp_path):
    raises(tmp_path, "is a folder")


def test_unreadable_file(tmp_path, monkeypatch):
    p = write(tmp_path, b"text")
    if os.geteuid() != 0:          # root reads anything, so simulate the error there
        p.chmod(0)
    else:
        def deny(*a, **k):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(textio, "open", deny, raising=False)
    raises(p, "permission denied")


@pytest.mark.parametrize("data,match", [
    (b"", "is empty"),
    (b"  \n\t\n  \r\n", "only whitespace"),
    (b"\xef\xbb\xbf\n\n", "only whitespace"),
])
def test_empty_or_whitespace(tmp_path, data, match):
    raises(write(tmp_path, data), match)


def test_nul_byte_means_binary(tmp_path):
    err = raises(write(tmp_path, b"hello\x00world" * 3), "binary")
    assert "NUL" in str(err) and "offset 5" in str(err)


def test_control_bytes_mean_binary(tmp_path):
    raises(write(tmp_path, bytes(range(1, 9)) * 50 + b"some text"), "control bytes")


def test_known_binary_formats(tmp_path):
    raises(write(tmp_path, b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj"), "PDF")
    raises(write(tmp_path, b"PK\x03\x04\x14\x00\x06\x00"), "ZIP")
    raises(write(tmp_path, b"GGUF\x03\x00\x00\x00\x05" + bytes(15)), "GGUF model")
    raises(write(tmp_path, b"{\\rtf1\\ansi\\deff0 {\\fonttbl}}"), "RTF")


@pytest.mark.parametrize("text", ["GGUF", "GGUF files hold a model.\n", "%PDF is a format",
                                  "{\\rtf is how RTF starts"])
def test_text_that_starts_with_a_formats_name_is_text(tmp_path, text):
    """A signature that is printable counts only with the bytes that follow it in the format."""
    assert read_text(write(tmp_path, text.encode())) == text


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])   # with and without BOM
def test_utf16_is_named(tmp_path, codec):
    err = raises(write(tmp_path, "hello world, plain text\n".encode(codec)), "UTF-16")
    assert "UTF-8" in err.hint


@pytest.mark.parametrize("data,offset", [
    (b"hello\n\xe4\xb8 world", 6),                       # truncated UTF-8 sequence
    (b"It\x92s a cp1252 quote", 2),                        # 0x92: cp1252, not Latin-1
    (b"ok " + "\u041f\u0440\u0438\u0432\u0435\u0442".encode("cp1251"), 3),  # Cyrillic run
    (b"\xef\xbb\xbfabc\xff", 6),                           # offset counts the BOM
    ("café".encode() + b" caf\xe9", 9),                     # mixed UTF-8 and Latin-1
])
def test_not_utf8_names_offset(tmp_path, data, offset):
    err = raises(write(tmp_path, data), "not valid UTF-8")
    assert f"byte offset {offset}" in str(err)
    assert "UTF-8" in err.hint


def test_too_large_names_size_and_limit(tmp_path):
    p = write(tmp_path, b"x" * 3000)
    err = raises(p, "larger than the limit", max_bytes=2048)
    assert "2.9 KiB" in str(err) and "2.0 KiB" in str(err)


def test_size_limit_is_inclusive(tmp_path):
    assert read_text(write(tmp_path, b"x" * 2048), max_bytes=2048) == "x" * 2048


def test_what_names_the_file_kind(tmp_path):
    raises(tmp_path / "none.txt", "tune dialogues file", what="tune dialogues")


def test_a_latin1_file_is_said_in_the_studio_not_only_in_the_log(tmp_path, qtbot):
    """A Latin-1 file was read as Latin-1 with a log line only: the studio showed nothing.
    read_text's `notes` carries the sentence, and the Data tab's statistics line shows it."""
    p = write(tmp_path, "Le caf\xe9 est \xe0 c\xf4t\xe9 de l'\xe9glise.\n".encode("latin-1"))
    notes = []
    assert read_text(p, notes=notes) == "Le café est à côté de l'église.\n"
    assert notes == ["not UTF-8: read as Latin-1 (ISO-8859-1)"]
    utf8 = tmp_path / "utf8.txt"
    utf8.write_text("café\n", encoding="utf-8")
    read_text(utf8, notes=notes)
    assert len(notes) == 1  # nothing to say about a UTF-8 file
    from opencl_llm_studio.studio.ui.panels.data_panel import DataPanel
    panel = DataPanel()
    qtbot.addWidget(panel)
    assert panel.load("pretrain", p)
    assert "read as Latin-1" in panel.pretrain.stats.text()
    assert panel.load("pretrain", utf8)
    assert "Latin-1" not in panel.pretrain.stats.text()
