"""The NaN guard's copy of the last good state (engine.training.snapshot): in memory for a small
model, in an unnamed temporary file for a large one (SmolLM2-135M's copy was 1.5 GiB of RAM
beside the model, twice that while a new copy replaced the old), exact either way."""

import numpy as np
import pytest

from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.opencl import tune_cache
from opencl_llm_studio.engine.training import snapshot
from opencl_llm_studio.engine.training.snapshot import Snapshot
from tests.helpers import tiny_config


def _state(m):
    return [m.read_flat(w) for w in ("params", "m", "v")]


@pytest.mark.parametrize("ram_limit", [0, 2 ** 30])
def test_a_snapshot_restores_exactly_and_refuses_non_finite_weights(rt, tmp_path, monkeypatch,
                                                                     ram_limit):
    monkeypatch.setenv(tune_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(snapshot, "CHUNK_FLOATS", 997)   # odd chunks, the last one short
    m = Model(rt, tiny_config(), seed=1)
    rng = np.random.default_rng(0)
    for w in ("m", "v"):
        m.write_flat(w, rng.standard_normal(m.table.size).astype(np.float32))
    m.adam_t = 7
    snap = Snapshot(m, ram_limit)
    assert snap.in_memory == bool(ram_limit)
    assert not snap.restore(m)                               # nothing taken yet
    assert snap.take(m, extra="step 7")
    want = _state(m)
    bad = want[0].copy()
    bad[5] = np.nan
    m.write_flat("params", bad)
    assert not snap.take(m, extra="step 9")                  # the last good copy stays
    for w in ("m", "v"):
        m.write_flat(w, np.zeros(m.table.size, np.float32))
    m.adam_t = 9
    assert snap.restore(m) and m.adam_t == 7 and snap.extra == "step 7"
    for got, exp in zip(_state(m), want):
        np.testing.assert_array_equal(got, exp)
    if not ram_limit:                                        # a file with no name: nothing left
        assert list(tmp_path.iterdir()) == []
    snap.close()
    assert not snap.restore(m)


def test_a_large_model_keeps_its_copy_out_of_memory(rt):
    """The trainer's rule: a copy of three times a 135M model's weights is far above the limit."""
    assert 3 * 4 * 134_515_008 > snapshot.RAM_LIMIT_BYTES
    m = Model(rt, tiny_config(), seed=1)
    assert Snapshot(m).in_memory                             # a small one stays in memory
