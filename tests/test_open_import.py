"""Issue 21: pretrained open models in and out. On small random models of each family built with
transformers: import of the folder -> GGUF export -> llama.cpp gives transformers' logits and
greedy ids; GGUF and HF round trips keep every weight bit; quantized GGUFs of every common type
import (dequantized by gguf-py); llama3 RoPE scaling survives both ways; what the engine cannot
run is refused with the reason."""

import ctypes
import json
import re
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
llama_cpp = pytest.importorskip("llama_cpp")

import gguf  # noqa: E402

from opencl_llm_studio.engine.config import ModelConfig  # noqa: E402
from opencl_llm_studio.engine.errors import ModelImportError  # noqa: E402
from opencl_llm_studio.engine.files.gguf_export import export_gguf
from opencl_llm_studio.engine.files.gguf_import import import_gguf
from opencl_llm_studio.engine.files.hf.export import export_hf
from opencl_llm_studio.engine.files.hf.load import import_hf, model_config
from opencl_llm_studio.engine.files.model_card import format_card, model_card
from opencl_llm_studio.engine.files.open_gguf import open_config
from opencl_llm_studio.engine.model.rope_scaling import llama3_factors, llama3_from_factors
from tests.open_models import FAMILIES, build, llama_model, nmse, numpy_logits

PROMPT = "Hello world! 12345 你好 def f(x): return x"


def _hf_logits(folder, ids):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        return model.eval()(torch.tensor([ids])).logits[0].numpy(), model


@pytest.mark.parametrize("family", FAMILIES)
def test_llama_cpp_on_the_exported_gguf_gives_transformers_logits(family, open_folders,
                                                                  open_ggufs):
    tok = import_hf(open_folders[family])[0].tokenizer
    ids = ([tok.bos_id] if tok.add_bos else []) + tok.encode(PROMPT)
    want, model = _hf_logits(open_folders[family], ids)
    llm = llama_model(open_ggufs[family])
    llm.eval(ids)
    assert nmse(np.array(llm.scores[:len(ids)]), want) < 1e-8
    greedy = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                            eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    llm.reset()
    got = []
    for token in llm.generate(ids, temp=0.0, top_k=1):
        got.append(token)
        if len(got) == 8:
            break
    assert got == greedy


@pytest.mark.parametrize("family", FAMILIES)
def test_imported_weights_in_the_engines_layout_give_transformers_logits(family, open_folders,
                                                                         open_ggufs):
    want = None
    for bundle in (import_hf(open_folders[family])[0], import_gguf(open_ggufs[family])):
        tok = bundle.tokenizer
        ids = ([tok.bos_id] if tok.add_bos else []) + tok.encode(PROMPT)
        if want is None:
            want = _hf_logits(open_folders[family], ids)[0]
        assert nmse(numpy_logits(bundle, ids), want) < 1e-8


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_and_hf_round_trips_keep_every_weight(family, open_folders, open_ggufs, tmp_path):
    bundle = import_hf(open_folders[family])[0]
    back = import_gguf(open_ggufs[family])
    assert back.config == bundle.config
    assert set(back.weights) == set(bundle.weights)
    for name, w in bundle.weights.items():
        np.testing.assert_array_equal(back.weights[name], w, err_msg=name)
    folder = export_hf(back, tmp_path / "hf")
    again = import_hf(folder)[0]
    assert again.config == bundle.config
    for name, w in bundle.weights.items():
        np.testing.assert_array_equal(again.weights[name], w, err_msg=name)
    tok = bundle.tokenizer
    ids = ([tok.bos_id] if tok.add_bos else []) + tok.encode(PROMPT)
    np.testing.assert_array_equal(_hf_logits(folder, ids)[0],
                                  _hf_logits(open_folders[family], ids)[0])
    ref = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert ref(PROMPT, add_special_tokens=False).input_ids == tok.encode(PROMPT)
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    src = transformers.AutoTokenizer.from_pretrained(str(open_folders[family]))
    assert ref.apply_chat_template(msgs, tokenize=False) == \
        src.apply_chat_template(msgs, tokenize=False)
    assert (again.tokenizer.stop_ids, again.tokenizer.add_bos) == (tok.stop_ids, tok.add_bos)


def _quantize(src, dst, ftype) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(),
                                          ctypes.byref(params)) == 0


# llama.cpp file type -> (a ggml type the file must hold, largest relative RMS error of a matrix)
QUANTS = {"Q8_0": ("Q8_0", 0.01), "Q4_0": ("Q4_0", 0.12), "Q4_1": ("Q4_1", 0.12),
          "Q5_K_M": ("Q5_K", 0.06), "Q4_K_M": ("Q4_K", 0.12), "Q6_K": ("Q6_K", 0.03),
          "Q3_K_M": ("Q3_K", 0.25), "F16": ("F16", 1e-3), "BF16": ("BF16", 1e-2)}


@pytest.fixture(scope="module")
def k_model(tmp_path_factory):
    """A SmolLM2-like model whose rows are whole K-quant blocks (256), as a F32 GGUF."""
    root = tmp_path_factory.mktemp("kquant")
    folder = build("smollm2", root / "hf", hidden_size=256, intermediate_size=512,
                   num_attention_heads=4, num_key_value_heads=2)
    bundle = import_hf(folder)[0]
    return bundle, export_gguf(bundle, root / "f32.gguf").path


@pytest.mark.parametrize("name", QUANTS)
def test_quantized_ggufs_import_dequantized_by_gguf_py(name, k_model, tmp_path):
    bundle, f32 = k_model
    path = tmp_path / f"{name}.gguf"
    _quantize(f32, path, getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}"))
    want_type, tol = QUANTS[name]
    held = {t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert want_type in held, held
    got = import_gguf(path)
    assert got.config == bundle.config
    for tname, w in bundle.weights.items():
        err = np.sqrt(np.mean((got.weights[tname] - w) ** 2) / np.mean(w ** 2))
        assert err < (tol if w.ndim == 2 else 1e-6), (tname, err)
    tok = got.tokenizer
    assert tok.encode(PROMPT) == bundle.tokenizer.encode(PROMPT)


def test_llama3_scaling_equals_transformers_and_is_read_back_from_rope_freqs():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cases = [(128, 500000.0, 32.0, 1.0, 4.0, 8192), (64, 500000.0, 8.0, 1.0, 4.0, 8192),
             (128, 10000.0, 4.0, 1.0, 2.0, 4096), (16, 500000.0, 32.0, 1.0, 4.0, 8192)]
    for hd, base, factor, low, high, orig in cases:
        rope = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                "high_freq_factor": high, "original_max_position_embeddings": orig,
                "rope_theta": base}
        hf = LlamaConfig(hidden_size=hd * 2, num_attention_heads=2, rope_parameters=rope,
                         max_position_embeddings=4 * orig)
        inv_scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
        inv = 1.0 / (base ** (np.arange(0, hd, 2) / hd))
        cfg = ModelConfig(d_model=hd * 2, n_head=2, rope_base=base, rope_scaling="llama3",
                          rope_scaling_factor=factor, rope_low_freq_factor=low,
                          rope_high_freq_factor=high, rope_original_context=orig)
        factors = llama3_factors(cfg)
        np.testing.assert_allclose(inv / factors, inv_scaled.numpy(), rtol=1e-5)
        fields = llama3_from_factors(factors, hd, base)
        back = cfg.replace(**fields)
        np.testing.assert_allclose(llama3_factors(back), factors, rtol=1e-5)
    assert llama3_from_factors(np.ones(8), 16, 10000.0) is None
    with pytest.raises(ValueError, match="not a llama3"):
        llama3_from_factors(np.linspace(1, 3, 64)[::-1], 128, 10000.0)


class _T:   # the parts of a gguf ReaderTensor open_config reads
    def __init__(self, name):
        self.name = name


def _llama_keys(**extra):
    keys = {"general.architecture": "llama", "llama.embedding_length": 64,
            "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
            "llama.block_count": 1, "llama.feed_forward_length": 128,
            "llama.context_length": 128, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "tokenizer.ggml.tokens": ["a"] * 300}
    keys.update(extra)
    return lambda key, default=None: keys.get(key, default)


def test_gguf_settings_the_engine_cannot_run_are_refused_with_the_reason():
    tensors = {n: _T(n) for n in ("token_embd.weight", "output_norm.weight")}
    cfg = open_config(_llama_keys(), tensors, "m.gguf")
    assert (cfg.n_kv_head, cfg.kv_heads, cfg.ffn_dim, cfg.tie_embeddings) == (2, 2, 128, True)
    bad = {"llama.attention.head_count_kv": 3}
    with pytest.raises(ModelImportError, match="3 key/value heads for 4 heads"):
        open_config(_llama_keys(**bad), tensors, "m.gguf")
    with pytest.raises(ModelImportError, match="yarn RoPE scaling"):
        open_config(_llama_keys(**{"llama.rope.scaling.type": "yarn"}), tensors, "m.gguf")
    with pytest.raises(ModelImportError, match="rope.dimension_count"):
        open_config(_llama_keys(**{"llama.rope.dimension_count": 8}), tensors, "m.gguf")
    with pytest.raises(ModelImportError, match="bias vectors"):
        open_config(_llama_keys(), {**tensors, "blk.0.attn_q.bias": _T("b")}, "m.gguf")
    with pytest.raises(ModelImportError, match="mixture-of-experts"):
        open_config(_llama_keys(**{"llama.expert_count": 8}), tensors, "m.gguf")


def test_a_qwen2_gguf_is_refused_naming_its_biases(tmp_path):
    path = tmp_path / "qwen.gguf"
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelImportError, match="'qwen2' model, which has bias vectors"):
        import_gguf(path)


def test_hf_configs_the_engine_cannot_run_are_refused_with_the_reason(open_folders):
    base = json.loads((open_folders["smollm2"] / "config.json").read_text())
    assert model_config(base).kv_heads == 2
    for change, reason in [({"attention_bias": True}, "bias"),
                           ({"num_key_value_heads": 4}, "4 key/value heads for 6 heads"),
                           ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
                           ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
                            "not a Llama"),
                           ({"hidden_act": "gelu"}, "gelu")]:
        with pytest.raises(ModelImportError, match=reason):
            model_config({**base, **change})


def test_model_card_counts_what_transformers_counts(open_folders):
    for family, folder in open_folders.items():
        bundle = import_hf(folder)[0]
        card = model_card(bundle)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
        hf = json.loads((folder / "config.json").read_text())
        assert card["parameters"] == model.num_parameters()
        assert (card["layers"], card["heads"], card["kv_heads"], card["vocab_size"]) == (
            hf["num_hidden_layers"], hf["num_attention_heads"], hf["num_key_value_heads"],
            hf["vocab_size"])
        assert card["chat_template"] and card["context_length"] == hf["max_position_embeddings"]
        text = format_card(card)
        assert f"key-value heads {hf['num_key_value_heads']}" in text


def test_cli_import_writes_a_run_and_prints_the_card(open_folders, open_ggufs, tmp_path, capsys):
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.engine.files.open_run import tuning_config
    from opencl_llm_studio.engine.data.open_tokenizer import tokenizer_from_bytes
    from opencl_llm_studio.engine.model.params import ParamTable
    from opencl_llm_studio.studio.cli import main
    for src in (open_ggufs["llama32"], open_folders["tinyllama"]):
        out = tmp_path / src.stem
        assert main(["import", str(src), str(out)]) == 0
        printed = capsys.readouterr().out
        assert "key-value heads" in printed and "chat template: yes" in printed
        ck = checkpoint.load(out)
        bundle = import_gguf(src) if src.is_file() else import_hf(src)[0]
        assert ModelConfig(**ck["header"]["model_config"]) == tuning_config(bundle.config)
        np.testing.assert_array_equal(ck["params"],
                                      ParamTable(bundle.config).flatten(bundle.weights))
        tok = tokenizer_from_bytes(ck["tokenizer"])
        assert tok.encode(PROMPT) == bundle.tokenizer.encode(PROMPT)
        assert ck["header"]["chat_format"] == "model" and ck["pretrain_text"]
        for target in (out, src):   # `tokenize` reads an imported run and an open GGUF
            if target.is_dir() and target != out:
                continue
            assert main(["tokenize", str(target), PROMPT]) == 0
            first = capsys.readouterr().out.splitlines()[0]
            assert first == " ".join(map(str, tok.encode(PROMPT)))
    qwen = tmp_path / "qwen"
    shutil.copytree(open_folders["smollm2"], qwen)
    cfg = json.loads((qwen / "config.json").read_text())
    (qwen / "config.json").write_text(json.dumps({**cfg, "attention_bias": True}))
    assert main(["import", str(qwen), str(tmp_path / "refused")]) == 2
    assert "bias" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


def test_cli_import_says_a_way_to_tune_that_works(open_folders, tmp_path, capsys):
    """The line import ends with names a tuning command that runs. With --tune at import:
    `train --continue --tune-steps N`; without dialogues: `train --continue --tune FILE
    --tune-steps N`, which gives the imported run its dialogues (was: the advice to import
    again with --tune, since a continued run ignored --tune). A folder with spaces is quoted in
    it, so the command pastes as it is (it was printed bare and split in two)."""
    import shlex
    from opencl_llm_studio.studio.cli import main
    dialogues = tmp_path / "d.txt"
    dialogues.write_text("User: Where is Vell?\nAssistant: In the north sea.\n")
    for tune in ([], ["--tune", str(dialogues)]):
        out = tmp_path / "my runs" / f"run {len(tune)}"
        assert main(["import", str(open_folders["smollm2"]), str(out), *tune]) == 0
        err = capsys.readouterr().err
        assert ("--tune for your own" in err) == (not tune), err   # not when it was given
        said = re.search(r"`llm-studio (train --out ([^`]+) --continue[^`]*)`", err)
        assert said and ("--tune FILE" in said.group(1)) == (not tune), err
        argv = shlex.split(said.group(1).replace(" N", " 1").replace("FILE", str(dialogues)))
        assert argv[2] == str(out), argv
        assert main(argv) == 0, capsys.readouterr().err
        ck = np.load(out / "checkpoint.npz")
        assert bytes(ck["tune_text"]).decode() == dialogues.read_text()


CONVERSATIONS = ([{"role": "user", "content": "Hi there"}],
                 [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "Bye"}])


@pytest.mark.parametrize("family", ["smollm2", "llama32", "tinyllama", "qwen2"])
def test_an_open_models_export_carries_its_own_template_for_ollama(open_folders, tmp_path,
                                                                    capsys, family):
    """An open model's GGUF was written without a Modelfile, so Ollama matched the nearest
    template it knew and dropped the model's default system prompt (SmolLM2's): the Modelfile
    now carries the model's template in Ollama's Go terms, its default SYSTEM and its stop
    tokens, read back by the port of Ollama's parser; Ollama's rendering of it (with the
    default system message it adds) is the prompt the studio builds from the Jinja template."""
    from opencl_llm_studio.engine.data.chat_template import render, special_tokens
    from opencl_llm_studio.engine.training.opening import load_session
    from opencl_llm_studio.studio.cli import main
    from tests.ollama_parser import parse, render_go
    run = tmp_path / "run"
    assert main(["import", str(open_folders[family]), str(run)]) == 0
    assert main(["export", str(run), str(tmp_path / "m.gguf")]) == 0
    commands = parse((tmp_path / "m.Modelfile").read_text())
    values = {}
    for name, value in commands:   # (model | template | system | a parameter's name, value)
        values.setdefault(name, []).append(value)
    assert values["model"] == ["./m.gguf"]
    tok = load_session(run).tokenizer
    assert values["stop"] == list(dict.fromkeys(tok.id_to_piece(i) for i in tok.stop_ids))
    system = values.get("system", [""])[0]
    if family == "smollm2":
        assert system.startswith("You are a helpful AI assistant named SmolLM")
    bos = tok.id_to_piece(tok.bos_id) if tok.add_bos and tok.bos_id is not None else ""
    for conv in CONVERSATIONS:
        jinja = render(tok.chat_template, conv, add_generation_prompt=True,
                       **special_tokens(tok)).removeprefix(bos)   # Ollama adds the BOS itself
        said = [{"role": "system", "content": system}] if system else []
        assert render_go(values["template"][0], said + conv) == jinja


def test_an_open_model_of_no_known_template_family_says_why_there_is_no_modelfile(
        open_folders, tmp_path, capsys, monkeypatch):
    """A template of no family the writer knows: no Modelfile, and the export says so and gives
    the one line Ollama needs."""
    from opencl_llm_studio.engine.files import ollama_template
    from opencl_llm_studio.studio.cli import main
    assert ollama_template.family_of("{{ messages[0]['content'] }}") is None
    monkeypatch.setattr(ollama_template, "ollama_chat", lambda tokenizer: None)
    run = tmp_path / "run"
    assert main(["import", str(open_folders["smollm2"]), str(run)]) == 0
    capsys.readouterr()
    assert main(["export", str(run), str(tmp_path / "m.gguf")]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "m.Modelfile").exists()
    assert "No Modelfile" in out and "FROM ./m.gguf" in out, out
