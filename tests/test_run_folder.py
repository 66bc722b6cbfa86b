"""studio.run_folder: one reader of a run folder and one answer to what a model path holds.

The Runs table (studio.runs.load_run) and `--continue` (engine.files.checkpoint.load, through
load_session) read the same checkpoint of a folder whose newest file is torn, foreign or
missing; every command that takes a model path names what a wrong path is."""

import json
import os

import numpy as np
import pytest

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.errors import CheckpointError, StudioError
from opencl_llm_studio.studio.cli import main
from opencl_llm_studio.studio.run_folder import ModelKind, path_kind, read_header
from opencl_llm_studio.studio.runs import load_run, scan
from tests.runs_helpers import make_run


def _resave(folder, step: int) -> None:
    """Save the folder's checkpoint again at `step` (the first one becomes checkpoint.prev.npz)."""
    ck = checkpoint.load(folder)
    header = dict(ck["header"], step=step, adam_t=step)
    checkpoint.save(folder, header, ck["params"], ck["adam_m"], ck["adam_v"], ck["tokenizer"],
                    ck["pretrain_text"], ck["tune_text"])


def _npz(path, header: dict, leave_out=()) -> None:
    """A checkpoint-like archive with this header, written without engine.files.checkpoint's checks."""
    z = np.zeros(4, np.float32)
    members = {"params": z, "adam_m": z, "adam_v": z, "tokenizer": np.frombuffer(b"tok", np.uint8),
               "pretrain_text": np.frombuffer(b"text", np.uint8),
               "tune_text": np.zeros(0, np.uint8),
               "header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
    with open(path, "wb") as f:
        np.savez(f, **{k: v for k, v in members.items() if k not in leave_out})


def _partial(folder) -> None:
    """A save killed after its temp file was complete, before the rename: checkpoint.npz torn,
    the step-30 file under its temp name, step 20 in checkpoint.prev.npz."""
    _resave(folder, 30)
    os.replace(folder / checkpoint.FILENAME, folder / f".{checkpoint.FILENAME}.4242.beef.tmp")
    (folder / checkpoint.FILENAME).write_bytes(b"PK\x03\x04 torn")


def _foreign(folder) -> None:
    """checkpoint.npz of another format version (step 30); step 20 in checkpoint.prev.npz."""
    _resave(folder, 30)
    header = dict(checkpoint.load(folder)["header"], format="opencl-llm-studio-checkpoint/0")
    _npz(folder / checkpoint.FILENAME, header)


def _no_weights(folder) -> None:
    """checkpoint.npz whose header is fine but whose weights are not in it; step 20 before."""
    _resave(folder, 30)
    _npz(folder / checkpoint.FILENAME, checkpoint.load(folder)["header"], leave_out=("params",))


def _only_previous(folder) -> None:
    """checkpoint.npz missing (removed by hand), checkpoint.prev.npz at step 20."""
    _resave(folder, 30)
    os.remove(folder / checkpoint.FILENAME)


@pytest.mark.parametrize("damage,step", [(_partial, 30), (_foreign, 20), (_no_weights, 20),
                                         (_only_previous, 20)])
def test_the_runs_table_and_continue_read_the_same_checkpoint(tmp_path, damage, step):
    """The Runs table read checkpoint.npz, else checkpoint.prev.npz, and any header it found;
    `--continue` also takes a complete temp file of an interrupted save and refuses a foreign
    or incomplete archive: one folder, two steps. Both now go through one list of candidates."""
    folder = make_run(tmp_path, "r", steps_done=30, saved_step=20, total=40)
    damage(folder)
    loaded = checkpoint.load(folder)          # what load_session (--continue) reads
    row = load_run(folder)
    assert loaded["header"]["step"] == step
    assert row.header == read_header(folder) == loaded["header"]
    assert [r.header for r in scan([tmp_path])] == [loaded["header"]]
    assert row.status == ("stopped" if step == 30 else "crashed")   # metrics reach step 30


def test_no_checkpoint_at_all(tmp_path):
    folder = make_run(tmp_path, "r", steps_done=5, saved_step=-1)
    with pytest.raises(CheckpointError, match="No checkpoint"):
        checkpoint.load(folder)
    assert read_header(folder) is None and load_run(folder).status == "crashed"
    assert path_kind(folder) is ModelKind.RUN_FOLDER       # metrics.jsonl makes it a run


def test_continue_trains_from_the_file_the_table_shows(tmp_path, capsys):
    """A real run whose last save was interrupted: the table and `train --continue` both say
    step 4 (the complete temp file), not the step 2 of checkpoint.prev.npz."""
    out = tmp_path / "run"
    tiny = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "16",
            "--vocab-size", "320", "--batch-size", "2", "--quiet", "--no-tune"]
    assert main(["train", "--out", str(out), "--steps", "2", *tiny]) == 0
    assert main(["train", "--out", str(out), "--continue", "--steps", "4", "--quiet"]) == 0
    os.replace(out / checkpoint.FILENAME, out / f".{checkpoint.FILENAME}.4242.beef.tmp")
    (out / checkpoint.FILENAME).write_bytes(b"PK\x03\x04 torn")
    assert load_run(out).header["step"] == 4
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--continue", "--steps", "5", "--quiet"]) == 0
    assert "at step 4/5" in capsys.readouterr().err


# ------------------------------------------------------------------ what a path holds
def test_each_kind_of_path(tmp_path):
    run = make_run(tmp_path, "r")
    (tmp_path / "model.GGUF").write_bytes(b"GGUF")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "config.json").write_text("{}")
    (ours / "studio.json").write_text("{}")
    assert path_kind(run) is ModelKind.RUN_FOLDER
    assert path_kind(run / "checkpoint.npz") is ModelKind.CHECKPOINT
    assert path_kind(str(tmp_path / "model.GGUF")) is ModelKind.GGUF
    assert path_kind(hf) is ModelKind.HF_FOLDER
    assert path_kind(ours) is ModelKind.APP_HF_FOLDER


@pytest.mark.parametrize("make,says", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "folder without a model"),
    (lambda p: (p / "notes.txt").write_text("hi") and p / "notes.txt",
     "neither a checkpoint (.npz) nor a GGUF"),
])
def test_a_wrong_path_is_named_with_what_to_give(tmp_path, make, says):
    path = make(tmp_path)
    with pytest.raises(StudioError, match="does not exist|without a model|neither") as e:
        path_kind(path)
    assert says in str(e.value) and str(path) in str(e.value)
    assert "run folder" in e.value.hint and ".gguf" in e.value.hint


@pytest.mark.parametrize("argv,says", [
    (["chat", "{tmp}/notes.txt", "-m", "hi"], "neither a checkpoint (.npz) nor a GGUF"),
    (["tokenize", "{tmp}/missing", "hi"], "does not exist"),
    (["sample", "{tmp}/hf"], "is a transformers folder; this command takes a run folder"),
    (["train", "--out", "{tmp}/hf", "--continue"], "is a transformers folder, not a training run"),
    (["import", "{tmp}/20261101-120000", "{tmp}/new"], "is a run folder: it is a run already"),
])
def test_commands_say_what_a_wrong_path_is(tmp_path, capsys, argv, says):
    make_run(tmp_path, "r")
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "new").exists()
