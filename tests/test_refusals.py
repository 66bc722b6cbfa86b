"""Refused means nothing changed: every command that refuses (exit 2) leaves the disk as it was,
and says so in the command line's words (no "Choose", "click", "box", "tab", "dialog").

Each case lists the folder tree (names and file contents) before and after the command."""

import hashlib
import re
import shutil
from pathlib import Path

import pytest

from opencl_llm_studio.studio.cli import main

TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
        "--vocab-size", "320", "--batch-size", "4", "--quiet"]
DIALOG_WORDS = re.compile(r"\b(choose|click|box|tab|dialog|button|pick)\b", re.IGNORECASE)


def tree(root: Path) -> dict:
    """Relative path -> sha256 of the file (None for a folder), hidden entries included."""
    return {str(p.relative_to(root)): None if p.is_dir() else
            hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))}


def refused(argv, root: Path, capsys, code=2) -> str:
    """Run the CLI; assert its exit code, that `root` is unchanged and that the message is in
    the command line's words. Returns stderr."""
    before = tree(root)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert tree(root) == before, err
    assert "Traceback" not in err
    assert not DIALOG_WORDS.search(err), err
    return err


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("refusals") / "run"
    assert main(["train", "--out", str(out), "--steps", "4", "--tune-steps", "2", *TINY]) == 0
    return out


@pytest.fixture
def place(tmp_path, run):
    """A folder holding a copy of the run (without its lock file: a run imported or copied from
    elsewhere), an empty folder and a user's file."""
    shutil.copytree(run, tmp_path / "run")
    (tmp_path / "run" / ".training.lock").unlink(missing_ok=True)   # a finished run has none
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("mine\n")
    return tmp_path


BAD_TUNE = "User: q\nAssistant: a\nUser: a question without an answer\n"


@pytest.mark.parametrize("out", ["new/run", "empty"])
@pytest.mark.parametrize("args,says", [
    (["--device", "no-such-device"], "No OpenCL device matches"),
    (["--d-model", "32768", "--n-layer", "64", "--n-head", "128", "--steps", "1"], "needs about"),
    (["--tune", "bad.txt"], "ends without an 'Assistant:'"),
    (["--pretrain", "missing.txt"], "does not exist"),
])
def test_train_refused_leaves_no_folder_or_lock(place, capsys, monkeypatch, out, args, says):
    monkeypatch.chdir(place)
    (place / "bad.txt").write_text(BAD_TUNE)
    argv = ["train", "--out", out, *TINY, *args]
    assert says in refused(argv, place, capsys)


@pytest.mark.parametrize("args,code", [([], 0), (["--device", "no-such-device"], 2),
                                       (["--steps", "10", "--device", "no-such-device"], 2)])
def test_continue_refused_or_with_nothing_left_changes_nothing(place, capsys, args, code):
    refused(["train", "--out", str(place / "run"), "--continue", *args], place, capsys, code)


@pytest.mark.parametrize("name,says", [("zero\u200bwidth.gguf", "cannot hold"),
                                       ("notes.txt", "already exists")])
def test_export_gguf_refused(place, capsys, name, says):
    assert says in refused(["export", str(place / "run"), str(place / name)], place, capsys)


def test_export_gguf_into_new_folders(place, capsys):
    """The CLI makes missing folders, as other tools do, instead of a dialog's 'Choose an
    existing folder'."""
    assert main(["export", str(place / "run"), str(place / "a" / "b" / "m.gguf")]) == 0
    assert (place / "a" / "b" / "m.gguf").is_file() and (place / "a" / "b" / "m.Modelfile").is_file()


@pytest.mark.parametrize("target,says", [("notes.txt", "is a file"), ("run", "not a Hugging Face"),
                                         ("run/checkpoint.npz", "is a file")])
def test_export_hf_force_never_replaces_other_things(place, capsys, target, says):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    argv = ["export", str(place / "run"), str(place / target), "--format", "hf", "--force"]
    assert says in refused(argv, place, capsys)


def test_export_hf_force_leaves_no_old_copy(place, capsys):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    argv = ["export", str(place / "run"), str(place / "hf"), "--format", "hf"]
    assert main(argv) == 0
    before = tree(place)
    assert main(argv + ["--force"]) == 0
    assert tree(place).keys() == before.keys()   # no hidden .hf.*.old, no temp folder


@pytest.mark.parametrize("argv", [
    ["import", "{p}/run", "{p}/new/back"],
    ["import", "{p}/missing", "{p}/new/back"],
    ["scale-out", "{p}/run", "{p}/empty/../run"],
    ["chat", "{p}/missing", "-m", "hi"],
    ["sample", "{p}/notes.txt"],
    ["tokenize", "{p}/new/run", "text"],
    ["runs", "{p}/new"],
    ["plot", "{p}/empty", "-o", "{p}/new/curves.png"],
])
def test_other_commands_refused_change_nothing(place, capsys, argv):
    refused([a.format(p=place) for a in argv], place, capsys)


def test_train_messages_name_cli_options(place, capsys, monkeypatch):
    """The hint of an unwritable --out names the option, not a dialog."""
    err = refused(["train", "--out", "/proc/no/such/run", *TINY], place, capsys)
    assert "--out" in err


def test_a_busy_folder_is_left_to_its_trainer(tmp_path, capsys, monkeypatch):
    """A train refused because another process trains in --out removes nothing there, not even
    what that process made while this one started (here: a folder and a file made just before
    the refusal)."""
    from opencl_llm_studio.engine.training import run_lock

    def busy(self):   # the other trainer made the folder and its first file meanwhile
        (tmp_path / "new").mkdir()
        (tmp_path / "new" / "metrics.jsonl").write_text("{}\n")
        raise run_lock.RunFolderBusy(f"The run folder {self.folder} is in use.", "Wait.")
    monkeypatch.setattr(run_lock.RunLock, "acquire", busy)
    assert main(["train", "--out", str(tmp_path / "new"), *TINY]) == 2
    assert (tmp_path / "new" / "metrics.jsonl").read_text() == "{}\n"


def test_import_of_a_damaged_gguf_says_only_why(place, capsys):
    """A file that is no GGUF is refused with its reason alone, no note about the training
    text first (was: "note: the model carries no training text; the run keeps the bundled
    corpus..." above the error, as if the import had gone on)."""
    (place / "broken.gguf").write_bytes(b"\x00" * 64)
    err = refused(["import", str(place / "broken.gguf"), str(place / "new" / "back")], place,
                  capsys)
    assert "not a GGUF file" in err and "note:" not in err


@pytest.mark.parametrize("argv,takes,not_taken", [
    (["chat", "{p}/missing", "-m", "hi"], "a .gguf file", "transformers model folder (config"),
    (["export", "{p}/missing", "{p}/new/m.gguf"], "a .gguf file",
     "transformers model folder (config"),
    (["train", "--out", "{p}/new/run", "--continue-from", "{p}/missing"], "a checkpoint .npz",
     ".gguf"),
    (["import", "{p}/missing", "{p}/new/back"], "transformers model folder", "checkpoint"),
])
def test_a_missing_path_is_told_what_this_command_takes(place, capsys, argv, takes, not_taken):
    """The hint after "... does not exist." names what this command takes (was one hint for
    all: chat and export were told to give "a transformers model folder (config.json)", which
    they then refused with "this command takes a run folder or a GGUF")."""
    err = refused([a.format(p=place) for a in argv], place, capsys)
    hint = err.split("does not exist.")[1]
    assert takes in hint and not_taken not in hint, err
