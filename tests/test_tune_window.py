"""Issue 33, item 4: dialogues train in a window of their own, never padded to the model's.

An imported model's window is 1,024 tokens (its own context is longer still); ten dialogues of
about 60 tokens were each padded to it, so a tuning step of SmolLM2-135M computed 16 x 1,024
positions, took 391 s and grew to 18.9 GB. The rows are now cut to the longest dialogue
(rounded up to engine.data.dialogue.WINDOW_STEP); the replayed general text, the general
loss of a model with no pretraining stage of its own and the memory check follow that window.
"""

import numpy as np
import pytest

from opencl_llm_studio.engine.data.dialogue import WINDOW_STEP, TuneData, tune_window

SHORT = "".join(f"User: What is the code word {i}?\nAssistant: The code word {i} is zebra{i}.\n\n"
                for i in range(10))


def test_the_window_is_the_longest_dialogue_rounded_up(tok):
    data = TuneData(tok, SHORT, context_length=1024)
    longest = max(len(ids) for ids, _ in data.encoded)
    assert data.window % WINDOW_STEP == 0 and longest - 1 <= data.window < longest - 1 + WINDOW_STEP
    assert data.window < 1024 and data.n_truncated == 0                 # old: 1,024, padded
    x, y = data.train_batch(np.random.default_rng(0), 4)
    assert x.shape == y.shape == (4, data.window)
    ids, mask = data.rows
    assert ids.shape == (10, data.window + 1)
    for r, (e_ids, e_mask) in enumerate(data.encoded):          # every dialogue whole
        assert ids[r, :len(e_ids)].tolist() == e_ids and int(mask[r].sum()) == sum(e_mask)
    assert all(b[0].shape == (4, data.window) for b in data.eval_batches(4))
    # the same dialogues give the same window whatever the model's context beyond it
    assert TuneData(tok, SHORT, context_length=4096).window == data.window


@pytest.mark.parametrize("lengths, context, want", [
    ([2], 1024, WINDOW_STEP), ([WINDOW_STEP + 1], 1024, WINDOW_STEP),
    ([WINDOW_STEP + 2, 10], 1024, 2 * WINDOW_STEP), ([5000], 1024, 1024), ([70], 40, 40),
    ([1], 16, 16)])
def test_tune_window_rule(lengths, context, want):
    assert tune_window(lengths, context) == want


def test_replay_windows_take_the_tuning_width(tok, texts):
    from opencl_llm_studio.engine.data.corpus import PretrainData
    pre = PretrainData(tok, texts[0], 256)
    x, y = pre.train_batch(np.random.default_rng(0), 3, window=64)
    assert x.shape == y.shape == (3, 64) and np.array_equal(x[:, 1:], y[:, :-1])
    vx, vy = pre.val_batches(2, 10_000, window=64)[0]
    assert vx.shape == (2, 64)


def test_an_opened_model_tunes_and_scores_in_the_dialogues_window(rt, tmp_path):
    """A random model of Llama 3.2's shape (context 16,384: a 1,024-token training window) opened
    with ten short dialogues: every activation set its tuning allocates is (B, W), W the
    dialogues' window, and the memory check counts that window, not 1,024."""
    pytest.importorskip("transformers")
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.training.open_hf import session_from_hf
    from opencl_llm_studio.engine.model.memory import training_bytes
    from tests.helpers import bundled_texts
    from tests.open_models import build
    folder = build("llama32", tmp_path / "m")
    s = session_from_hf(folder, bundled_texts()[0], SHORT, runtime=rt)
    s.train_config = TrainConfig(pretrain_steps=0, tune_steps=2, batch_size=4,
                                 replay_fraction=0.25, eval_interval=1, sample_interval=0,
                                 evaluate_recall=False)
    assert s.model_config.context_length == 1024 and s.tune.window < 256
    assert s.training_window() == s.tune.window
    records = list(s.train())
    assert [r.stage for r in records] == ["tune", "tune"]
    assert all(np.isfinite(r.loss) and r.pretrain_val_loss is not None for r in records)
    shapes = {(B, T) for B, T, _ in s.model._acts}
    assert shapes == {(4, s.tune.window)}                    # old: (4, 1024) sets
    cfg = s.model_config
    assert (training_bytes(cfg, 4, rt.info, window=s.tune.window)[0]
            < training_bytes(cfg, 4, rt.info)[0])
