"""The llm-studio command line: a tiny training run end to end, continued, and bad input."""

import math

import pytest

from opencl_llm_studio.studio.cli import main
from tests.helpers import TINY, metrics


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--out", str(out), "--steps", "40", "--tune-steps", "10", *TINY]) == 0
    return out


def test_train_writes_checkpoint_and_metrics(run):
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 51))
    for key in ("loss", "grad_norm", "lr", "tokens_per_s"):
        assert all(isinstance(r[key], float) for r in rows), key
    assert any("val_loss" in r for r in rows)
    assert rows[-1]["stage"] == "tune" and rows[0]["stage"] == "pretrain"
    assert abs(rows[0]["loss"] - math.log(320)) < 0.5  # starts near ln(vocab_size)
    assert rows[39]["loss"] < rows[0]["loss"] - 1.0      # and falls
    assert (run / "checkpoint.npz").exists()


def test_sample_tokenize_chat(run, capsys, rt):
    """Greedy `sample` and `chat` print what the saved model's own greedy decoding gives (the
    same text a second time), and `tokenize` the ids and pieces of its tokenizer."""
    from opencl_llm_studio.engine.data.dialogue import Message
    from opencl_llm_studio.engine.training.opening import load_session
    s = load_session(run, runtime=rt)
    assert main(["sample", str(run), "--prompt", "Paris is", "--greedy", "--max-tokens", "8"]) == 0
    assert capsys.readouterr().out == "Paris is" + s.generate("Paris is", max_new_tokens=8,
                                                               greedy=True) + "\n"
    assert main(["tokenize", str(run), "Paris, héllo\n"]) == 0
    ids_line, pieces_line, summary = capsys.readouterr().out.splitlines()
    ids = [int(i) for i in ids_line.split()]
    assert ids == s.tokenizer.encode("Paris, héllo\n")
    assert s.tokenizer.decode(ids) == "Paris, héllo\n"
    assert len(pieces_line.split()) == len(ids) and summary == f"{len(ids)} tokens for 13 characters"
    question = [Message("user", "What is the capital of France?")]
    assert main(["chat", str(run), "-m", question[0].content, "--greedy",
                 "--max-tokens", "8"]) == 0
    reply = s.chat(question, greedy=True, max_new_tokens=8)
    notes = "".join(f"({note})\n" for note in reply.notes())
    assert capsys.readouterr().out == reply + "\n" + notes  # a tiny model's answer may be blank
    # ended by </s>, the bound or the 32-token window; n_tokens leaves out </s>
    assert reply.finish_reason in ("stop", "length", "context") and reply.n_tokens <= 8
    assert reply.finish_reason != "length" or reply.n_tokens == 8
    assert reply.finish_reason != "stop" or reply.n_tokens < 8


@pytest.mark.parametrize("flag", ["--continue", "--resume"])
def test_continue_trains_a_finished_run_further(run, tmp_path, capsys, flag):
    """`--continue` (one term: more steps of a saved run); the old `--resume` still works and
    says it is now --continue ("resume" is the studio's going on after Pause)."""
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert main(["train", "--out", str(copy), flag, "--tune-steps", "15", "--quiet"]) == 0
    rows = metrics(copy)
    assert [r["step"] for r in rows] == list(range(1, 56))
    assert rows[:50] == metrics(run)
    assert ("--resume is now --continue" in capsys.readouterr().err) == (flag == "--resume")


@pytest.mark.parametrize("totals", [[], ["--tune-steps", "10"], ["--steps", "40"]])
def test_continue_with_nothing_left_says_so_and_changes_nothing(run, tmp_path, capsys, totals):
    """`--continue` of a run already at its totals printed "Done: 50 steps" after validating
    and re-saving it (the previous checkpoint rotated away): now it says there is nothing to
    train and how to ask for more, and leaves the folder as it was."""
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    assert main(["train", "--out", str(copy), "--continue", *totals]) == 0
    err = capsys.readouterr().err
    assert "Nothing to train: the run has done all of its 50 steps" in err, err
    assert "--tune-steps" in err and "Done:" not in err
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()
            and p.name in before} == before
    assert not (copy / "checkpoint.prev.npz").exists() or "checkpoint.prev.npz" in before


def test_continue_with_new_dialogues_tunes_on_them(run, tmp_path, capsys):
    """`train --continue --tune FILE --tune-steps N` (issue 21: how an imported or text-only
    run is tuned on the person's dialogues): a run trained without dialogues gains a tuning
    stage on FILE; a run with dialogues tunes on FILE instead; the checkpoint keeps FILE's
    text (was: --tune ignored, and a run without dialogues refused any tuning steps)."""
    import shutil

    import numpy as np
    dialogues = tmp_path / "d.txt"
    dialogues.write_text("User: Where is Vell?\nAssistant: In the north sea.\n" * 3)
    plain = tmp_path / "plain"
    assert main(["train", "--out", str(plain), "--steps", "3", "--no-tune", *TINY]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    for folder, before, total in ((plain, 3, 5), (copy, 50, 52)):
        tune_steps = "2" if folder == plain else "12"
        assert main(["train", "--out", str(folder), "--continue", "--tune", str(dialogues),
                     "--tune-steps", tune_steps, "--quiet"]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        assert "Tuning on" in err and "--tune ignored" not in err, err
        rows = metrics(folder)
        assert [r["step"] for r in rows] == list(range(1, total + 1))
        assert [r["stage"] for r in rows[before:]] == ["tune"] * (total - before)
        ck = np.load(folder / "checkpoint.npz")
        assert bytes(ck["tune_text"]).decode() == dialogues.read_text()


def test_continue_with_a_dialogue_file_that_holds_none_is_refused(run, tmp_path, capsys):
    import shutil
    bad = tmp_path / "bad.txt"
    bad.write_text("Just some prose, no turns at all.\n")
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    before = (copy / "checkpoint.npz").read_bytes()
    assert main(["train", "--out", str(copy), "--continue", "--tune", str(bad),
                 "--tune-steps", "12", "--quiet"]) == 2
    assert "bad.txt" in capsys.readouterr().err
    assert (copy / "checkpoint.npz").read_bytes() == before


def test_an_exported_gguf_imports_as_a_run_that_trains_on(run, tmp_path, capsys):
    """A GGUF this app exported, whose run folder is gone: `import` makes a run of it at the
    step it was exported at, which chats and trains further (was: refused, "continue the run
    it came from", so such a GGUF could never be tuned again)."""
    from opencl_llm_studio.engine.training.opening import load_session
    gguf, out = tmp_path / "m.gguf", tmp_path / "again"
    assert main(["export", str(run), str(gguf), "--dtype", "f32"]) == 0
    assert main(["import", str(gguf), str(out)]) == 0, capsys.readouterr().err
    assert "step 50/50" in capsys.readouterr().err
    s = load_session(out)
    assert s.step == 50 and s.has_tune
    before = load_session(run)
    assert s.generate("Paris is", max_new_tokens=6, greedy=True) == before.generate(
        "Paris is", max_new_tokens=6, greedy=True)
    assert main(["train", "--out", str(out), "--continue", "--tune-steps", "12", "--quiet"]) == 0
    assert [r["step"] for r in metrics(out)][-2:] == [51, 52]


def test_help_names_one_term_per_meaning(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert "--continue" in text and "resume" not in text.lower()


def test_existing_run_is_not_overwritten(run, capsys):
    before = (run / "checkpoint.npz").read_bytes()
    assert main(["train", "--out", str(run), *TINY]) == 2
    assert "already holds a training run" in capsys.readouterr().err
    assert (run / "checkpoint.npz").read_bytes() == before


@pytest.mark.parametrize("args,message", [
    (["--pretrain", "/nonexistent/file.txt"], "does not exist"),
    (["--d-model", "30", "--n-head", "4"], "not divisible by n_head"),
    (["--n-kv-head", "3"], "must divide n_head"),
    (["--device", "no-such-device"], "No OpenCL device matches"),
    (["--context-length", "4000"], "shorter than one training window"),
])
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, args, message):
    argv = ["train", "--out", str(tmp_path / "r"), "--steps", "1", *TINY]
    assert main(argv + args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_grouped_query_run_trains_samples_and_exports(tmp_path, capsys):
    """--n-kv-head: a grouped-query model trains, continues from its checkpoint (sample) and
    exports a GGUF whose head_count_kv is the run's."""
    gguf = pytest.importorskip("gguf")
    out = tmp_path / "r"
    args = ["--steps", "3", "--no-tune", *TINY, "--n-head", "4", "--n-kv-head", "2"]
    assert main(["train", "--out", str(out), *args]) == 0
    assert main(["sample", str(out), "--prompt", "Paris", "--max-tokens", "3"]) == 0
    assert main(["export", str(out), str(tmp_path / "m.gguf")]) == 0
    fields = gguf.GGUFReader(tmp_path / "m.gguf").fields
    assert fields["llama.attention.head_count_kv"].contents() == 2
    assert fields["llama.attention.head_count"].contents() == 4


def test_empty_file_exits_2(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    assert main(["train", "--out", str(tmp_path / "r"), "--pretrain", str(empty), *TINY]) == 2
    assert "empty" in capsys.readouterr().err


def test_same_seed_same_losses(tmp_path):
    for name in ("a", "b"):
        assert main(["train", "--out", str(tmp_path / name), "--steps", "6", "--tune-steps", "2",
                     *TINY]) == 0
    la = [r["loss"] for r in metrics(tmp_path / "a")]
    lb = [r["loss"] for r in metrics(tmp_path / "b")]
    assert la == lb
