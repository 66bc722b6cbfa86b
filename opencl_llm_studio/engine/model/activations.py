"""Every device buffer of a model, declared once: engine.model.transformer.Activations allocates BUFFERS
(one (B, T) set), engine.model.transformer.Model allocates model_buffers (weights, gradients, AdamW
moments, scratch, RoPE tables), engine.generation.decode.KVDecoder allocates DECODE_BUFFERS (one row), and
engine.model.memory counts the same lists (silx's BufferDescription list, which both allocates and
sizes).

Each `Buffer` gives its attribute name, its element count as a function of the set's `Dims`, its
dtype (float32 or int32: 4 bytes each), how many copies (one, one per layer, or one per layer
plus one) and whether only a training set (with gradients) holds it. Attention keeps a logsumexp
(B, H, T) per layer on the fused path and the probabilities (B, H, T, T) on the GEMM path
(engine/model/attention_gemm.py); `Dims.att` is whichever the set's path needs.
Logits are held for at most `Dims.R` rows at once (logit_rows): all B*T rows for small
vocabularies, chunks of them for large ones (SmolLM2's 49,152, Llama 3's 128,256), where
engine/model/output_head.py runs the output projection and cross-entropy chunk by chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.model.params import qkv_width, ParamTable
from opencl_llm_studio.engine.model.moments import BYTES as moment_bytes, resolve as resolve_moments
from opencl_llm_studio.engine.opencl.ops import GRAD_NORM_PARTIALS


@dataclass(frozen=True)
class Dims:
    """The sizes one activation set depends on."""
    B: int
    T: int
    C: int          # d_model
    F: int          # hidden_dim (SwiGLU)
    V: int          # vocab_size
    H: int          # n_head
    L: int          # n_layer
    W: int          # qkv row width: d_model + 2 * kv_heads * head_dim (engine.model.params.qkv_width)
    attention: str  # "fused" or "gemm"

    @classmethod
    def of(cls, cfg: ModelConfig, B: int, T: int, attention: str) -> "Dims":
        return cls(B, T, cfg.d_model, cfg.hidden_dim, cfg.vocab_size, cfg.n_head, cfg.n_layer,
                   qkv_width(cfg), attention)

    @property
    def R(self) -> int:
        """Rows of logits held at once: logit_rows(V, B*T)."""
        return logit_rows(self.V, self.BT)

    @property
    def BT(self) -> int:
        return self.B * self.T

    @property
    def att(self) -> int:
        """Floats per layer of attention state: logsumexp (B, H, T), or probabilities (B, H, T, T)."""
        return self.B * self.H * self.T * (self.T if self.attention == "gemm" else 1)


# Logits held at once, in floats: 64 MiB (SmolLM2's vocabulary: 256 rows; B x T x V would be
# 400 MiB at batch 8 x 256). Below it a set holds all its B*T rows of logits.
LOGITS_FLOATS = 1 << 24
LOGIT_ROW_STEP = 128  # chunk rows are multiples of 128: sub-buffer origins stay aligned (ops._rows)


def logit_rows(V: int, BT: int) -> int:
    """Rows of logits (each V floats) computed and held at once for B*T rows: BT when they fit
    LOGITS_FLOATS, else the most multiples of LOGIT_ROW_STEP that do (at least one step)."""
    if BT * V <= LOGITS_FLOATS:
        return BT
    return min(BT, max(LOGIT_ROW_STEP, LOGITS_FLOATS // V // LOGIT_ROW_STEP * LOGIT_ROW_STEP))


ONE, PER_LAYER, PER_LAYER_PLUS_ONE = "one", "layer", "layer+1"


@dataclass(frozen=True)
class Buffer:
    name: str                      # attribute of engine.model.transformer.Activations
    elems: Callable[[Dims], int]   # elements of one copy
    dtype: type = np.float32
    copies: str = ONE              # ONE: a buffer; PER_LAYER(_PLUS_ONE): a list of n_layer (+1)
    grad: bool = False             # only in a training set (backward scratch)
    kept: bool = False             # per layer in a forward-only set too (the KV cache's qkv)

    def count(self, d: Dims, with_grad: bool = True) -> int:
        """Copies allocated in a set of dims d. A training set keeps every layer's (backward
        reads them); a forward-only set (evaluation, generation) needs a layer's buffers only
        until the next layer has read them, so its per-layer lists share one buffer (the
        residual stream x two, alternating: a layer reads x[l] while it writes x[l + 1]),
        except `kept` ones: a 1,024-token window of a 30-block model is 0.2 GiB, not 1 GiB."""
        full = {ONE: 1, PER_LAYER: d.L, PER_LAYER_PLUS_ONE: d.L + 1}[self.copies]
        if with_grad or self.kept or self.copies == ONE:
            return full
        return min(full, 2 if self.copies == PER_LAYER_PLUS_ONE else 1)

    def layer_list(self, allocated: list, d: Dims) -> list:
        """The per-layer list (count(d) entries) over the `allocated` copies: layer l uses copy
        l mod len(allocated)."""
        full = self.count(d)
        return [allocated[i % len(allocated)] for i in range(full)]


_i = np.int32
BUFFERS: tuple[Buffer, ...] = (
    Buffer("ids", lambda d: d.BT, _i),
    Buffer("targets", lambda d: d.BT, _i),
    Buffer("x", lambda d: d.BT * d.C, copies=PER_LAYER_PLUS_ONE),  # residual entering layer l
    Buffer("xn", lambda d: d.BT * d.C, copies=PER_LAYER),          # attn RMSNorm output
    Buffer("rstd1", lambda d: d.BT, copies=PER_LAYER),
    Buffer("qkv", lambda d: d.BT * d.W, copies=PER_LAYER, kept=True),  # after RoPE; KV cache
    Buffer("lse", lambda d: d.att, copies=PER_LAYER),              # logsumexp, or probabilities
    Buffer("y", lambda d: d.BT * d.C, copies=PER_LAYER),           # attention before attn_output
    Buffer("xmid", lambda d: d.BT * d.C, copies=PER_LAYER),        # residual after attention
    Buffer("xn2", lambda d: d.BT * d.C, copies=PER_LAYER),
    Buffer("rstd2", lambda d: d.BT, copies=PER_LAYER),
    Buffer("gu", lambda d: d.BT * 2 * d.F, copies=PER_LAYER),      # gate | up
    Buffer("h", lambda d: d.BT * d.F, copies=PER_LAYER),           # silu(gate) * up
    Buffer("proj", lambda d: d.BT * d.C),                          # attn_output / ffn_down result
    Buffer("xf", lambda d: d.BT * d.C),
    Buffer("rstdf", lambda d: d.BT),
    Buffer("logits", lambda d: d.R * d.V),                         # rows in chunks: logit_rows
    Buffer("losses", lambda d: d.BT),
    # the rows with a target, when few (a tuning batch's answers): engine/model/output_head.py
    Buffer("head_rows", lambda d: d.BT, _i),
    Buffer("head_targets", lambda d: d.BT, _i),
    Buffer("head_x", lambda d: d.BT * d.C),
    Buffer("dres", lambda d: d.BT * d.C, grad=True),
    Buffer("dtmp", lambda d: d.BT * d.C, grad=True),
    Buffer("dy", lambda d: d.BT * d.C, grad=True),
    Buffer("ddrop", lambda d: d.BT * d.C, grad=True),    # dout of a projection under dropout
    Buffer("dqkv", lambda d: d.BT * d.W, grad=True),
    Buffer("dsum", lambda d: d.att, grad=True),          # rowsum(dy * y), or dP/dS scratch
    Buffer("dgu", lambda d: d.BT * 2 * d.F, grad=True),
    Buffer("dh", lambda d: d.BT * d.F, grad=True),
    Buffer("uniq", lambda d: d.BT, _i, grad=True),       # embedding_backward's CSR grouping
    Buffer("starts", lambda d: d.BT + 1, _i, grad=True),
    Buffer("order", lambda d: d.BT, _i, grad=True),
    Buffer("head_dx", lambda d: d.BT * d.C, grad=True),  # dxf of the rows with a target
    Buffer("head_starts", lambda d: d.BT + 1, _i, grad=True),   # their scatter (CSR: 1 each)
    Buffer("head_order", lambda d: d.BT, _i, grad=True),
)


def buffers(with_grad: bool) -> list[Buffer]:
    """The buffers of a set: all of them for training, the forward ones otherwise."""
    return [b for b in BUFFERS if with_grad or not b.grad]


# KVDecoder's one-row buffers (B = 1, T = 1 of the set's dims), and its attention scores over
# the whole window (H, context_length): engine/generation/decode.py
DECODE_BUFFERS: tuple[Buffer, ...] = (
    Buffer("tok", lambda d: 1, _i),
    *(Buffer(n, lambda d: d.C) for n in ("x", "xn", "y", "proj", "xmid", "xn2", "xnext", "xf")),
    *(Buffer(n, lambda d: 1) for n in ("rstd", "rstd2", "rstdf")),
    Buffer("qkv", lambda d: d.W),
    Buffer("gu", lambda d: 2 * d.F),
    Buffer("h", lambda d: d.F),
    Buffer("logits", lambda d: d.V),
    Buffer("scores", lambda d: d.H * d.T),
)



@dataclass(frozen=True)
class ModelBuffer:
    name: str    # attribute of engine.model.transformer.Model
    elems: int   # float32 elements
    training: bool = False   # made at the first training use (gradients, AdamW moments): a
    #                          model opened to chat or export holds its weights alone
    itemsize: int = 4        # bytes an element: 2 for moments kept as bfloat16 (model.moments)


def model_buffers(cfg: ModelConfig, moments: str = "f32") -> tuple[ModelBuffer, ...]:
    """The device buffers a Model holds besides its activation sets: the weights, gradients
    and both AdamW moments (the padded ParamTable each; the moments float32 or, with
    moments="bf16", bfloat16: engine.model.moments), the grad-norm stats (norm,
    clip scale, non-finite flag) and partial sums, the transposed-weight scratch of
    matmul_forward (the largest group) and RoPE's cos and sin tables (context_length,
    head_dim / 2; engine.model.attention.rope_table)."""
    table = ParamTable(cfg)
    rope = cfg.context_length * (cfg.head_dim // 2)
    return (ModelBuffer("params", table.size),
            ModelBuffer("grads", table.size, training=True),
            *(ModelBuffer(n, table.size, training=True, itemsize=moment_bytes[moments])
              for n in ("m", "v")),
            ModelBuffer("stats", 3), ModelBuffer("partial", GRAD_NORM_PARTIALS),
            ModelBuffer("w_t", max(g.size for g in table.groups.values())),
            ModelBuffer("rope_cos", rope), ModelBuffer("rope_sin", rope))


def buffer_bytes(buffers, d: Dims, with_grad: bool = True) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) of Buffers at dims d (each at least one
    element: OpenCL forbids size 0, engine.opencl.runtime.Runtime.empty); with_grad: a
    training set's copies or a forward-only one's (Buffer.count)."""
    sizes = [(b.count(d, with_grad), max(b.elems(d), 1) * np.dtype(b.dtype).itemsize)
             for b in buffers]
    return sum(n * s for n, s in sizes), max(s for _, s in sizes)


def set_bytes(cfg: ModelConfig, B: int, T: int, with_grad: bool,
              attention: str = "fused") -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) of one activation set (B, T) of cfg with
    attention on `attention` ("fused" or "gemm"); what engine.model.transformer.Activations allocates."""
    return buffer_bytes(buffers(with_grad), Dims.of(cfg, B, T, attention), with_grad)


def decode_bytes(cfg: ModelConfig) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) of a KVDecoder's own buffers (its cache is
    the (1, context_length) activation set)."""
    return buffer_bytes(DECODE_BUFFERS, Dims.of(cfg, 1, cfg.context_length, "fused"))


def model_bytes(cfg: ModelConfig, training: bool = True, moments: str = "auto"
                ) -> tuple[int, int]:
    """(total bytes, largest single buffer in bytes) of model_buffers(cfg); training=False:
    without the ones made at the first training use (gradients, AdamW moments). moments:
    TrainConfig.adam_moments ("auto": as engine.model.moments.resolve picks for cfg)."""
    kind = resolve_moments(moments, cfg)
    sizes = [b.itemsize * max(b.elems, 1) for b in model_buffers(cfg, kind)
             if training or not b.training]
    return sum(sizes), max(sizes)
