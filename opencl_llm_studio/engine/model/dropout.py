"""Dropout masks for one training step, derived on the host as a few 32-bit keys.

Placement follows nanoGPT's resid_dropout (Karpathy, nanoGPT model.py): on the attention output
projection and on the feed-forward down projection, before each residual add; never on the
embedding nor on the attention probabilities (the latter would add a (B, H, T, T) pass per layer
and sits inside the attention kernels). Inverted dropout (Srivastava et al. 2014): kept values are
scaled by 1 / (1 - p), so nothing changes at inference, where dropout is off.

Element i of a site is kept when lowbias32(lowbias32(i) ^ key) >= threshold (kernels/dropout.cl),
key = mix(seed, step, layer, site): the device makes the mask itself, backward regenerates it,
and a run with the same seed is reproducible. tests/reference.py holds the numpy twin.
"""

from __future__ import annotations

from dataclasses import dataclass

from opencl_llm_studio.engine.opencl import ops

SITES = ("attn", "ffn")  # attention output projection, feed-forward down projection
_M32 = 0xFFFFFFFF


def lowbias32(x: int) -> int:
    """C. Wellons' lowbias32 integer hash on a Python int (the kernel's twin, modulo 2^32)."""
    x &= _M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


@dataclass(frozen=True)
class StepDropout:
    """Dropout of one training step: probability p in [0, 1), seed and step (optimizer update)."""

    p: float
    seed: int
    step: int

    @property
    def threshold(self) -> int:
        """Keep when the 32-bit hash >= threshold: P(drop) = threshold / 2^32 ~= p."""
        return min(int(round(self.p * 2.0 ** 32)), _M32)

    @property
    def scale(self) -> float:
        return 1.0 / (1.0 - self.p)

    def key(self, layer: int, site: str) -> int:
        """The uint32 key of one site (layer, 'attn' | 'ffn') at this step."""
        k = lowbias32(self.seed)
        for part in (self.step, layer, SITES.index(site)):
            k = lowbias32(k ^ lowbias32(part + 0x9E3779B9))
        return k


def forward_at(rt, buf, drop: StepDropout | None, layer: int, site: str, n: int) -> None:
    """Dropout in place on a projection output `buf` (B*T, C; n floats) before its residual
    add, at `site` ("attn" or "ffn") of `layer`; nothing when drop is None."""
    if drop is not None:
        ops.dropout_forward(rt, buf, buf, drop.key(layer, site), drop.threshold, drop.scale, n)


def backward_at(rt, a, drop: StepDropout | None, layer: int, site: str, n: int):
    """The gradient of a projection output under dropout: a.dres itself without dropout, else
    the masked copy in a.ddrop (the residual keeps the unmasked one). a: the step's
    engine.model.activations.Activations."""
    if drop is None:
        return a.dres
    rt.before_write(a.ddrop)  # the previous site's weight gradient may still read it
    ops.dropout_backward(rt, a.ddrop, a.dres, drop.key(layer, site), drop.threshold, drop.scale,
                         n)
    return a.ddrop

