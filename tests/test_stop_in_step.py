"""Stopping inside a long training step (issue 22, "Every way to stop is prompt"): a stop lands
between two blocks of the model, the step is abandoned and the state is as before it."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.progress import Cancelled
from opencl_llm_studio.engine.training.opening import create_session
from tests.helpers import bundled_texts


class StopAfter:
    """A check that raises Cancelled on its n-th call."""

    def __init__(self, n):
        self.n, self.calls = n, 0

    def __call__(self):
        self.calls += 1
        if self.calls >= self.n:
            raise Cancelled()


@pytest.mark.parametrize("where", [1, 2, 4])   # forward's first block, later, in backward
def test_stop_inside_a_step_leaves_the_model_as_it_was(rt, where):
    cfg = ModelConfig(d_model=32, n_layer=2, n_head=2, context_length=16, vocab_size=300)
    model = Model(rt, cfg, seed=3)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 300, (2, 16)).astype(np.int32)
    y = rng.integers(0, 300, (2, 16)).astype(np.int32)
    before = [model.read_flat(k) for k in ("params", "m", "v")]
    stop = StopAfter(where)
    with pytest.raises(Cancelled):
        model.train_step(x, y, 1e-2, TrainConfig().optim(), check=stop)
    assert stop.calls == where                                   # it stopped where asked
    for k, b in zip(("params", "m", "v"), before):
        np.testing.assert_array_equal(model.read_flat(k), b)
    assert model.adam_t == 0
    loss, _, skipped = model.train_step(x, y, 1e-2, TrainConfig().optim(), check=lambda: None)
    assert np.isfinite(loss) and not skipped and model.adam_t == 1   # and it still trains


def test_a_stop_lands_between_the_chunks_of_a_long_launch(rt, monkeypatch):
    """Issue 33: a stop landed only between blocks, and one block's attention or GEMM launch
    could run for seconds (a d256, 2-block step at context 2048, batch 64 took 16-20 s to
    stop). Launches over the device's cap (Runtime.max_launch_flops, now also on a CPU) are
    split, and a step's stop check runs between their chunks: with a tiny cap there are many
    more stop points than blocks, a stop at any of them abandons the step, and the split
    step computes what the unsplit one does."""
    cfg = ModelConfig(d_model=64, n_layer=1, n_head=2, context_length=64, vocab_size=300)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 300, (4, 64)).astype(np.int32)
    y = rng.integers(0, 300, (4, 64)).astype(np.int32)
    whole = Model(rt, cfg, seed=3)
    want = whole.train_step(x, y, 1e-2, TrainConfig().optim())[0]
    monkeypatch.setattr(rt, "max_launch_flops", 2e5)
    model = Model(rt, cfg, seed=3)
    count = StopAfter(10 ** 9)
    got = model.train_step(x, y, 1e-2, TrainConfig().optim(), check=count)[0]
    assert count.calls > 10 * cfg.n_layer and got == pytest.approx(want, rel=1e-5)
    before = [model.read_flat(k) for k in ("params", "m", "v")]
    stop = StopAfter(count.calls // 2)            # inside one block's chunks
    with pytest.raises(Cancelled):
        model.train_step(x, y, 1e-2, TrainConfig().optim(), check=stop)
    for k, b in zip(("params", "m", "v"), before):
        np.testing.assert_array_equal(model.read_flat(k), b)
    assert model.adam_t == 1 and rt.chunk_check is None


def test_a_stop_in_the_first_step_is_a_step_not_taken(rt):
    tc = TrainConfig(pretrain_steps=5, tune_steps=0, batch_size=2, eval_interval=50,
                     sample_interval=0, evaluate_recall=False)
    mc = ModelConfig(d_model=32, n_layer=2, n_head=2, context_length=16, vocab_size=400)
    s = create_session(mc, tc, bundled_texts()[0], None, runtime=rt)
    rng_state = s.rng.bit_generator.state
    params = s.model.read_flat()
    real = s.rt.stop_point
    calls = []

    def stop_point(check):      # the person presses Ctrl-C while the first block runs
        calls.append(1)
        if len(calls) == 2:
            s.monitor.cancel()
        real(check)
    s.rt.stop_point = stop_point
    try:
        with pytest.raises(Cancelled):
            next(s.train())
    finally:
        del s.rt.stop_point
    assert s.step == 0 and s.history == [] and s.rng.bit_generator.state == rng_state
    np.testing.assert_array_equal(s.model.read_flat(), params)


def test_ctrl_c_inside_the_first_long_step_abandons_it(tmp_path):
    """The CLI: Ctrl-C while the first step of a model of seconds per step runs. The old loop
    finished the step (and saved "step 1"); now the step is abandoned, and with no step done
    nothing is saved: --out is left as it was (it was a step-0 checkpoint, after which the same
    command was refused: "already holds a training run")."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "opencl_llm_studio", "train", "--out", str(out), "--no-tune",
           "--d-model", "384", "--n-layer", "6", "--n-head", "6", "--context-length", "256",
           "--batch-size", "8", "--steps", "50"]
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parent.parent,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:          # the last line before the first step
        lines.append(line)
        if line.startswith("Validation:"):
            break
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    proc.wait(timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 130, "".join(lines) + err
    assert "Stopped before training began" in err, err   # the step was not finished
    assert "saving the checkpoint" not in err and not out.exists()
    assert took < 30, took
