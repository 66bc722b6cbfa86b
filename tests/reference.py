"""Float64 numpy twin of every kernel and of the whole model: the oracle the OpenCL code is tested against.

Conventions are those of docs/ENGINE_API.md: linear weights (out, in), y = x @ W.T; RMSNorm
x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019); RoPE in llama.cpp's NORM convention (pair
(x[2i], x[2i+1]) rotated by pos * base^(-2i/head_dim), Su et al. 2021); causal attention with scale
1/sqrt(head_dim); SwiGLU silu(g) * u (Shazeer 2020); mean cross-entropy over targets >= 0.
Every function takes and returns float64 arrays; `_backward` functions return gradients named d<x>.
"""

from __future__ import annotations

import math

import numpy as np

from opencl_llm_studio.engine.model.params import ParamTable  # names and shapes only; the arithmetic here is independent

# ----------------------------------------------------------------------------- layers


def lowbias32(x):
    """C. Wellons' lowbias32 hash on uint32 arrays (kernels/dropout.cl's twin)."""
    x = np.asarray(x, np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def dropout_keep(key, n, p):
    """Keep mask (n,) bool of kernels/dropout.cl for a site key and probability p."""
    threshold = min(int(round(p * 2.0 ** 32)), 0xFFFFFFFF)
    h = lowbias32(lowbias32(np.arange(n, dtype=np.uint32)) ^ np.uint32(key))
    return h >= np.uint32(threshold)


def dropout_forward(x, keep, p):
    """Inverted dropout (Srivastava et al. 2014): x * keep / (1 - p)."""
    return x * keep / (1.0 - p)


def dropout_backward(dout, keep, p):
    return dout * keep / (1.0 - p)


def embedding_forward(ids, wte):
    """ids (B, T) int -> (B, T, C)."""
    return wte[ids]


def embedding_backward(dout, ids, vocab_size):
    """dout (B, T, C) -> dwte (V, C), rows of repeated ids summed."""
    dwte = np.zeros((vocab_size, dout.shape[-1]))
    np.add.at(dwte, ids.reshape(-1), dout.reshape(-1, dout.shape[-1]))
    return dwte


def rmsnorm_forward(x, w, eps=1e-5):
    """x (..., C), w (C,) -> out (..., C), rstd (...)."""
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1) + eps)
    return x * rstd[..., None] * w, rstd


def rmsnorm_backward(dout, x, w, rstd):
    """-> dx (..., C), dw (C,)."""
    xhat = x * rstd[..., None]
    dw = np.sum((dout * xhat).reshape(-1, x.shape[-1]), axis=0)
    dxhat = dout * w
    c = x.shape[-1]
    dx = rstd[..., None] * (dxhat - xhat * np.sum(dxhat * xhat, axis=-1, keepdims=True) / c)
    return dx, dw


def matmul_forward(x, w):
    """x (..., K), w (N, K) -> (..., N)."""
    return x @ w.T


def matmul_backward(dout, x, w):
    """-> dx (..., K), dw (N, K)."""
    k = x.shape[-1]
    n = w.shape[0]
    dx = dout @ w
    dw = dout.reshape(-1, n).T @ x.reshape(-1, k)
    return dx, dw


def llama3_inv_freq(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    """(dim/2,) RoPE inverse frequencies with Llama 3.1 scaling, line by line as transformers'
    src/transformers/modeling_rope_utils.py _compute_llama3_parameters (numpy for torch)."""
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # wavelen < high_freq_wavelen: do nothing
    # wavelen > low_freq_wavelen: divide by factor
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # otherwise: interpolate between the two, using a smooth factor
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor
                                                                     - low_freq_factor)
    smoothed_inv_freq = ((1 - smooth_factor) * inv_freq_llama / factor
                         + smooth_factor * inv_freq_llama)
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return np.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def model_inv_freq(cfg):
    """A ModelConfig's RoPE inverse frequencies, or None for the plain base^(-2i/head_dim)."""
    if cfg.rope_scaling != "llama3":
        return None
    return llama3_inv_freq(cfg.rope_base, cfg.head_dim, cfg.rope_scaling_factor,
                           cfg.rope_low_freq_factor, cfg.rope_high_freq_factor,
                           cfg.rope_original_context)


def rope_angles(T, head_dim, base=10000.0, pos0=0, inv_freq=None):
    """-> cos, sin of shape (T, head_dim // 2): angle = pos * inv_freq, inv_freq by default
    base^(-2i/head_dim)."""
    if inv_freq is None:
        i = np.arange(head_dim // 2)
        inv_freq = base ** (-2.0 * i / head_dim)
    ang = np.arange(pos0, pos0 + T)[:, None] * inv_freq[None, :]
    return np.cos(ang), np.sin(ang)


def rope_forward(x, n_head, base=10000.0, pos0=0, inv_freq=None):
    """x (B, T, n_head * head_dim) -> rotated copy; pairs (2i, 2i+1) within each head."""
    B, T, C = x.shape
    hd = C // n_head
    cos, sin = rope_angles(T, hd, base, pos0, inv_freq)
    xr = x.reshape(B, T, n_head, hd // 2, 2)
    a, b = xr[..., 0], xr[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = np.stack([a * c - b * s, a * s + b * c], axis=-1)
    return out.reshape(B, T, C)


def rope_backward(dout, n_head, base=10000.0, pos0=0, inv_freq=None):
    """The rotation is orthogonal: its gradient is the inverse rotation."""
    B, T, C = dout.shape
    hd = C // n_head
    cos, sin = rope_angles(T, hd, base, pos0, inv_freq)
    dr = dout.reshape(B, T, n_head, hd // 2, 2)
    a, b = dr[..., 0], dr[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = np.stack([a * c + b * s, -a * s + b * c], axis=-1)
    return out.reshape(B, T, C)


def _heads(t, n, hd):
    """(B, T, n * hd) -> (B, n, T, hd)."""
    B, T, _ = t.shape
    return t.reshape(B, T, n, hd).transpose(0, 2, 1, 3)


def _kv_heads(q, k, n_head):
    """Grouped-query attention (Ainslie et al. 2023): k (or v) (B, T, kv_heads * hd) as
    (B, n_head, T, hd), key/value head j repeated for query heads j*G .. j*G+G-1
    (transformers' repeat_kv; query head h reads kv head h // G)."""
    hd = q.shape[-1] // n_head
    kv = k.shape[-1] // hd
    return np.repeat(_heads(k, kv, hd), n_head // kv, axis=1)


def _scores(q, k, n_head):
    """Causal scaled scores (B, H, T, T), -inf above the diagonal."""
    T, hd = q.shape[1], q.shape[-1] // n_head
    s = _heads(q, n_head, hd) @ _kv_heads(q, k, n_head).transpose(0, 1, 3, 2) / np.sqrt(hd)
    return np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)


def attention_forward(q, k, v, n_head):
    """q (B, T, C), k, v (B, T, kv_heads * head_dim) (already rotated; kv_heads divides n_head,
    kv_heads = n_head is multi-head attention) -> y (B, T, C), att (B, H, T, T) causal softmax."""
    B, T, C = q.shape
    s = _scores(q, k, n_head)
    s = s - s.max(axis=-1, keepdims=True)
    att = np.exp(s)
    att /= att.sum(axis=-1, keepdims=True)
    y = (att @ _kv_heads(q, v, n_head)).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y, att


def attention_logsumexp(q, k, n_head):
    """(B, H, T): log of the sum over keys s <= t of exp(q_t . k_s / sqrt(head_dim)), what the
    fused forward keeps per query row instead of the probabilities (Dao 2023)."""
    s = _scores(q, k, n_head)
    mx = s.max(axis=-1, keepdims=True)
    return (mx + np.log(np.exp(s - mx).sum(axis=-1, keepdims=True)))[..., 0]


def attention_backward(dy, q, k, v, att, n_head):
    """-> dq (B, T, C), dk, dv (B, T, kv_heads * head_dim): the gradients of a key/value head
    sum over the query heads that read it."""
    B, T, C = q.shape
    hd = C // n_head
    kv = k.shape[-1] // hd
    merge = lambda t: t.transpose(0, 2, 1, 3).reshape(B, T, -1)  # noqa: E731
    group = lambda t: t.reshape(B, kv, n_head // kv, T, hd).sum(axis=2)  # noqa: E731
    qh, dyh = _heads(q, n_head, hd), _heads(dy, n_head, hd)
    kh, vh = _kv_heads(q, k, n_head), _kv_heads(q, v, n_head)
    dv = att.transpose(0, 1, 3, 2) @ dyh
    datt = dyh @ vh.transpose(0, 1, 3, 2)
    ds = att * (datt - np.sum(datt * att, axis=-1, keepdims=True)) / np.sqrt(hd)
    dq = ds @ kh
    dk = ds.transpose(0, 1, 3, 2) @ qh
    return merge(dq), merge(group(dk)), merge(group(dv))


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu_forward(g, u):
    """g, u (..., F) -> silu(g) * u."""
    return silu(g) * u


def swiglu_backward(dout, g, u):
    """-> dg, du."""
    sig = 1.0 / (1.0 + np.exp(-g))
    dsilu = sig * (1.0 + g * (1.0 - sig))
    return dout * u * dsilu, dout * silu(g)


def crossentropy_forward(logits, targets):
    """logits (N, V), targets (N,) with -1 = ignored -> (mean loss over valid targets, losses (N,))."""
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    valid = targets >= 0
    losses = np.where(valid, -logp[np.arange(len(targets)), np.where(valid, targets, 0)], 0.0)
    return losses.sum() / max(valid.sum(), 1), losses


def crossentropy_backward(logits, targets):
    """dlogits (N, V) of the mean loss: (softmax - onehot) / n_valid on valid rows, 0 elsewhere."""
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    valid = targets >= 0
    p[np.arange(len(targets)), np.where(valid, targets, 0)] -= valid
    return p * valid[:, None] / max(valid.sum(), 1)


def adamw_update(p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, clip_scale=1.0):
    """One AdamW step (Loshchilov & Hutter 2019, PyTorch's form), gradient pre-scaled by clip_scale.
    `step` counts from 1. Returns new (p, m, v)."""
    g = g * clip_scale
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    mhat = m / (1 - beta1 ** step)
    vhat = v / (1 - beta2 ** step)
    p = p - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * p)
    return p, m, v


def bf16_stochastic(x32, draws):
    """float32 values -> bfloat16 bits (uint16): a uniform 16-bit draw added below the kept bits,
    then truncated (kernels/optimizer.cl bf16_round); Inf and NaN kept."""
    b = np.ascontiguousarray(x32, np.float32).view(np.uint32).astype(np.uint64)
    special = (b & 0x7F800000) == 0x7F800000
    out = np.where(special, b >> 16, (b + (np.asarray(draws, np.uint64) & 0xFFFF)) >> 16)
    return out.astype(np.uint16)


def bf16_value(h):
    """bfloat16 bits (uint16) -> float64 values."""
    return (np.asarray(h, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def adamw_update_bf16(p, g, m16, v16, step, lr, beta1, beta2, eps, weight_decay, key,
                      clip_scale=1.0):
    """adamw_update with the moments read from bfloat16 bits and written back with stochastic
    rounding, element i drawing lowbias32(lowbias32(i) ^ key) for m and the same with
    key ^ 0x9e3779b9 for v. Returns (p, m bits, v bits, m float64, v float64 before rounding)."""
    p, m, v = adamw_update(p, g, bf16_value(m16), bf16_value(v16), step, lr, beta1, beta2, eps,
                           weight_decay, clip_scale)
    h = lowbias32(np.arange(len(p), dtype=np.uint32))
    dm = lowbias32(h ^ np.uint32(key))
    dv = lowbias32(h ^ np.uint32(key ^ 0x9E3779B9))
    return p, bf16_stochastic(m, dm), bf16_stochastic(v, dv), m, v


# ----------------------------------------------------------------------------- whole model


def init_weights(cfg, seed=0, std=0.02):
    """Random float64 weights with the engine's names and shapes (engine.model.params.ParamTable):
    matrices N(0, std), norm weights 1 + N(0, 0.1)."""
    rng = np.random.default_rng(seed)
    return {name: (1.0 + rng.normal(0, 0.1, shape)) if len(shape) == 1
            else rng.normal(0, std, shape)
            for name, shape in ParamTable(cfg).shapes().items()}


def _out_weight(w, cfg):
    return w["token_embd.weight"] if cfg.tie_embeddings else w["output.weight"]


def forward(weights, cfg, ids, targets=None, masks=None, drop_p=0.0):
    """ids (B, T) -> logits (B, T, V); with targets (B, T) also returns (logits, loss, cache).
    masks: {(layer, "attn" | "ffn"): keep (B, T, C) bool} applies dropout drop_p to the attention
    output and feed-forward down projections before their residual adds (nanoGPT's
    resid_dropout); None = no dropout."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    ids = np.asarray(ids)
    B, T = ids.shape
    H, eps, base, f = cfg.n_head, cfg.rms_eps, cfg.rope_base, cfg.hidden_dim
    KVH, inv = cfg.kv_heads, model_inv_freq(cfg)
    cache = {"ids": ids, "layers": [], "masks": masks, "p": drop_p}
    drop = (lambda z, i, site: z) if masks is None else \
        (lambda z, i, site: dropout_forward(z, masks[(i, site)], drop_p))
    x = embedding_forward(ids, w["token_embd.weight"])  # (B, T, C)
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        L = {"x": x}
        L["xn"], L["rstd1"] = rmsnorm_forward(x, w[p + "attn_norm.weight"], eps)
        q = rope_forward(matmul_forward(L["xn"], w[p + "attn_q.weight"]), H, base, 0, inv)
        k = rope_forward(matmul_forward(L["xn"], w[p + "attn_k.weight"]), KVH, base, 0, inv)
        v = matmul_forward(L["xn"], w[p + "attn_v.weight"])
        L["q"], L["k"], L["v"] = q, k, v
        L["y"], L["att"] = attention_forward(q, k, v, H)
        x = x + drop(matmul_forward(L["y"], w[p + "attn_output.weight"]), i, "attn")
        L["x2"] = x
        L["xn2"], L["rstd2"] = rmsnorm_forward(x, w[p + "ffn_norm.weight"], eps)
        L["g"] = matmul_forward(L["xn2"], w[p + "ffn_gate.weight"])  # (B, T, F)
        L["u"] = matmul_forward(L["xn2"], w[p + "ffn_up.weight"])
        L["h"] = swiglu_forward(L["g"], L["u"])
        x = x + drop(matmul_forward(L["h"], w[p + "ffn_down.weight"]), i, "ffn")
        cache["layers"].append(L)
    cache["xlast"] = x
    cache["xf"], cache["rstdf"] = rmsnorm_forward(x, w["output_norm.weight"], eps)
    logits = matmul_forward(cache["xf"], _out_weight(w, cfg))  # (B, T, V)
    assert f == w["blk.0.ffn_gate.weight"].shape[0] if cfg.n_layer else True
    if targets is None:
        return logits
    loss, _ = crossentropy_forward(logits.reshape(B * T, -1), np.asarray(targets).reshape(-1))
    cache["logits"], cache["targets"] = logits, np.asarray(targets)
    return logits, loss, cache


def backward(weights, cfg, cache):
    """Gradients of the mean cross-entropy for every weight, same names as `weights`."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    H, base, KVH, inv = cfg.n_head, cfg.rope_base, cfg.kv_heads, model_inv_freq(cfg)
    logits, targets = cache["logits"], cache["targets"]
    B, T, V = logits.shape
    g = {k: np.zeros_like(v) for k, v in w.items()}
    dlogits = crossentropy_backward(logits.reshape(B * T, V), targets.reshape(-1)).reshape(B, T, V)
    masks, drop_p = cache["masks"], cache["p"]
    drop = (lambda d, i, site: d) if masks is None else \
        (lambda d, i, site: dropout_backward(d, masks[(i, site)], drop_p))
    dxf, dwout = matmul_backward(dlogits, cache["xf"], _out_weight(w, cfg))
    g["token_embd.weight" if cfg.tie_embeddings else "output.weight"] += dwout
    dx, g["output_norm.weight"] = rmsnorm_backward(dxf, cache["xlast"], w["output_norm.weight"],
                                                   cache["rstdf"])
    for i in reversed(range(cfg.n_layer)):
        p, L = f"blk.{i}.", cache["layers"][i]
        dh, g[p + "ffn_down.weight"] = matmul_backward(drop(dx, i, "ffn"), L["h"],
                                                       w[p + "ffn_down.weight"])
        dg, du = swiglu_backward(dh, L["g"], L["u"])
        dxn2a, g[p + "ffn_gate.weight"] = matmul_backward(dg, L["xn2"], w[p + "ffn_gate.weight"])
        dxn2b, g[p + "ffn_up.weight"] = matmul_backward(du, L["xn2"], w[p + "ffn_up.weight"])
        dx2, g[p + "ffn_norm.weight"] = rmsnorm_backward(dxn2a + dxn2b, L["x2"],
                                                         w[p + "ffn_norm.weight"], L["rstd2"])
        dx = dx + dx2
        dy, g[p + "attn_output.weight"] = matmul_backward(drop(dx, i, "attn"), L["y"],
                                                          w[p + "attn_output.weight"])
        dq, dk, dv = attention_backward(dy, L["q"], L["k"], L["v"], L["att"], H)
        dq, dk = rope_backward(dq, H, base, 0, inv), rope_backward(dk, KVH, base, 0, inv)
        dxn = 0.0
        for name, dproj in (("attn_q", dq), ("attn_k", dk), ("attn_v", dv)):
            dpart, g[p + name + ".weight"] = matmul_backward(dproj, L["xn"], w[p + name + ".weight"])
            dxn = dxn + dpart
        dx1, g[p + "attn_norm.weight"] = rmsnorm_backward(dxn, L["x"], w[p + "attn_norm.weight"],
                                                          L["rstd1"])
        dx = dx + dx1
    g["token_embd.weight"] += embedding_backward(dx, cache["ids"], V)
    return g
