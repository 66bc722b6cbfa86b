"""nanoGPT's model and training loop in PyTorch, written out from its last commit (3adf61e), for
benchmarks/quality_nanogpt.py: model.py (GPT-2 style: learned positions, LayerNorm without bias, GELU MLP,
tied lm_head, init N(0, 0.02) and c_proj scaled by 1/sqrt(2 n_layer)), configure_optimizers
(AdamW, weight decay on 2-D parameters only, fused on CUDA when available), train.py's get_lr
(linear warmup, cosine to min_lr), gradient clipping at 1.0, and its loop order (the next batch
is fetched between forward and backward). Only the data (numpy arrays instead of .bin memmaps)
and the evaluation (quality_nanogpt.Evaluator, the same windows for every side) are ours.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass(frozen=True)
class NanoConfig:
    """One of nanoGPT's two character-level Shakespeare recipes (config/train_shakespeare_char.py;
    the CPU one is its README's command line)."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    max_iters: int
    dropout: float
    lr_decay_iters: int
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_interval: int = 250
    eval_iters: int = 200
    bias: bool = False


RECIPES = {
    "cpu": NanoConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12,
                      max_iters=2000, lr_decay_iters=2000, dropout=0.0, eval_iters=20),
    "gpu": NanoConfig(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64,
                      max_iters=5000, lr_decay_iters=5000, dropout=0.2),
}


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c: NanoConfig):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c: NanoConfig):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c: NanoConfig):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(c.n_embd, c.bias), CausalSelfAttention(c)
        self.ln_2, self.mlp = LayerNorm(c.n_embd, c.bias), MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c: NanoConfig, vocab_size: int):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout), h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, c.bias)))
        self.lm_head = nn.Linear(c.n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)

    def configure_optimizers(self, c: NanoConfig, device_type: str):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": c.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type == "cuda"
        return torch.optim.AdamW(groups, lr=c.learning_rate, betas=(c.beta1, c.beta2),
                                 **(dict(fused=True) if fused else {}))


def get_lr(c: NanoConfig, it: int) -> float:
    """train.py's get_lr: linear warmup, cosine decay to min_lr at lr_decay_iters."""
    if it < c.warmup_iters:
        return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
    if it > c.lr_decay_iters:
        return c.min_lr
    ratio = (it - c.warmup_iters) / (c.lr_decay_iters - c.warmup_iters)
    return c.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c.learning_rate - c.min_lr)


def train(c: NanoConfig, data, evaluator, device: str = "cpu", compile_model: bool = False,
          dtype: str = "float32", seed: int = 1337, max_iters: int | None = None,
          stop_below: float | None = None):
    """train.py's loop; yields (iter, train_s, val_loss) at iter 0 and every eval_interval.
    train_s excludes evaluation (and includes compilation: the first steps compile).
    data: quality_nanogpt.CharData; evaluator: quality_nanogpt.Evaluator (callable loss(batch) -> float)."""
    torch.manual_seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = True  # as train.py
    torch.backends.cudnn.allow_tf32 = True
    device_type = "cuda" if "cuda" in device else "cpu"
    model = GPT(c, data.vocab_size).to(device)
    optimizer = model.configure_optimizers(c, device_type)
    fwd = torch.compile(model) if compile_model else model
    autocast = torch.autocast(device_type=device_type, dtype=getattr(torch, dtype),
                              enabled=dtype != "float32")
    rng = torch.Generator().manual_seed(seed)

    def get_batch():
        x, y = data.train_batch(c.batch_size, c.block_size, rng)
        return x.to(device), y.to(device)

    def val_loss():
        model.eval()
        with torch.no_grad(), autocast:
            loss = evaluator(lambda x, y: float(fwd(x.to(device), y.to(device))))
        model.train()
        return loss

    train_s, last = 0.0, max_iters if max_iters is not None else c.max_iters
    X, Y = get_batch()
    t0 = time.perf_counter()
    for it in range(last + 1):
        if it % c.eval_interval == 0 or it == last:
            if device_type == "cuda":
                torch.cuda.synchronize()  # only here: the loop itself never waits for the GPU
            train_s += time.perf_counter() - t0
            v = val_loss()
            yield it, train_s, v
            if it == last or (stop_below is not None and v <= stop_below):
                return
            t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = get_lr(c, it)
        with autocast:
            loss = fwd(X, Y)
        X, Y = get_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
