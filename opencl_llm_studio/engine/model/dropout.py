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
