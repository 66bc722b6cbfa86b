"""Where LoRA adapters sit and how they are laid out (Hu et al. 2021).

A target (engine.config.LORA_TARGETS) is one linear weight of every block. The engine fuses
weights that read the same input (engine.model.params: q, k, v are one (C + 2 kv_dim, C) group,
gate and up one (2F, C)), so each target is a column range of its group's output: `slot` gives
the group, the range's first column and width, and the input width. The adapters live in one
flat buffer, A (rank, in) then B (out, rank) per target per block, each on the 256-float
boundary sub-buffers need (engine.model.params.ALIGN); gradients and both AdamW moments use the
same layout, so clipping and AdamW are the full model's kernels over a smaller vector.
Names: "blk.{l}.{target}.weight.lora_a" / ".lora_b", as llama.cpp's LoRA adapter GGUFs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from opencl_llm_studio.engine.config import LoraConfig, ModelConfig
from opencl_llm_studio.engine.model.params import ALIGN, Entry, Group, Layout


class Slot(NamedTuple):
    """A target's place in its fused weight group: output columns [c0, c0 + n) of the group's
    (M, width) product, whose input is k columns wide."""
    group: str   # engine.model.params group suffix: attn_qkv, attn_output, ffn_gate_up, ffn_down
    c0: int
    n: int       # out_features of the target
    width: int   # columns of the group's output
    k: int       # in_features


def slot(cfg: ModelConfig, target: str) -> Slot:
    """The Slot of `target` (one of engine.config.LORA_TARGETS) in a model of `cfg`."""
    C, F, kv = cfg.d_model, cfg.hidden_dim, cfg.kv_heads * cfg.head_dim
    W = C + 2 * kv
    return {"attn_q": Slot("attn_qkv", 0, C, W, C), "attn_k": Slot("attn_qkv", C, kv, W, C),
            "attn_v": Slot("attn_qkv", C + kv, kv, W, C),
            "attn_output": Slot("attn_output", 0, C, C, C),
            "ffn_gate": Slot("ffn_gate_up", 0, F, 2 * F, C),
            "ffn_up": Slot("ffn_gate_up", F, F, 2 * F, C),
            "ffn_down": Slot("ffn_down", 0, C, C, F)}[target]


def names(layer: int, target: str) -> tuple[str, str]:
    """The (A, B) tensor names of `target` in block `layer`."""
    base = f"blk.{layer}.{target}.weight"
    return base + ".lora_a", base + ".lora_b"


class LoraTable(Layout):
    """Layout of the adapters of (cfg, lora): `entries` by name (Entry: name, offset, shape),
    `groups` the same (one tensor each), and n_decay: what training reads of a
    engine.model.params.ParamTable."""

    def __init__(self, cfg: ModelConfig, lora: LoraConfig):
        self.cfg, self.lora = cfg, lora.validate()
        self.entries: dict[str, Entry] = {}
        self.groups: dict[str, Group] = {}
        cursor = 0
        for layer in range(cfg.n_layer):
            for target in lora.targets:
                s = slot(cfg, target)
                for name, shape in zip(names(layer, target), ((lora.rank, s.k), (s.n, lora.rank))):
                    cursor = -(-cursor // ALIGN) * ALIGN
                    e = Entry(name, cursor, shape)
                    self.entries[name] = e
                    self.groups[name] = Group(name, cursor, e.size)
                    cursor += e.size
        self.size = cursor
        self.n_decay = cursor   # every adapter is a matrix: AdamW's decoupled decay covers all
        # in_group's answers: asked for every product of every step and decoded token (made
        # afresh each time they cost 8 s of a 10-step run's closing check on the 135M model)
        self._in_group: dict[str, list[tuple[str, Slot]]] = {}
        for target in lora.targets:
            s = slot(cfg, target)
            self._in_group.setdefault(s.group, []).append((target, s))

    def init_weights(self, rng: np.random.Generator) -> np.ndarray:
        """A uniform in +-1/sqrt(in) (PEFT's kaiming_uniform_(a=sqrt(5)) bound), B zero: the
        adapted model starts as the base model exactly (Hu et al. 2021, section 4.1)."""
        flat = np.zeros(self.size, np.float32)
        for n, e in self.entries.items():
            if n.endswith(".lora_a"):
                bound = 1.0 / np.sqrt(e.shape[1])
                flat[e.offset:e.offset + e.size] = rng.uniform(-bound, bound, e.size)
        return flat

    def in_group(self, group: str) -> list[tuple[str, Slot]]:
        """(target, Slot) of the adapted targets whose slot is in weight group `group`."""
        return self._in_group.get(group, [])
