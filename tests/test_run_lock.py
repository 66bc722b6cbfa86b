"""One training process per run folder (issue 11): a second `train --out` into a folder in use
exits 2 naming the folder and the pid; a SIGKILLed holder never leaves the folder stuck."""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.training import run_lock
from opencl_llm_studio.engine.training.run_lock import RunFolderBusy, RunLock, ensure_free
from opencl_llm_studio.studio.run_folder import RunRecorder

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
        "--vocab-size", "320", "--batch-size", "4", "--quiet"]
HOLD = ("import sys, time; from opencl_llm_studio.engine.training.run_lock import RunLock; "
        "lock = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)")


def _holder(folder):
    """A process holding the lock of `folder` until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], env=ENV, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _train(out, *extra, **kw):
    return subprocess.run([sys.executable, "-m", "opencl_llm_studio.studio.cli", "train", "--out", str(out),
                           *TINY, *extra], env=ENV, cwd=ROOT, capture_output=True, text=True,
                          timeout=600, **kw)


def test_a_second_train_into_a_folder_in_use_exits_2_naming_the_pid(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "opencl_llm_studio.studio.cli", "train", "--out", str(out),
                              "--steps", "100000", "--tune-steps", "0",
                              "--checkpoint-every", "1", *TINY],
                             env=ENV, cwd=ROOT)
    try:
        mfile = out / "metrics.jsonl"
        deadline = time.time() + 300
        while time.time() < deadline and not (mfile.exists() and mfile.read_text().count("\n") > 1):
            assert first.poll() is None
            time.sleep(0.05)
        lines_before = mfile.read_text().count("\n")
        for extra in ([], ["--continue"]):
            second = _train(out, "--steps", "3", "--tune-steps", "0", *extra)
            assert second.returncode == 2, second.stderr
            assert str(out) in second.stderr and f"process {first.pid}" in second.stderr
            assert "--out" in second.stderr  # the hint says what to do
        assert first.poll() is None and mfile.read_text().count("\n") >= lines_before
        first.send_signal(signal.SIGKILL)  # the crash releases the lock with the process
        first.wait()
        step = checkpoint.load(out)["header"]["step"]
        resumed = _train(out, "--continue", "--steps", str(step + 1), "--tune-steps", "0")
        assert resumed.returncode == 0, resumed.stderr
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_a_killed_holder_leaves_the_folder_free(tmp_path):
    proc = _holder(tmp_path)
    with pytest.raises(RunFolderBusy, match=f"process {proc.pid} is training"):
        RunLock(tmp_path).acquire()
    with pytest.raises(RunFolderBusy):
        RunRecorder(tmp_path)          # the studio's autosave folder is refused too
    with pytest.raises(RunFolderBusy):
        ensure_free(tmp_path)          # and File › Save checkpoint into it
    assert not (tmp_path / "metrics.jsonl").exists()  # the refused recorder touched nothing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with RunLock(tmp_path) as lock:
        assert lock.held and run_lock.holder(lock.path)[0] == os.getpid()
    assert run_lock.holder(lock.path) == (None, "")  # released: no stale pid to show


def test_one_process_cannot_train_twice_in_one_folder(tmp_path):
    recorder = RunRecorder(tmp_path / "run")
    with pytest.raises(RunFolderBusy, match="in use"):
        RunRecorder(tmp_path / "run")
    recorder.close()
    RunRecorder(tmp_path / "run").close()  # closing gave it back


def test_ensure_free_leaves_no_lock_file_in_a_plain_folder(tmp_path):
    ensure_free(tmp_path)
    assert not list(tmp_path.iterdir())


def test_without_os_locks_the_holders_pid_is_checked(tmp_path, monkeypatch):
    fcntl = pytest.importorskip("fcntl")

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")  # some network filesystems
    monkeypatch.setattr(fcntl, "flock", no_locks)
    proc = _holder(tmp_path / "live")  # the child is not patched: it wrote its pid
    try:
        with pytest.raises(RunFolderBusy, match=f"process {proc.pid}"):
            RunLock(tmp_path / "live").acquire()
    finally:
        proc.kill()
        proc.wait()
    (tmp_path / "dead").mkdir()
    (tmp_path / "dead" / run_lock.LOCK_NAME).write_text(f"{2**22 + 1} {os.uname().nodename}\n")
    with RunLock(tmp_path / "dead"):  # a holder that is gone does not count
        pass


def test_two_studios_starting_in_the_same_second_get_two_folders(tmp_path):
    """new_run_dir claims the folder it names: two windows pressing Train in one second (same
    timestamp) get <stamp> and <stamp>-2, and both runs record (before, both got <stamp> and
    the second was refused as "in use")."""
    from opencl_llm_studio.studio.run_folder import new_run_dir
    now = time.time()
    a, b = new_run_dir(tmp_path, now), new_run_dir(tmp_path, now)
    assert a != b and a.is_dir() and b.is_dir() and b.name == a.name + "-2"
    first, second = RunRecorder(a), RunRecorder(b)
    first.close(), second.close()


def test_a_claimed_folder_no_run_wrote_into_is_given_back(tmp_path):
    from opencl_llm_studio.studio.run_folder import new_run_dir, remove_if_empty
    claimed = new_run_dir(tmp_path)
    remove_if_empty(claimed)
    assert not claimed.exists()
    used = new_run_dir(tmp_path)
    (used / "metrics.jsonl").write_text("{}\n")
    remove_if_empty(used)                  # a folder with anything in it stays
    assert used.exists()


def test_the_busy_message_fits_the_studio_and_the_cli(tmp_path):
    """The engine's refusal is shown by both: no command-line option in it."""
    recorder = RunRecorder(tmp_path / "run")
    with pytest.raises(RunFolderBusy) as e:
        RunRecorder(tmp_path / "run")
    recorder.close()
    assert "--" not in e.value.hint and "another run folder" in e.value.hint
