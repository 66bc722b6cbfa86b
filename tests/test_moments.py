"""AdamW moments kept as bfloat16 (engine.model.moments, issue 33: a 360M model's full tuning
within 6 GB): which models get them, what they cost, and a run that trains, saves, reopens and
restores with them as one in float32 does."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.model import moments
from opencl_llm_studio.engine.model.activations import model_bytes
from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.training.opening import create_session, load_session
from opencl_llm_studio.engine.training.snapshot import Snapshot
from tests.helpers import RESOURCES

SMOL135 = ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                      ffn_dim=1536, context_length=1024)
SMOL360 = ModelConfig(vocab_size=49152, d_model=960, n_layer=32, n_head=15, n_kv_head=5,
                      ffn_dim=2560, context_length=1024)
SMALL = ModelConfig(d_model=32, n_layer=2, n_head=2, context_length=32)


def test_auto_keeps_bf16_moments_for_models_past_250m_parameters():
    assert moments.resolve("auto", SMOL135) == "f32"
    assert moments.resolve("auto", SMOL360) == "bf16"
    assert moments.resolve("f32", SMOL360) == "f32" and moments.resolve("bf16", SMALL) == "bf16"
    n = ParamTable(SMOL360).size
    f32, bf16 = (model_bytes(SMOL360, moments=k)[0] for k in ("f32", "bf16"))
    assert f32 - bf16 == 4 * n                      # two bytes less for each of m and v
    assert model_bytes(SMOL360)[0] == bf16          # auto
    with pytest.raises(ConfigError, match="AdamW moments .fp8. are not understood"):
        TrainConfig(adam_moments="fp8").validate()


def test_bf16_host_conversion_is_round_to_nearest_and_exact_back():
    x = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -9, -2.5e-30, np.inf, 3e38],
                 np.float32)
    h = moments.to_bf16(x)
    back = moments.from_bf16(h)
    assert back[0] == 1.0 and back[1] == 1.0      # a tie goes to even
    assert back[2] == np.float32(1.0 + 2.0 ** -7)
    assert back[4] == np.inf and np.isnan(moments.from_bf16(moments.to_bf16(np.float32([np.nan]))))[0]
    assert np.all(moments.to_bf16(back) == h)      # every bfloat16 is a float32


def _session(kind: str):
    tc = TrainConfig(pretrain_steps=8, tune_steps=0, batch_size=4, eval_interval=100,
                     sample_interval=0, evaluate_recall=False, adam_moments=kind, seed=3)
    return create_session(SMALL, tc, read_text(RESOURCES / "pretrain.txt"),
                          tokenizer_kind="char")


def test_a_run_with_bf16_moments_trains_like_float32_and_keeps_them_across_a_save(tmp_path):
    runs = {kind: _session(kind) for kind in ("f32", "bf16")}
    losses = {kind: [m.loss for m in s.train()] for kind, s in runs.items()}
    s = runs["bf16"]
    assert s.model.moment_dtype == "bf16" and runs["f32"].model.moment_dtype == "f32"
    assert s.model.m.size == 2 * s.model.table.size           # bytes: two per moment
    assert losses["bf16"][-1] < losses["bf16"][0]
    np.testing.assert_allclose(losses["bf16"], losses["f32"], rtol=0.02)
    m, v = s.model.read_flat("m"), s.model.read_flat("v")
    assert np.all(moments.to_bf16(m).view(np.uint16) == moments.to_bf16(m))
    assert np.abs(m).max() > 0 and v.min() >= 0
    s.save(tmp_path / "run")
    back = load_session(tmp_path / "run")
    assert back.train_config.adam_moments == "bf16" and back.model.moment_dtype == "bf16"
    np.testing.assert_array_equal(back.model.read_flat("m"), m)
    np.testing.assert_array_equal(back.model.read_flat("v"), v)


def test_the_nan_guard_restores_bf16_moments_exactly(tmp_path):
    s = _session("bf16")
    list(s.train())
    for ram in (1 << 40, 0):                          # in memory, and in a file
        snap = Snapshot(s.model, ram_limit=ram)
        m, v, p = (s.model.read_flat(w) for w in ("m", "v", "params"))
        assert snap.take(s.model)
        s.model.write_flat("m", np.zeros_like(m))
        s.model.write_flat("params", np.zeros_like(p))
        assert snap.restore(s.model)
        np.testing.assert_array_equal(s.model.read_flat("m"), m)
        np.testing.assert_array_equal(s.model.read_flat("v"), v)
        np.testing.assert_array_equal(s.model.read_flat("params"), p)
        snap.close()
