"""The Ollama Modelfile is read by Ollama's own rules (tests/ollama_parser.py, a port of
parser/parser.go): FROM names the exported file whatever its name, TEMPLATE and stop words come
back unchanged, and a name Ollama cannot read is refused before anything is written."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ollama_parser
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.errors import ExportError
from opencl_llm_studio.engine.files.gguf_export import export_gguf
from opencl_llm_studio.engine.files.modelfile import OLLAMA_TEMPLATES, STOP_WORDS, modelfile_text, modelfile_value
from tests.gguf_helpers import make_bundle

CONFIG = ModelConfig(vocab_size=300, d_model=32, n_layer=1, n_head=2, context_length=48)
NAMES = ['we"ird.gguf', '"q".gguf', '"""x""".gguf', "my model.gguf", "back\\slash.gguf",
         "'single'.gguf", "#hash.gguf", "trail.gguf ", "tab\tname.gguf", "ünï 日本 🎉.gguf",
         'end".gguf"', "a  b.gguf", "line\nbreak.gguf"]
REFUSED = ["cr\rname.gguf", "zero\u200bwidth.gguf", "bell\x07.gguf"]


def read(text):
    """Commands as Ollama reads them: {"model": [..], "template": [..], "stop": [..], ...}."""
    out = {}
    for name, args in ollama_parser.parse(text):
        out.setdefault(name, []).append(args)
    return out


@pytest.mark.parametrize("fmt", sorted(OLLAMA_TEMPLATES))
@pytest.mark.parametrize("name", NAMES)
def test_modelfile_reads_back(name, fmt):
    got = read(modelfile_text(name, CONFIG, fmt))
    assert got["model"] == [f"./{name}"]
    assert got["template"] == [OLLAMA_TEMPLATES[fmt]]
    assert got["stop"] == list(STOP_WORDS)
    assert got["num_ctx"] == ["48"]


@pytest.mark.parametrize("name", REFUSED)
def test_unreadable_names_are_refused(name):
    with pytest.raises(ExportError, match="Modelfile cannot hold"):
        modelfile_text(name, CONFIG)


@pytest.fixture(scope="module")
def bundle(tok):
    return make_bundle(tok, d_model=32, n_layer=1, n_head=2, context_length=32)


@pytest.mark.parametrize("name", ['we"ird.gguf', '"q".gguf', "my model.gguf"])
def test_exported_modelfile_finds_its_gguf(bundle, tmp_path, name):
    """Ollama resolves FROM against the Modelfile's folder (parser.go expandPath)."""
    r = export_gguf(bundle, tmp_path / name, "f32")
    (path,) = read(r.modelfile_path.read_text(encoding="utf-8"))["model"]
    assert (r.modelfile_path.parent / path).resolve() == r.path.resolve()


def test_refused_name_writes_nothing(bundle, tmp_path):
    with pytest.raises(ExportError, match="cannot hold"):
        export_gguf(bundle, tmp_path / "zero\u200bwidth.gguf", "f32")
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab "\'\\\t\n#{}') + ["\u200b", "é"]), max_size=12))
def test_any_value_reads_back_or_is_refused(s):
    try:
        value = modelfile_value(s, "value")
    except ExportError:
        assert any(not (c.isprintable() or c in "\t\n") for c in s) or '"' in s
        return
    assert read(f"FROM ./m.gguf\nPARAMETER stop {value}\nSYSTEM {value}\n")["stop"] == [s]
    assert read(f"FROM ./m.gguf\nSYSTEM {value}\n")["system"] == [s]


def test_parser_port_matches_ollama_examples():
    """Cases from Ollama's parser_test.go style: escapes stay, one quote pair goes."""
    assert read('FROM "./we\\"ird.gguf"\n')["model"] == ['./we\\"ird.gguf']   # the old bug
    assert read('FROM foo\nSYSTEM """a\nb"""\n')["system"] == ["a\nb"]
    assert read("FROM foo bar\n")["model"] == ["foo bar"]
    with pytest.raises(ollama_parser.ParseError):
        ollama_parser.parse('FROM foo\nSYSTEM "open\n')
