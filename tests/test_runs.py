"""studio.runs: scanning run folders without loading weights, status, names, curves, diff."""

import json
import math
import os
import time

import numpy as np
import pytest

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.studio import runs as R
from opencl_llm_studio.engine.model.params import param_count
from tests.runs_helpers import make_run


def test_scan_reads_every_column(tmp_path):
    make_run(tmp_path, "fast", lr=1e-2, bpb=True, stamp="20261102-090000")
    make_run(tmp_path, "slow", lr=1e-3, d_model=64, stamp="20261101-090000")
    (tmp_path / "not-a-run").mkdir()
    runs = R.scan([tmp_path])
    assert [r.name for r in runs] == ["fast", "slow"]  # newest first
    fast = runs[0]
    assert fast.status == "finished" and fast.step == 40 and fast.total_steps == 40
    assert fast.device == "Test CPU" and fast.tokenizer == "SentencePiece BPE · 300"
    assert fast.params == param_count(R.ModelConfig(vocab_size=300, d_model=32, n_layer=1, n_head=2,
                                                    context_length=8))
    assert fast.loss == pytest.approx(math.log(300) * math.exp(-40 * 1e-2 * 10) + 0.1)
    assert fast.val_loss == pytest.approx(fast.loss + 0.2)
    assert fast.val_bpb == pytest.approx(fast.val_loss / math.log(2) / 3)
    assert runs[1].val_bpb is None
    assert fast.wall_s == pytest.approx(20.0)
    assert (fast.clipped, fast.skipped) == (5, 0)  # grad norm 2.0 > clip 1.0 at steps 7..35
    assert time.strftime("%Y%m%d-%H%M%S", time.localtime(fast.date)) == "20261102-090000"


def test_header_read_without_the_weights(tmp_path, monkeypatch):
    folder = make_run(tmp_path, "a")
    members = []
    real = np.lib.npyio.NpzFile.__getitem__

    def spy(self, key):
        members.append(key)
        return real(self, key)
    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__", spy)
    assert R.read_header(folder)["device"] == "Test CPU"
    assert members == ["header"]


@pytest.mark.parametrize("saved,done,expect", [(40, 40, "finished"), (20, 20, "stopped"),
                                               (20, 27, "crashed"), (-1, 12, "crashed")])
def test_status(tmp_path, saved, done, expect):
    folder = make_run(tmp_path, "r", steps_done=done, saved_step=saved)
    assert R.load_run(folder).status == expect


def test_status_running_while_metrics_are_written_and_the_lock_cannot_be_read(tmp_path):
    """Only where the lock file is unreadable does the clock guess: metrics written just now."""
    folder = make_run(tmp_path, "r", steps_done=20, saved_step=10)
    os.utime(folder / "metrics.jsonl")  # just now
    assert R.load_run(folder).status == "crashed"   # no lock file: nothing trains there
    (folder / ".training.lock").mkdir()             # opening it fails (not FileNotFoundError)
    assert R.load_run(folder).status == "running"


def test_status_follows_the_run_lock_not_the_clock(tmp_path):
    """A run stopped a moment ago is "stopped" (its lock is free), not "running" for a minute
    with Open / Continue / Delete off; a run whose lock is held is "running" however old its
    files look (a continued run before its first new checkpoint looks finished)."""
    from opencl_llm_studio.engine.training.run_lock import RunLock, in_use
    stopped = make_run(tmp_path, "stopped", steps_done=20, saved_step=20, stamp="20261101-1")
    RunLock(stopped).acquire().release()           # as the studio and `train` leave it
    os.utime(stopped / "metrics.jsonl")            # written just now
    assert in_use(stopped) is False
    assert R.load_run(stopped).status == "stopped"
    busy = make_run(tmp_path, "busy", steps_done=40, saved_step=40, stamp="20261101-2")
    lock = RunLock(busy).acquire()                 # this process trains in it
    try:
        assert in_use(busy) is True
        assert R.load_run(busy).status == "running"
    finally:
        lock.release()
    assert R.load_run(busy).status == "finished"
    assert in_use(tmp_path) is False               # no lock file: no run trains there


def test_damaged_checkpoint_and_torn_metrics_line(tmp_path):
    folder = make_run(tmp_path, "r", steps_done=20, saved_step=20)
    os.replace(folder / "checkpoint.npz", folder / "checkpoint.prev.npz")
    (folder / "checkpoint.npz").write_bytes(b"PK\x03\x04 torn")
    with open(folder / "metrics.jsonl", "a") as f:
        f.write('{"step": 21, "loss": 1.')
    old = time.time() - 3600
    os.utime(folder / "metrics.jsonl", (old, old))
    run = R.load_run(folder)
    assert run.header is not None and run.step == 20 and run.status == "stopped"


def test_rename_is_atomic_json_and_rejects_empty(tmp_path):
    folder = make_run(tmp_path, "old")
    R.rename(folder, "  new name ")
    assert json.loads((folder / "run.json").read_text())["name"] == "new name"
    assert R.load_run(folder).name == "new name"
    assert not list(folder.glob(".run-*.tmp"))
    with pytest.raises(StudioError):
        R.rename(folder, "  ")


def test_wall_time_chains_resumed_segments():
    recs = [{"step": i, "elapsed_s": e} for i, e in enumerate([1, 2, 3, 0.5, 1.5], start=1)]
    np.testing.assert_allclose(R.wall_times(recs), [1, 2, 3, 3.5, 4.5])


def test_curves_against_step_tokens_and_wall_time(tmp_path):
    run = R.load_run(make_run(tmp_path, "r"))
    c = R.curves(run, "tokens")
    np.testing.assert_allclose(c["loss"][0][:3], [16, 32, 48])  # step x batch 2 x context 8
    assert len(c["val"][0]) == 4 and len(c["health.update_ratio.norms"][0]) == 4
    assert R.curves(run, "wall")["lr"][0][-1] == pytest.approx(20.0)


def test_config_diff_lists_only_differences(tmp_path):
    a = R.load_run(make_run(tmp_path, "a", lr=1e-2, stamp="20261101-000001"))
    b = R.load_run(make_run(tmp_path, "b", lr=1e-3, d_model=64, stamp="20261101-000002"))
    diff = dict(R.config_diff([a, b]))
    assert diff == {"model.d_model": [32, 64], "train.learning_rate": [1e-2, 1e-3]}
