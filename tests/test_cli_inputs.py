"""What a person can type or do to `llm-studio`: every bad number is exit 2 with a message,
the ETA is honest after a resume or a pause, the progress line leaves no stale characters, and
closing the terminal (SIGHUP) saves the run."""

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencl_llm_studio.engine.progress import Pace
from opencl_llm_studio.studio.cli import main
from opencl_llm_studio.studio.cli.progress import ProgressLine
from tests.fake_clock import FakeTime

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
        "--vocab-size", "320", "--batch-size", "4", "--quiet"]
BAD = ["-1", "-1000000", "99999999999999999999", "1e309", "nan", "inf", "-inf", "abc", ""]
TRAIN_NUMBERS = {"--d-model": ["0", "1"], "--n-layer": ["0"], "--n-head": ["0"], "--n-kv-head": [],
                 "--context-length": ["0"], "--vocab-size": ["0", "258"], "--lr": ["0", "1"],
                 "--steps": [], "--tune-steps": [], "--batch-size": ["0"], "--replay": ["1.5"],
                 "--seed": [], "--checkpoint-every": []}
GEN_NUMBERS = {"--max-tokens": ["0"], "--temperature": [], "--top-k": [], "--top-p": ["0"],
               "--repeat-penalty": ["0"], "--seed": []}


def _exit_code(argv, capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("option,value", [(o, v) for o, extra in TRAIN_NUMBERS.items()
                                          for v in BAD + extra])
def test_train_rejects_every_bad_number(tmp_path, capsys, option, value):
    rc, err = _exit_code(["train", "--out", str(tmp_path / "r"), *TINY, option, value], capsys)
    assert rc == 2 and option in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # refused before any work


@pytest.mark.parametrize("command", ["sample", "chat"])
@pytest.mark.parametrize("option,value", [(o, v) for o, extra in GEN_NUMBERS.items()
                                          for v in BAD + extra])
def test_sample_and_chat_reject_every_bad_number(tmp_path, capsys, command, option, value):
    rc, err = _exit_code([command, str(tmp_path), option, value], capsys)
    assert rc == 2 and option in err and "Traceback" not in err


def test_zero_steps_is_a_message_not_a_traceback(tmp_path, capsys):
    rc, err = _exit_code(["train", "--out", str(tmp_path / "r"), "--steps", "0",
                          "--tune-steps", "0", *TINY], capsys)
    assert rc == 2 and "Nothing to train" in err and "Traceback" not in err


# ---------------------------------------------------------------- ETA and the progress line

def test_eta_after_resume_counts_only_this_process():
    """Resumed at step 90 of 100, one step a second: 9 s left after step 91, not 0.1 s (the
    old CLI divided this process's time by the share of all steps done)."""
    clock = FakeTime()
    pace = Pace(clock=clock)
    pace.start(90)
    clock.t += 1
    pace.update(91)
    assert pace.eta(100) == pytest.approx(9)


def test_eta_excludes_paused_time_and_follows_an_extension():
    clock = FakeTime()
    pace = Pace(clock=clock)
    pace.start(0)
    for step in range(1, 6):
        clock.t += 2
        pace.update(step)
    pace.pause()
    clock.t += 3600  # an hour away from the laptop
    pace.resume()
    clock.t += 2
    pace.update(6)
    assert pace.eta(10) == pytest.approx(8)
    assert pace.eta(20) == pytest.approx(28)  # the run was extended to 20 steps


class Tty(io.StringIO):
    def isatty(self):
        return True


class Record:
    def __init__(self, step, total, loss=1.0):
        self.step, self.total_steps, self.stage, self.loss = step, total, "pretrain", loss
        self.val_loss, self.tokens_per_s = None, 1000.0


def _screen(raw: str) -> str:
    """What a terminal shows after `raw` (carriage returns overwrite)."""
    line, col = "", 0
    for ch in raw:
        if ch == "\r":
            col = 0
        elif ch == "\n":
            line, col = "", 0
            continue
        else:
            line = line[:col] + ch + line[col + 1:]
            col += 1
            continue
    return line


def test_a_shorter_line_leaves_no_characters_of_a_longer_one():
    out = Tty()
    line = ProgressLine(out)
    line.show("x" * 60)
    line.show("short")
    assert _screen(out.getvalue()).rstrip() == "short"


def test_the_step_line_of_a_resumed_run_shows_this_process_eta(monkeypatch):
    out = Tty()
    line = ProgressLine(out)
    clock = FakeTime()
    line.pace = Pace(clock=clock)
    line.pace.start(90)
    clock.t += 10
    line.step(Record(91, 100))
    assert _screen(out.getvalue()).rstrip().endswith("ETA 1:30")
    line.phase("checking recall", 3, 64)  # a long phase inside the step: no leftovers
    assert _screen(out.getvalue()).rstrip().endswith("91/100 · checking recall 3/64…")


def test_a_closed_terminal_does_not_stop_the_save():
    class Gone(Tty):
        def write(self, text):
            raise OSError(5, "Input/output error")
    line = ProgressLine(Gone())
    line.step(Record(1, 10))
    line.say("Stopped")  # no exception


def test_sighup_saves_the_run(tmp_path):
    """Closing the terminal sends SIGHUP, whose default is to end the process at once (no
    checkpoint); the CLI stops after the step and saves, as for Ctrl-C."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "opencl_llm_studio", "train", "--out", str(out), "--steps", "300",
           "--tune-steps", "20", "--checkpoint-every", "0", *TINY]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE)
    mfile = out / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (mfile.exists() and len(mfile.read_text().splitlines()) >= 3):
        time.sleep(0.05)
    proc.stderr.close()  # the terminal is gone: writing to it fails
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=120) == 130
    from opencl_llm_studio.engine.training.opening import load_session
    steps = len(mfile.read_text().splitlines())
    assert load_session(out).step == steps >= 3


@pytest.mark.parametrize("body,says", [
    ("User: hi\nBot: hello\n", "has no line starting with 'Assistant:'"),
    ("Hello\nUser: hi\nAssistant: yo\n", "line 1: expected a line starting with 'User:'")])
def test_a_bad_tune_file_is_named_in_the_cli_and_the_studio(tmp_path, capsys, qtbot, body, says):
    """`train --tune bad.txt` said "The tune file has no line ..." (which file?) and the studio
    "The /path/bad.txt has no line ...": both now name the tune dialogues file and its path."""
    bad = tmp_path / "bad dialogues.txt"
    bad.write_text(body, encoding="utf-8")
    named = f"tune dialogues file '{bad}'"
    rc, err = _exit_code(["train", "--out", str(tmp_path / "run"), "--tune", str(bad), *TINY,
                          "--steps", "1"], capsys)
    assert rc == 2 and named in err and says in err, err
    from opencl_llm_studio.studio.ui.panels.data_panel import DataPanel
    panel = DataPanel()
    qtbot.addWidget(panel)
    errors = []
    panel.errorOccurred.connect(lambda title, text: errors.append(text))
    assert not panel.load("tune", bad)
    assert named in errors[0] and says in errors[0], errors
