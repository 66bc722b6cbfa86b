"""A model is read once (issue 21's known limit): File › Open model…'s card comes from metadata
alone (GGUF fields and tensor infos; config.json, tokenizer files and safetensors headers), never
a tensor's data, and opening dequantizes each tensor once; `llm-studio import` of a folder this
app wrote reads its tensors once (before: the card read dequantized the whole model, then the
open read it all again; the import read a folder to tell its kind, then again to open it)."""

import pytest

pytest.importorskip("transformers")

import gguf  # noqa: E402

from opencl_llm_studio.engine.model.params import ParamTable  # noqa: E402
from tests.open_models import FAMILIES  # noqa: E402


def _card(path):
    from opencl_llm_studio.studio.ui.dialogs.open_model_dialog import read_card
    return read_card(path, 4)


def _full_card(path):
    """The card as it was made before: from the whole model, weights read."""
    from opencl_llm_studio.engine.files.gguf_export import is_open
    from opencl_llm_studio.engine.files.model_card import model_card
    from opencl_llm_studio.studio.open_import import read_model
    bundle = read_model(path)
    assert bundle.weights
    return model_card(bundle), is_open(bundle)


@pytest.fixture
def counted(monkeypatch):
    """Calls of gguf's dequantize, by tensor type name."""
    calls = []
    real = gguf.quants.dequantize

    def dequantize(data, qtype):
        calls.append(qtype.name)
        return real(data, qtype)
    monkeypatch.setattr(gguf.quants, "dequantize", dequantize)
    return calls


@pytest.mark.parametrize("family", FAMILIES)
def test_a_quantized_ggufs_card_dequantizes_nothing_and_opening_each_tensor_once(
        family, open_folders, tmp_path, monkeypatch, counted):
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    from opencl_llm_studio.studio.open_import import import_open_model, read_model
    bundle = import_hf(open_folders[family])[0]
    path = export_gguf(bundle, tmp_path / "q8.gguf", dtype="q8_0").path
    want, want_open = _full_card(path)
    counted.clear()

    def refuse(*_):
        raise AssertionError("the card dequantized a tensor")
    with monkeypatch.context() as m:
        m.setattr(gguf.quants, "dequantize", refuse)
        got = _card(path)
    assert got["card"] == want and got["open"] is want_open and got["card"]["file_type"] == "Q8_0"
    import_open_model(read_model(path), tmp_path / "run", "Some general text.")
    assert len(counted) == len(ParamTable(bundle.config).shapes())   # once per tensor
    assert "Q8_0" in counted


@pytest.mark.parametrize("family", FAMILIES)
def test_a_folders_card_reads_no_tensor_data(family, open_folders, monkeypatch):
    """Only the safetensors headers: get_tensor is never called for the card."""
    import safetensors
    folder = open_folders[family]
    want, _ = _full_card(folder)
    real = safetensors.safe_open

    class HeadersOnly:
        def __init__(self, *a, **k):
            self.st = real(*a, **k)

        def __enter__(self):
            self.st.__enter__()
            return self

        def __exit__(self, *exc):
            return self.st.__exit__(*exc)

        def keys(self):
            return self.st.keys()

        def get_slice(self, name):
            return self.st.get_slice(name)

        def get_tensor(self, name):
            raise AssertionError("the card read a tensor's data")
    monkeypatch.setattr(safetensors, "safe_open", HeadersOnly)
    assert _card(folder)["card"] == want


def test_a_broken_model_is_refused_by_the_card_as_by_the_open(open_folders, tmp_path):
    """The checks a full read made (here: a tensor of the wrong shape) still refuse the card."""
    import json
    import shutil

    from opencl_llm_studio.engine.errors import ModelImportError
    folder = tmp_path / "bad"
    shutil.copytree(open_folders["smollm2"], folder)
    hf = json.loads((folder / "config.json").read_text())
    hf["intermediate_size"] += 8   # the weights no longer match
    (folder / "config.json").write_text(json.dumps(hf))
    with pytest.raises(ModelImportError, match="expected shape"):
        _card(folder)


def test_cli_import_of_an_app_folder_reads_its_tensors_once(rt, tok, texts, tmp_path,
                                                            monkeypatch):
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.files.hf import load
    from opencl_llm_studio.engine.files.hf.export import export_session
    from opencl_llm_studio.engine.training.session import TrainingSession
    from opencl_llm_studio.studio.cli import main
    from tests.helpers import tiny_config
    s = TrainingSession(rt, tiny_config(vocab_size=tok.vocab_size), TrainConfig(batch_size=2),
                        tok, texts[0], None)
    folder = export_session(s, tmp_path / "hf")
    reads = []
    real = load._read_tensors
    monkeypatch.setattr(load, "_read_tensors", lambda f: reads.append(f) or real(f))
    assert main(["--device", str(rt.info.index), "import", str(folder),
                 str(tmp_path / "run")]) == 0
    assert len(reads) == 1


def test_tokenize_on_a_gguf_dequantizes_nothing(open_folders, tmp_path, monkeypatch, capsys):
    """`llm-studio tokenize MODEL.gguf TEXT` needs the tokenizer only (before: it dequantized
    every tensor of the model first)."""
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    from opencl_llm_studio.studio.cli import main
    bundle = import_hf(open_folders["smollm2"])[0]
    path = export_gguf(bundle, tmp_path / "q8.gguf", dtype="q8_0").path

    def refuse(*_):
        raise AssertionError("tokenize dequantized a tensor")
    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    assert main(["tokenize", str(path), "Hello world"]) == 0
    ids = capsys.readouterr().out.splitlines()[0]
    assert ids == " ".join(str(i) for i in bundle.tokenizer.encode("Hello world"))


def test_a_type_gguf_py_cannot_dequantize_is_refused_at_open(open_ggufs, monkeypatch):
    """The card reads no tensor, so whether gguf-py dequantizes a tensor's type is told at
    open, by gguf-py's own dequantize: its NotImplementedError becomes the refusal with the
    reason and what to use instead, not a traceback."""
    from opencl_llm_studio.engine.errors import ModelImportError
    from opencl_llm_studio.studio.open_import import read_model
    path = open_ggufs["smollm2"]
    assert read_model(path, False).weights == {}   # the card: no refusal, nothing read

    def cannot(data, qtype):
        raise NotImplementedError(f"Dequantization for {qtype.name} is not yet implemented")
    monkeypatch.setattr(gguf.quants, "dequantize", cannot)
    with pytest.raises(ModelImportError, match="which gguf-py cannot dequantize") as e:
        read_model(path)
    assert "K-quant" in e.value.hint
