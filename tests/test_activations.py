"""One declaration of the activation buffers (engine/activations.py): what engine.model.Activations
allocates on the device is exactly what engine.memory counts, for random configs, batch sizes,
context lengths and both attention paths."""

import inspect

import numpy as np
import pyopencl as cl
import pytest

from engine import model
from engine.activations import BUFFERS, Dims, buffers
from engine.config import ModelConfig
from engine.memory import activation_floats
from engine.model import Activations


def allocated(a: Activations) -> list[int]:
    """Byte sizes of every device buffer an Activations set holds."""
    sizes = []
    for value in vars(a).values():
        for buf in value if isinstance(value, list) else [value]:
            if isinstance(buf, cl.MemoryObjectHolder):
                sizes.append(buf.size)
    return sizes


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
    n_buffers = sum(b.count(d) for b in buffers(with_grad))
    assert len(sizes) == n_buffers  # no buffer outside the declaration


def test_every_declared_buffer_is_used_by_the_model():
    """A buffer the model stopped using would still be allocated and counted: none may be."""
    names = [b.name for b in BUFFERS]
    assert len(names) == len(set(names))
    source = inspect.getsource(model.Model)
    assert [n for n in names if f"a.{n}" not in source] == []
