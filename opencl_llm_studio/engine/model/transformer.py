"""The Llama-style model on the device: forward, backward and the AdamW step.

forward() and backward() read as a flat list of layer calls (llm.c). Parameters, gradients and
AdamW moments are flat device buffers laid out by engine.model.params.ParamTable; the kernels see
sub-buffers of the groups. Activations are kept per (B, T) shape in an `Activations` set.
Within a step nothing is read back to the host except the loss and grad-norm stats at the end.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from opencl_llm_studio.engine.model import (activations, attention, attention_gemm, dropout,
                                            moments, output_head)
from opencl_llm_studio.engine.opencl import ops
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.model.dropout import StepDropout
from opencl_llm_studio.engine.model.flat_state import FlatState
from opencl_llm_studio.engine.model.params import ParamTable, qkv_width
from opencl_llm_studio.engine.opencl.runtime import Runtime


class Activations:
    """Device buffers for one (B, T): what backward needs from forward, plus gradient scratch.
    The buffers, their shapes and which are per layer are declared in engine/model/activations.py
    (BUFFERS), which engine.model.memory counts; this allocates them as attributes of those names."""

    def __init__(self, rt: Runtime, cfg: ModelConfig, B: int, T: int, with_grad: bool):
        self.B, self.T, self.with_grad = B, T, with_grad
        # attention: fused kernels (logsumexp (B, H, T) per layer) or, where the device memory
        # allows, batched GEMMs (probabilities (B, H, T, T)): engine/model/attention_gemm.choose
        self.attention = attention_gemm.path_for(rt, cfg, B, T, with_grad)
        self.attend = attention_gemm if self.attention == "gemm" else attention
        d = activations.Dims.of(cfg, B, T, self.attention)
        self.logit_rows = d.R  # logits held at once: B*T, or chunks of a large vocabulary
        # the rows with a target of the pass under way, when few (engine/model/output_head.py)
        self.head_n: int | None = None
        self.head_index: np.ndarray | None = None
        self.head_host: list = []
        for b in activations.buffers(with_grad):
            bufs = [rt.empty(b.elems(d), b.dtype) for _ in range(b.count(d, with_grad))]
            setattr(self, b.name, bufs[0] if b.copies == activations.ONE
                    else b.layer_list(bufs, d))


class Model(FlatState):
    """Weights, gradients and AdamW state of one ModelConfig on one Runtime."""

    def __init__(self, rt: Runtime, cfg: ModelConfig, flat_weights: np.ndarray | None = None,
                 seed: int = 0, moments: str = "f32"):
        """moments: "f32" or "bf16", how the AdamW moments are kept (engine.model.moments)."""
        self.rt, self.cfg = rt, cfg.validate()
        self.moment_dtype = moments
        self.table = ParamTable(cfg)
        if flat_weights is None:
            flat_weights = self.table.init_weights(np.random.default_rng(seed))
        # params, grads, m, v, stats, partial, w_t (transposed weight scratch for
        # matmul_forward), rope_cos, rope_sin: declared in engine.model.activations.model_buffers
        self._training_state: dict[str, cl.Buffer] = {}   # grads, m, v: made when first used
        self._moments = None   # where saved moments wait (defer_moments), read when first used
        for b in activations.model_buffers(cfg):
            if not b.training:
                setattr(self, b.name, rt.zeros(b.elems))
        cos, sin = attention.rope_table(cfg.head_dim, cfg.context_length, cfg.rope_base,
                                        attention.rope_inv_freq(cfg))
        if isinstance(flat_weights, np.ndarray):
            self.write_flat("params", flat_weights.reshape(-1))
        else:   # (offset, piece) pairs, e.g. a checkpoint read piece by piece
            self.write_pieces("params", flat_weights)
        for buf, host in ((self.rope_cos, cos), (self.rope_sin, sin)):
            if buf.size // 4 != np.size(host):   # the declaration and the data disagree: a bug
                raise ValueError(f"{np.size(host)} floats for a buffer of {buf.size // 4}")
            rt.write(buf, np.asarray(host, np.float32).reshape(-1), wait=True)
        self.p = self._views(self.params)
        self._g: dict[str, cl.Buffer] | None = None
        self._acts: dict[tuple, Activations] = {}
        self.adam_t = 0  # AdamW steps taken (bias correction)

    def activations(self, B: int, T: int, with_grad: bool) -> Activations:
        """The activation set of batch B, context T: a training set (with_grad) also serves
        forward-only work of the same (B, T) (evaluation holds a second full set otherwise: 5
        of 12.6 GiB for a 135M model at 16 x 256), and replaces a forward-only set made before
        it (dropped here; freed once no KVDecoder holds it as its cache). Raises ValueError for
        T > context_length."""
        if T > self.cfg.context_length:   # RoPE's tables end there: later rows read past them
            raise ValueError(f"a window of {T} tokens is longer than the model's context_length "
                             f"{self.cfg.context_length}")
        if (B, T, True) in self._acts:
            return self._acts[(B, T, True)]
        key = (B, T, with_grad)
        if key not in self._acts:
            if with_grad:
                self._acts.pop((B, T, False), None)
            self._acts[key] = Activations(self.rt, self.cfg, B, T, with_grad)
        return self._acts[key]

    def release_training_sets(self) -> int:
        """Drop the training activation sets (freed once nothing else holds them): after a
        run's last step its evaluation, samples and chat need forward-only sets, which share
        their layers' buffers (SmolLM2-135M's final checks ran 0.3 GB above its steps with the
        batch-8 training set kept). A later training step makes its set again. Returns how
        many sets were dropped."""
        keys = [k for k in self._acts if k[2]]
        for k in keys:
            del self._acts[k]
        return len(keys)

    # -------------------------------------------------------------------------- forward
    def forward(self, a: Activations, B: int, T: int, drop: StepDropout | None = None,
                check=None):
        """Logits (B*T, V) into a.logits from a.ids (already on the device); drop: dropout of
        this training step (engine/model/dropout.py), None at inference. A set that holds logits in
        chunks (large vocabularies) stops at the final norm a.xf: cross_entropy and logits
        project it a chunk at a time (engine/model/output_head.py). check: called between blocks
        (Runtime.stop_point); raises to abandon the step."""
        rt, cfg, p = self.rt, self.cfg, self.p
        C, F, H, hd = cfg.d_model, cfg.hidden_dim, cfg.n_head, cfg.head_dim
        KVH, W = cfg.kv_heads, qkv_width(cfg)  # key/value heads; qkv row width (C + 2 kv_dim)
        BT = B * T
        self.embed(a.x[0], a.ids, BT)                                               # (B, T, C)
        L = cfg.n_layer
        ops.rmsnorm_forward(rt, a.xn[0], a.rstd1[0], a.x[0], p["blk.0.attn_norm"], BT, C,
                            cfg.rms_eps)
        for l in range(L):
            if check is not None:
                rt.stop_point(check)
            b = f"blk.{l}."
            self.linear(l, "attn_qkv", a.qkv[l], a.xn[l], BT, W, C)
            attention.rope_forward(rt, a.qkv[l], self.rope_cos, self.rope_sin, BT, T, C, hd, 0,
                                   KVH)
            a.attend.attention_forward(rt, a.y[l], a.lse[l], a.qkv[l], B, T, C, H, KVH)  # (B,T,C)
            self.linear(l, "attn_output", a.proj, a.y[l], BT, C, C)
            dropout.forward_at(rt, a.proj, drop, l, "attn", BT * C)
            # xmid = x + attention, and its ffn_norm, in one pass
            ops.residual_rmsnorm_forward(rt, a.xmid[l], a.xn2[l], a.rstd2[l], a.x[l], a.proj,
                                         p[b + "ffn_norm"], BT, C, cfg.rms_eps)
            self.linear(l, "ffn_gate_up", a.gu[l], a.xn2[l], BT, 2 * F, C)
            ops.swiglu_forward(rt, a.h[l], a.gu[l], BT, F)                      # (B, T, F)
            self.linear(l, "ffn_down", a.proj, a.h[l], BT, C, F)
            dropout.forward_at(rt, a.proj, drop, l, "ffn", BT * C)
            # x[l+1] = xmid + feed-forward, and the next norm (the next block's, or the final)
            if l + 1 < L:
                nxt = (a.xn[l + 1], a.rstd1[l + 1], p[f"blk.{l + 1}.attn_norm"])
            else:
                nxt = (a.xf, a.rstdf, p["output_norm"])
            ops.residual_rmsnorm_forward(rt, a.x[l + 1], nxt[0], nxt[1], a.xmid[l], a.proj,
                                         nxt[2], BT, C, cfg.rms_eps)
        if not (output_head.chunked(a) or output_head.sparse(a)):
            self.head(a.logits, a.xf, BT)

    def cross_entropy(self, a: Activations, n_counted: int, want_grad: bool):
        """a.losses (B*T,) from the forward's logits and a.targets; with want_grad the gradient
        of the mean over n_counted rows: dlogits in a.logits (then backward() projects them),
        or, for chunked logits, already projected to dxf in a.dtmp and the output weight's
        gradient (engine/model/output_head.py)."""
        if output_head.sparse(a):   # few rows with a target: those alone
            output_head.cross_entropy_rows(self, a, n_counted, want_grad)
            return
        if output_head.chunked(a):
            output_head.cross_entropy(self, a, n_counted, want_grad)
            return
        ops.crossentropy_forward_backward(self.rt, a.logits, a.losses, a.targets, a.B * a.T,
                                          self.cfg.vocab_size, n_counted, want_grad)

    # -------------------------------------------------------------------------- backward
    def backward(self, a: Activations, B: int, T: int, drop: StepDropout | None = None,
                 check=None):
        """Gradients of the loss into self.grads, from dlogits already in a.logits (chunked
        logits: from dxf already in a.dtmp, see cross_entropy); drop: the dropout that forward
        applied; check: as in forward."""
        rt, cfg, p = self.rt, self.cfg, self.p
        C, F, H, hd = cfg.d_model, cfg.hidden_dim, cfg.n_head, cfg.head_dim
        BT, L = B * T, cfg.n_layer
        KVH, W = cfg.kv_heads, qkv_width(cfg)
        # Weight gradients run on the side queue (GPUs): before_write holds the main queue
        # until those reading a buffer are done with it (Runtime.side).
        if not (output_head.chunked(a) or output_head.sparse(a)):
            self.head_backward(a.dtmp, a.logits, a.xf, BT)                       # dxf
        rt.fill_zero(a.dres, BT * C)
        ops.rmsnorm_backward(rt, a.dres, self.norm_grad("output_norm"), a.dtmp, a.x[L],
                             p["output_norm"], a.rstdf, BT, C)
        for l in reversed(range(L)):
            if check is not None:
                rt.stop_point(check)
            b = f"blk.{l}."
            dproj = dropout.backward_at(rt, a, drop, l, "ffn", BT * C)
            self.linear_backward(l, "ffn_down", a.dh, dproj, a.h[l], BT, C, F)    # (B, T, F)
            rt.before_write(a.dgu)
            ops.swiglu_backward(rt, a.dgu, a.dh, a.gu[l], BT, F)                   # (B, T, 2F)
            self.linear_backward(l, "ffn_gate_up", a.dtmp, a.dgu, a.xn2[l], BT, 2 * F,
                                 C)                                                # (B, T, C)
            rt.before_write(a.dres)
            ops.rmsnorm_backward(rt, a.dres, self.norm_grad(b + "ffn_norm"), a.dtmp, a.xmid[l],
                                 p[b + "ffn_norm"], a.rstd2[l], BT, C)
            dproj = dropout.backward_at(rt, a, drop, l, "attn", BT * C)
            self.linear_backward(l, "attn_output", a.dy, dproj, a.y[l], BT, C, C)
            rt.before_write(a.dqkv)
            a.attend.attention_backward(rt, a.dqkv, a.dsum, a.dy, a.qkv[l], a.y[l], a.lse[l],
                                        B, T, C, H, KVH)                          # (B, T, W)
            attention.rope_backward(rt, a.dqkv, self.rope_cos, self.rope_sin, BT, T, C, hd, 0,
                                    KVH)
            self.linear_backward(l, "attn_qkv", a.dtmp, a.dqkv, a.xn[l], BT, W, C)
            rt.before_write(a.dres)
            ops.rmsnorm_backward(rt, a.dres, self.norm_grad(b + "attn_norm"), a.dtmp, a.x[l],
                                 p[b + "attn_norm"], a.rstd1[l], BT, C)
        rt.join()  # every weight gradient done (token_embd may be tied to the output)
        self.embed_backward(a)

    # ------------------------------------------------------------- the weights' products
    # One place per use of a weight, so a model whose base is frozen, quantized or carries
    # LoRA adapters (engine.model.lora.LoraModel) changes these and not the passes above.
    def embed(self, out, ids, n: int):
        """out (n, C) = token_embd rows of ids (n,)."""
        ops.embedding_forward(self.rt, out, ids, self.p["token_embd"], n, self.cfg.d_model)

    def linear(self, layer: int, group: str, out, inp, M: int, N: int, K: int):
        """out (M, N) = inp (M, K) @ W^T, W (N, K) the weight group `group` of block `layer`
        (attn_qkv, attn_output, ffn_gate_up, ffn_down)."""
        ops.matmul_forward(self.rt, out, inp, self.p[f"blk.{layer}.{group}"], self.w_t, M, N, K)

    def linear_backward(self, layer: int, group: str, dinp, dout, inp, M: int, N: int, K: int):
        """dinp (M, K) = dout (M, N) @ W; the weight's gradient += dout^T @ inp (M, K)."""
        name = f"blk.{layer}.{group}"
        ops.matmul_backward(self.rt, dinp, self.g[name], dout, inp, self.p[name], M, N, K)

    def head(self, out, inp, M: int, w_t_ready: bool = False):
        """logits out (M, V) = inp (M, C) @ W_out^T (w_t_ready: as ops.matmul_forward's)."""
        cfg = self.cfg
        ops.matmul_forward(self.rt, out, inp, self.p[self.table.output_group], self.w_t, M,
                           cfg.vocab_size, cfg.d_model, w_t_ready=w_t_ready)

    def head_reads_in_place(self, M: int) -> bool:
        """Whether head() of M rows reads W_out as it is (no transpose into w_t kept between
        calls: engine.model.output_head projects chunks with it)."""
        return ops.reads_weight_in_place(self.rt, M, self.cfg.vocab_size, self.cfg.d_model)

    def head_backward(self, dinp, dout, inp, M: int):
        """dinp (M, C) = dout (M, V) @ W_out; W_out's gradient += dout^T @ inp."""
        out = self.table.output_group
        ops.matmul_backward(self.rt, dinp, self.g[out], dout, inp, self.p[out], M,
                            self.cfg.vocab_size, self.cfg.d_model)

    def norm_grad(self, name: str):
        """Where an RMSNorm weight's gradient accumulates (None: not trained)."""
        return self.g[name]

    def embed_backward(self, a: Activations):
        """token_embd's gradient from dres (the gradient of the first residual)."""
        ops.embedding_backward(self.rt, self.g["token_embd"], a.dres, a.uniq, a.starts, a.order,
                               a.n_unique, self.cfg.d_model)

    # -------------------------------------------------------------------------- steps
    def upload_batch(self, a: Activations, inputs: np.ndarray, targets: np.ndarray | None):
        ids = np.ascontiguousarray(inputs, np.int32)
        if ids.min(initial=0) < 0 or ids.max(initial=0) >= self.cfg.vocab_size:
            raise ValueError("token id out of range for this model's vocabulary")
        self.rt.write(a.ids, ids.reshape(-1))
        if targets is not None:
            self.rt.write(a.targets, np.ascontiguousarray(targets, np.int32).reshape(-1))
        output_head.pick_rows(self.rt, a, targets)

    def upload_groups(self, a: Activations, inputs: np.ndarray):
        """The CSR grouping of positions by token that embedding_backward reads (host sort).
        train_step calls it after enqueueing the forward pass, so the device works meanwhile."""
        if a.with_grad:
            uniq, starts, order = ops.group_positions(np.ascontiguousarray(inputs, np.int32))
            self.rt.write(a.uniq, uniq)
            self.rt.write(a.starts, starts)
            self.rt.write(a.order, order)
            a.n_unique = len(uniq)

    def loss(self, inputs: np.ndarray, targets: np.ndarray, per_row: bool = False):
        """Mean cross-entropy (nats) over targets >= 0, no gradient. inputs, targets (B, T).
        per_row: the nats summed per row instead, (B,) float64 (validation's standard error)."""
        B, T = inputs.shape
        a = self.activations(B, T, with_grad=False)
        self.upload_batch(a, inputs, targets)
        self.forward(a, B, T)
        n = int((targets >= 0).sum())
        self.cross_entropy(a, n, want_grad=False)
        losses = output_head.row_losses(a, self.rt.read(a.losses, B * T).astype(np.float64))
        return losses.reshape(B, T).sum(axis=1) if per_row else float(losses.sum() / max(n, 1))

    def train_step(self, inputs: np.ndarray, targets: np.ndarray, lr: float, opt,
                   check=None) -> tuple:
        """Forward, backward, clip, AdamW on one batch (B, T). Returns (loss, grad_norm, skipped)
        where skipped is True when the gradient was NaN/Inf and no update was made.
        opt: an engine.config.OptimConfig (betas, eps, weight decay, clip, dropout, seed; a
        TrainConfig has the same fields). Dropout opt.dropout applies here only, its masks
        keyed by (opt.seed, self.adam_t). check: called between blocks (Runtime.stop_point);
        when it raises, the step is abandoned before AdamW: weights, moments and adam_t are
        as they were."""
        B, T = inputs.shape
        rt, n = self.rt, self.table.size
        a = self.activations(B, T, with_grad=True)
        self.upload_batch(a, inputs, targets)
        rt.fill_zero(self.grads, n)
        drop = StepDropout(opt.dropout, opt.seed, self.adam_t) if opt.dropout > 0 else None
        rt.chunk_check = check   # split launches stop between their chunks too
        try:
            self.forward(a, B, T, drop, check)
            n_counted = int((targets >= 0).sum())
            self.cross_entropy(a, n_counted, want_grad=True)
            self.upload_groups(a, inputs)
            self.backward(a, B, T, drop, check)
        except BaseException:
            rt.finish()   # nothing of the abandoned step may run after we return
            raise
        finally:
            rt.chunk_check = None
            rt.end_stop_points()
        ops.grad_norm(rt, self.stats, self.partial, self.grads, n, opt.grad_clip)
        self.adam_t += 1
        ops.adamw_update(rt, self.params, self.grads, self.m, self.v, self.stats, n,
                         self.table.n_decay, lr, opt.beta1, opt.beta2, opt.adam_eps,
                         opt.weight_decay, self.adam_t,
                         bf16_key=(moments.moment_key(opt.seed, self.adam_t)
                                   if self.moment_dtype == "bf16" else None))
        losses = rt.read(a.losses, B * T)
        stats = rt.read(self.stats, 3)
        skipped = bool(stats[2] != 0)
        if skipped:
            self.adam_t -= 1  # no update happened; keep bias correction in step
        return float(losses.sum() / max(n_counted, 1)), float(stats[0]), skipped

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """Logits (B, T, V) float32 for ids (B, T), T <= context_length."""
        B, T = ids.shape
        a = self.activations(B, T, with_grad=False)
        self.upload_batch(a, ids, None)
        self.forward(a, B, T)
        if output_head.chunked(a):
            return output_head.logits(self, a).reshape(B, T, -1)
        return self.rt.read(a.logits, B * T * self.cfg.vocab_size).reshape(B, T, -1)

    def last_logits(self, window: np.ndarray, length: int,
                    acts: Activations | None = None) -> np.ndarray:
        """Logits (V,) at position length-1 of window (1, T); positions >= length are ignored
        by causality, so one fixed T serves every prompt length (one activation set). acts: a
        forward-only set of (1, T) to run in (a KV decoder's short prefill), else the model's."""
        B, T = window.shape
        a = acts or self.activations(B, T, with_grad=False)
        self.upload_batch(a, window, None)
        self.forward(a, B, T)
        V = self.cfg.vocab_size
        if output_head.chunked(a):
            return output_head.logits(self, a, length - 1, length)[0]
        return self.rt.read(a.logits, V, offset_elems=(length - 1) * V)

    def weights(self) -> dict[str, np.ndarray]:
        """{GGUF name: float32 array} copied from the device."""
        return self.table.unflatten(self.read_flat("params"))
