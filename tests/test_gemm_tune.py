"""The GEMM plan as one immutable object, and the kernel tuner (engine/opencl/gemm_plan.py,
engine/model/gemm_tune.py, engine/opencl/tune_cache.py; issue 23 item 5, issue 24 goal 4). No timings are
asserted: the machine is shared; what the tuner must guarantee is that what it picks runs,
is right, and is stored and used."""

import dataclasses
import json

import numpy as np
import pytest

from opencl_llm_studio.engine.model import gemm_tune
from opencl_llm_studio.engine.opencl import ops, tune_cache
from opencl_llm_studio.engine.errors import DeviceError
from opencl_llm_studio.engine.opencl.gemm_plan import GemmChoice
from opencl_llm_studio.engine.progress import Cancelled, Monitor
from opencl_llm_studio.engine.opencl.runtime import Runtime
from tests.helpers import tiny_config
from tests.kernel_helpers import close, down, up

CFG, B = tiny_config(vocab_size=260, n_head=2), 2


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(tune_cache.CACHE_ENV, str(tmp_path))
    return tmp_path / tune_cache.FILE_NAME


def product(r, shape):
    """Run one product of `shape` on runtime r; returns (got, float64 reference)."""
    form, M, N, K = shape
    rng = np.random.default_rng(M + N + K)
    a = rng.normal(size=(K, M) if form == "tn" else (M, K))
    b = rng.normal(size=(K, N))
    c = r.empty(M * N)
    (ops.matmul_tn if form == "tn" else ops.matmul_nn)(r, c, up(r, a), up(r, b), M, N, K)
    return down(r, c, (M, N)), (a.T if form == "tn" else a) @ b


def test_the_plan_is_immutable_and_round_trips(rt):
    plan = rt.plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.default = GemmChoice("blocked")
    tuned = plan.replace(shapes=((("nn", 7, 5, 3), GemmChoice("blocked", group=(2, 8))),),
                         attention_path="gemm")
    back = plan.with_tuned(json.loads(json.dumps(tuned.to_dict())))
    assert back == tuned and back.choice_for("nn", 7, 5, 3).group == (2, 8)
    assert back.choice_for("nn", 7, 5, 4) == plan.choice_for("nn", 7, 5, 4)   # the table's
    with pytest.raises((KeyError, TypeError, ValueError)):
        plan.with_tuned({"default": {"variant": "magic"}, "shapes": []})


def test_tuner_finds_launches_where_the_table_does_not_fit(rt):
    """A device profile whose groups hold at most 8 work-items (the table's CPU GEMMs take
    4x4): the table's launches are refused (but its packed ones, one work-item a group), the
    tuner's run and are right."""
    if not rt.is_cpu:
        pytest.skip("a GPU runtime refuses groups under 256 work-items outright")
    small = Runtime(rt.info, limits={"max_work_group_size": 8})
    shape = ("nn", 37, 50, 19)
    with pytest.raises(DeviceError):
        product(small, shape)
    result = gemm_tune.tune(small, CFG, B, seconds=300)
    assert result.rows and len(result.rows) == len({s for _, s in gemm_tune.model_products(CFG, B)})
    assert any(t_table is None for _, _, _, t_table, _, _ in result.rows)
    for label, shape_, table, t_table, tuned, t_tuned in result.rows:
        assert (t_table is None or table.variant == "packed") and t_tuned is not None, label
        # the packed GEMM's groups are one work-item each (engine.opencl.gemm_packed)
        assert (1 if tuned.variant == "packed" else tuned.group[0] * tuned.group[1]) <= 8
    tuned_rt = small.with_plan(result.plan)
    for _, shape_ in gemm_tune.model_products(CFG, B):
        got, want = product(tuned_rt, shape_)
        close(got, want)


def test_a_wrong_but_fast_candidate_is_never_chosen(rt, monkeypatch):
    """A candidate that launches nothing (K slices of -1 floats: C stays as it was) would be
    the fastest of all; its result is checked first, so it is never timed or chosen."""
    broken = GemmChoice(rt.plan.variant, rt.plan.vector_width, k_slice=-1)
    if rt.plan.variant == "tiled":
        pytest.skip("K slices are a CPU variant's choice")
    shape = ("tn", 24, 40, 32)
    bench = gemm_tune.ProductBench(rt, shape, gemm_tune.time.perf_counter)
    assert gemm_tune._measure(bench, rt, rt.plan, broken) is None
    real = gemm_tune.candidates
    monkeypatch.setattr(gemm_tune, "candidates",
                        lambda r, t, stage, best, form: [broken] + real(r, t, stage, best, form))
    result = gemm_tune.tune(rt, CFG, B, seconds=300)
    assert result.rows and all(row[4] != broken for row in result.rows)
    assert broken not in dict(result.plan.shapes).values()


def test_cancelling_keeps_the_table_and_stores_nothing(rt, cache, monkeypatch):
    monitor = Monitor()
    monitor.cancel()
    result = gemm_tune.tune(rt, CFG, B, seconds=300, monitor=monitor)
    assert result.cancelled and not result.complete and result.plan.shapes == ()
    monkeypatch.setenv(gemm_tune.AUTOTUNE_ENV, "1")
    with pytest.raises(Cancelled):
        gemm_tune.runtime_for_model(rt, CFG, B, monitor)
    assert not cache.exists()


def test_cached_winners_are_used_and_a_damaged_cache_is_ignored(rt, cache):
    """An entry for this device and shape becomes the runtime's plan (a copy: rt keeps its
    own); a damaged file warns and the table runs; storing replaces it atomically."""
    shape = gemm_tune.model_products(CFG, B)[0][1]
    choice = dataclasses.replace(rt.plan.default, group=(2, 8)) if rt.is_cpu else \
        dataclasses.replace(rt.plan.default, fetch4=False)
    tuned = rt.plan.replace(shapes=((shape, choice),))
    gemm_tune.save(rt, CFG, B, gemm_tune.TuneResult(tuned, [], True, False, 1.0))
    r = gemm_tune.runtime_for_model(rt, CFG, B)
    assert r.plan.choice_for(*shape) == choice and rt.plan.shapes == ()
    got, want = product(r, shape)
    close(got, want)
    assert gemm_tune.runtime_for_model(rt, tiny_config(), 3).plan == rt.plan  # other shape
    cache.write_text("{not json", encoding="utf-8")
    with pytest.warns(UserWarning, match="damaged"):
        assert gemm_tune.runtime_for_model(rt, CFG, B).plan == rt.plan
        gemm_tune.save(rt, CFG, B, gemm_tune.TuneResult(tuned, [], True, False, 1.0))
    assert json.loads(cache.read_text(encoding="utf-8"))["version"] == tune_cache.VERSION


def test_opted_in_training_start_tunes_once_and_caches(rt, cache, monkeypatch):
    monkeypatch.setenv(gemm_tune.AUTOTUNE_ENV, "1")
    monkeypatch.setattr(gemm_tune, "TUNE_SECONDS", 60.0)
    seen = []
    gemm_tune.runtime_for_model(rt, CFG, B, Monitor(lambda *a: seen.append(a)))
    products = gemm_tune.model_products(CFG, B)
    first = max(products, key=lambda p: np.prod(p[1][1:]))[0]   # the largest is tuned first
    assert cache.exists() and (f"tuning kernels: {first}", 0, len({s for _, s in products}) + 1) \
        in seen
    calls = []
    monkeypatch.setattr(gemm_tune, "tune", lambda *a, **k: calls.append(a))
    gemm_tune.runtime_for_model(rt, CFG, B)  # cached now: no second tuning
    assert calls == []


def test_tune_kernels_command(rt, cache, capsys):
    from opencl_llm_studio.studio.cli import main
    code = main(["--device", str(rt.info.index), "tune-kernels", "--d-model", "24",
                 "--n-head", "2", "--context-length", "16", "--vocab-size", "260",
                 "--batch-size", "2", "--seconds", "60"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "qkv fwd" in out and "table" in out and "tuned" in out and str(cache) in out
    assert "A training step's products: " in out
    entries = json.loads(cache.read_text(encoding="utf-8"))["entries"]
    assert tune_cache.device_key(rt) in entries


def test_a_training_session_runs_on_the_cached_plan(rt, cache, tok, texts):
    """TrainingSession (engine/training/session.py) takes the cached winners for its device and shape:
    its model launches by them; the runtime it was given is left as it was."""
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.training.session import TrainingSession
    cfg, tc = tiny_config(vocab_size=tok.vocab_size), TrainConfig(batch_size=2)
    shape = gemm_tune.model_products(cfg, tc.batch_size)[0][1]
    choice = dataclasses.replace(rt.plan.default, k_slice=128, group=(8, 2))
    tuned = rt.plan.replace(shapes=((shape, choice),))
    gemm_tune.save(rt, cfg, tc.batch_size, gemm_tune.TuneResult(tuned, [], True, False, 1.0))
    s = TrainingSession(rt, cfg, tc, tok, texts[0], None)
    assert s.rt.plan.choice_for(*shape) == choice and s.model.rt is s.rt
    assert rt.plan.shapes == ()
    loss, _, skipped = s.model.train_step(*s.pretrain.train_batch(s.rng, 2), 1e-3, tc)
    assert not skipped and np.isfinite(loss)


def test_a_table_of_packed_launches_tunes(rt):
    """The tuner counts the work-groups of a packed launch from the device (gemm_packed.packed_launch)
    like any other (before: launch_for refused the packed variant and tuning a plan whose table
    said "packed" stopped with ValueError)."""
    if not rt.is_cpu:
        pytest.skip("the packed kernels are for CPUs")
    packed = rt.with_plan(rt.plan.replace(variant="packed"))
    result = gemm_tune.tune(packed, CFG, B, seconds=300)
    assert len(result.rows) == len({s for _, s in gemm_tune.model_products(CFG, B)})
    for _, shape in gemm_tune.model_products(CFG, B):
        got, want = product(packed.with_plan(result.plan), shape)
        close(got, want)


def test_autotune_is_a_parameter_as_well_as_the_environment(rt, cache, monkeypatch):
    """runtime_for_model(autotune=True) tunes without LLM_STUDIO_AUTOTUNE (the studio's
    setting and `train --autotune` pass it; the engine never reads the GUI's settings), and
    autotune=False does not tune even with the variable set."""
    calls = []
    result = gemm_tune.TuneResult(rt.plan, [], True, False, 0.1)
    monkeypatch.setattr(gemm_tune, "tune", lambda *a, **k: calls.append(a) or result)
    monkeypatch.setenv(gemm_tune.AUTOTUNE_ENV, "1")
    assert gemm_tune.runtime_for_model(rt, CFG, B, autotune=False) is rt and calls == []
    monkeypatch.delenv(gemm_tune.AUTOTUNE_ENV)
    assert gemm_tune.runtime_for_model(rt, CFG, B) is rt and calls == []
    gemm_tune.runtime_for_model(rt, CFG, B, autotune=True)
    assert len(calls) == 1 and gemm_tune.cached_plan(rt, CFG, B) is not None


def test_a_chunked_output_head_is_tuned_on_the_products_it_runs():
    """A large vocabulary projects its logits in chunks of rows (engine.model.output_head): the
    tuner times the chunk's products (SmolLM2's head at 16 x 256: 256 rows, not 4096), and a
    step counts them once per chunk."""
    from opencl_llm_studio.engine.config import ModelConfig
    cfg = ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                      context_length=256, ffn_dim=1536, tie_embeddings=True)
    products = dict(gemm_tune.model_products(cfg, 16))
    assert products["logits fwd"] == ("nn", 256, 49152, 576)
    assert products["logits dX"] == ("nn", 256, 576, 49152)
    assert products["logits dW"] == ("tn", 49152, 576, 256)
    assert products["qkv fwd"] == ("nn", 4096, 960, 576)
    t = GemmChoice("blocked")
    rows = [("qkv fwd", products["qkv fwd"], t, 1.0, t, 1.0),
            ("logits dX", products["logits dX"], t, 2.0, t, 1.0)]
    result = gemm_tune.TuneResult(None, rows, True, False, 1.0)
    # 30 blocks' qkv fwd at 1 s either way, 16 chunks' dX at 2 s -> 1 s
    assert gemm_tune.step_speedup(result, cfg, 16) == pytest.approx((30 + 32) / (30 + 16))


def test_the_device_key_needs_no_runtime(rt):
    """The studio asks whether a device is tuned on its GUI thread: the key from the
    DeviceInfo alone equals a Runtime's."""
    assert tune_cache.device_key_of(rt.info) == tune_cache.device_key(rt)


def test_step_speedup_weighs_products_as_a_step_runs_them():
    """Each block's products run n_layer times a step, the logits once."""
    cfg = tiny_config(n_layer=3)
    products = dict((label, shape) for label, shape in gemm_tune.model_products(cfg, 2))
    t = GemmChoice("blocked")
    rows = [("qkv fwd", products["qkv fwd"], t, 3.0, t, 1.0),
            ("logits fwd", products["logits fwd"], t, 1.0, t, 1.0),
            ("down dW", products["down dW"], t, None, t, 1.0)]   # failed on the table: not counted
    result = gemm_tune.TuneResult(None, rows, True, False, 1.0)
    assert gemm_tune.step_speedup(result, cfg, 2) == pytest.approx((3 * 3 + 1) / (3 * 1 + 1))
    assert gemm_tune.step_speedup(gemm_tune.TuneResult(None, [], False, True, 0), cfg, 2) is None


def test_an_opened_session_switches_to_tuned_kernels(rt, cache, tok, texts, monkeypatch):
    """TrainingSession.use_tuned_kernels (the studio's Continue with its setting on): tunes
    (here: a cached entry appears), then the model and its generator launch by the plan."""
    from opencl_llm_studio.engine.config import TrainConfig
    from opencl_llm_studio.engine.training.session import TrainingSession
    cfg, tc = tiny_config(vocab_size=tok.vocab_size), TrainConfig(batch_size=2)
    s = TrainingSession(rt, cfg, tc, tok, texts[0], None)
    assert s.rt is rt
    shape = gemm_tune.model_products(cfg, tc.batch_size)[0][1]
    choice = dataclasses.replace(rt.plan.default, k_slice=128, group=(8, 2))
    tuned = rt.plan.replace(shapes=((shape, choice),))
    monkeypatch.setattr(gemm_tune, "tune", lambda *a, **k: gemm_tune.TuneResult(
        tuned, [], True, False, 0.1))
    s.generate("Paris", max_new_tokens=2)   # a decoder on the old runtime
    assert s.use_tuned_kernels() is True
    assert s.rt.plan.choice_for(*shape) == choice and s.model.rt is s.rt and rt.plan.shapes == ()
    assert gemm_tune.cached_plan(rt, cfg, tc.batch_size) is not None
    assert isinstance(s.generate("Paris", max_new_tokens=2), str)
    assert s.generator._decoder.rt is s.rt   # the KV decoder was made again, on the plan
    loss, _, skipped = s.model.train_step(*s.pretrain.train_batch(s.rng, 2), 1e-3, tc)
    assert not skipped and np.isfinite(loss)


def test_train_autotune_flag_tunes_first(rt, cache, tmp_path, monkeypatch):
    """`llm-studio train --autotune` is LLM_STUDIO_AUTOTUNE=1 as a flag: the new run (and a
    continued one, tuned once: the entry is cached by then) tunes before its first step."""
    from opencl_llm_studio.studio.cli import main
    from tests.helpers import TINY
    calls = []

    def fake(r, cfg, batch, *a, **k):
        calls.append((cfg.d_model, batch))
        return gemm_tune.TuneResult(r.plan, [], True, False, 0.1)
    monkeypatch.setattr(gemm_tune, "tune", fake)
    out = str(tmp_path / "run")
    assert main(["--device", str(rt.info.index), "train", "--out", out, "--steps", "2",
                 "--no-tune", "--autotune", *TINY]) == 0
    assert calls == [(32, 4)] and cache.exists()   # TINY's d_model and batch
    assert main(["--device", str(rt.info.index), "train", "--out", out, "--continue",
                 "--steps", "3", "--autotune", "--quiet"]) == 0
    assert len(calls) == 1


@pytest.mark.parametrize("gemm_seconds,want", [(1.0, "fused"), (0.98, "fused"), (0.5, "gemm")])
def test_tune_attention_keeps_the_fused_path_unless_the_gemms_are_faster(rt, gemm_seconds, want):
    """One attention path wherever it is as fast (issue 24 goal 2): the fused path, timed
    first, is replaced only by a batched-GEMM path faster by the tuner's margin. The clock is
    scripted: each path is timed between two readings (fused 1 s, gemm `gemm_seconds`)."""
    readings = iter([0.0, 2.0, 10.0, 10.0 + 2 * gemm_seconds])
    assert gemm_tune.tune_attention(rt, CFG, B, clock=lambda: next(readings)) == want
