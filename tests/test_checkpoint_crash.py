"""A checkpoint save killed at any point leaves a complete checkpoint.npz (issue 11).

Each crash is real: a forked child runs checkpoint.save and ends itself with os._exit (no
`finally`, no cleanup, as SIGKILL) at its n-th filesystem step: while writing the temp file,
after an fsync, a hard link, a rename, the folder fsync, a temp removal. The parent then checks
what `load` finds, and that the next save works and leaves no temp file behind.
"""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine import fsutil

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
STEPS = ("fsync", "link", "replace", "unlink", "fsync_dir", "copyfile")


def _save(folder, step):
    p = np.full(64, float(step), np.float32)
    return checkpoint.save(folder, {"step": step}, p, p * 2, p * 3, b"tok", "pre" * step, None)


def _crash_save_at(folder, step, n, no_links=False):
    """Fork; the child saves `step` and dies at filesystem step n. True if it died there."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        count = [0]

        def tick():
            count[0] += 1
            if count[0] == n:
                os._exit(9)

        def wrap(fn):
            def wrapped(*a, **k):
                tick()
                out = fn(*a, **k)
                tick()
                return out
            return wrapped
        real_savez = np.savez

        def savez(f, **arrays):  # dies half way through the temp file when n is 1
            import io
            buf = io.BytesIO()
            real_savez(buf, **arrays)
            f.write(buf.getvalue()[: buf.tell() // 2])
            f.flush()
            tick()
            f.write(buf.getvalue()[buf.tell() // 2:])
        np.savez = savez
        for name in ("fsync", "replace", "unlink"):
            setattr(os, name, wrap(getattr(os, name)))
        os.link = wrap(_no_link if no_links else os.link)
        shutil.copyfile = wrap(shutil.copyfile)
        fsutil.fsync_dir = wrap(fsutil.fsync_dir)
        Path.unlink = wrap(Path.unlink)
        try:
            _save(folder, step)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 9


def _no_link(src, dst):
    raise OSError(1, "Operation not permitted")  # FAT, some network shares


@pytest.mark.parametrize("no_links", [False, True], ids=["hard-link", "copy"])
@pytest.mark.parametrize("before", [1, 2], ids=["one-save-before", "two-saves-before"])
def test_a_kill_at_any_point_of_a_save_leaves_a_complete_checkpoint(tmp_path, before, no_links):
    n, outcomes = 0, set()
    while True:
        n += 1
        folder = tmp_path / f"crash-{n}"
        for step in range(1, before + 1):
            _save(folder, step)
        died = _crash_save_at(folder, 10, n, no_links)
        ck = checkpoint.load(folder)
        # checkpoint.npz itself is whole, the old one or the new one; never only the previous
        assert not ck["from_previous"], f"crash at step {n}: checkpoint.npz missing or damaged"
        assert ck["header"]["step"] in (before, 10)
        np.testing.assert_array_equal(ck["params"], np.full(64, ck["header"]["step"], np.float32))
        outcomes.add(ck["header"]["step"])
        previous = folder / "checkpoint.prev.npz"
        if previous.exists():
            assert checkpoint.load(previous)["header"]["step"] in (before - 1, before)
        _save(folder, 11)  # the next save works and removes the killed writer's temp files
        assert checkpoint.load(folder)["header"]["step"] == 11
        assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.npz", "checkpoint.prev.npz"]
        if not died:  # n passed the last filesystem step: every point was tried
            break
    assert n > 6 and outcomes == {before, 10}


def test_a_kill_during_the_first_save_leaves_no_checkpoint_or_a_complete_one(tmp_path):
    for n in range(1, 12):
        folder = tmp_path / f"first-{n}"
        _crash_save_at(folder, 3, n)
        try:
            ck = checkpoint.load(folder)
        except checkpoint.CheckpointError as e:
            assert "No checkpoint" in str(e) or "not a readable" in str(e)
        else:
            assert ck["header"]["step"] == 3


def test_the_complete_checkpoint_left_in_a_temp_file_by_older_versions_is_found(tmp_path):
    """What the old two-rename save left after a kill between its renames: no checkpoint.npz,
    the previous one renamed aside, the newest complete under a mkstemp name."""
    _save(tmp_path, 5)
    target = checkpoint.checkpoint_path(tmp_path)
    os.replace(target, target.with_name("checkpoint.prev.npz"))
    _save(tmp_path / "newer", 10)
    os.replace(checkpoint.checkpoint_path(tmp_path / "newer"), tmp_path / ".checkpoint-x1y2.tmp")
    (tmp_path / ".checkpoint-zz.tmp").write_bytes(b"PK\x03\x04 half written")
    ck = checkpoint.load(tmp_path)
    assert ck["header"]["step"] == 10 and ck["from_previous"]
    _save(tmp_path, 11)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.npz", "checkpoint.prev.npz", "newer"]


def test_a_live_writers_temp_file_is_left_alone(tmp_path):
    _save(tmp_path, 1)
    target = checkpoint.checkpoint_path(tmp_path)
    live = target.with_name(f".{target.name}.{os.getppid()}.abcd1234.tmp")  # pytest's parent
    dead = target.with_name(f".{target.name}.{2**22 + 12345}.abcd1234.tmp")  # above pid_max
    live.write_bytes(b"being written")
    dead.write_bytes(b"left by a killed process")
    _save(tmp_path, 2)
    assert live.exists() and not dead.exists()


def _dies_half_way(self, text, *a, **k):
    """Path.write_text that writes half of the text and fails, as a kill or a full disk would."""
    with open(self, "w", encoding="utf-8") as f:
        f.write(text[: len(text) // 2])
    raise OSError(28, "No space left on device")


def test_rewriting_metrics_on_resume_never_loses_them(tmp_path, monkeypatch):
    from opencl_llm_studio.studio.run_folder import MetricsLog, RunRecorder
    lines = "".join(f'{{"step": {i}, "loss": 1.0}}\n' for i in range(1, 9))
    cli_file = tmp_path / "cli" / "metrics.jsonl"
    cli_file.parent.mkdir()
    cli_file.write_text(lines)
    recorder = RunRecorder(tmp_path / "studio", history=[{"step": i} for i in range(1, 9)])
    studio_file = recorder.folder / "metrics.jsonl"
    before = studio_file.read_text()
    monkeypatch.setattr(Path, "write_text", _dies_half_way)
    with pytest.raises(OSError):
        MetricsLog(cli_file.parent, keep_until=5)   # what `train --continue` does first
    recorder.truncate(5)                             # what the studio does after a NaN restore
    recorder.close()
    assert cli_file.read_text() == lines and studio_file.read_text() == before
    monkeypatch.undo()
    MetricsLog(cli_file.parent, keep_until=5).close()
    assert cli_file.read_text().count("\n") == 5
    assert sorted(p.name for p in cli_file.parent.iterdir()) == ["metrics.jsonl"]


def test_a_killed_exports_temp_file_is_removed_by_the_next_export(tmp_path):
    from opencl_llm_studio.engine.files.gguf_export import atomic_write
    target = tmp_path / "m.gguf"
    dead = tmp_path / f".m.gguf.{2**22 + 7}.0badf00d.tmp"  # pid above pid_max: its writer is gone
    dead.write_bytes(b"half a model")
    atomic_write(target, lambda tmp: tmp.write_bytes(b"GGUF"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
