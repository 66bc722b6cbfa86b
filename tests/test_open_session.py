"""Issue 21, the session part: an imported pretrained model (grouped-query attention, byte-level
BPE, ChatML template) is opened as a run, chats in its own template with the greedy ids
transformers gives, stops at its end-of-turn token, and tunes on dialogues (loss on the
assistant's tokens) through the CLI."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from opencl_llm_studio.engine.config import SamplingParams  # noqa: E402
from opencl_llm_studio.engine.data.dialogue import Message, encode_prompt  # noqa: E402
from tests.open_models import build  # noqa: E402

DIALOGUES = "".join(f"User: What is the code word {i}?\nAssistant: The code word {i} is "
                    f"zebra{i}.\n\n" for i in range(6))


@pytest.fixture(scope="module")
def smol_run(tmp_path_factory):
    from opencl_llm_studio.studio.cli import main
    root = tmp_path_factory.mktemp("smol")
    folder = build("smollm2", root / "folder")
    tune = root / "tune.txt"
    tune.write_text(DIALOGUES)
    out = root / "run"
    assert main(["import", str(folder), str(out), "--tune", str(tune)]) == 0
    return folder, out


def test_imported_model_chats_in_its_own_template_as_transformers(smol_run):
    from opencl_llm_studio.engine.training.opening import load_session
    folder, out = smol_run
    s = load_session(out)
    messages = [Message("user", "Hello there, what is 2 + 2?")]
    ids = encode_prompt(s.tokenizer, messages, s.chat_format)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    want = hf_tok.apply_chat_template([{"role": "user", "content": messages[0].content}],
                                      add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
    assert ids == want                      # old: the session refused chat_format "model"
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    stops = s.tokenizer.stop_ids
    greedy = model.eval().generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                   eos_token_id=stops, pad_token_id=0)[0, len(ids):].tolist()
    got = s.generate_ids(ids, max_new_tokens=12, sampling=SamplingParams(greedy=True))
    assert got == [t for t in greedy if t not in stops][:len(got)]
    assert len(got) == 12 or greedy[len(got)] in stops
    assert s.model_config.context_length <= 1024


def test_imported_model_tunes_on_dialogues_through_the_cli(smol_run, tmp_path, capsys):
    import shutil
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.studio.cli import main
    _, src = smol_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    assert main(["train", "--out", str(out), "--continue", "--tune-steps", "4",
                 "--batch-size", "2"]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in rows] == ["tune"] * 4
    assert all(np.isfinite(r["loss"]) for r in rows)
    assert "pretrain_val_loss" in rows[-1]              # the general text's loss beside it
    ck = checkpoint.load(out)
    assert ck["header"]["chat_format"] == "model" and ck["header"]["step"] == 4
    capsys.readouterr()
    assert main(["chat", str(out), "-m", "What is the code word 1?", "--greedy",
                 "--max-tokens", "8"]) == 0
    from opencl_llm_studio.engine.training.opening import load_session
    reply = load_session(out).chat([Message("user", "What is the code word 1?")],
                                           greedy=True, max_new_tokens=8)
    assert capsys.readouterr().out.startswith(reply + "\n")


def test_an_open_model_folder_opens_in_its_own_template(smol_run, rt):
    """File > Open Hugging Face folder on a pretrained model (engine.training.open_hf.session_from_hf):
    its own template and a training window, as an imported run (it opened in the app's
    User:/Assistant: format with the model's whole context)."""
    from opencl_llm_studio.engine.training.open_hf import session_from_hf
    folder, _ = smol_run
    s = session_from_hf(folder, "A general text.\n" * 50, None, runtime=rt)
    assert s.chat_format == "model" and s.model_config.context_length <= 1024
    reply = s.chat([Message("user", "Hi!")], greedy=True, max_new_tokens=4)
    assert reply == s.chat([Message("user", "Hi!")], greedy=True, max_new_tokens=4)  # greedy
    # ended by its end-of-turn token or the bound; n_tokens leaves out the end-of-turn token
    assert reply.finish_reason in ("stop", "length") and reply.n_tokens <= 4
    assert reply.n_tokens == 4 if reply.finish_reason == "length" else reply.n_tokens < 4
    assert "<|im_end|>" not in reply and "<|im_start|>" not in reply   # its end-of-turn stops it
    assert reply.dropped_turns == 0


def test_an_exported_folder_keeps_its_chat_format(rt, tmp_path):
    """studio.json records the chat format, so a run tuned in format 1 opens in format 1."""
    from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
    from opencl_llm_studio.engine.files.hf.export import export_session
    from opencl_llm_studio.engine.training.open_hf import session_from_hf
    from opencl_llm_studio.engine.training.opening import create_session
    from tests.helpers import bundled_texts
    mc = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=64, vocab_size=400)
    s = create_session(mc, TrainConfig(pretrain_steps=1, tune_steps=1, batch_size=2),
                       *bundled_texts(), runtime=rt)
    s.chat_format = 1
    export_session(s, tmp_path / "hf")
    back = session_from_hf(tmp_path / "hf", s.pretrain_text, s.tune_text, runtime=rt)
    assert back.chat_format == 1 and back.tune.chat_format == 1


def test_a_failed_write_of_an_imported_folder_is_explained_and_leaves_nothing(rt, tmp_path,
                                                                              monkeypatch,
                                                                              capsys):
    """`llm-studio import` of a folder this app exported, on a full disk: the person reads
    what failed and the run folder is not left half written (the write's error path named
    StudioError without importing it: a NameError traceback)."""
    from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
    from opencl_llm_studio.engine.files.hf.export import export_session
    from opencl_llm_studio.engine.training.session import TrainingSession
    from opencl_llm_studio.engine.training.opening import create_session
    from opencl_llm_studio.studio.cli import main
    from tests.helpers import bundled_texts
    mc = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=64, vocab_size=400)
    s = create_session(mc, TrainConfig(pretrain_steps=1, tune_steps=1, batch_size=2),
                       *bundled_texts(), runtime=rt)
    export_session(s, tmp_path / "hf")

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(TrainingSession, "save", full)
    assert main(["import", str(tmp_path / "hf"), str(tmp_path / "run")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_exports_of_an_imported_model_keep_its_own_context_length(tmp_path):
    """The run trains and chats in a window of at most 1,024 tokens, but the model is the
    source's: the GGUF and the HF config say the source's context (they said 1,024), and a
    save after tuning keeps the model card that says it."""
    import gguf
    from opencl_llm_studio.engine.files.hf.export import export_session
    from opencl_llm_studio.engine.training.opening import load_session
    from opencl_llm_studio.studio.cli import main
    folder = build("llama32", tmp_path / "folder")   # 16,384 positions
    assert main(["import", str(folder), str(tmp_path / "run")]) == 0
    own = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    s = load_session(tmp_path / "run")
    assert s.model_config.context_length < own
    s.export_gguf(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    field = reader.fields["llama.context_length"]
    assert int(field.parts[field.data[0]][0]) == own
    export_session(s, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["max_position_embeddings"] == own
    s.save(tmp_path / "again")
    assert load_session(tmp_path / "again").export_config().context_length == own


def test_an_imported_instruct_model_is_not_called_untuned(tmp_path, monkeypatch, capsys):
    """`llm-studio chat` said of an imported Instruct model (its own chat template, tuned by
    its makers) that it "was not tuned on dialogues"; a model of this app's without tuning
    still gets the note."""
    import io
    from opencl_llm_studio.studio.cli import main
    from tests.helpers import TINY
    folder = build("smollm2", tmp_path / "folder")
    assert main(["import", str(folder), str(tmp_path / "run")]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    capsys.readouterr()
    assert main(["chat", str(tmp_path / "run")]) == 0
    assert "not tuned" not in capsys.readouterr().out
    assert main(["train", "--out", str(tmp_path / "mine"), "--steps", "2", "--no-tune", *TINY]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    capsys.readouterr()
    assert main(["chat", str(tmp_path / "mine")]) == 0
    assert "not tuned" in capsys.readouterr().out


def test_an_imported_run_stores_no_empty_optimizer_state(tmp_path):
    """An imported run's checkpoint held its weights and two AdamW moments of zeros (1.6 GB
    for SmolLM2-135M): the moments are stored empty until the first step, read back as zeros,
    and a run trained on stores them."""
    import zipfile
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.engine.training.opening import load_session
    from opencl_llm_studio.studio.cli import main
    folder = build("smollm2", tmp_path / "folder")
    tune = tmp_path / "tune.txt"
    tune.write_text(DIALOGUES)
    run = tmp_path / "run"
    assert main(["import", str(folder), str(run), "--tune", str(tune)]) == 0
    ck = checkpoint.load(run)
    assert not ck["adam_m"].any() and ck["adam_m"].shape == ck["params"].shape
    with zipfile.ZipFile(run / checkpoint.FILENAME) as z:
        sizes = {i.filename: i.file_size for i in z.infolist()}
    assert sizes["adam_m.npy"] < 1024 and sizes["adam_v.npy"] < 1024
    assert sizes["params.npy"] > 4 * ck["params"].size
    assert main(["train", "--out", str(run), "--continue", "--tune-steps", "2",
                 "--batch-size", "2"]) == 0
    trained = checkpoint.load(run)
    assert trained["adam_v"].any()
    assert load_session(run).step == 2


@pytest.mark.parametrize("form", ["folder", "gguf"])
def test_an_imported_model_trains_at_pretrained_defaults_and_takes_its_tune_lr(
        tmp_path, capsys, form):
    """An imported run kept the from-scratch defaults (batch 16, lr 3e-3, tuning at 1e-3),
    which erase a pretrained model's knowledge (SmolLM2-135M then answered "Montelle" for the
    capital of France): it starts at the pretrained defaults, in the CLI as from a transformers
    folder or a GGUF; with no pretraining stage its one learning rate is its tuning rate (the
    studio's field, `--lr`), and `--tune-lr` sets the tuning rate of a continued run."""
    from opencl_llm_studio.engine.config import (PRETRAINED_BATCH, PRETRAINED_TUNE_LR,
                                                 pretrained_train_config)
    from opencl_llm_studio.engine.files.gguf_export import export_gguf
    from opencl_llm_studio.engine.files.hf.load import import_hf
    from opencl_llm_studio.engine.training.opening import load_session
    from opencl_llm_studio.studio.cli import main
    folder = build("smollm2", tmp_path / "folder")
    src = folder if form == "folder" else export_gguf(import_hf(folder)[0],
                                                     tmp_path / "m.gguf").path
    tune = tmp_path / "tune.txt"
    tune.write_text(DIALOGUES)
    run = tmp_path / "run"
    assert main(["import", str(src), str(run), "--tune", str(tune)]) == 0
    tc = load_session(run).train_config
    assert tc == pretrained_train_config()
    assert (tc.batch_size, tc.tune_peak, tc.pretrain_steps) == (PRETRAINED_BATCH,
                                                                PRETRAINED_TUNE_LR, 0)
    assert PRETRAINED_TUNE_LR <= 3e-4
    assert main(["train", "--out", str(run), "--continue", "--tune-steps", "1",
                 "--lr", "1e-4", "--quiet"]) == 0
    assert load_session(run).train_config.tune_peak == 1e-4
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--continue", "--tune-steps", "2",
                 "--tune-lr", "5e-5", "--quiet"]) == 0
    assert "tune learning rate 5e-05" in capsys.readouterr().err
    assert load_session(run).train_config.tune_peak == 5e-5
