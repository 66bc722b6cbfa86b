"""What we write for another program is read by that program's own code: GGUF metadata strings
by gguf's GGUFReader and by llama.cpp (llama-cpp-python), the Hugging Face folder by
transformers' loaders, and the advice on which export transformers should load is true and
given where a person chooses (README, export dialog). The Modelfile: tests/test_modelfile.py."""

import os
from pathlib import Path

import gguf
import pytest

from opencl_llm_studio.engine.files.export_types import TRANSFORMERS_NOTE
from opencl_llm_studio.engine.files.gguf_export import export_gguf
from tests.gguf_helpers import make_bundle

ROOT = Path(__file__).resolve().parent.parent
ODD = ['we"ird \\ name', "two\nlines\ttab", "日本 🎉 ünï", "nul\x00inside",
       "lone " + os.fsdecode(b"\xff") + " byte", "{{ bos_token }}", "'"]   # gguf skips "" 


def readable(s: str) -> str:
    """What every reader can get back: NUL and lone surrogates as U+FFFD (engine.gguf_text)."""
    return "".join("\ufffd" if c == "\0" or "\ud800" <= c <= "\udfff" else c for c in s)


@pytest.fixture(scope="module")
def odd_gguf(tok, tmp_path_factory):
    b = make_bundle(tok, d_model=32, n_layer=1, n_head=2, context_length=32)
    b.metadata.update({f"odd{k}": s for k, s in enumerate(ODD)}, name=ODD[0],
                      odd_list=ODD[:4])
    name = "model " + os.fsdecode(b"\xfe") + ".gguf"     # a file name that is not UTF-8
    return export_gguf(b, tmp_path_factory.mktemp("odd") / name, modelfile=None).path


def test_gguf_reader_reads_every_string(odd_gguf):
    fields = {k: v.contents() for k, v in gguf.GGUFReader(odd_gguf).fields.items()}
    assert fields["general.name"] == readable(ODD[0])
    for k, s in enumerate(ODD):
        assert fields[f"opencl_llm_studio.odd{k}"] == readable(s)
    assert fields["opencl_llm_studio.odd_list"] == [readable(s) for s in ODD[:4]]


def test_llama_cpp_reads_every_string(odd_gguf):
    llama_cpp = pytest.importorskip("llama_cpp")
    plain = odd_gguf.with_name("plain.gguf")   # llama-cpp-python takes only UTF-8 paths
    plain.write_bytes(odd_gguf.read_bytes())
    llm = llama_cpp.Llama(str(plain), n_ctx=32, verbose=False, vocab_only=True)
    meta = llm.metadata
    assert meta["general.name"] == readable(ODD[0])
    for k, s in enumerate(ODD):
        assert meta[f"opencl_llm_studio.odd{k}"] == readable(s), k


# ---------------------------------------------------------------- transformers

TEXTS = ["Paris is the capital", "User: hi\nAssistant:\n", " leading space", "日本"]


@pytest.fixture(scope="module")
def exports(tok, tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from opencl_llm_studio.engine.files.hf.export import export_hf
    b = make_bundle(tok, d_model=32, n_layer=1, n_head=2, context_length=32)
    d = tmp_path_factory.mktemp("consumers")
    export_gguf(b, d / "m.gguf", modelfile=None)
    export_hf(b, d / "hf")
    return tok, d


def test_hf_folder_tokenizes_like_the_engine(exports):
    """The advice's first half: the HF folder gives transformers the engine's ids."""
    from transformers import AutoTokenizer
    tok, d = exports
    hf = AutoTokenizer.from_pretrained(d / "hf")
    for text in TEXTS:
        assert hf.encode(text, add_special_tokens=False) == tok.encode(text), text
        assert hf.encode(text)[0] == tok.bos_id


def test_transformers_gguf_loader_differs_as_the_note_says(exports):
    """The advice's second half, as of transformers 5.x: its GGUF loader puts "▁" before the
    first word (add_space_prefix = false ignored). When this fails, transformers reads the flag:
    drop TRANSFORMERS_NOTE from the README and the export dialog."""
    from transformers import AutoTokenizer
    tok, d = exports
    loaded = AutoTokenizer.from_pretrained(d, gguf_file="m.gguf")
    text = TEXTS[0]
    assert loaded.encode(text, add_special_tokens=False) != tok.encode(text)
    assert loaded.encode(text, add_special_tokens=False) == tok.encode(" " + text)


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_note_is_where_people_choose(qtbot):
    assert _words(TRANSFORMERS_NOTE) in _words((ROOT / "README.md").read_text(encoding="utf-8"))
    pytest.importorskip("pytestqt")
    from opencl_llm_studio.engine.config import ModelConfig
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog
    dialog = ExportDialog(ModelConfig(), Path("model.gguf"))
    qtbot.addWidget(dialog)
    assert TRANSFORMERS_NOTE in dialog.note.text()


def test_model_card_table_reads_back_in_a_markdown_parser(tok, tmp_path):
    """The HF folder's README.md: metadata with "|", backslashes, newlines and undecodable
    bytes stays one row of two cells each in a GFM table parser (markdown-it-py)."""
    pytest.importorskip("safetensors")
    markdown_it = pytest.importorskip("markdown_it")
    from opencl_llm_studio.engine.files.hf.export import export_hf
    b = make_bundle(tok, d_model=32, n_layer=1, n_head=2, context_length=32)
    b.metadata = {"name": "my|model", "corpus": "a|b\\c\nnext line",
                  "file": "lone " + os.fsdecode(b"\xff")}
    export_hf(b, tmp_path / "hf")
    tokens = markdown_it.MarkdownIt("commonmark").enable("table").parse(
        (tmp_path / "hf" / "README.md").read_text(encoding="utf-8"))
    def text(t):   # what the parser reads in an inline run (escapes applied)
        return "".join(c.content for c in t.children or () if c.type == "text")
    cells = [text(t) for t in tokens
             if t.type == "inline" and any(p.type in ("td_open", "th_open") for p in
                                           tokens[max(0, tokens.index(t) - 1):tokens.index(t)])]
    rows = dict(zip(cells[2::2], cells[3::2]))     # after the header's two cells
    assert rows == {"corpus": "a|b\\c next line", "file": "lone \ufffd", "name": "my|model"}
    heading = next(t for t in tokens if t.type == "inline")
    assert text(heading) == "my|model"
