"""GGUF tensor names <-> Hugging Face Llama names, and the q/k row permutation between them.

The engine (like GGUF and llama.cpp's "NORM" RoPE) rotates adjacent channel pairs (x[2i],
x[2i+1]) of each head; transformers' Llama rotates halves (x[i], x[i + head_dim/2])
(`rotate_half`). Both compute the same attention when the q and k rows of every head are
reordered: llama.cpp's `convert_hf_to_gguf.py` (LlamaModel.permute) maps HF -> GGUF with
reshape(n_head, 2, head_dim/2, ...).swapaxes(1, 2); `to_hf_rows` is its inverse.
"""

from __future__ import annotations

import re

import numpy as np

_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_TO_GGUF = {v: k for k, v in _LAYER.items()}
_BLK = re.compile(r"blk\.(\d+)\.(\w+)\.weight$")
_HF_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)\.weight$")


def hf_name(gguf_name: str) -> str:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight'. KeyError if unknown."""
    m = _BLK.match(gguf_name)
    if m:
        return f"model.layers.{m.group(1)}.{_LAYER[m.group(2)]}.weight"
    return _GLOBAL[gguf_name.removesuffix(".weight")] + ".weight"


def gguf_name(name: str) -> str:
    """The inverse of hf_name. KeyError for a tensor the engine's model does not have."""
    m = _HF_LAYER.match(name)
    if m:
        return f"blk.{m.group(1)}.{_TO_GGUF[m.group(2)]}.weight"
    inverse = {v: k for k, v in _GLOBAL.items()}
    return inverse[name.removesuffix(".weight")] + ".weight"


def is_rotated(gguf_tensor: str) -> bool:
    """q and k carry RoPE, so their rows are permuted between the two layouts."""
    return gguf_tensor.endswith(("attn_q.weight", "attn_k.weight"))


def rotated_heads(gguf_tensor: str, cfg) -> int:
    """Heads whose rows to_hf_rows / from_hf_rows permute in a rotated tensor of ModelConfig
    cfg: n_head for attn_q, kv_heads for attn_k (grouped-query attention; llama.cpp's
    convert_hf_to_gguf permutes k_proj with n_kv_head); 0 for tensors without RoPE."""
    if gguf_tensor.endswith("attn_k.weight"):
        return cfg.kv_heads
    return cfg.n_head if is_rotated(gguf_tensor) else 0


def to_hf_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """(n_head * head_dim, in) rows from adjacent-pair order to rotate-half order."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def from_hf_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of to_hf_rows (llama.cpp's LlamaModel.permute)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_hf_tensor(gguf_tensor: str, w: np.ndarray, cfg) -> np.ndarray:
    """The engine's tensor `gguf_tensor` in transformers' layout (q/k rows to rotate-half)."""
    heads = rotated_heads(gguf_tensor, cfg)
    return to_hf_rows(w, heads) if heads else w


def from_hf_tensor(gguf_tensor: str, w: np.ndarray, cfg) -> np.ndarray:
    """The inverse of to_hf_tensor (q/k rows from rotate-half to the engine's pair order)."""
    heads = rotated_heads(gguf_tensor, cfg)
    return from_hf_rows(w, heads) if heads else w
