"""No lost work: exact resume after SIGKILL, the NaN guard, atomic checkpoints, clear errors."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import CheckpointError, ConfigError, TrainingDiverged
from opencl_llm_studio.engine.training.session import TrainingSession
from opencl_llm_studio.engine.training.opening import create_session, load_session
from tests.helpers import bundled_texts

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--d-model", "32", "--n-layer", "1", "--n-head", "2", "--context-length", "32",
        "--vocab-size", "320", "--batch-size", "4", "--quiet"]


def _losses(run):
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _train_cmd(out, *extra):
    return [sys.executable, "-m", "opencl_llm_studio", "train", "--out", str(out), "--steps", "300",
            "--tune-steps", "20", "--checkpoint-every", "5", *TINY, *extra]


KILLS = int(os.environ.get("LLM_STUDIO_KILLS", "4"))  # 50 for the full stress run
KILL_SEED = int(os.environ.get("LLM_STUDIO_KILL_SEED", "11"))


def _run_then_kill(cmd, env, delay):
    """Start cmd, SIGKILL it after `delay` s (unless it ended before). True if killed."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=delay)
        assert proc.returncode == 0, f"{cmd} failed with {proc.returncode}: {err}"
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        return True


def _killed_run(out, env, rng, span, kills_left):
    """Train into `out` to the end, SIGKILLed after random delays up to `kills_left` times and
    resumed after each. Returns the number of kills and the checkpoint step after each."""
    kills, steps = 0, []
    ck = checkpoint.checkpoint_path(out)
    while True:
        resume = ["--continue"] if ck.exists() else []  # killed before its first save: restart
        cmd = _train_cmd(out, "--checkpoint-every", "1", *resume)
        if kills == kills_left:
            subprocess.run(cmd, check=True, env=env, cwd=ROOT, timeout=600)
            return kills, steps
        if not _run_then_kill(cmd, env, rng.uniform(0.05, span)):
            return kills, steps  # it finished before the kill
        kills += 1
        if ck.exists():  # once a save finished, checkpoint.npz is whole at every instant
            loaded = checkpoint.load(out)
            assert not loaded["from_previous"], f"after kill {kills}: checkpoint.npz damaged"
            steps.append(loaded["header"]["step"])


def test_sigkill_then_resume_gives_the_same_losses(tmp_path):
    """SIGKILL at random moments (start-up, tokenizer, a step, a save, the recall check, the
    final save), resume each time, and every run ends exactly as one never killed. A checkpoint
    is saved every step, so many kills land inside a save. LLM_STUDIO_KILLS=50 for the stress
    run (README, "Tests")."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    full = tmp_path / "full"
    t0 = time.perf_counter()
    subprocess.run(_train_cmd(full), check=True, env=env, cwd=ROOT, timeout=600)
    span = time.perf_counter() - t0  # the whole run, start-up included
    rng = random.Random(KILL_SEED)
    kills, runs = 0, 0
    while kills < KILLS:
        runs += 1
        out = tmp_path / f"killed-{runs}"
        n, steps = _killed_run(out, env, rng, span, KILLS - kills)
        kills += n
        print(f"\nrun {runs}: {n} kills, checkpoint step after each: {steps}")
        assert _losses(out) == _losses(full), f"run {runs} differs from the unkilled run"


@pytest.fixture(scope="module")
def session(rt):
    mc = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32, vocab_size=320)
    tc = TrainConfig(pretrain_steps=6, tune_steps=2, batch_size=4, eval_interval=2,
                     sample_interval=0, evaluate_recall=False)
    return create_session(mc, tc, *bundled_texts(), runtime=rt)


def test_nan_weights_stop_training_and_restore_the_last_good_state(session, tmp_path):
    good = None
    with pytest.raises(TrainingDiverged, match="NaN/Inf"):
        for m in session.train():
            if m.step == 2:  # a validation step: the guard's snapshot is this state
                good = session.model.read_flat()
                bad = good.copy()
                bad[5] = np.nan  # as an exploding update would leave it
                session.model.write_flat("params", bad)
    np.testing.assert_array_equal(session.model.read_flat(), good)
    assert session.step == 2
    session.save(tmp_path)  # the restored state is finite, so it can be saved


def test_nan_weights_are_never_checkpointed(session, tmp_path):
    session.save(tmp_path)
    before = checkpoint.checkpoint_path(tmp_path).read_bytes()
    flat = session.model.read_flat()
    session.model.write_flat("params", np.where(np.arange(flat.size) == 3, np.inf, flat))
    try:
        with pytest.raises(CheckpointError, match="NaN or Inf"):
            session.save(tmp_path)
    finally:
        session.model.write_flat("params", flat)
    assert checkpoint.checkpoint_path(tmp_path).read_bytes() == before


def test_full_disk_keeps_the_previous_checkpoint(session, tmp_path, monkeypatch):
    session.save(tmp_path)
    before = checkpoint.checkpoint_path(tmp_path).read_bytes()

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(checkpoint, "_write_npz", no_space)
    with pytest.raises(CheckpointError, match="No space left"):
        session.save(tmp_path)
    assert checkpoint.checkpoint_path(tmp_path).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]  # no temp file


def test_unwritable_checkpoint_folder(session, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(CheckpointError, match="Could not write"):
        session.save(blocker / "run")


def test_save_never_writes_over_a_file_and_a_dotted_name_is_a_folder(session, tmp_path):
    """save(a file) wrote the checkpoint over that file (File › Save checkpoint onto notes.txt
    left an .npz named notes.txt), and a new folder name with a dot ("backup.v2") became a
    file: save is into a folder, always."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(CheckpointError, match="is a file, not a folder"):
        session.save(notes)
    assert notes.read_text() == "my notes" and sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt"]
    path = session.save(tmp_path / "backup.v2")
    assert path == tmp_path / "backup.v2" / "checkpoint.npz"
    assert load_session(tmp_path / "backup.v2", runtime=session.rt).step == session.step


def _damage(path, how):
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": os.urandom(4096),
                      "empty": b""}[how])


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_checkpoint_is_a_clear_error(session, tmp_path, damage):
    path = session.save(tmp_path)
    _damage(path, damage)
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_session(tmp_path, runtime=session.rt)


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(session, tmp_path):
    session.save(tmp_path)
    first_step = session.step
    it = session.train()
    next(it)
    it.close()
    path = session.save(tmp_path)
    _damage(path, "truncate")
    back = load_session(tmp_path, runtime=session.rt)
    assert back.loaded_from_previous and back.step == first_step


def test_a_model_larger_than_the_device_is_refused(session):
    huge = ModelConfig(d_model=4096, n_layer=48, n_head=32, context_length=2048)
    with pytest.raises(ConfigError, match="needs about"):
        TrainingSession(session.rt, huge, TrainConfig(batch_size=64), session.tokenizer,
                        session.pretrain_text, None)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_checkpoint_round_trip_restores_identical_state(session, tmp_path_factory, steps, seed):
    session.rng = np.random.default_rng(seed)
    it = session.train()
    for _ in range(steps):
        next(it, None)
    it.close()
    out = tmp_path_factory.mktemp("ck")
    session.save(out)
    back = load_session(out, runtime=session.rt)
    for which in ("params", "m", "v"):
        np.testing.assert_array_equal(back.model.read_flat(which), session.model.read_flat(which))
    assert (back.step, back.model.adam_t) == (session.step, session.model.adam_t)
    assert back.rng.bit_generator.state == session.rng.bit_generator.state
    assert back.tokenizer.to_bytes() == session.tokenizer.to_bytes()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(d_head=st.sampled_from([2, 4, 6]), n_head=st.integers(1, 3), n_layer=st.integers(1, 2),
       tied=st.booleans(), seed=st.integers(0, 1000))
def test_export_then_import_gives_identical_logits(session, tmp_path_factory, d_head, n_head,
                                                   n_layer, tied, seed):
    from opencl_llm_studio.engine.files.gguf_export import ModelBundle, export_gguf
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.training.opening import session_from_gguf
    cfg = session.model_config.replace(d_model=d_head * n_head, n_head=n_head, n_layer=n_layer,
                                       tie_embeddings=tied)
    model = Model(session.rt, cfg, seed=seed)
    path = tmp_path_factory.mktemp("gg") / "m.gguf"
    export_gguf(ModelBundle(cfg, session.tokenizer, model.weights(), {}), path)
    back = session_from_gguf(path, session.pretrain_text, runtime=session.rt)
    ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, (2, 9)).astype(np.int32)
    np.testing.assert_array_equal(back.model.logits(ids), model.logits(ids))


def test_sigterm_stops_after_a_whole_step_and_saves(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "run"
    proc = subprocess.Popen(_train_cmd(out, "--checkpoint-every", "0"), env=env, cwd=ROOT)
    mfile = out / "metrics.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and not (mfile.exists() and len(mfile.read_text().splitlines()) >= 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    steps = len(mfile.read_text().splitlines())
    back = load_session(out)
    assert back.step == steps  # the checkpoint holds exactly the steps the metrics report


def test_a_failing_device_is_a_clear_error_and_the_checkpoint_stays(session, tmp_path, monkeypatch):
    import pyopencl as cl
    from opencl_llm_studio.engine.errors import DeviceError
    path = session.save(tmp_path)
    before = path.read_bytes()

    def out_of_memory(*a, **k):
        raise cl.MemoryError("clEnqueueNDRangeKernel", cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
                             "out of memory")
    monkeypatch.setattr(session.model, "train_step", out_of_memory)
    session.continue_training(tune_steps=session.train_config.tune_steps + session.step + 5)
    with pytest.raises(DeviceError, match="device failed") as err:
        next(session.train())
    assert "smaller batch size" in err.value.hint
    assert path.read_bytes() == before


def test_vocabulary_larger_than_the_text_supports_is_reported(tmp_path, capsys):
    from opencl_llm_studio.studio.cli import main
    assert main(["train", "--out", str(tmp_path / "r"), "--steps", "2", "--tune-steps", "0",
                 *TINY[:-1], "--vocab-size", "5000"]) == 0
    assert "the text supports" in capsys.readouterr().err
