"""The engine's Llama-style model written in PyTorch (fp32), for benchmarks/bench_train.py.

Same math as tests/reference.py and engine/model/transformer.py: token embedding; per block RMSNorm (eps
1e-5) -> causal multi-head attention with RoPE in llama.cpp's NORM convention (pairs (2i, 2i+1))
-> residual; RMSNorm -> SwiGLU -> residual; final RMSNorm; output projection tied to the
embedding by default. No biases. Weights are loaded from the engine by GGUF name, so both sides
start identical. q, k, v are held as one (3C, C) parameter and gate, up as one (2F, C), as the
engine does (and nanoGPT does for qkv): it is the fast way to write it in PyTorch too, and AdamW
is elementwise, so fusing changes no number.

The optimizer is torch.optim.AdamW with PyTorch's defaults (foreach) and two parameter groups,
decay on 2-D weights only; clipping is clip_grad_norm_, whose return value is the norm before
clipping.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from opencl_llm_studio.engine.model.params import ParamTable


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., C) / sqrt(mean(x^2) + eps) * w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, hd); cos, sin (T, hd/2). Pair (x[2i], x[2i+1]) rotated (llama.cpp NORM)."""
    xr = x.unflatten(-1, (-1, 2))                 # (B, H, T, hd/2, 2)
    a, b = xr[..., 0], xr[..., 1]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return out.flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Fh = cfg.d_model, cfg.hidden_dim
        self.n_head, self.eps, self.hidden = cfg.n_head, cfg.rms_eps, Fh
        self.attn_norm = nn.Parameter(torch.ones(C))
        self.attn_qkv = nn.Parameter(torch.empty(3 * C, C))      # (out, in): q | k | v
        self.attn_output = nn.Parameter(torch.empty(C, C))
        self.ffn_norm = nn.Parameter(torch.ones(C))
        self.ffn_gate_up = nn.Parameter(torch.empty(2 * Fh, C))  # gate | up
        self.ffn_down = nn.Parameter(torch.empty(C, Fh))

    def forward(self, x, cos, sin, sdpa: bool):
        B, T, C = x.shape
        H = self.n_head
        h = rms_norm(x, self.attn_norm, self.eps)
        q, k, v = F.linear(h, self.attn_qkv).split(C, dim=-1)              # (B, T, C) each
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, self.attn_output)
        h = rms_norm(x, self.ffn_norm, self.eps)
        g, u = F.linear(h, self.ffn_gate_up).split(self.hidden, dim=-1)
        return x + F.linear(F.silu(g) * u, self.ffn_down)


class TorchLlama(nn.Module):
    """The engine's model in PyTorch. `sdpa`: attention through scaled_dot_product_attention
    (what a PyTorch user writes today) instead of the explicit softmax(QK^T)V."""

    def __init__(self, cfg, sdpa: bool = True):
        super().__init__()
        self.cfg, self.sdpa = cfg, sdpa
        self.token_embd = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.output = (None if cfg.tie_embeddings
                       else nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model)))
        hd = cfg.head_dim
        inv = cfg.rope_base ** (-2.0 * np.arange(hd // 2) / hd)
        ang = np.arange(cfg.context_length)[:, None] * inv[None, :]  # float64, rounded once
        self.register_buffer("rope_cos", torch.tensor(np.cos(ang), dtype=torch.float32))
        self.register_buffer("rope_sin", torch.tensor(np.sin(ang), dtype=torch.float32))

    def forward(self, ids: torch.Tensor, targets: torch.Tensor | None = None):
        """ids (B, T) int64 -> logits (B, T, V); with targets, the mean cross-entropy over
        targets >= 0 instead."""
        B, T = ids.shape
        x = self.token_embd[ids]                                          # (B, T, C)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for blk in self.blocks:
            x = blk(x, cos, sin, self.sdpa)
        x = rms_norm(x, self.output_norm, self.cfg.rms_eps)
        logits = F.linear(x, self.token_embd if self.output is None else self.output)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1), ignore_index=-1)

    # -- weights by GGUF name ----------------------------------------------------------------
    def _group_param(self, group: str) -> nn.Parameter:
        """The parameter holding one engine.model.params.ParamTable group ("blk.3.attn_qkv" ->
        blocks[3].attn_qkv): the groups are the fused tensors this model keeps."""
        if group.startswith("blk."):
            _, layer, name = group.split(".", 2)
            return getattr(self.blocks[int(layer)], name)
        return getattr(self, group)

    @torch.no_grad()
    def load_gguf_weights(self, w: dict[str, np.ndarray]):
        """Copy {GGUF name: array} (engine.model.transformer.Model.weights()) into the parameters, through
        the engine's table (names, shapes and group layout from ParamTable alone)."""
        table = ParamTable(self.cfg)
        flat = torch.from_numpy(table.flatten(w))
        for name, g in table.groups.items():
            param = self._group_param(name)
            param.copy_(flat[g.offset:g.offset + g.size].view_as(param))

    @torch.no_grad()
    def gguf_weights(self) -> dict[str, np.ndarray]:
        """{GGUF name: float32 array}, the inverse of load_gguf_weights."""
        table = ParamTable(self.cfg)
        flat = np.zeros(table.size, np.float32)
        for name, g in table.groups.items():
            flat[g.offset:g.offset + g.size] = self._group_param(name).detach().float().cpu() \
                .numpy().reshape(-1)
        return table.unflatten(flat)


class TorchTrainer:
    """TorchLlama + AdamW + clipping, with the engine's train_step signature."""

    def __init__(self, cfg, weights: dict[str, np.ndarray], tc, device: str = "cpu",
                 sdpa: bool = True, compile: bool = False):
        """compile: the model through torch.compile (default mode); on CUDA AdamW is fused."""
        self.device = torch.device(device)
        self.model = TorchLlama(cfg, sdpa=sdpa).to(self.device)
        self.model.load_gguf_weights(weights)
        self.model.to(self.device)
        decay = [p for p in self.model.parameters() if p.dim() == 2]
        no_decay = [p for p in self.model.parameters() if p.dim() != 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": tc.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=tc.learning_rate, betas=(tc.beta1, tc.beta2), eps=tc.adam_eps,
            fused=self.device.type == "cuda")
        self.run = torch.compile(self.model) if compile else self.model
        self.tc = tc

    def _to(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a, np.int64))
        return t.to(self.device, non_blocking=False)

    def train_step(self, inputs: np.ndarray, targets: np.ndarray, lr: float, tc=None):
        """One step on (B, T) batches. Returns (loss, grad_norm before clipping, False)."""
        tc = tc or self.tc
        x, y = self._to(inputs), self._to(targets)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss = self.run(x, y)
        loss.backward()
        if tc.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip)
        else:
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p.grad) for p in self.model.parameters()]))
        self.opt.step()
        return float(loss.item()), float(norm.item()), False

    def synchronize(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
