"""One declaration of the activation buffers (engine/model/activations.py): what engine.model.transformer.Activations
allocates on the device is exactly what engine.model.memory counts, for random configs, batch sizes,
context lengths and both attention paths."""

import inspect

import numpy as np
import pyopencl as cl
import pytest

from opencl_llm_studio.engine.model import transformer as model
from opencl_llm_studio.engine.model.activations import BUFFERS, Dims, buffers
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.model.memory import activation_floats
from opencl_llm_studio.engine.model.transformer import Activations


def allocated(a: Activations) -> list[int]:
    """Byte sizes of every device buffer an Activations set holds, each once (a forward-only
    set's layers share buffers: Buffer.count)."""
    seen = {}
    for value in vars(a).values():
        for buf in value if isinstance(value, list) else [value]:
            if isinstance(buf, cl.MemoryObjectHolder):
                seen[id(buf)] = buf.size
    return list(seen.values())


def random_case(rng):
    n_head = int(rng.integers(1, 4))
    cfg = ModelConfig(vocab_size=int(rng.integers(259, 700)), n_layer=int(rng.integers(1, 4)),
                      n_head=n_head, d_model=2 * n_head * int(rng.integers(1, 9)),
                      context_length=64, ffn_dim=int(rng.choice([0, int(rng.integers(1, 50))])),
                      tie_embeddings=bool(rng.integers(2)))
    return cfg, int(rng.integers(1, 4)), int(rng.integers(1, 40))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("path", ["fused", "gemm"])
@pytest.mark.parametrize("with_grad", [True, False])
def test_memory_counts_what_is_allocated(rt, seed, path, with_grad):
    cfg, B, T = random_case(np.random.default_rng(seed))
    a = Activations(rt.with_plan(rt.plan.replace(attention_path=path)), cfg, B, T, with_grad)
    assert a.attention == path
    sizes = allocated(a)
    total, largest = activation_floats(cfg, B, T, with_grad, path)
    assert sum(sizes) == 4 * total, (cfg, B, T)
    assert max(sizes) == 4 * largest
    d = Dims.of(cfg, B, T, path)
    n_buffers = sum(b.count(d, with_grad) for b in buffers(with_grad))
    assert len(sizes) == n_buffers  # no buffer outside the declaration
    for b in buffers(with_grad):   # every layer has its list entry
        if b.copies != "one":
            assert len(getattr(a, b.name)) == b.count(d)


def test_a_forward_only_set_shares_its_layers_buffers_and_computes_the_same(rt):
    """Evaluation and generation sets hold one copy of each per-layer buffer (the residual
    stream two, the KV cache's qkv all): the logits equal a training set's, the cache rows are
    per layer, and a 30-block window of 1,024 tokens counts a fraction of the full set."""
    from opencl_llm_studio.engine.model.transformer import Model
    cfg = ModelConfig(vocab_size=300, d_model=24, n_layer=3, n_head=3, context_length=16,
                      ffn_dim=40)
    m = Model(rt, cfg, seed=3)
    ids = np.random.default_rng(0).integers(0, 300, (2, 16)).astype(np.int32)
    fwd = m.logits(ids)
    a = m.activations(2, 16, with_grad=False)
    assert len({id(b) for b in a.x}) == 2 and len({id(b) for b in a.gu}) == 1
    assert len({id(b) for b in a.qkv}) == 3
    m._acts.clear()
    m.activations(2, 16, with_grad=True)          # a training set serves the same forward
    np.testing.assert_allclose(m.logits(ids), fwd, rtol=1e-5, atol=1e-6)
    smol = ModelConfig(vocab_size=49152, d_model=576, n_layer=30, n_head=9, n_kv_head=3,
                       context_length=1024, ffn_dim=1536)
    assert activation_floats(smol, 1, 1024, False)[0] < 0.25 * activation_floats(
        smol, 1, 1024, True)[0]


def test_every_declared_buffer_is_used_by_the_model():
    """A buffer the model stopped using would still be allocated and counted: none may be. The
    model's dropout sites (engine.model.dropout) and its output head (engine.model.output_head)
    use a step's buffers on its behalf."""
    from opencl_llm_studio.engine.model import dropout, output_head
    names = [b.name for b in BUFFERS]
    assert len(names) == len(set(names))
    source = inspect.getsource(model.Model) + inspect.getsource(dropout) + \
        inspect.getsource(output_head)
    assert [n for n in names if f"a.{n}" not in source] == []


# A Model's own buffers, a KVDecoder's and the runtime's scratch come from the same declarations
# and sizing functions (model_buffers, DECODE_BUFFERS, engine.model.scratch): engine.model.memory's
# estimate is every byte a run allocates. Grouped-query attention, tied and untied output, odd
# widths and a context that is not a power of two; "wide" has products whose K is split (the
# packed GEMM's K ranges on CPUs, split-K on GPUs) and more rows than RMSNorm's dweight sums in
# one slice; batch 1 with one key/value head shares a head among work-items (the CPU backward's
# dq shares in the scratch).
MODELS = [ModelConfig(vocab_size=300, d_model=24, n_layer=2, n_head=4, n_kv_head=2,
                      context_length=17),
          ModelConfig(vocab_size=333, d_model=40, n_layer=1, n_head=4, n_kv_head=1,
                      context_length=32, tie_embeddings=False, ffn_dim=37),
          ModelConfig(vocab_size=259, d_model=16, n_layer=3, n_head=2, context_length=9,
                      tie_embeddings=False),
          ModelConfig(vocab_size=512, d_model=64, n_layer=1, n_head=2, context_length=256)]


def _run_everything(m, batch: int):
    """What a run allocates after its first samples: a training step, an evaluation on the
    training batch and a generation window's logits."""
    from opencl_llm_studio.engine.config import OptimConfig
    cfg, T = m.cfg, m.cfg.context_length
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, T + 1)).astype(np.int32)
    m.train_step(ids[:, :-1], ids[:, 1:], 1e-3, OptimConfig())
    m.loss(ids[:, :-1], ids[:, 1:])   # evaluation shares the training set
    m.logits(ids[:1, :-1])            # generation
    m.rt.finish()


def _allocations(rt, monkeypatch) -> list[int]:
    """Byte sizes of the buffers rt allocates from now on, with each queue's scratch counted
    once, at the size it grew to (a scratch that grows replaces its smaller buffer)."""
    sizes, empty, scratch, growing = [], rt.empty, rt.scratch, [False]

    def counted(n, dtype=np.float32):
        buf = empty(n, dtype)
        if not growing[0]:
            sizes.append(buf.size)
        return buf

    def counted_scratch(n):
        growing[0] = True
        try:
            return scratch(n)
        finally:
            growing[0] = False
    monkeypatch.setattr(rt, "empty", counted)
    monkeypatch.setattr(rt, "scratch", counted_scratch)
    # a scratch of this run alone (the session's runtime grew its own in earlier tests)
    monkeypatch.setattr(rt, "_scratch_slots", {"main": (None, 0), "side": (None, 0)})
    return sizes


def _scratch_sizes(rt) -> list[int]:
    return [4 * n for _, n in rt._scratch_slots.values() if n]


def _gpu_form(rt):
    """rt as a GPU runs a model: tiled GEMMs (split over K where tiles are few), the flash
    attention (the backward's dS^T in the scratch) and weight gradients on a side queue."""
    gpu = rt.with_plan(rt.plan.replace(variant="tiled", attention_variant="tiled"))
    gpu.side_queue = gpu.side_queue or cl.CommandQueue(gpu.ctx)
    gpu._pending = []   # its side work's events, not the session runtime's (with_plan shares them)
    return gpu


@pytest.mark.parametrize("cfg", MODELS, ids=["gqa-tied", "mqa-untied", "mha-untied", "wide"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("form", ["device", "gpu-form"])
def test_memory_estimate_is_what_a_model_allocates(rt, monkeypatch, cfg, batch, form):
    from opencl_llm_studio.engine.generation.decode import KVDecoder
    from opencl_llm_studio.engine.model.memory import training_bytes
    rt = _gpu_form(rt) if form == "gpu-form" else rt
    sizes = _allocations(rt, monkeypatch)
    m = model.Model(rt, cfg)
    T = cfg.context_length
    KVDecoder(m)   # samples before training (its cache: the (1, T) forward-only set)
    train = m.activations(batch, T, True)
    assert m.activations(batch, T, False) is train
    _run_everything(m, batch)
    sizes += _scratch_sizes(rt)
    assert (sum(sizes), max(sizes)) == training_bytes(cfg, batch, rt.info,
                                                      rt.plan.attention_path, rt)


def test_the_estimate_counts_the_scratch(rt):
    """The runs above grow the scratch of both queues (without that, they would not check
    it): "wide" at batch 3 splits its weight gradients over K (side queue) and keeps dS^T
    (main) in the GPU form, and RMSNorm's dweight partial sums everywhere. Without the runtime
    the estimate leaves the K split partial products out."""
    from opencl_llm_studio.engine.model import attention_flash, scratch
    from opencl_llm_studio.engine.model.memory import training_bytes
    cfg, batch, gpu = MODELS[3], 3, _gpu_form(rt)
    main, side = scratch.step_scratch_bytes(gpu, cfg, batch, "fused", "fused")
    assert main > 0 and side > 0
    assert sum(scratch.step_scratch_bytes(rt, cfg, batch, "fused", "fused")) > 0
    with_rt = training_bytes(cfg, batch, gpu.info, None, gpu)[0]
    # without it: the dS^T alone, on a GPU (the device's type, not the plan, says so)
    ds = attention_flash.ds_scratch_bytes(gpu.info, cfg, batch, cfg.context_length)
    assert with_rt == training_bytes(cfg, batch, gpu.info)[0] - ds + main + side


def test_evaluation_shares_the_training_set(rt):
    """Evaluation at the training batch reuses the training set (a second set of every
    per-layer buffer was 40% of a 135M model's count at 16 x 256), also when evaluation came
    first: the forward-only set is then replaced, and the loss is the same."""
    cfg = MODELS[0]
    T, B = cfg.context_length, 2
    m = model.Model(rt, cfg, seed=3)
    rng = np.random.default_rng(0)
    x = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    y = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    before = m.loss(x, y)
    evaluation = m.activations(B, T, False)
    train = m.activations(B, T, True)
    assert train is not evaluation and m.activations(B, T, False) is train
    assert len(m._acts) == 1
    assert m.loss(x, y) == pytest.approx(before, rel=1e-6)


def test_a_runs_last_checks_run_without_its_training_set(rt):
    """After the last step the training set is dropped before the final validation, samples and
    recall (SmolLM2-135M's final checks ran 0.3 GB above its steps with it kept): they use
    forward-only sets, and a later step makes its training set again."""
    from opencl_llm_studio.engine.config import TrainConfig
    from tests.helpers import tiny_config, trained_session
    s = trained_session(rt, tiny_config(vocab_size=400),
                        TrainConfig(pretrain_steps=3, tune_steps=2, batch_size=2,
                                    eval_interval=2))
    assert s.model._acts and not any(with_grad for _, _, with_grad in s.model._acts)
    step, made = s.step, []
    s.continue_training(tune_steps=s.train_config.tune_steps + 1)
    real = model.Activations
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model, "Activations", lambda *a: made.append(a[-1]) or real(*a))
        for _ in s.train():
            pass
    assert s.step == step + 1 and True in made   # the step made its training set again
    assert not any(with_grad for _, _, with_grad in s.model._acts)


def test_every_declared_model_buffer_is_the_models():
    from opencl_llm_studio.engine.model.activations import DECODE_BUFFERS, model_buffers
    from opencl_llm_studio.engine.generation.decode import KVDecoder
    names = [b.name for b in model_buffers(ModelConfig())]
    assert len(names) == len(set(names))
    source = inspect.getsource(model) + inspect.getsource(KVDecoder)
    assert [n for n in names if f"self.{n}" not in source] == []
    assert [b.name for b in DECODE_BUFFERS if f"self.{b.name}" not in
            inspect.getsource(KVDecoder)] == []
