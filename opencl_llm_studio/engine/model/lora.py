"""A model tuned through LoRA adapters on a frozen base (Hu et al. 2021).

LoraModel is engine.model.transformer.Model with its weight hooks changed: the base (a
engine.model.lora_base.FlatBase or engine.model.quant_base.QuantBase) computes every product
and back-propagates to the inputs only, and each adapted target adds
    out[:, c0:c0+n] += s * (drop(x) A^T) B^T,   s = alpha / rank          (Hu et al. 2021, eq. 3)
into its columns of the group's output (engine.model.lora_table.Slot). Backward, with
G = s * dout[:, c0:c0+n] (M, n), u = drop(x) A^T (M, r, recomputed, not stored):
    dB += G^T u,   du = G B,   dA += du^T drop(x),   dx += drop'(du A)
The trainable vector (params, grads, m, v; `table`) is the adapters alone (engine.model.
lora_table.LoraTable), so the step's clipping, AdamW, snapshots and checkpoints are the full
model's over it, and no gradient or moment of the base exists. Norm weights and embeddings
stay frozen too. Adapter dropout masks come from kernels/dropout.cl's hash with their own keys.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from opencl_llm_studio.engine.config import LoraConfig, ModelConfig
from opencl_llm_studio.engine.model import attention
from opencl_llm_studio.engine.model.dropout import StepDropout, lowbias32
from opencl_llm_studio.engine.model.lora_table import LoraTable, Slot, names, slot
from opencl_llm_studio.engine.model.transformer import Model
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.opencl.ops import GRAD_NORM_PARTIALS
from opencl_llm_studio.engine.opencl.runtime import Runtime

_TARGET_SITE = 0x10   # adapter dropout keys start past the residual sites' (dropout.SITES)


def w_t_floats(base_w_t_floats: int, table: LoraTable) -> int:
    """Floats of a LoraModel's transposed-weight scratch (matmul_forward's w_t): what the base's
    products need (base.w_t_floats) or the largest adapter's, whichever is more."""
    return max(base_w_t_floats, max(e.size for e in table.entries.values()))


class _Scratch:
    """The adapter passes' buffers for M rows: u and du (M, rank), the target's delta or
    gathered gradient (M, n_max), and with dropout the dropped input and its gradient
    (M, k_max)."""

    def __init__(self, rt: Runtime, M: int, rank: int, n_max: int, k_max: int, dropout: bool):
        self.u, self.du = rt.empty(M * rank), rt.empty(M * rank)
        self.cols = rt.empty(M * n_max)
        self.xd = rt.empty(M * k_max) if dropout else None
        self.dx = rt.empty(M * k_max) if dropout else None


class LoraModel(Model):
    """Adapters (trainable) on a frozen base. `base`: a FlatBase or QuantBase of cfg;
    adapters: flat LoraTable weights to start from (None: A random, B zero)."""

    def __init__(self, rt: Runtime, cfg: ModelConfig, base, lora: LoraConfig,
                 adapters: np.ndarray | None = None, seed: int = 0):
        self.rt, self.cfg, self.base = rt, cfg.validate(), base
        self.lora = lora.validate()
        self.table = LoraTable(cfg, lora)
        if adapters is None:
            adapters = self.table.init_weights(np.random.default_rng(seed))
        self._training_state = {}
        self._moments = None
        self.params = rt.zeros(self.table.size)
        self.stats, self.partial = rt.zeros(3), rt.zeros(GRAD_NORM_PARTIALS)
        self.w_t = rt.empty(w_t_floats(base.w_t_floats, self.table))
        cos, sin = attention.rope_table(cfg.head_dim, cfg.context_length, cfg.rope_base,
                                        attention.rope_inv_freq(cfg))
        self.rope_cos, self.rope_sin = (rt.to_device(np.asarray(t, np.float32).reshape(-1))
                                       for t in (cos, sin))
        if isinstance(adapters, np.ndarray):
            self.write_flat("params", adapters.reshape(-1))
        else:
            self.write_pieces("params", adapters)
        self.p = base.views                 # norms (and, for a FlatBase, every weight group)
        self._a = self._views(self.params)  # adapters by tensor name
        self._g = None
        self._acts = {}
        self._scratch: dict[int, _Scratch] = {}
        self.adam_t = 0
        self._drop: StepDropout | None = None

    # ----------------------------------------------------------------- the base's products
    def embed(self, out, ids, n: int):
        self.base.embed(out, ids, n)

    def head(self, out, inp, M: int, w_t_ready: bool = False):
        self.base.head(out, inp, M, self.w_t, w_t_ready)

    def head_reads_in_place(self, M: int) -> bool:
        return self.base.head_reads_in_place(M)

    def head_backward(self, dinp, dout, inp, M: int):
        self.base.head_backward(dinp, dout, M)

    def norm_grad(self, name: str):
        return None   # frozen

    def embed_backward(self, a):
        pass          # frozen

    # ----------------------------------------------------------------- adapted products
    def linear(self, layer: int, group: str, out, inp, M: int, N: int, K: int):
        self.base.linear(f"blk.{layer}.{group}", out, inp, M, N, K, self.w_t)
        for target, s in self.table.in_group(group):
            A, B = (self._a[n] for n in names(layer, target))
            sc = self._scratch_for(M)
            x = self._dropped(sc, inp, layer, target, M, K)
            r = self.lora.rank
            ops.matmul_forward(self.rt, sc.u, x, A, self.w_t, M, r, K)           # (M, r)
            ops.matmul_forward(self.rt, sc.cols, sc.u, B, self.w_t, M, s.n, r)   # (M, n)
            self._add_columns(out, sc.cols, M, s, self.lora.scale)

    def linear_backward(self, layer: int, group: str, dinp, dout, inp, M: int, N: int, K: int):
        rt, r = self.rt, self.lora.rank
        self.base.linear_backward(f"blk.{layer}.{group}", dinp, dout, M, N, K)
        for target, s in self.table.in_group(group):
            a_name, b_name = names(layer, target)
            A, B = self._a[a_name], self._a[b_name]
            sc = self._scratch_for(M)
            rt.launch_elementwise("lora_gather_columns", s.n, M, sc.cols, dout, np.int32(M),
                                  np.int32(s.width), np.int32(s.c0), np.int32(s.n),
                                  np.float32(self.lora.scale))                  # G (M, n)
            x = self._dropped(sc, inp, layer, target, M, K)
            ops.matmul_forward(rt, sc.u, x, A, self.w_t, M, r, K)                # u (M, r)
            ops.matmul_tn(rt, self.g[b_name], sc.cols, sc.u, s.n, r, M, 1.0)     # dB += G^T u
            ops.matmul_nn(rt, sc.du, sc.cols, B, M, r, s.n)                      # du = G B
            ops.matmul_tn(rt, self.g[a_name], sc.du, x, r, K, M, 1.0)            # dA += du^T x
            if sc.dx is None or self._drop is None:
                ops.matmul_nn(rt, dinp, sc.du, A, M, K, r, 1.0)                 # dx += du A
            else:
                ops.matmul_nn(rt, sc.dx, sc.du, A, M, K, r)
                d = self._drop
                ops.dropout_backward(rt, sc.dx, sc.dx, self._key(layer, target), d.threshold,
                                     d.scale, M * K)
                rt.launch_elementwise("lora_add_columns", K, M, dinp, sc.dx, np.int32(M),
                                      np.int32(K), np.int32(0), np.int32(K), np.float32(1.0))

    def _add_columns(self, out, cols, M: int, s: Slot, scale: float):
        self.rt.launch_elementwise("lora_add_columns", s.n, M, out, cols, np.int32(M),
                                   np.int32(s.width), np.int32(s.c0), np.int32(s.n),
                                   np.float32(scale))

    def _dropped(self, sc: _Scratch, inp, layer: int, target: str, M: int, K: int):
        """The adapter's input: inp itself, or in a training step with adapter dropout its
        dropped copy (the same mask forward and backward: the key names step, block, target)."""
        if self._drop is None or sc.xd is None:
            return inp
        d = self._drop
        ops.dropout_forward(self.rt, sc.xd, inp, self._key(layer, target), d.threshold, d.scale,
                            M * K)
        return sc.xd

    def _key(self, layer: int, target: str) -> int:
        site = _TARGET_SITE + self.lora.targets.index(target)
        return lowbias32(self._drop.key(layer, "attn") ^ lowbias32(site))

    def _scratch_for(self, M: int) -> _Scratch:
        if M not in self._scratch:
            slots = [slot(self.cfg, t) for t in self.lora.targets]
            self._scratch[M] = _Scratch(self.rt, M, self.lora.rank, max(s.n for s in slots),
                                        max(s.k for s in slots), self.lora.dropout > 0)
        return self._scratch[M]

    def release_training_sets(self) -> int:
        self._scratch.clear()
        return super().release_training_sets()

    # ----------------------------------------------------------------- steps
    def train_step(self, inputs, targets, lr: float, opt, check=None) -> tuple:
        """Model.train_step over the adapters; the adapters' dropout (LoraConfig.dropout)
        replaces the residual dropout, which a frozen base does not train with."""
        p = self.lora.dropout
        self._drop = StepDropout(p, opt.seed, self.adam_t) if p > 0 else None
        try:
            return super().train_step(inputs, targets, lr, dataclasses.replace(opt, dropout=0.0),
                                      check)
        finally:
            self._drop = None

    def own_bytes(self, M: int) -> tuple[int, int]:
        """(total, largest single buffer) bytes of this model's own device buffers when it
        trains M = B*T rows: the base, params / grads / m / v of the adapters, w_t, the adapter
        scratch (engine.model.memory.check_fits' model_part)."""
        slots = [slot(self.cfg, t) for t in self.lora.targets]
        n_max, k_max = max(s.n for s in slots), max(s.k for s in slots)
        scratch = [2 * M * self.lora.rank, M * n_max] + [M * k_max] * (
            2 * (self.lora.dropout > 0))
        floats = [4 * self.table.size, self.w_t.size // 4, *scratch]
        return self.base.nbytes + 4 * sum(floats), max(4 * max(floats), self.base.largest)

    @staticmethod
    def chat_bytes(cfg: ModelConfig, base, lora: LoraConfig) -> tuple[int, int]:
        """(total, largest single buffer) bytes of the LoRA model of (cfg, base, lora) before
        it trains (what chatting and exporting need of it: engine.model.memory.check_chat_fits'
        model_part): the base as it is on the device, the adapters and the w_t scratch this
        class allocates; gradients, moments and the adapter scratch come with training
        (own_bytes)."""
        table = LoraTable(cfg, lora)
        floats = table.size + w_t_floats(base.w_t_floats, table)
        return base.nbytes + 4 * floats, max(base.largest, 4 * table.size)

    # ----------------------------------------------------------------- host copies
    def adapters(self) -> dict[str, np.ndarray]:
        """{"blk.l.target.weight.lora_a" / ".lora_b": float32 array} from the device."""
        return self.table.unflatten(self.read_flat("params"))

    def weights(self) -> dict[str, np.ndarray]:
        """The merged model, {GGUF name: float32}: each target's W + s B A (what a merged
        export writes; the base's quantized weights dequantized on the host)."""
        merged = self.base.weights()
        ad = self.adapters()
        for layer in range(self.cfg.n_layer):
            for target in self.lora.targets:
                a_name, b_name = names(layer, target)
                w = merged[f"blk.{layer}.{target}.weight"]
                merged[f"blk.{layer}.{target}.weight"] = (
                    w + np.float32(self.lora.scale) * (ad[b_name] @ ad[a_name])).astype(np.float32)
        return merged

