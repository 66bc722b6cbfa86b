"""Helpers the kernel and model tests share: host <-> device copies, the relative-error checks
against the float64 twin (tests/reference.py), random token batches, one train step checked
against the reference, and attention's forward and backward checked on random qkv."""

import numpy as np
import pytest

import tests.reference as ref
from opencl_llm_studio.engine.model import attention

# grouped-query attention: n_head 9 / kv 3, 6 / 1 (multi-query), 4 / 2; odd T, T 1, batch 1
GQA_SHAPES = [(1, 1, 9, 2, 3), (2, 5, 6, 4, 1), (1, 19, 9, 6, 3), (2, 33, 4, 10, 2),
              (1, 70, 6, 8, 1), (3, 17, 9, 64, 3), (1, 45, 2, 24, 1)]  # (B, T, H, hd, KVH)


def up(rt, a, dtype=np.float32):
    """A new device buffer holding `a` as `dtype`."""
    return rt.to_device(np.asarray(a, dtype))


def down(rt, buf, shape, dtype=np.float32):
    """The device buffer's first prod(shape) values as an array of `shape` (after finish)."""
    rt.finish()
    return rt.read(buf, int(np.prod(shape)), dtype).reshape(shape)


def close(got, want, tol=2e-5):
    """Max |got - want| relative to the reference's magnitude is below tol (float32 terms)."""
    scale = max(np.abs(want).max(), 1e-6)
    err = np.abs(got - want).max() / scale
    assert err < tol, f"max relative error {err:.2e} >= {tol:.0e}"


def rel_err(got, want):
    """Max |got - want| relative to the reference's magnitude."""
    return np.abs(got - want).max() / max(np.abs(want).max(), 1e-8)


def batch(cfg, B, T, seed=0, mask=False):
    """Random token ids (B, T) and their next-token targets (B, T); mask: the first T // 2
    targets of each row are -1 (ignored), as a dialogue's prompt is."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, size=(B, T + 1))
    x, y = ids[:, :-1].copy(), ids[:, 1:].copy()
    if mask:
        y[:, : T // 2] = -1
    return x, y


def assert_step_matches(model, x, y, tc, rloss, rgrads) -> float:
    """One train_step (lr ~0) gives the reference loss and every gradient; returns grad norm."""
    loss, gnorm, skipped = model.train_step(x, y, 1e-30, tc)
    assert not skipped
    assert abs(loss - rloss) < 1e-5 * max(1.0, abs(rloss))
    grads = model.table.unflatten(model.read_flat("grads"))
    for name, want in rgrads.items():
        assert rel_err(grads[name], want) < 1e-4, name
    return gnorm


def run_attention(rt, B, T, H, hd, seed, KVH=None, attend=attention, state=None):
    """attend's forward and backward on random qkv (B, T, C + 2 KVH hd) against the float64
    reference; KVH None: multi-head. state: floats of the forward's second output, compared
    too: None for the fused path's logsumexp (B*H*T), B*H*T*T for the gemm path's
    probabilities."""
    rng = np.random.default_rng(seed)
    C, KV = H * hd, (KVH or H) * hd
    W = C + 2 * KV
    qkv, dy = rng.normal(size=(B, T, W)), rng.normal(size=(B, T, C))
    q, k, v = qkv[..., :C], qkv[..., C:C + KV], qkv[..., C + KV:]
    nan = lambda n: up(rt, np.full(n, np.nan))  # noqa: E731  no kernel may read stale contents
    n_state = B * H * T if state is None else state
    y, lse, bqkv = nan(B * T * C), nan(n_state), up(rt, qkv)
    attend.attention_forward(rt, y, lse, bqkv, B, T, C, H, KVH)
    ry, ratt = ref.attention_forward(q, k, v, H)
    close(down(rt, y, (B, T, C)), ry)
    if state is None:
        close(down(rt, lse, (B, H, T)), ref.attention_logsumexp(q, k, H))
    else:
        close(down(rt, lse, (B, H, T, T)), ratt)  # zero above the diagonal
    dqkv, dsum = nan(B * T * W), nan(n_state)
    attend.attention_backward(rt, dqkv, dsum, up(rt, dy), bqkv, y, lse, B, T, C, H, KVH)
    got = down(rt, dqkv, (B, T, W))
    rdq, rdk, rdv = ref.attention_backward(dy, q, k, v, ratt, H)
    close(got[..., :C], rdq, 5e-5)
    close(got[..., C:C + KV], rdk, 5e-5)
    close(got[..., C + KV:], rdv, 5e-5)


GEMM_VARIANTS = ["blocked", "vector8", "vector16", "packed8", "packed16", "tiled64", "tiled128",
                 "tiled64s", "tiled128s"]


def plan_rt(rt, name: str):
    """rt with its GEMM plan set to variant `name` (see gemm_rt), or a pytest skip where the
    device cannot run it."""
    variant = name.rstrip("0123456789s")
    cpu_only = variant in ("vector", "packed")
    if cpu_only and not rt.is_cpu and "Oclgrind" not in rt.info.name:
        pytest.skip("the vector and packed kernels are for CPUs (and checked under Oclgrind)")
    edge = int(name[5:].rstrip("s")) if variant == "tiled" else None
    if edge is not None and edge not in rt.plan.edges:
        pytest.skip(f"{rt.info.name} has too little local memory for {edge}x{edge} tiles "
                    "(the engine uses a smaller edge there)")
    width = int(name[6:]) if cpu_only else rt.plan.vector_width
    return rt.with_plan(rt.plan.replace(variant=variant, tile_edge=edge, vector_width=width,
                                        fetch4=not name.endswith("s")))
