"""Token-by-token decoding with a KV cache on the device.

The prompt is run once through the full forward pass (prefill) on a window of
prefill_length(len(prompt)) positions, the least power of two that holds it (a 40-token chat
prompt of an imported model with a 1,024-token window was prefilled over all 1,024 positions:
2.4 s a prompt on 2 CPU cores, most of a tuning run's closing check); its per-layer qkv rows
(k and v already rotated) are copied into the cache, a (1, context_length) activation set. Each new token
then costs one row through every layer: its q, k, v are appended at row `pos` and its query
attends to rows 0..pos (kernel attention_decode). The cache holds one window of context_length
rows: when it is full the caller chooses the next window and prefills it with `reset`
(TrainingSession.generate_ids: the newest half of the tokens for plain text, whole older
exchanges dropped for a chat). RoPE positions are absolute, so rows cannot simply shift.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from opencl_llm_studio.engine.model import attention, activations
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.model.transformer import Activations, Model
from opencl_llm_studio.engine.model.params import qkv_width


PREFILL_MIN = 16   # the shortest prefill window (a few short prompts share one set)


def prefill_length(n: int, T: int) -> int:
    """Positions of the window a prompt of n tokens is prefilled in: the least power of two
    >= n, at least PREFILL_MIN and at most T (the context length). Powers of two keep the
    distinct windows, and so the GEMM launches and activation sets made, to log2(T)."""
    length = PREFILL_MIN
    while length < n:
        length *= 2
    return min(length, T)


class KVDecoder:
    """decoder.reset(prompt_ids) -> logits (V,) of the last prompt token;
    decoder.step(token) -> logits (V,) after appending token."""

    def __init__(self, model: Model):
        self.model, self.rt, cfg = model, model.rt, model.cfg
        self.T = cfg.context_length
        self.cache = model.activations(1, self.T, with_grad=False)  # qkv[l] rows = the cache
        self.width = qkv_width(cfg)  # q, k, v of one row (grouped-query attention: k, v narrower)
        # one row each (x, xn, rstd, qkv, y, proj, xmid, xn2, rstd2, gu, h, xnext, xf, rstdf,
        # logits), the token and the scores (H, T): engine.model.activations.DECODE_BUFFERS
        d = activations.Dims.of(cfg, 1, self.T, "fused")
        for b in activations.DECODE_BUFFERS:
            setattr(self, b.name, self.rt.empty(b.elems(d), b.dtype))
        self.ids: list[int] = []
        self._short: Activations | None = None   # the last short prefill's set, if kept

    def reset(self, prompt_ids: list[int]) -> np.ndarray:
        """Prefill with the prompt (its last context_length tokens): logits (V,) of its last
        token. A prompt shorter than the window runs in a (1, prefill_length) set and its
        qkv rows are copied into the cache; a set of more than a quarter of the window is not
        kept afterwards (it would add that much to the decoder's memory)."""
        ids = list(prompt_ids)[-self.T:]
        n, length = len(ids), prefill_length(len(ids), self.T)
        window = np.zeros((1, length), np.int32)
        window[0, :n] = ids
        self.ids = ids
        if length == self.T:
            return self.model.last_logits(window, n)   # the cache's own set
        if self._short is None or self._short.T != length:
            self._short = None   # freed before the next one is made
            self._short = Activations(self.rt, self.model.cfg, 1, length, with_grad=False)
        short = self._short
        logits = self.model.last_logits(window, n, acts=short)
        for l in range(self.model.cfg.n_layer):   # rows 0..n-1 of each layer's k, v (and q)
            cl.enqueue_copy(self.rt.queue, self.cache.qkv[l], short.qkv[l],
                            byte_count=n * self.width * 4)
        if 4 * length > self.T:
            self._short = None
        return logits

    def step(self, token: int) -> np.ndarray:
        """Append `token` at the next position; ValueError when the window is already full
        (call reset with the next window instead)."""
        if len(self.ids) >= self.T:
            raise ValueError(f"the {self.T}-token window is full: reset() with the next window")
        pos = len(self.ids)
        self.ids.append(int(token))
        rt, m, cfg, p = self.rt, self.model, self.model.cfg, self.model.p
        C, F, V, H, hd = cfg.d_model, cfg.hidden_dim, cfg.vocab_size, cfg.n_head, cfg.head_dim
        KVH, W = cfg.kv_heads, self.width
        rt.write(self.tok, np.array([token], np.int32))
        m.embed(self.x, self.tok, 1)
        x = self.x
        ops.rmsnorm_forward(rt, self.xn, self.rstd, x, p["blk.0.attn_norm"], 1, C, cfg.rms_eps)
        for l in range(cfg.n_layer):
            b, cache = f"blk.{l}.", self.cache.qkv[l]
            m.linear(l, "attn_qkv", self.qkv, self.xn, 1, W, C)
            attention.rope_forward(rt, self.qkv, m.rope_cos, m.rope_sin, 1, 1, C, hd, pos, KVH)
            cl.enqueue_copy(rt.queue, cache, self.qkv, byte_count=W * 4, dst_offset=pos * W * 4)
            attention.attention_decode(rt, self.y, self.scores, self.qkv, cache, pos, self.T, C, H,
                                       KVH)
            m.linear(l, "attn_output", self.proj, self.y, 1, C, C)
            ops.residual_rmsnorm_forward(rt, self.xmid, self.xn2, self.rstd2, x, self.proj,
                                         p[b + "ffn_norm"], 1, C, cfg.rms_eps)
            m.linear(l, "ffn_gate_up", self.gu, self.xn2, 1, 2 * F, C)
            ops.swiglu_forward(rt, self.h, self.gu, 1, F)
            m.linear(l, "ffn_down", self.proj, self.h, 1, C, F)
            # the residual, then the next block's attn_norm (or the final norm) on it
            last = l + 1 == cfg.n_layer
            out, rstd = (self.xf, self.rstdf) if last else (self.xn, self.rstd)
            w = p["output_norm"] if last else p[f"blk.{l + 1}.attn_norm"]
            ops.residual_rmsnorm_forward(rt, self.xnext, out, rstd, self.xmid, self.proj, w, 1,
                                         C, cfg.rms_eps)
            x, self.xnext = self.xnext, x  # ping-pong the residual rows
        self.x = x
        m.head(self.logits, self.xf, 1)
        return rt.read(self.logits, V)
