"""Checkpoints written and read piece by piece (issue 33: tuning SmolLM2-135M peaked at a save,
with its 0.5 GiB of weights on the host beside the model, and at loading a trained run, whose
params, m and v were read whole: 3.7 GiB). A Stream is written CHUNK floats at a time and read
back by np.load as any .npy; Members reads a member in pieces; a session saves and loads with no
whole array on the host; a damaged member is still found before anything is read, so the
previous checkpoint is used instead."""

import tracemalloc

import numpy as np
import pytest

from opencl_llm_studio.engine.config import TrainConfig
from opencl_llm_studio.engine.errors import CheckpointError
from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.training.session import TrainingSession
from opencl_llm_studio.engine.training.opening import create_session, load_session
from tests.helpers import bundled_texts, tiny_config


def _stream(arr):
    return checkpoint.Stream(arr.size, lambda lo, n: arr[lo:lo + n].copy())


@pytest.mark.parametrize("size", [1, 996, 997, 2 * 997 + 5])
def test_streams_round_trip_through_np_load_and_members(tmp_path, monkeypatch, size):
    monkeypatch.setattr(checkpoint, "CHUNK", 997)   # odd pieces, the last one short
    rng = np.random.default_rng(size)
    p, m, v = (rng.standard_normal(size).astype(np.float32) for _ in range(3))
    checkpoint.save(tmp_path, {"step": 3, "adam_t": 3}, _stream(p), _stream(m), v,
                    b"tok", "text", None)
    ck = checkpoint.load(tmp_path)          # numpy's own reader takes the streamed members
    for got, want in zip((ck["params"], ck["adam_m"], ck["adam_v"]), (p, m, v)):
        np.testing.assert_array_equal(got, want)
    ck = checkpoint.load(tmp_path, arrays=False)
    with ck["members"] as members:
        for name, want in (("params", p), ("adam_m", m), ("adam_v", v)):
            pieces = list(members.chunks(name))
            assert members.size(name) == size
            assert [lo for lo, _ in pieces] == list(range(0, size, 997))
            assert all(x.size <= 997 and x.dtype == np.float32 for _, x in pieces)
            np.testing.assert_array_equal(np.concatenate([x for _, x in pieces]), want)
    assert ck["tokenizer"] == b"tok" and ck["pretrain_text"] == "text"


def test_a_non_finite_stream_is_refused_and_the_previous_checkpoint_stays(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(checkpoint, "CHUNK", 100)
    good = np.ones(1000, np.float32)
    checkpoint.save(tmp_path, {"step": 1}, good, None, None, b"t", "x", None)
    bad = good.copy()
    bad[950] = np.inf                       # in the last piece: found while writing
    with pytest.raises(CheckpointError, match="NaN or Inf"):
        checkpoint.save(tmp_path, {"step": 2}, _stream(bad), None, None, b"t", "x", None)
    assert checkpoint.load(tmp_path)["header"]["step"] == 1
    assert sorted(f.name for f in tmp_path.iterdir()) == ["checkpoint.npz"]   # no temp left


def test_a_damaged_member_is_found_first_and_the_previous_checkpoint_read(tmp_path):
    a, b = np.full(5000, 1.0, np.float32), np.full(5000, 2.0, np.float32)
    checkpoint.save(tmp_path, {"step": 1}, a, a, a, b"t", "x", None)
    path = checkpoint.save(tmp_path, {"step": 2}, b, b, b, b"t", "x", None)
    data = bytearray(path.read_bytes())
    at = data.find(np.float32(2.0).tobytes() * 8) + 4000   # inside the params member's data
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    ck = checkpoint.load(tmp_path, arrays=False)
    with ck["members"] as members:
        assert ck["from_previous"] and ck["header"]["step"] == 1
        np.testing.assert_array_equal(np.concatenate([x for _, x in members.chunks("params")]),
                                      a)


def _trained(rt, cfg, steps: int, batch_size: int) -> TrainingSession:
    """A session of cfg trained `steps` steps on the start of the bundled text, no checks."""
    tc = TrainConfig(pretrain_steps=steps, tune_steps=0, batch_size=batch_size,
                     eval_interval=100, sample_interval=0, evaluate_recall=False)
    s = create_session(cfg, tc, bundled_texts()[0][:4000], None, runtime=rt)
    for _ in s.train():
        pass
    return s


def _peak_bytes(fn) -> int:
    """Peak of host memory numpy and Python allocate while fn runs (tracemalloc sees numpy's
    arrays; the OpenCL device's buffers are not counted)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_session_saves_and_loads_with_no_whole_array_on_the_host(rt, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHUNK", 4096)
    s = _trained(rt, tiny_config(vocab_size=2000, d_model=128, n_head=4, ffn_dim=384),
                 steps=1, batch_size=1)   # ~0.7M floats
    want = [s.model.read_flat(w) for w in ("params", "m", "v")]
    array_bytes = want[0].nbytes
    assert s.model.adam_t == 1 and array_bytes > 2_000_000
    assert _peak_bytes(lambda: s.save(tmp_path)) < array_bytes / 4
    loaded = []
    peak = _peak_bytes(lambda: loaded.append(load_session(tmp_path, runtime=rt)))
    assert peak < array_bytes, peak   # (the texts and the tokenizer are read whole)
    for w, exp in zip(("params", "m", "v"), want):
        np.testing.assert_array_equal(loaded[0].model.read_flat(w), exp)
    assert loaded[0].model.adam_t == 1 and loaded[0].step == s.step


def test_a_loaded_runs_moments_wait_on_disk_and_a_replaced_file_is_refused(rt, tmp_path):
    """A trained run opened to chat or export does not read its AdamW moments (two more copies
    of the weights on the device); training reads them then, exactly as saved. When another
    save has replaced the file meanwhile they are refused, not mixed with other weights."""
    s = _trained(rt, tiny_config(vocab_size=400), steps=2, batch_size=2)
    s.save(tmp_path)
    want = [s.model.read_flat(w) for w in ("m", "v")]
    opened = load_session(tmp_path, runtime=rt)
    assert not opened.model.holds_training_state
    opened.generate("The", max_new_tokens=3, greedy=True)
    assert not opened.model.holds_training_state
    for w, exp in zip(("m", "v"), want):
        np.testing.assert_array_equal(opened.model.read_flat(w), exp)
    stale, other = (load_session(tmp_path, runtime=rt) for _ in range(2))
    other.continue_training(3)
    for _ in other.train():
        pass
    other.save(tmp_path)
    for _ in range(2):   # and again: no zeros stand in for them after the refusal
        with pytest.raises(CheckpointError, match="changed since"):
            stale.model.read_flat("m")
