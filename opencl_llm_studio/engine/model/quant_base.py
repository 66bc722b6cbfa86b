"""A GGUF's weights as the frozen base of LoRA tuning, kept in the file's quantized form.

Each linear weight becomes an engine.model.quant.QuantMatrix (4-bit and 8-bit codes with
float32 scales, f16 for other types), dequantized a panel at a time inside the products, so a
Q4 base takes about 0.75 bytes per weight instead of float32's 4 (QLoRA's idea, Dettmers et al.
2023, with the GGUF file's own quantization instead of NF4). Where the engine fuses weights
(q, k, v into attn_qkv; gate, up into ffn_gate_up) and the file stores them in one type, their
blocks are stacked into one matrix; where the types differ (Q4_K_M files keep attn_v in Q6_K),
each member writes its columns of the group's output (engine/model/quant.py copy_columns).
Norm weights are float32 in one small buffer (`views`, as engine.model.lora_base.FlatBase).
"""

from __future__ import annotations

import gguf
import numpy as np

from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.model import quant
from opencl_llm_studio.engine.model.params import ALIGN, ParamTable
from opencl_llm_studio.engine.opencl.runtime import Runtime

# the engine's fused groups and the file's tensors in them, in column order
MEMBERS = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "attn_output": ("attn_output",),
           "ffn_gate_up": ("ffn_gate", "ffn_up"), "ffn_down": ("ffn_down",)}


class _Group:
    """One fused weight group: a single stacked QuantMatrix, or members with column offsets."""

    def __init__(self, parts: list[tuple[quant.QuantMatrix, int]], width: int):
        self.parts, self.width = parts, width

    @property
    def mats(self):
        return [qm for qm, _ in self.parts]


class QuantBase:
    """The frozen base of a GGUF file: `groups` ({"blk.l.attn_qkv": _Group, ...}), `embedding`
    and `output` (QuantMatrix; output None when tied), `views` (norm weights by ParamTable
    group name), nbytes (device bytes of all of it)."""

    form = "quantized"

    def __init__(self, rt: Runtime, cfg: ModelConfig, tensors: dict):
        """tensors: {GGUF name: gguf ReaderTensor-like (name, tensor_type, data)}, checked
        against cfg by the caller (engine.files.open_gguf.check_tensors)."""
        self.rt, self.cfg = rt, cfg
        table = ParamTable(cfg)
        self.shapes = table.shapes()
        self.groups: dict[str, _Group] = {}
        for layer in range(cfg.n_layer):
            for group, members in MEMBERS.items():
                self.groups[f"blk.{layer}.{group}"] = self._group(
                    rt, [tensors[f"blk.{layer}.{m}.weight"] for m in members],
                    [table.entries[f"blk.{layer}.{m}.weight"].shape for m in members])
        self.embedding = _matrix(rt, tensors["token_embd.weight"],
                                 table.entries["token_embd.weight"].shape)
        self.output = None if cfg.tie_embeddings else _matrix(
            rt, tensors["output.weight"], table.entries["output.weight"].shape)
        norms = [n for n, e in table.entries.items() if len(e.shape) == 1]
        offsets, cursor = {}, 0
        for n in norms:
            offsets[n], cursor = cursor, -(-(cursor + cfg.d_model) // ALIGN) * ALIGN
        flat = np.zeros(cursor, np.float32)
        for n in norms:
            flat[offsets[n]:offsets[n] + cfg.d_model] = _floats(tensors[n])
        self.norms = rt.to_device(flat)
        self.views = {n[:-len(".weight")]: self.norms.get_sub_region(4 * o, 4 * cfg.d_model)
                      for n, o in offsets.items()}
        mats = [m for g in self.groups.values() for m in g.mats] + [self.embedding] + (
            [self.output] if self.output is not None else [])
        self.nbytes = sum(m.nbytes for m in mats) + 4 * cursor
        self.largest = max(m.nbytes for m in mats)
        self._scratch: dict[int, tuple[quant.PanelScratch, object]] = {}
        self.w_t_floats = 1

    @staticmethod
    def _group(rt, ts, shapes) -> _Group:
        width = sum(s[0] for s in shapes)
        if len({t.tensor_type for t in ts}) == 1:   # one type: stack the rows' blocks
            raw = np.concatenate([np.asarray(t.data).reshape(s[0], -1) for t, s in
                                  zip(ts, shapes)], axis=0)
            return _Group([(quant.QuantMatrix.from_gguf(rt, raw, ts[0].tensor_type,
                                                        (width, shapes[0][1])), 0)], width)
        parts, c0 = [], 0
        for t, s in zip(ts, shapes):
            parts.append((_matrix(rt, t, s), c0))
            c0 += s[0]
        return _Group(parts, width)

    def _scratch_for(self, M: int):
        """(PanelScratch, member columns buffer) for M rows: the smallest one made for at least
        M rows (a scratch serves up to its M), else one made for M. One per M kept them all:
        the rows with a target (engine.model.output_head) change with every tuning batch."""
        fit = [m for m in self._scratch if m >= M]
        if fit:
            return self._scratch[min(fit)]
        mats = [m for g in self.groups.values() for m in g.mats] + [self.embedding] + (
            [self.output] if self.output is not None else [])
        ps = quant.PanelScratch(self.rt, mats, M)
        split = [qm.rows for g in self.groups.values() if len(g.parts) > 1 for qm in g.mats]
        cols = self.rt.empty(M * max(split)) if split else None
        self._scratch[M] = (ps, cols)
        return self._scratch[M]

    # ----------------------------------------------------------------- products
    def embed(self, out, ids, n: int):
        quant.embedding_forward(self.rt, out, ids, self.embedding, n)

    def linear(self, name: str, out, inp, M: int, N: int, K: int, w_t):
        g = self.groups[name]
        ps, cols = self._scratch_for(M)
        if len(g.parts) == 1:
            quant.linear_forward(self.rt, out, inp, g.parts[0][0], M, ps)
            return
        for qm, c0 in g.parts:
            quant.linear_forward(self.rt, cols, inp, qm, M, ps)
            quant.copy_columns(self.rt, out, g.width, c0, cols, qm.rows, 0, M, qm.rows)

    def linear_backward(self, name: str, dinp, dout, M: int, N: int, K: int):
        g = self.groups[name]
        ps, cols = self._scratch_for(M)
        if len(g.parts) == 1:
            quant.linear_backward_input(self.rt, dinp, dout, g.parts[0][0], M, ps)
            return
        for i, (qm, c0) in enumerate(g.parts):
            quant.copy_columns(self.rt, cols, qm.rows, 0, dout, g.width, c0, M, qm.rows)
            quant.linear_backward_input(self.rt, dinp, cols, qm, M, ps, 0.0 if i == 0 else 1.0)

    @property
    def _head(self) -> quant.QuantMatrix:
        return self.embedding if self.output is None else self.output

    def head(self, out, inp, M: int, w_t, w_t_ready: bool = False):
        quant.linear_forward(self.rt, out, inp, self._head, M, self._scratch_for(M)[0])

    def head_reads_in_place(self, M: int) -> bool:
        return True   # nothing is kept between calls

    def head_backward(self, dinp, dout, M: int):
        quant.linear_backward_input(self.rt, dinp, dout, self._head, M, self._scratch_for(M)[0])

    def release_scratch(self) -> None:
        self._scratch.clear()

    def weights(self) -> dict[str, np.ndarray]:
        """{GGUF name: float32 (out, in)}: the base dequantized on the device, read back (a
        merged export's input)."""
        out: dict[str, np.ndarray] = {}
        for name, g in self.groups.items():
            _, layer, group = name.split(".")
            members = [f"blk.{layer}.{m}.weight" for m in MEMBERS[group]]
            full = np.concatenate([_read(self.rt, qm) for qm in g.mats], axis=0)
            rows = np.cumsum([self.shapes[m][0] for m in members])[:-1]
            out.update(zip(members, np.split(full, rows, axis=0)))
        out["token_embd.weight"] = _read(self.rt, self.embedding)
        if self.output is not None:
            out["output.weight"] = _read(self.rt, self.output)
        for n, v in self.views.items():
            out[n + ".weight"] = self.rt.read(v, self.cfg.d_model)
        return out


def _read(rt: Runtime, qm: quant.QuantMatrix) -> np.ndarray:
    buf = rt.empty(qm.rows * qm.cols)
    qm.dequantize_rows(rt, buf, 0, qm.rows)
    return rt.read(buf, qm.rows * qm.cols).reshape(qm.rows, qm.cols)


def _matrix(rt: Runtime, t, shape) -> quant.QuantMatrix:
    return quant.QuantMatrix.from_gguf(rt, np.asarray(t.data), t.tensor_type, tuple(shape))


def _floats(t) -> np.ndarray:
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        return np.asarray(t.data, np.float32).reshape(-1)
    return np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type),
                      np.float32).reshape(-1)

