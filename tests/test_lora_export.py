"""Issue 34: LoRA adapters exported for llama.cpp / Ollama (GGUF adapter + Modelfile ADAPTER) and
for transformers + PEFT. The judges: llama.cpp on base + adapter gives the logits of llama.cpp
on the merged weights and of the float64 reference (tests/reference.py) of the merged model
(normalized MSE < 1e-6, as the F32 GGUF checks); transformers + peft on the HF export of the
base + the PEFT folder give the merged model's logits; Ollama's parser reads FROM and ADAPTER;
bad adapters and targets are refused with a message and leave the disk as it was.

The model uses grouped-query attention (n_kv_head 2 < n_head 4), so q and k lora_B rows are
permuted with different head counts on the HF side."""

import json
import os

import gguf
import numpy as np
import pytest

import ollama_parser
import reference
from opencl_llm_studio.engine.config import LORA_TARGETS, LoraConfig
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.errors import ExportError
from opencl_llm_studio.engine.files.gguf_export import ModelBundle, export_gguf
from opencl_llm_studio.engine.files.lora_export import (
    HF_TARGETS, TARGETS, AdapterError, LoraAdapters, export_adapter_gguf, export_peft, is_adapter_gguf,
    write_adapter_modelfile)
from opencl_llm_studio.engine.model.params import ParamTable
from tests.gguf_helpers import META, make_bundle
from tests.helpers import RESOURCES

SUBSET = ("attn_q", "attn_v", "ffn_down")
CASES = {"all": (TARGETS, 4, 8.0), "subset": (SUBSET, 2, 3.0)}   # targets, rank, alpha


def random_adapters(cfg, targets, rank, alpha, seed=1, std=0.1) -> LoraAdapters:
    """Non-zero random A (rank, in) and B (out, rank) for every target of every block."""
    rng = np.random.default_rng(seed)
    shapes = ParamTable(cfg).shapes()
    tensors = {}
    for layer in range(cfg.n_layer):
        for t in targets:
            out, inp = shapes[f"blk.{layer}.{t}.weight"]
            tensors[f"blk.{layer}.{t}"] = (rng.normal(0, std, (rank, inp)).astype(np.float32),
                                           rng.normal(0, std, (out, rank)).astype(np.float32))
    return LoraAdapters(rank, alpha, targets, tensors)


def nmse(a, b):
    return float(np.mean((a - b) ** 2) / np.mean(b ** 2))


@pytest.fixture(scope="module")
def bundle(tok):
    return make_bundle(tok, seed=5, n_kv_head=2)


@pytest.fixture(scope="module")
def ids(bundle):
    text = " ".join(read_text(RESOURCES / "pretrain.txt").split("\n"))
    return np.array([[bundle.tokenizer.bos_id] + bundle.tokenizer.encode(text)[:63]])


@pytest.fixture(scope="module", params=list(CASES))
def case(request, bundle):
    """(name, adapters, the base weights with the adapters merged in)."""
    targets, rank, alpha = CASES[request.param]
    ad = random_adapters(bundle.config, targets, rank, alpha)
    return request.param, ad, ad.merged(bundle.weights)


@pytest.fixture(scope="module")
def base_gguf(bundle, tmp_path_factory):
    return export_gguf(bundle, tmp_path_factory.mktemp("base") / "base.gguf", modelfile=None).path


# ---------------------------------------------------------------- the adapters themselves

def test_merged_adds_scaled_product_and_leaves_inputs(bundle):
    ad = random_adapters(bundle.config, SUBSET, 2, 3.0)
    before = {k: v.copy() for k, v in bundle.weights.items()}
    merged = ad.merged(bundle.weights)
    assert ad.scale == 1.5
    for name, w in bundle.weights.items():
        np.testing.assert_array_equal(w, before[name])          # inputs untouched
        key = name.removesuffix(".weight")
        if key in ad.tensors:
            a, b = ad.tensors[key]
            want = w.astype(np.float64) + 1.5 * b.astype(np.float64) @ a.astype(np.float64)
            assert merged[name].dtype == np.float32
            np.testing.assert_allclose(merged[name], want, rtol=1e-6, atol=1e-7)
            assert np.abs(merged[name] - w).max() > 1e-3
        else:
            assert merged[name] is w


def test_from_the_engines_names(bundle):
    """engine.model.lora.LoraModel.adapters() names: "blk.l.target.weight.lora_a" / ".lora_b"."""
    ad = random_adapters(bundle.config, SUBSET, 2, 3.0)
    named = {f"{k}.weight.lora_{h}": x for k, pair in ad.tensors.items()
             for h, x in zip("ab", pair)}
    back = LoraAdapters.from_named(LoraConfig(2, 3.0, targets=SUBSET), named)
    assert back.tensors.keys() == ad.tensors.keys() and back.targets == SUBSET
    for k, (a, b) in ad.tensors.items():
        assert back.tensors[k][0] is a and back.tensors[k][1] is b
    named.pop("blk.0.attn_q.weight.lora_b")
    with pytest.raises(AdapterError, match="blk.0.attn_q has only one"):
        LoraAdapters.from_named(LoraConfig(2, 3.0, targets=SUBSET), named)
    with pytest.raises(AdapterError, match="not a LoRA tensor name"):
        LoraAdapters.from_named(LoraConfig(2, 3.0), {"blk.0.attn_q.weight": ad.tensors["blk.0.attn_q"][0]})
    assert set(HF_TARGETS) == set(LORA_TARGETS)          # every target the engine tunes has a name


# ---------------------------------------------------------------- llama.cpp

@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp")


def load(llama_cpp, path, lora=None):
    """llama.cpp on the file (tests/gguf_helpers.load's settings), with a LoRA adapter beside
    it when given (llama-cpp-python: llama_adapter_lora_init + set_adapter_lora, scale 1)."""
    kw = dict(n_ctx=64, logits_all=True, verbose=False, seed=0,
              type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
              n_threads=min(4, os.cpu_count() or 1))
    if lora is not None:
        kw["lora_path"] = str(lora)
    return llama_cpp.Llama(str(path), **kw)


def llama_logits(llama_cpp, ids, path, lora=None):
    llm = load(llama_cpp, path, lora)
    llm.eval(ids[0].tolist())
    out = np.array(llm.scores[: ids.shape[1]], dtype=np.float64)
    llm.close()
    return out


def test_adapter_gguf_layout(bundle, case, tmp_path):
    """The keys and tensors llama.cpp's llama_adapter_lora_init_impl reads (module docstring of
    engine.files.lora_export)."""
    _, ad, _ = case
    path = export_adapter_gguf(ad, bundle.config, tmp_path / "a.gguf", base_name="/home/me/base.gguf")
    r = gguf.GGUFReader(path)
    fields = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "llama" and fields["general.type"] == "adapter"
    assert fields["adapter.type"] == "lora" and fields["adapter.lora.alpha"] == ad.alpha
    assert fields["general.base_model.0.name"] == "base.gguf"     # no machine's folders
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in r.tensors}
    want = {}
    for key, (a, b) in ad.tensors.items():
        want[key + ".weight.lora_a"], want[key + ".weight.lora_b"] = a.shape, b.shape
    assert shapes == want
    base = ParamTable(bundle.config).shapes()
    ne = {t.name: [int(n) for n in t.shape] for t in r.tensors}    # ggml order: ne0 first
    for key in ad.tensors:   # llama.cpp: base ne0 == a.ne0, base ne1 == b.ne1, a.ne1 == b.ne0
        out, inp = base[key + ".weight"]
        a_ne, b_ne = ne[key + ".weight.lora_a"], ne[key + ".weight.lora_b"]
        assert a_ne[0] == inp and b_ne[1] == out and a_ne[1] == b_ne[0] == ad.rank
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in r.tensors)
    assert is_adapter_gguf(path) and not is_adapter_gguf(tmp_path / "missing.gguf")


@pytest.mark.parametrize("dtype,limit", [("f32", 1e-6), ("f16", 1e-4)])
def test_llama_cpp_base_plus_adapter_is_the_merged_model(llama_cpp, bundle, base_gguf, case,
                                                         ids, tmp_path, dtype, limit):
    name, ad, merged = case
    cfg = bundle.config
    adapter = export_adapter_gguf(ad, cfg, tmp_path / f"{name}-lora.gguf", "base", dtype=dtype)
    merged_gguf = export_gguf(ModelBundle(cfg, bundle.tokenizer, merged, dict(META)),
                              tmp_path / "merged.gguf", modelfile=None).path
    want = reference.forward(merged, cfg, ids)[0]
    base = reference.forward(bundle.weights, cfg, ids)[0]
    assert nmse(base, want) > 1e-2                      # the adapters change the model a lot
    got = llama_logits(llama_cpp, ids, base_gguf, adapter)
    on_merged = llama_logits(llama_cpp, ids, merged_gguf)
    err, err_merged = nmse(got, want), nmse(got, on_merged)
    print(f"\nLoRA {name} {dtype}: NMSE vs reference {err:.2e}, vs llama.cpp merged "
          f"{err_merged:.2e}, base vs merged {nmse(base, want):.2e}")
    assert err < limit and err_merged < limit
    assert nmse(on_merged, want) < 1e-6


# ---------------------------------------------------------------- transformers + peft

@pytest.fixture(scope="module")
def hf_base(bundle, tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from opencl_llm_studio.engine.files.hf.export import export_hf
    return export_hf(bundle, tmp_path_factory.mktemp("hf") / "base-model")


def test_peft_on_hf_export_is_the_merged_model(bundle, hf_base, case, ids, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    name, ad, merged = case
    folder = export_peft(ad, bundle.config, tmp_path / "adapter", base_model=str(hf_base),
                         lora_dropout=0.05)   # a training setting: inference ignores it
    cfg = json.loads((folder / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "base-model"       # a name, never a machine's path
    assert cfg["peft_type"] == "LORA" and cfg["r"] == ad.rank and cfg["lora_alpha"] == ad.alpha
    assert cfg["task_type"] == "CAUSAL_LM" and cfg["bias"] == "none" and cfg["lora_dropout"] == 0.05
    assert sorted(os.listdir(folder)) == ["adapter_config.json", "adapter_model.safetensors"]
    model = transformers.LlamaForCausalLM.from_pretrained(hf_base, dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(model, folder).eval()
    assert len([n for n, _ in model.named_modules() if n.endswith(".lora_A.default")]) == \
        bundle.config.n_layer * len(ad.targets)               # every adapter was attached
    with torch.no_grad():
        got = model(torch.tensor(ids)).logits[0].double().numpy()
    want = reference.forward(merged, bundle.config, ids)[0]
    diff = got - want
    print(f"\nPEFT {name}: max |diff| {np.abs(diff).max():.2e}, NMSE {nmse(got, want):.2e}")
    assert np.abs(diff).max() < 1e-4 and nmse(got, want) < 1e-10


# ---------------------------------------------------------------- Ollama

def test_modelfile_names_base_and_adapter(bundle, tmp_path):
    path = write_adapter_modelfile(tmp_path / "tuned.Modelfile", "base.gguf", "tuned lora.gguf",
                                   bundle.config)
    commands = ollama_parser.parse(path.read_text())
    assert ("model", "./base.gguf") in commands and ("adapter", "./tuned lora.gguf") in commands
    assert [c for c, _ in commands][:2] == ["model", "adapter"]
    assert ("num_ctx", str(bundle.config.context_length)) in commands
    assert any(c == "template" for c, _ in commands)
    with pytest.raises(ExportError, match="already exists"):
        write_adapter_modelfile(path, "base.gguf", "x.gguf", bundle.config)
    with pytest.raises(ExportError, match="relative"):
        write_adapter_modelfile(tmp_path / "b.Modelfile", "/abs/base.gguf", "x.gguf", bundle.config)
    assert not (tmp_path / "b.Modelfile").exists()


# ---------------------------------------------------------------- bad input

def test_bad_adapters_are_refused_with_a_message(bundle):
    cfg = bundle.config
    good = random_adapters(cfg, SUBSET, 2, 3.0)
    a, b = good.tensors["blk.0.attn_q"]
    bad = [
        (dict(rank=0), "rank"),
        (dict(alpha=0.0), "alpha"),
        (dict(alpha=float("nan")), "alpha"),
        (dict(targets=("attn_q", "attn_v", "ffn_down", "lm_head")), "unknown target 'lm_head'"),
        (dict(tensors={**good.tensors, "blk.0.attn_k": (a, b)}), "names no block"),
        (dict(tensors={**good.tensors, "blk.0.attn_q": (a[:1], b)}), "rank 2"),
        (dict(tensors={**good.tensors, "blk.0.attn_q": (a, b * np.inf)}), "NaN or infinite"),
    ]
    fields = dict(rank=2, alpha=3.0, targets=SUBSET, tensors=good.tensors)
    for change, words in bad:
        with pytest.raises(AdapterError, match=words) as e:
            LoraAdapters(**{**fields, **change})
        assert isinstance(e.value, ExportError) and e.value.hint


@pytest.mark.parametrize("change,words", [
    (lambda t: t.pop("blk.1.attn_v"), "blk.1.attn_v is missing"),
    (lambda t: t.update({"blk.9.attn_v": t["blk.0.attn_v"]}), "blk.9.attn_v is not in"),
    (lambda t: t.update({"blk.0.ffn_down": t["blk.0.attn_q"]}), r"needs A \(2, "),
])
def test_adapters_that_do_not_fit_the_model_write_nothing(bundle, tmp_path, change, words):
    ad = random_adapters(bundle.config, SUBSET, 2, 3.0)
    change(ad.tensors)
    with pytest.raises(AdapterError, match=words):
        export_adapter_gguf(ad, bundle.config, tmp_path / "a.gguf", "base")
    with pytest.raises(AdapterError, match=words):
        export_peft(ad, bundle.config, tmp_path / "peft", "base")
    assert os.listdir(tmp_path) == []


def test_merged_refuses_weights_of_another_model(bundle, tok):
    ad = random_adapters(bundle.config, SUBSET, 2, 3.0)
    other = make_bundle(tok, seed=1, d_model=32, n_head=2)
    with pytest.raises(AdapterError, match="blk.0.attn_q.weight has shape"):
        ad.merged(other.weights)
    with pytest.raises(AdapterError, match="no blk.0.attn_q.weight"):
        ad.merged({})


def test_existing_paths(bundle, base_gguf, tmp_path):
    cfg = bundle.config
    ad = random_adapters(cfg, SUBSET, 2, 3.0)
    notes = tmp_path / "notes.gguf"
    notes.write_text("mine")
    base_copy = tmp_path / "base.gguf"
    base_copy.write_bytes(base_gguf.read_bytes())
    for target in (notes, base_copy):       # not an adapter: never replaced, even with force
        before = target.read_bytes()
        for force in (False, True):
            with pytest.raises(ExportError, match="not a LoRA adapter GGUF"):
                export_adapter_gguf(ad, cfg, target, "base", force=force)
        assert target.read_bytes() == before
    with pytest.raises(ExportError, match="is a folder"):
        export_adapter_gguf(ad, cfg, tmp_path, "base")
    path = export_adapter_gguf(ad, cfg, tmp_path / "new" / "a.gguf", "base")   # folders made
    with pytest.raises(ExportError, match="already exists"):
        export_adapter_gguf(ad, cfg, path, "base")
    ad2 = random_adapters(cfg, SUBSET, 2, 5.0, seed=2)
    export_adapter_gguf(ad2, cfg, path, "base", force=True)
    assert gguf.GGUFReader(path).fields["adapter.lora.alpha"].contents() == 5.0
    with pytest.raises(AdapterError, match="Unknown adapter type"):
        export_adapter_gguf(ad, cfg, tmp_path / "q.gguf", "base", dtype="q8_0")
    with pytest.raises(AdapterError, match="empty"):
        export_adapter_gguf(ad, cfg, tmp_path / "e.gguf", " ")
    assert sorted(os.listdir(tmp_path)) == ["base.gguf", "new", "notes.gguf"]
    assert os.listdir(tmp_path / "new") == ["a.gguf"]           # no temp files left


def test_peft_folder_targets(bundle, tmp_path):
    pytest.importorskip("safetensors")
    cfg = bundle.config
    ad = random_adapters(cfg, SUBSET, 2, 3.0)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    for force in (False, True):   # a folder of other files is never replaced
        with pytest.raises(ExportError, match="not a PEFT adapter folder"):
            export_peft(ad, cfg, run, "base", force=force)
    assert os.listdir(run) == ["metrics.jsonl"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="is a file"):
        export_peft(ad, cfg, tmp_path / "file", "base")
    folder = export_peft(ad, cfg, tmp_path / "peft", "~/models/my-base")
    assert json.loads((folder / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == "my-base"
    with pytest.raises(ExportError, match="already exists"):
        export_peft(ad, cfg, folder, "org/base")
    export_peft(ad, cfg, folder, "org/base", force=True)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "org/base"         # a hub id stays as it is
    assert sorted(config["target_modules"]) == ["down_proj", "q_proj", "v_proj"]
    assert sorted(os.listdir(tmp_path)) == ["file", "peft", "run"]  # no temp folders left
