"""A LoRA run end to end through the command line: a quantized open model imported, tuned with
adapters on its still-quantized base, saved and continued, exported as an adapter that llama.cpp
loads beside the base, as a merged GGUF and as a PEFT folder."""

import json

import numpy as np
import pytest

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.studio.cli import main
from tests.helpers import metrics

DIALOGUES = "\n\n".join(f"User: What is the code word {i}?\nAssistant: The code word {i} is "
                        f"{w}." for i, w in enumerate(["amber", "basalt", "cobalt", "dune"]))


@pytest.fixture(scope="module")
def lora_run(lora_base_gguf, tmp_path_factory):
    """(run folder, base q8_0 GGUF, tune file) after `train --continue --lora-rank 4`."""
    root = tmp_path_factory.mktemp("lora_run")
    base = lora_base_gguf
    tune = root / "tune.txt"
    tune.write_text(DIALOGUES)
    run = root / "run"
    assert main(["import", str(base), str(run), "--tune", str(tune)]) == 0
    assert main(["train", "--out", str(run), "--continue", "--tune", str(tune), "--tune-steps",
                 "6", "--batch-size", "2", "--lora-rank", "4", "--quiet"]) == 0
    return run, base, tune


def test_the_run_holds_adapters_and_names_its_base(lora_run):
    run, base, _ = lora_run
    ck = checkpoint.load(run, arrays=True)
    lora = ck["header"]["lora"]
    assert (lora["rank"], lora["alpha"], len(lora["targets"])) == (4, 8.0, 7)
    assert lora["base"]["path"] == str(base.resolve())
    from opencl_llm_studio.engine.config import LoraConfig, ModelConfig
    from opencl_llm_studio.engine.model.lora_table import LoraTable
    cfg = ModelConfig(**ck["header"]["model_config"])
    assert ck["params"].size == LoraTable(cfg, LoraConfig.from_dict(lora)).size   # adapters only
    assert [r["step"] for r in metrics(run)][-1] == 6


def test_a_lora_run_opens_where_its_float32_model_would_not(lora_run, monkeypatch):
    """Opening a LoRA run checks what its model holds (the base as stored on the device and
    the adapters), not a float32 copy of every weight: a 1.1B model's LoRA run would have been
    refused on an 8 GB laptop (4.7 GiB counted to chat, for a run that tunes in 1.7 GiB)."""
    from opencl_llm_studio.engine.model import memory
    from opencl_llm_studio.engine.model.lora import LoraModel
    from opencl_llm_studio.engine.training.opening import load_session
    run = lora_run[0]
    s = load_session(run)
    cfg, info, path = s.model_config, s.rt.info, s.rt.plan.attention_path
    own = LoraModel.chat_bytes(cfg, s.model.base, s.lora)
    assert own[0] >= s.model.base.nbytes + 4 * s.model.table.size
    lora_need = memory.chat_bytes(cfg, info, path, own)[0]
    full_need = memory.chat_bytes(cfg, info, path)[0]
    assert lora_need < full_need
    have = (lora_need + full_need) / 2 / 0.9   # room for the LoRA model, not a float32 one
    monkeypatch.setattr(memory, "usable_bytes", lambda device: int(have))
    assert load_session(run).lora is not None
    with pytest.raises(Exception, match="just to chat"):   # the float32 model would not fit
        memory.check_chat_fits(cfg, info, path)


def test_continue_keeps_the_adapters_and_refuses_another_rank(lora_run, tmp_path, capsys):
    import shutil
    run, _, tune = lora_run
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert main(["train", "--out", str(copy), "--continue", "--tune-steps", "8", "--quiet"]) == 0
    assert [r["step"] for r in metrics(copy)][-2:] == [7, 8]
    assert checkpoint.load(copy)["header"]["lora"]["rank"] == 4
    capsys.readouterr()
    assert main(["train", "--out", str(copy), "--continue", "--tune-steps", "9",
                 "--lora-rank", "8", "--quiet"]) == 2
    assert "keeps its adapters' shape" in capsys.readouterr().err


def _llama_logits(path, ids, lora=None):
    llama_cpp = pytest.importorskip("llama_cpp")
    from tests.gguf_helpers import load
    llm = load(llama_cpp, path, lora=lora)
    llm.eval(list(ids))
    out = np.array(llm.scores[:len(ids)], np.float64)
    llm.close()
    return out


def _nmse(a, b):
    return float(((a - b) ** 2).mean() / (b ** 2).mean())


def test_adapter_and_merged_exports_are_the_tuned_model_in_llama_cpp(lora_run, tmp_path):
    from opencl_llm_studio.engine.training.opening import load_session
    run, base, _ = lora_run
    s = load_session(run)
    ids = s.tokenizer.encode("What is the code word 2?")[:20]
    ours = s.model.logits(np.array([ids], np.int32))[0].astype(np.float64)
    base_logits = _llama_logits(base, ids)
    assert _nmse(base_logits, ours) > 1e-4   # the adapters changed the model
    adapter = tmp_path / "adapter.gguf"
    assert main(["export", str(run), str(adapter), "--adapter"]) == 0
    assert adapter.with_suffix(".Modelfile").read_text().count("ADAPTER") == 1
    with_adapter = _llama_logits(base, ids, adapter)
    assert _nmse(with_adapter, ours) < 1e-3   # llama.cpp's q8_0 products round activations
    assert (with_adapter.argmax(-1) == ours.argmax(-1)).mean() >= 0.9
    merged = tmp_path / "merged.gguf"
    assert main(["export", str(run), str(merged), "--dtype", "f32"]) == 0
    assert _nmse(_llama_logits(merged, ids), ours) < 1e-6


def test_peft_export_names_the_base_without_a_path(lora_run, tmp_path):
    run, _, _ = lora_run
    out = tmp_path / "peft"
    assert main(["export", str(run), str(out), "--format", "peft"]) == 0
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and "/" not in cfg["base_model_name_or_path"]
    assert (out / "adapter_model.safetensors").stat().st_size > 0


def test_lora_options_are_refused_where_they_cannot_apply(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "new"), "--lora-rank", "4", "--quiet"]) == 2
    assert "Import a GGUF" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "new"), "--lora-alpha", "4", "--quiet"]) == 2
    assert "needs --lora-rank" in capsys.readouterr().err


def test_a_lora_run_maps_its_base_without_parsing_its_metadata(lora_run, monkeypatch):
    """The import records the base's tensor table and the run's checkpoint keeps it: reopening
    maps the tensors from it, gguf.GGUFReader not called (it parses every metadata key first:
    5 of the 6 s SmolLM2-135M's LoRA run took to open), with the reader's bytes, types and
    shapes; once the file is touched the table no longer vouches for it and the reader runs."""
    import os

    import gguf

    from opencl_llm_studio.engine.files import gguf_base
    from opencl_llm_studio.engine.training.opening import load_session
    run, base, _ = lora_run
    table = checkpoint.load(run, arrays=False)["header"]["lora"]["base"]["tensor_table"]
    assert table["size"] == base.stat().st_size
    read = {t.name: t for t in gguf.GGUFReader(base).tensors}
    mapped = gguf_base._mapped_tensors(base, table)
    assert mapped.keys() == read.keys()
    for name, t in read.items():
        m = mapped[name]
        assert (m.tensor_type, m.shape.tolist(), m.data.dtype, m.data.shape) == \
            (t.tensor_type, t.shape.tolist(), t.data.dtype, t.data.shape), name
        assert np.array_equal(np.asarray(m.data), np.asarray(t.data)), name
    calls = []
    real = gguf.GGUFReader
    monkeypatch.setattr(gguf_base.gguf, "GGUFReader", lambda p: calls.append(p) or real(p))
    s = load_session(run)
    assert calls == [] and s.lora is not None
    st = base.stat()
    os.utime(base, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        load_session(run)
        assert len(calls) == 1
    finally:
        os.utime(base, ns=(st.st_atime_ns, st.st_mtime_ns))
