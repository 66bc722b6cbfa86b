"""A new user's first hour (issue 32), each fault by its kind: one notion of "my runs" for both
front ends, an empty runs folder is no error, a finished run leaves no lock file, your own text
is not tuned on the bundled dialogues behind your back, and --version answers."""

import os
import threading

import pytest

from opencl_llm_studio.engine.training.run_lock import LOCK_NAME, RunLock
from opencl_llm_studio.studio.cli import main
from tests.helpers import TINY

RUN = ["--steps", "3", "--tune-steps", "2", *TINY]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user with a home of their own (the studio's settings and runs folder inside), standing
    in an empty folder."""
    for var, sub in (("HOME", "home"), ("XDG_DATA_HOME", "home/.local/share"),
                     ("XDG_CONFIG_HOME", "home/.config")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    from opencl_llm_studio.studio.app_settings import runs_root
    return runs_root()


def test_runs_on_a_machine_where_nothing_ran_is_an_empty_list(home, capsys):
    """`llm-studio runs` before any run (no runs folder yet): exit 0 and where runs will go
    (it said "... runs is not a folder" and exited 2)."""
    assert not home.exists()
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "No runs yet" in out and str(home) in out


def test_a_run_named_on_the_command_line_is_one_the_studio_lists(home, capsys):
    """`train --out NAME` puts the run in the runs folder that the studio's Runs window reads
    (studio.app_settings.runs_root), `runs` lists it, and the other commands find it by name;
    nothing is written where the user stands."""
    from opencl_llm_studio.studio.runs import scan
    assert main(["train", "--out", "first", *RUN]) == 0
    assert (home / "first" / "checkpoint.npz").exists()
    assert [r.path.name for r in scan([home])] == ["first"]
    capsys.readouterr()
    assert main(["runs"]) == 0
    assert "first" in capsys.readouterr().out
    for argv in (["sample", "first", "--max-tokens", "2"], ["tokenize", "first", "Paris"],
                 ["chat", "first", "-m", "Hi", "--max-tokens", "2"], ["export", "first"],
                 ["train", "--out", "first", "--continue", "--tune-steps", "3"],
                 ["train", "--out", "second", "--continue-from", "first", "--tune-steps", "4"]):
        assert main(argv) == 0, argv
    assert (home / "first" / "export" / "first-f32.gguf").exists()
    assert (home / "second" / "checkpoint.npz").exists()
    assert list(__import__("pathlib").Path.cwd().iterdir()) == []


def test_a_path_is_used_as_written(home, tmp_path):
    """A run argument with a separator is a path (here, relative to the current folder)."""
    assert main(["train", "--out", "./mine", *RUN]) == 0
    assert (tmp_path / "here" / "mine" / "checkpoint.npz").exists()
    assert not (home / "mine").exists()


def test_export_of_a_gguf_without_an_output_asks_for_one(home, tmp_path, capsys):
    assert main(["train", "--out", "first", *RUN]) == 0
    gguf = tmp_path / "m.gguf"
    assert main(["export", "first", str(gguf)]) == 0
    assert main(["export", str(gguf)]) == 2
    assert "name the file to write" in capsys.readouterr().err


def test_a_finished_run_leaves_no_lock_file(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *RUN]) == 0
    assert not (out / LOCK_NAME).exists()


def test_a_released_lock_is_removed_and_the_folder_locks_again(tmp_path):
    """RunLock.release removes the file; a lock taken while another process removes it ends on
    the file at the path (acquire re-checks), so two holders never coexist."""
    lock = RunLock(tmp_path).acquire()
    assert (tmp_path / LOCK_NAME).exists()
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()
    stop, held = threading.Event(), []

    def churn():   # take and give back as fast as possible
        while not stop.is_set():
            try:
                with RunLock(tmp_path):
                    held.append(1)
            except Exception:
                pass
    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(200):
            try:
                with RunLock(tmp_path) as mine:
                    st = os.stat(mine.path)
                    assert st.st_ino == os.fstat(mine._file.fileno()).st_ino
            except Exception as e:   # busy: the other holder has it
                assert "in use" in str(e) or "training" in str(e), e
    finally:
        stop.set()
        t.join()


def test_own_text_without_dialogues_pretrains_only(tmp_path, capsys):
    """`train --pretrain MINE.txt` without --tune tuned on the bundled dialogues, so a model of
    Python source wrote the bundled facts: now it pretrains only and says so."""
    from opencl_llm_studio.engine.training.opening import load_session
    text = tmp_path / "code.py"
    text.write_text("".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(300)))
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--pretrain", str(text), *RUN]) == 0
    assert "pretraining only" in capsys.readouterr().err
    assert not load_session(out).has_tune


def test_version(capsys):
    from opencl_llm_studio import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"llm-studio {__version__}"


def test_the_studio_says_when_your_text_would_be_tuned_on_the_sample_dialogues(qtbot, tmp_path):
    """The window keeps the bundled dialogues in the tune slot when you open your own text:
    the slot then says, before Train, that tuning teaches the sample's facts."""
    from opencl_llm_studio.engine.data.textio import bundled_corpus
    from opencl_llm_studio.studio.ui.panels.data_panel import BUNDLED_TUNE_NOTE, DataPanel
    panel = DataPanel()
    qtbot.addWidget(panel)
    assert panel.load("pretrain", bundled_corpus("pretrain"))
    assert panel.load("tune", bundled_corpus("tune"))
    assert BUNDLED_TUNE_NOTE not in panel.tune.stats.text()
    mine = tmp_path / "mine.txt"
    mine.write_text("My own words, about my own things.\n\nAnother paragraph of them.\n")
    assert panel.load("pretrain", mine)
    assert BUNDLED_TUNE_NOTE in panel.tune.stats.text()
    own_tune = tmp_path / "mine-dialogues.txt"
    own_tune.write_text("User: hi\nAssistant: hello\n")
    assert panel.load("tune", own_tune)
    assert BUNDLED_TUNE_NOTE not in panel.tune.stats.text()


def test_every_command_says_what_it_does_in_its_own_help(capsys):
    """`llm-studio devices --help` (and sample, export, tune-kernels) printed a usage line and
    options but no line saying what the command does: every command's help has one."""
    from opencl_llm_studio.studio.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = capsys.readouterr().out
        lines = [line for line in text.split("\n\n")[1:2]]   # the paragraph after the usage
        assert lines and lines[0].strip() and not lines[0].startswith(("positional", "options")), \
            (name, text[:300])


def test_a_continued_run_takes_how_to_train_from_here(tmp_path, capsys):
    """`train --continue --batch-size 4` kept batch 16 ("a continued run keeps its model, data
    and settings"): a continued run takes the batch size, learning rate, replay and dropout,
    and still keeps its model and data."""
    from opencl_llm_studio.engine.training.opening import load_session
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *RUN]) == 0
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--continue", "--tune-steps", "4",
                 "--batch-size", "2", "--lr", "0.001", "--d-model", "64"]) == 0
    err = capsys.readouterr().err
    assert "batch size 2" in err and "--d-model ignored" in err, err
    s = load_session(out)
    assert (s.train_config.batch_size, s.train_config.learning_rate) == (2, 0.001)
    assert s.model_config.d_model == 32
    with pytest.raises(SystemExit) as e:   # range-checked at the edge, the run untouched
        main(["train", "--out", str(out), "--continue", "--tune-steps", "5",
              "--batch-size", "100000"])
    assert e.value.code == 2
    assert load_session(out).step == s.step
