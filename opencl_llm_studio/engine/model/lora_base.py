"""The frozen base model under LoRA adapters: its weights' products, never their gradients.

A base gives engine.model.lora.LoraModel what engine.model.transformer.Model's weight hooks
need: the norm weights as device buffers (`views`), the embedding rows, each block's fused
weight groups (attn_qkv, attn_output, ffn_gate_up, ffn_down) forward (y = x W^T) and backward
to the input only (dx = dy W), and the output head. `FlatBase` holds float32 weights in the
full model's flat layout (engine.model.params.ParamTable): a model trained here or opened from
an f32/f16 file. engine.model.quant_base.QuantBase keeps a GGUF's quantized tensors as they are.
"""

from __future__ import annotations

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.model.params import ParamTable
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.runtime import Runtime


class FlatBase:
    """float32 base weights on the device in ParamTable's layout (one buffer, group views)."""

    form = "f32"

    def __init__(self, rt: Runtime, cfg: ModelConfig, flat_weights: np.ndarray):
        self.rt, self.cfg, self.table = rt, cfg, ParamTable(cfg)
        if np.size(flat_weights) != self.table.size:
            raise ValueError(f"{np.size(flat_weights)} floats for a base of {self.table.size}")
        self.params = rt.to_device(np.asarray(flat_weights, np.float32).reshape(-1))
        self.views = {name: self.params.get_sub_region(g.offset * 4, g.size * 4)
                      for name, g in self.table.groups.items()}
        self.nbytes = self.largest = 4 * self.table.size   # device bytes; one buffer

    @property
    def w_t_floats(self) -> int:
        """Floats of the transposed-weight scratch its products may need (the largest group)."""
        return max(g.size for g in self.table.groups.values())

    def embed(self, out, ids, n: int):
        ops.embedding_forward(self.rt, out, ids, self.views["token_embd"], n, self.cfg.d_model)

    def linear(self, name: str, out, inp, M: int, N: int, K: int, w_t):
        ops.matmul_forward(self.rt, out, inp, self.views[name], w_t, M, N, K)

    def linear_backward(self, name: str, dinp, dout, M: int, N: int, K: int):
        """dinp (M, K) = dout (M, N) @ W."""
        ops.matmul_nn(self.rt, dinp, dout, self.views[name], M, K, N)

    def head(self, out, inp, M: int, w_t, w_t_ready: bool = False):
        cfg = self.cfg
        ops.matmul_forward(self.rt, out, inp, self.views[self.table.output_group], w_t, M,
                           cfg.vocab_size, cfg.d_model, w_t_ready=w_t_ready)

    def head_reads_in_place(self, M: int) -> bool:
        return ops.reads_weight_in_place(self.rt, M, self.cfg.vocab_size, self.cfg.d_model)

    def head_backward(self, dinp, dout, M: int):
        cfg = self.cfg
        ops.matmul_nn(self.rt, dinp, dout, self.views[self.table.output_group], M, cfg.d_model,
                      cfg.vocab_size)

    def weights(self) -> dict[str, np.ndarray]:
        """{GGUF name: float32 (out, in)} copied from the device."""
        return self.table.unflatten(self.rt.read(self.params, self.table.size))
