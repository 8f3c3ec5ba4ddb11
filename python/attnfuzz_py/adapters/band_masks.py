"""The harness's dense mask as the band masks FlashAttention-style kernels take: none, causal, or a
sliding window, all aligned to the bottom-right corner of the call (FlashAttention's and
FlashInfer's convention when Sq != Skv).

A call of Sq queries and n keys with off = n - Sq: query i sees key j iff

    i + off - left <= j <= i + off + right        (left, right: None is unbounded)

causal is (left None, right 0). attnfuzz's masks are in its own coordinates (top-left or
bottom-right causal, windows of either alignment, the offsets and bands of a composition's
part), so a band of the harness is a band here only up to the keys nobody sees: keys that no
query of the call sees are cut off first (the kernel is called on keys [kv_lo, kv_hi), and
their dK and dV are exact zeros). What is left must be exactly one of the bands above, or the
case is declined with the reason.

Used by the FA4 and FlashInfer adapters (fa4.py, flashinfer.py); tests/python/
test_thirdparty_adapters.py checks it against brute force on every mask kind of the case format.
"""
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Band:
    kv_lo: int  # the call is made on keys [kv_lo, kv_hi)
    kv_hi: int
    left: Optional[int]  # None: unbounded
    right: Optional[int]

    @property
    def kind(self):
        if self.kv_hi == self.kv_lo:
            return "empty"  # no query sees any key
        if self.left is None and self.right is None:
            return "none"
        if self.left is None and self.right == 0:
            return "causal"
        return "window"

    def describe(self):
        k = self.kind
        keys = f"keys [{self.kv_lo}, {self.kv_hi})"
        if k in ("empty", "none", "causal"):
            return f"{k} on {keys}"
        return f"window left={self.left} right={self.right} on {keys}"


def band_plane(sq, n, left, right):
    """The bool [sq][n] mask of a band (bottom-right aligned)."""
    d = np.arange(n)[None, :] - np.arange(sq)[:, None] - (n - sq)
    out = np.ones((sq, n), dtype=bool)
    if left is not None:
        out &= d >= -left
    if right is not None:
        out &= d <= right
    return out


def band_of_plane(plane):
    """(Band, None) when the bool [Sq][Skv] plane is a band once its never-seen keys are cut off,
    else (None, the reason)."""
    plane = np.asarray(plane, dtype=bool)
    sq, skv = plane.shape
    cols = plane.any(axis=0)
    if not cols.any():
        return Band(0, 0, None, None), None
    lo = int(np.argmax(cols))
    hi = skv - int(np.argmax(cols[::-1]))
    m = plane[:, lo:hi]
    n = hi - lo
    d = np.arange(n)[None, :] - np.arange(sq)[:, None] - (n - sq)
    seen = d[m]
    right, left = int(seen.max()), int(-seen.min())
    for cand in ((None, None), (None, right), (left, None), (left, right)):
        if np.array_equal(band_plane(sq, n, *cand), m):
            return Band(lo, hi, *cand), None
    return None, f"the mask is not a band (none, causal or one sliding window, bottom-right aligned) on keys [{lo}, {hi})"


def same_over(mask, axes):
    """Whether the uint8/bool [B][H][Sq][Skv] mask is the same along `axes` (0: batch, 1: heads)."""
    first = mask[tuple(slice(0, 1) if a in axes else slice(None) for a in range(mask.ndim))]
    return bool((mask == first).all())


def band_of_mask(mask, per_batch=False):
    """The bands of a dense [B][H][Sq][Skv] mask: (list of one Band per batch element, None) or
    (None, reason). The same band for every head is required; for every batch element too unless
    per_batch."""
    mask = np.asarray(mask)
    if mask.shape[0] == 0 or mask.shape[1] == 0:
        return [Band(0, 0, None, None)] * mask.shape[0], None
    if not same_over(mask, (1,)):
        return None, "the mask differs between heads"
    if not per_batch and not same_over(mask, (0,)):
        return None, "the mask differs between batch elements"
    bands = []
    for b in range(mask.shape[0] if per_batch else 1):
        band, why = band_of_plane(mask[b, 0] != 0)
        if why:
            return None, why
        bands.append(band)
    return (bands if per_batch else bands * mask.shape[0]), None


def expression_plane(p):
    """The call's mask evaluated from its expression (supports() has no dense mask): bool
    [Sq][Skv] numpy, or (None, reason) when it needs the dense mask (a random leaf). The
    expressions' leaves do not depend on the batch element or head, so one plane is all of it."""
    from attnfuzz_py.masks import contains_random, dense_from_mask_mod, mask_mod_for
    if contains_random(p.mask_expr):
        return None, "a random mask is no band"
    try:
        mod = mask_mod_for(p, "cpu")
    except ValueError as e:
        return None, str(e)
    return dense_from_mask_mod(mod, 1, 1, p.seq_q, p.seq_kv, "cpu")[0, 0].numpy(), None


class BandCache:
    """supports()'s classification of a problem's expression, kept by the expression, the offsets
    and the sizes (a campaign asks about the same mask again and again)."""

    def __init__(self, size=256):
        self._kept, self._size = {}, size

    def band(self, p):
        import json
        key = (json.dumps(p.mask_expr, sort_keys=True), json.dumps(p.restrictions, sort_keys=True), p.q_offset,
               p.kv_offset, p.full_seq_q, p.full_seq_kv, p.seq_q, p.seq_kv)
        if key not in self._kept:
            if len(self._kept) >= self._size:
                self._kept.pop(next(iter(self._kept)))
            plane, why = expression_plane(p)
            self._kept[key] = (None, why) if why else band_of_plane(plane)
        return self._kept[key]
