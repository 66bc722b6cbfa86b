"""Issue 14: the Hugging Face round trip. transformers loads the exported folder and gives the
engine's logits, ids and greedy text; engine -> HF -> engine is bit-identical; folders the engine
cannot run are refused with a message; scale-out + train_ddp.py under torchrun continue a run
whose result imports back, chats and exports GGUF."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig  # noqa: E402
from opencl_llm_studio.engine.errors import ModelImportError  # noqa: E402
from opencl_llm_studio.engine.files.hf.export import export_hf, export_session  # noqa: E402
from opencl_llm_studio.engine.files.hf.load import import_hf  # noqa: E402
from opencl_llm_studio.engine.training.open_hf import session_from_hf  # noqa: E402
from opencl_llm_studio.engine.files.hf.names import from_hf_rows, to_hf_rows  # noqa: E402
from opencl_llm_studio.engine.files.hf.scale_out import SCRIPT, scale_out  # noqa: E402
from opencl_llm_studio.engine.data.textio import read_text  # noqa: E402
from opencl_llm_studio.engine.data.textio import bundled_corpus  # noqa: E402
from opencl_llm_studio.studio.cli import main  # noqa: E402
from tests.helpers import trained_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STRINGS = ["Paris is the capital of France.", "  two  spaces\n\nand newlines\tand a tab",
           "日本語のテキスト", "emoji 🙂👍 done", "accents: café naïve", "nbsp\u00a0here",
           "User: What is the highest mountain?\nAssistant:\nMount Everest.", "12 34 5678"]


@pytest.fixture(scope="module")
def trained(rt, tmp_path_factory):
    mc = ModelConfig(d_model=64, n_layer=2, n_head=4, context_length=64, vocab_size=512)
    tc = TrainConfig(pretrain_steps=60, tune_steps=30, batch_size=8, learning_rate=4e-3,
                     eval_interval=30, sample_interval=0, evaluate_recall=False)
    s = trained_session(rt, mc, tc)
    folder = export_session(s, tmp_path_factory.mktemp("hf") / "model")
    return s, folder


@pytest.fixture(scope="module")
def hf_model(trained):
    _, folder = trained
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval(), transformers.AutoTokenizer.from_pretrained(folder)


def test_transformers_gives_the_engines_logits(trained, hf_model):
    s, _ = trained
    model, _ = hf_model
    text = s.pretrain.documents[-1]          # held-out text
    ids = ([s.tokenizer.bos_id] + s.tokenizer.encode(text))[:s.model_config.context_length]
    ours = s.model.logits(np.array([ids], np.int32)).reshape(len(ids), -1)
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].numpy()
    diff = ours.astype(np.float64) - theirs
    assert np.abs(diff).max() < 1e-4
    assert (diff ** 2).mean() / (ours.astype(np.float64) ** 2).mean() < 1e-10


def test_hf_tokenizer_gives_the_engines_ids(trained, hf_model):
    s, _ = trained
    _, tok = hf_model
    for text in STRINGS + [s.pretrain_text, s.tune_text]:
        ids = s.tokenizer.encode(text)
        assert tok.encode(text, add_special_tokens=False) == ids, text[:40]
        assert tok(text).input_ids == [s.tokenizer.bos_id] + ids    # BOS first, as Llama's
        assert tok.decode(ids) == text


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_tokenizer_json_on_other_vocabularies(kind, tmp_path):
    from opencl_llm_studio.engine.files.hf.tokenizer_json import build
    from opencl_llm_studio.engine.data.tokenizer import Tokenizer
    text = read_text(bundled_corpus("pretrain")) + "\n日本語 🙂 café\n"
    tok = Tokenizer.train([text], 700, kind)
    hf = build(tok)
    for s in STRINGS + [text]:
        assert hf.encode(s, add_special_tokens=False).ids == tok.encode(s), (kind, s[:30])
        assert hf.decode(tok.encode(s)) == s


def test_greedy_generation_is_identical(trained, hf_model):
    s, _ = trained
    model, _ = hf_model
    prompt = [s.tokenizer.bos_id] + s.tokenizer.encode("The capital of")
    from opencl_llm_studio.engine.generation.sampling import SamplingParams
    ours = s.generate_ids(prompt, 20, SamplingParams(greedy=True))
    out = model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                         eos_token_id=s.tokenizer.eos_id, pad_token_id=s.tokenizer.eos_id)
    theirs = out[0, len(prompt):].tolist()
    if theirs and theirs[-1] == s.tokenizer.eos_id:
        theirs = theirs[:-1]
    assert theirs == ours


def test_chat_template_renders_like_the_engine(trained, hf_model):
    from opencl_llm_studio.engine.data.dialogue import Message, encode_prompt
    s, _ = trained
    _, tok = hf_model
    msgs = [Message("user", "What is the highest mountain?"),
            Message("assistant", "Mount Everest."), Message("user", "Where is it?")]
    ids = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in msgs],
                                  add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(ids) == encode_prompt(s.tokenizer, msgs)


def test_round_trip_is_bit_identical(trained, tmp_path):
    s, folder = trained
    bundle, studio = import_hf(folder)
    for name, w in s.model.weights().items():
        np.testing.assert_array_equal(bundle.weights[name], w)
    assert bundle.config == s.model_config
    assert bundle.tokenizer.to_bytes() == s.tokenizer.to_bytes()
    assert studio["step"] == s.step and studio["train_config"] == s.train_config.__dict__


@pytest.mark.parametrize("n_head,head_dim", [(1, 2), (3, 6), (4, 16)])
def test_rope_row_permutation_is_inverted(n_head, head_dim):
    w = np.random.default_rng(0).normal(size=(n_head * head_dim, 5)).astype(np.float32)
    np.testing.assert_array_equal(from_hf_rows(to_hf_rows(w, n_head), n_head), w)
    # adjacent pair (2i, 2i+1) of head h -> rows i and i + head_dim/2 of that head
    hf = to_hf_rows(w, n_head)
    for h in range(n_head):
        o = h * head_dim
        for i in range(head_dim // 2):
            np.testing.assert_array_equal(hf[o + i], w[o + 2 * i])
            np.testing.assert_array_equal(hf[o + i + head_dim // 2], w[o + 2 * i + 1])


def _edit_config(folder, tmp_path, **changes):
    dst = tmp_path / "edited"
    shutil.copytree(folder, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("changes,words", [
    ({"num_key_value_heads": 3}, "3 key/value heads for 4 heads"),
    ({"num_key_value_heads": 2}, r"attn_k.weight: expected shape \(32, 64\), found \(64, 64\)"),
    ({"attention_bias": True}, "bias"),
    ({"hidden_act": "gelu"}, "gelu"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "linear RoPE scaling"),
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, "not a Llama"),
])
def test_folders_the_engine_cannot_run_are_refused(trained, tmp_path, capsys, changes, words):
    _, folder = trained
    bad = _edit_config(folder, tmp_path, **changes)
    with pytest.raises(ModelImportError, match=words):
        import_hf(bad)
    assert main(["import", str(bad), str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err and not (tmp_path / "run").exists()


def test_missing_tokenizer_model_and_foreign_folders(trained, tmp_path):
    _, folder = trained
    no_tok = tmp_path / "no_tok"
    shutil.copytree(folder, no_tok)
    (no_tok / "tokenizer.model").unlink()
    with pytest.raises(ModelImportError, match="tokenizer.model"):
        import_hf(no_tok)
    with pytest.raises(ModelImportError, match="config.json"):
        import_hf(tmp_path)
    with pytest.raises(ModelImportError, match="not a folder"):
        import_hf(tmp_path / "missing")


def test_export_refuses_a_non_empty_folder_and_keeps_it(trained, tmp_path):
    s, _ = trained
    target = tmp_path / "taken"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    from opencl_llm_studio.engine.errors import ExportError
    with pytest.raises(ExportError, match="not an empty folder"):
        export_hf(s.bundle(), target)
    assert (target / "notes.txt").read_text() == "mine"
    with pytest.raises(ExportError, match="not a Hugging Face model folder"):
        export_hf(s.bundle(), target, force=True)   # force replaces models, not a person's files
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    model = tmp_path / "model"
    export_hf(s.bundle(), model)
    (model / "stale.txt").write_text("from before")
    export_hf(s.bundle(), model, force=True)
    assert (model / "config.json").exists() and not (model / "stale.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp, no .old


def test_ddp_script_schedule_equals_the_engine(trained):
    s, _ = trained
    spec = importlib.util.spec_from_file_location("train_ddp", SCRIPT)
    ddp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ddp)
    sched = ddp.Schedule(s.train_config.__dict__, True)
    for step in range(0, s.total_steps + 5):
        assert sched.stage(step) == s.stage_at(step)
        assert sched.lr(step) == pytest.approx(s.lr_at(step), rel=1e-12)


def _torchrun(folder: Path, *args, nproc=2):
    exe = Path(sys.executable).with_name("torchrun")
    cmd = ([str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    return subprocess.run(cmd + ["--standalone", f"--nproc_per_node={nproc}", "train_ddp.py",
                                 *args], cwd=folder, capture_output=True, text=True,
                          timeout=600, env=env)


def check_scale_out_folder(folder: Path) -> None:
    for name in ("train_ddp.py", "optimizer.safetensors", "data/pretrain.txt", "data/tune.txt",
                 "data/pretrain_train.npy", "README.md"):
        assert (folder / name).exists(), name
    readme = (folder / "README.md").read_text()
    assert "torchrun --standalone --nproc_per_node=N train_ddp.py" in readme


def check_same_evaluation(folder: Path, s) -> None:
    """train_ddp.py --evaluate gives the studio's last validation numbers for the model."""
    r = _torchrun(folder, "--out", "unused", "--evaluate", nproc=1)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    last = [h for h in s.history if "val_loss" in h][-1]
    assert got["val_loss"] == pytest.approx(last["val_loss"], rel=1e-4)
    assert got["pretrain_val_loss"] == pytest.approx(last["pretrain_val_loss"], rel=1e-4)


def continue_on_two_processes(folder: Path, out: Path, s, more: int) -> None:
    """Two torchrun processes train `more` tuning steps; the first losses continue the curve."""
    r = _torchrun(folder, "--out", str(out), "--tune-steps", str(s.train_config.tune_steps + more))
    assert r.returncode == 0, r.stderr[-3000:]
    steps = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [m["step"] for m in steps] == list(range(s.step + 1, s.step + more + 1))
    before = np.mean([h["loss"] for h in s.history[-10:]])
    assert abs(steps[0]["loss"] - before) < 0.5 and all(np.isfinite(m["loss"]) for m in steps)


def test_scale_out_continues_under_torchrun_and_comes_back(trained, rt, tmp_path):
    s, _ = trained
    folder = scale_out(s, tmp_path / "scale")
    check_scale_out_folder(folder)
    check_same_evaluation(folder, s)
    continue_on_two_processes(folder, tmp_path / "continued", s, 10)
    # ... and come back: a run folder that chats, continues and exports GGUF.
    back = session_from_hf(tmp_path / "continued", runtime=rt)
    assert back.step == s.step + 10 and len(back.history) == len(s.history) + 10
    assert back.model.adam_t == s.model.adam_t + 10
    run = tmp_path / "run"
    assert main(["import", str(tmp_path / "continued"), str(run)]) == 0
    assert main(["export", str(run), str(tmp_path / "m.gguf")]) == 0
    assert main(["train", "--out", str(run), "--continue", "--tune-steps",
                 str(s.train_config.tune_steps + 12), "--quiet"]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == s.step + 12


@pytest.mark.skipif(not os.environ.get("LLM_STUDIO_LLAMA_CPP_SOURCE"),
                    reason="set LLM_STUDIO_LLAMA_CPP_SOURCE to a llama.cpp source tree")
def test_llama_cpp_converter_gives_our_gguf_tensors(trained, tmp_path):
    """llama.cpp's own convert_hf_to_gguf.py on the exported folder writes the tensors of
    `llm-studio export --dtype f32`."""
    import gguf
    s, folder = trained
    src = Path(os.environ["LLM_STUDIO_LLAMA_CPP_SOURCE"])
    out = tmp_path / "converted.gguf"
    r = subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(folder),
                        "--outtype", "f32", "--outfile", str(out)], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(src / "gguf-py")))
    assert r.returncode == 0, r.stderr[-3000:]
    ours = tmp_path / "ours.gguf"
    s.export_gguf(ours)
    a = {t.name: np.array(t.data) for t in gguf.GGUFReader(out).tensors}
    b = {t.name: np.array(t.data) for t in gguf.GGUFReader(ours).tensors}
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_ddp_scores_the_dialogues_the_studio_scores(tok, texts):
    """train_ddp.py (standalone) picks the same tune evaluation batches as the engine, also
    when the set is larger than MAX_TUNE_EVAL_BATCHES batches (it scored every dialogue)."""
    import importlib.util

    from opencl_llm_studio.engine.data.dialogue import TuneData
    from opencl_llm_studio.engine.training.evaluate import MAX_TUNE_EVAL_BATCHES
    spec = importlib.util.spec_from_file_location("train_ddp_script",
                                                  ROOT / "opencl_llm_studio" / "engine" / "files" / "hf" / "train_ddp.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.MAX_TUNE_EVAL_BATCHES == MAX_TUNE_EVAL_BATCHES
    data = TuneData(tok, "\n\n".join([texts[1]] * 8), 64)   # 160 dialogues: 40 batches of 4
    ids, mask = data.rows
    ddp = script.Data.__new__(script.Data)
    ddp.tune_ids, ddp.tune_mask = ids, mask
    ours = data.eval_batches(4, MAX_TUNE_EVAL_BATCHES)
    theirs = ddp.tune_eval_batches(4)
    assert len(theirs) == len(ours) == MAX_TUNE_EVAL_BATCHES
    for (x, y), (dx, dy) in zip(ours, theirs):
        assert (x == dx).all() and (y == dy).all()


@pytest.mark.parametrize("changes", [
    dict(n_head=4, n_kv_head=2),
    dict(n_head=8, n_kv_head=1, tie_embeddings=False),
    dict(n_head=4, n_kv_head=1, rope_base=500000.0, rope_scaling="llama3",
         rope_scaling_factor=4.0, rope_original_context=16)])
def test_grouped_query_export_runs_in_transformers(tok, tmp_path, changes):
    """num_key_value_heads = kv_heads, k rows permuted per kv head, llama3 rope_parameters:
    transformers gives the float64 reference's logits."""
    import tests.reference as ref
    from opencl_llm_studio.engine.files.gguf_export import ModelBundle
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layer=2, context_length=64,
                      **changes).validate()
    w = {k: v.astype(np.float32) for k, v in ref.init_weights(cfg, seed=2, std=0.08).items()}
    folder = export_hf(ModelBundle(cfg, tok, w, {}), tmp_path / "m")
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert model.config.num_key_value_heads == cfg.kv_heads
    ids = np.array([[tok.bos_id] + tok.encode("Paris is the capital of France. " * 6)[:47]])
    want = ref.forward(w, cfg, ids)[0]
    with torch.no_grad():
        got = model(torch.tensor(ids)).logits[0].numpy().astype(np.float64)
    assert ((got - want) ** 2).mean() / (want ** 2).mean() < 1e-10
