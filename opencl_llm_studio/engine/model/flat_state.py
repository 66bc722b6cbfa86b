"""A model's trainable vector on the device: params and, made when first used, its gradients
and AdamW moments (one flat buffer each, laid out by the model's `table`), and their host
copies piece by piece. engine.model.transformer.Model and engine.model.lora.LoraModel (whose
trainable vector is its adapters) share it; each sets rt, table, params, _training_state and
_moments.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from opencl_llm_studio.engine.model.moments import from_bf16, to_bf16


class FlatState:
    """The params / grads / m / v buffers of a model's `table` (a engine.model.params.Layout
    with named groups). moment_dtype: "f32", or "bf16" for m and v kept as bfloat16 bits
    (engine.model.moments); every host copy of them is float32 either way."""

    moment_dtype = "f32"

    # the training state (activations.ModelBuffer.training): zeros made at the first training
    # step, load or read, so a model opened to chat or export holds its weights alone (a 135M
    # model's chat took 3.9 GB with gradients and both moments allocated; a 1.1B one, 17.6 GB)
    @property
    def grads(self) -> cl.Buffer:
        return self._state("grads")

    @property
    def m(self) -> cl.Buffer:
        return self._state("m")

    @property
    def v(self) -> cl.Buffer:
        return self._state("v")

    @property
    def g(self) -> dict[str, cl.Buffer]:
        """Views of self.grads per ParamTable group."""
        if self._g is None:
            self._g = self._views(self.grads)
        return self._g

    @property
    def holds_training_state(self) -> bool:
        """Whether the gradients and AdamW moments are allocated (after a step or a load)."""
        return bool(self._training_state)

    def _buffer(self, which: str) -> cl.Buffer:
        """params, grads, m or v, without making the others (the training state is lazy)."""
        if which == "params":
            return self.params
        if which not in ("grads", "m", "v"):
            raise KeyError(which)
        return self._state(which)

    def defer_moments(self, source) -> None:
        """Read the AdamW moments from `source` when they are first used, not now: source has
        pieces("adam_m" / "adam_v") -> (offset, float32 piece) pairs
        (engine.files.checkpoint.MomentSource), so a trained run opened to chat or export
        holds its weights alone."""
        self._moments = source

    def _state(self, name: str) -> cl.Buffer:
        buf = self._training_state.get(name)
        if buf is None:
            buf = self._training_state[name] = self.rt.zeros(self.table.size, self._dtype(name))
            if name in ("m", "v") and self._moments is not None:
                try:
                    self.write_pieces(name, self._moments.pieces("adam_" + name))
                except BaseException:   # never zeros standing in for moments not read
                    del self._training_state[name]
                    raise
        return buf

    def _bf16(self, which: str) -> bool:
        return which in ("m", "v") and self.moment_dtype == "bf16"

    def _dtype(self, which: str):
        return np.uint16 if self._bf16(which) else np.float32

    def _views(self, buf) -> dict[str, cl.Buffer]:
        return {name: buf.get_sub_region(g.offset * 4, g.size * 4)
                for name, g in self.table.groups.items()}

    # -------------------------------------------------------------------------- host copies
    def read_flat(self, which: str = "params") -> np.ndarray:
        return self.read_piece(which, 0, self.table.size)

    def write_flat(self, which: str, flat: np.ndarray):
        """Set params, grads, m or v to `flat` (self.table.size floats). Raises ValueError
        for another size."""
        if np.size(flat) != self.table.size:   # the caller's data and the layout disagree
            raise ValueError(f"{np.size(flat)} floats for a {which} buffer of {self.table.size}")
        self.write_pieces(which, [(0, np.asarray(flat, np.float32).reshape(-1))])

    def write_pieces(self, which: str, pieces) -> None:
        """Set params, grads, m or v from (offset, float32 piece) pairs that cover it in order
        (engine.files.checkpoint.Members.chunks), so the whole vector is never on the host.
        Raises ValueError when the pieces do not cover exactly self.table.size floats."""
        buf = self._buffer(which)
        end = 0
        for offset, piece in pieces:
            if offset != end or end + piece.size > self.table.size:
                raise ValueError(f"a piece at {offset} of {piece.size} floats after {end} "
                                 f"of a {which} buffer of {self.table.size}")
            piece = np.ascontiguousarray(piece, np.float32)
            self.rt.write(buf, to_bf16(piece) if self._bf16(which) else piece, offset, wait=True)
            end += piece.size
        if end != self.table.size:
            raise ValueError(f"{end} floats for a {which} buffer of {self.table.size}")

    def read_piece(self, which: str, offset: int, n: int) -> np.ndarray:
        """Elements [offset, offset + n) of params, grads, m or v (a checkpoint Stream's read)."""
        buf = self._buffer(which)
        if self._bf16(which):
            return from_bf16(self.rt.read(buf, n, np.uint16, offset_elems=offset))
        return self.rt.read(buf, n, offset_elems=offset)

