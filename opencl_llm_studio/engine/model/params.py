"""The flat parameter table: every weight lives in one device buffer at a named (offset, shape).

Gradients and both AdamW moments use the same layout in their own flat buffers, so clipping and
AdamW are one kernel each, and checkpoint and export walk the table (docs/DESIGN.md). Weights that one
matmul reads together sit side by side: q, k, v form one (C + 2 kv_dim, C) matrix (kv_dim =
kv_heads * head_dim) and gate, up one (2F, C).
Matrices come first, then the norm weights, so weight decay covers exactly [0, n_decay).
Groups start on 256-float boundaries, the sub-buffer alignment every device we know accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig

ALIGN = 256  # floats (1 KiB): >= CL_DEVICE_MEM_BASE_ADDR_ALIGN on PoCL (128 B) and NVIDIA (512 B)


@dataclass(frozen=True)
class Entry:
    name: str      # GGUF tensor name, e.g. "blk.0.attn_q.weight"
    offset: int    # in floats, from the start of the flat buffer
    shape: tuple   # numpy shape, linear weights (out, in)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class Group:
    """A run of entries read as one tensor by the kernels (e.g. the fused qkv matrix)."""
    name: str
    offset: int
    size: int


def qkv_width(cfg: ModelConfig) -> int:
    """Columns of the fused qkv rows: q (n_head * head_dim), then k and v (kv_heads * head_dim
    each; grouped-query attention, Ainslie et al. 2023)."""
    return cfg.d_model + 2 * cfg.kv_heads * cfg.head_dim


def param_count(cfg: ModelConfig) -> int:
    """Number of trainable parameters (elements) of a model of `cfg`: its ParamTable's entries."""
    return ParamTable(cfg).n_params


def tensors_per_layer(cfg: ModelConfig) -> int:
    """Tensors each transformer block of `cfg`'s kind holds (GGUF import checks a file's
    block_count with it before building a table of that many layers)."""
    one, none = ParamTable(cfg.replace(n_layer=1)), ParamTable(cfg.replace(n_layer=0))
    return len(one.entries) - len(none.entries)


class Layout:
    """Named tensors in one flat float32 buffer: `entries` (Entry by name, in buffer order),
    `size` (floats, padding included). ParamTable (the model) and engine.model.lora_table.
    LoraTable (its adapters) are layouts."""

    entries: dict[str, Entry]
    size: int

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """GGUF tensor name -> numpy shape (linear weights (out, in)), in table order: the one
        list of the model's tensors that GGUF export and import, the Hugging Face round trip and
        tests/reference.py use."""
        return {n: e.shape for n, e in self.entries.items()}

    @property
    def n_params(self) -> int:
        """Trainable parameters (elements), padding excluded."""
        return sum(e.size for e in self.entries.values())

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Flat host array -> {name: array of the entry's shape} (copies)."""
        return {n: flat[e.offset:e.offset + e.size].reshape(e.shape).copy()
                for n, e in self.entries.items()}

    def flatten(self, weights: dict[str, np.ndarray]) -> np.ndarray:
        """{name: array} -> flat float32 host array (padding zero). Raises KeyError/ValueError
        when a name is missing or a shape differs."""
        flat = np.zeros(self.size, np.float32)
        for n, e in self.entries.items():
            w = np.asarray(weights[n], np.float32)
            if w.shape != e.shape:
                raise ValueError(f"{n}: shape {w.shape}, expected {e.shape}")
            flat[e.offset:e.offset + e.size] = w.reshape(-1)
        return flat


class ParamTable(Layout):
    """Layout of all parameters of a ModelConfig. `entries` by name, `groups` by name."""

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg
        d, f, V = cfg.d_model, cfg.hidden_dim, cfg.vocab_size
        kv = cfg.kv_heads * cfg.head_dim  # k and v rows (grouped-query attention)
        self.entries: dict[str, Entry] = {}
        self.groups: dict[str, Group] = {}
        self._cursor = 0
        self._group("token_embd", [("token_embd.weight", (V, d))])
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            self._group(p + "attn_qkv", [(p + "attn_q.weight", (d, d)),
                                         (p + "attn_k.weight", (kv, d)),
                                         (p + "attn_v.weight", (kv, d))])
            self._group(p + "attn_output", [(p + "attn_output.weight", (d, d))])
            self._group(p + "ffn_gate_up", [(p + "ffn_gate.weight", (f, d)),
                                            (p + "ffn_up.weight", (f, d))])
            self._group(p + "ffn_down", [(p + "ffn_down.weight", (d, f))])
        if not cfg.tie_embeddings:
            self._group("output", [("output.weight", (V, d))])
        self.n_decay = self._cursor
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            self._group(p + "attn_norm", [(p + "attn_norm.weight", (d,))])
            self._group(p + "ffn_norm", [(p + "ffn_norm.weight", (d,))])
        self._group("output_norm", [("output_norm.weight", (d,))])
        self.size = self._cursor  # total floats, padding included

    def _group(self, name, items):
        self._cursor = -(-self._cursor // ALIGN) * ALIGN
        start = self._cursor
        for ename, shape in items:
            e = Entry(ename, self._cursor, tuple(shape))
            self.entries[ename] = e
            self._cursor += e.size
        self.groups[name] = Group(name, start, self._cursor - start)

    @property
    def output_group(self) -> str:
        return "token_embd" if self.cfg.tie_embeddings else "output"

    def init_weights(self, rng: np.random.Generator) -> np.ndarray:
        """Flat float32 initial weights: N(0, 0.02) matrices, residual projections (attn_output,
        ffn_down) scaled by 1/sqrt(2 n_layer) (GPT-2, Radford et al. 2019), norm weights 1."""
        flat = np.zeros(self.size, np.float32)
        resid_std = 0.02 / np.sqrt(2 * max(self.cfg.n_layer, 1))
        for n, e in self.entries.items():
            if len(e.shape) == 1:
                vals = np.ones(e.shape)
            else:
                std = resid_std if ("attn_output" in n or "ffn_down" in n) else 0.02
                vals = rng.normal(0.0, std, e.shape)
            flat[e.offset:e.offset + e.size] = vals.reshape(-1)
        return flat
