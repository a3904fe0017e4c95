"""Fixed-point encoding of float updates into the ring ``Z_(2^k)`` and back (Bonawitz et al. 2017, §3).

Secure aggregation masks integers: a mask that is uniform in ``Z_(2^k)`` hides any ring element perfectly, and
masks cancel exactly only in modular arithmetic. Floats have neither property, so each client maps its update
to integers by scaling with ``2^f`` (``f`` fractional bits) and rounding to nearest, and the server maps the
ring sum back. The ring is held in ``numpy.uint64`` whose addition wraps modulo ``2^64``; for ``k < 64`` the
result is reduced by masking off the high bits, which is reduction modulo ``2^k`` because ``2^k`` divides
``2^64``.

What the codec guarantees (:meth:`FixedPointCodec.sum_error_bound`). Clip each coordinate to ``[-B, B]``,
let ``e = rint(clip(x)·2^f)`` and ``M = rint(B·2^f)``, so ``|e| ≤ M``. If ``N·M ≤ 2^(k-1) - 1``, the centred
lift of ``Σ e_i mod 2^k`` is ``Σ e_i`` itself: a sum of N encodings never wraps. Then, per coordinate,
``|decode(Σ e_i mod 2^k) − Σ clip(x_i)| ≤ N·2^-(f+1)``: each rounding moves a value by at most half a unit,
``2^-(f+1)``; add half an ulp of the result when ``N·M > 2^53`` (the integer sum then no longer converts to
float64 exactly). ``Σ clip(x_i)`` is the exact real sum; clipping is a deliberate change of the input,
counted by :meth:`FixedPointCodec.count_clipped`, not a rounding error. An L2-clipped update (DP-FedAvg,
``‖Δ‖₂ ≤ C``) has every coordinate in ``[-C, C]``, so ``B = C`` never clips it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

MAX_RING_BITS = 64


def ring_mask(ring_bits: int) -> np.uint64:
    """``2^k - 1`` as a ``uint64``: AND with it reduces a ``uint64`` modulo ``2^k``."""
    return np.uint64((1 << ring_bits) - 1)


def ring_reduce_(x: np.ndarray, ring_bits: int) -> np.ndarray:
    """Reduce ``x`` (``uint64``) modulo ``2^k`` in place and return it (a no-op for k = 64)."""
    if ring_bits < MAX_RING_BITS:
        np.bitwise_and(x, ring_mask(ring_bits), out=x)
    return x


def ring_sum(vectors: Iterable[np.ndarray], ring_bits: int) -> np.ndarray:
    """``Σ v mod 2^k`` of ``uint64`` vectors (wrapping ``uint64`` addition, reduced once at the end)."""
    total: np.ndarray | None = None
    for v in vectors:
        if total is None:
            total = np.array(v, dtype=np.uint64, copy=True)
        else:
            np.add(total, v, out=total)
    if total is None:
        raise ValueError("ring_sum of no vectors: the sum needs at least one summand to know its length")
    return ring_reduce_(total, ring_bits)


@dataclass(frozen=True)
class FixedPointCodec:
    """Map float64 vectors to ``Z_(2^k)`` with ``f`` fractional bits, so that N of them sum without wrapping.

    Attributes:
        ring_bits: k, the ring is ``Z_(2^k)``, ``2 ≤ k ≤ 64``.
        frac_bits: f, the scale is ``2^f``; the resolution of one encoding is ``2^-f``.
        clip: B, each coordinate is clipped to ``[-B, B]`` before encoding.
        num_summands: N, how many encodings the ring may hold in one sum (the number of clients).

    Raises:
        ValueError: at construction, when ``N·rint(B·2^f)`` does not fit in ``k - 1`` bits (the sum could wrap
            and decode to a wrong value); the message gives the largest ``f`` that fits and the k needed.
    """

    ring_bits: int = 32
    frac_bits: int = 16
    clip: float = 1.0
    num_summands: int = 1

    def __post_init__(self) -> None:
        if int(self.ring_bits) != self.ring_bits or not 2 <= self.ring_bits <= MAX_RING_BITS:
            raise ValueError(
                f"ring_bits must be an integer in [2, {MAX_RING_BITS}], got {self.ring_bits!r}: the ring is "
                "held in uint64"
            )
        if int(self.frac_bits) != self.frac_bits or self.frac_bits < 0:
            raise ValueError(f"frac_bits must be an integer >= 0, got {self.frac_bits!r}")
        if int(self.num_summands) != self.num_summands or self.num_summands < 1:
            raise ValueError(f"num_summands must be an integer >= 1, got {self.num_summands!r}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"clip must be finite and > 0, got {self.clip!r}: it is the bound B of |x_j|")
        needed = self.bits_needed()
        if needed > self.ring_bits:
            raise ValueError(
                f"a sum of {self.num_summands} encodings of values in [-{self.clip}, {self.clip}] with "
                f"{self.frac_bits} fractional bits needs {needed} ring bits (sign included), but the ring "
                f"has {self.ring_bits}: the sum would wrap modulo 2^{self.ring_bits} and decode to a wrong "
                "value. "
                f"Use ring_bits >= {needed}, or frac_bits <= {self._max_frac_bits()}, or a smaller clip."
            )

    @property
    def max_abs_int(self) -> int:
        """M = ``rint(B·2^f)``: the largest magnitude of one encoding."""
        return int(np.rint(float(self.clip) * 2.0**self.frac_bits))

    def bits_needed(self) -> int:
        """Ring bits a sum of N encodings needs: ``bit_length(N·M)`` plus one for the sign."""
        return (self.num_summands * self.max_abs_int).bit_length() + 1

    def _max_frac_bits(self) -> int:
        f = self.frac_bits
        while (
            f > 0
            and (self.num_summands * int(np.rint(float(self.clip) * 2.0**f))).bit_length() + 1
            > self.ring_bits
        ):
            f -= 1
        return f

    def count_clipped(self, x: np.ndarray) -> int:
        """How many coordinates of ``x`` lie outside ``[-B, B]`` and would be clipped by :meth:`encode`."""
        return int(np.count_nonzero(np.abs(np.asarray(x, dtype=np.float64)) > self.clip))

    def encode(self, x: np.ndarray) -> np.ndarray:
        """``rint(clip(x)·2^f) mod 2^k`` as ``uint64`` (two's complement for negative values).

        Raises:
            ValueError: ``x`` has a NaN or an infinity: no encoding bounds it, and clipping it would hide a
                diverged update.
        """
        x = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("the update has non-finite coordinates; fixed-point encoding needs finite ones")
        scaled = np.rint(np.clip(x, -self.clip, self.clip) * 2.0**self.frac_bits)
        return ring_reduce_(scaled.astype(np.int64).view(np.uint64), self.ring_bits)

    def lift(self, ring_values: np.ndarray) -> np.ndarray:
        """The centred lift of ring elements to ``int64`` in ``[-2^(k-1), 2^(k-1))``."""
        r = ring_reduce_(np.array(ring_values, dtype=np.uint64, copy=True), self.ring_bits)
        if self.ring_bits == MAX_RING_BITS:
            return r.view(np.int64)
        signed = r.astype(np.int64)
        signed[signed >= (1 << (self.ring_bits - 1))] -= 1 << self.ring_bits
        return signed

    def decode(self, ring_values: np.ndarray) -> np.ndarray:
        """Float64 value of a ring element or a ring sum of up to N encodings: ``lift(r) / 2^f``."""
        return self.lift(ring_values).astype(np.float64) / 2.0**self.frac_bits

    def sum_error_bound(self, num_summands: int | None = None) -> float:
        """Per-coordinate bound on ``|decode(ring sum) − exact sum of the clipped inputs|`` (see the module).

        Args:
            num_summands: how many encodings are in the sum (default: N, the codec's capacity).
        """
        n = self.num_summands if num_summands is None else int(num_summands)
        if not 0 <= n <= self.num_summands:
            raise ValueError(f"num_summands must be in [0, {self.num_summands}], got {num_summands!r}")
        rounding = n * 2.0 ** -(self.frac_bits + 1)
        largest = n * self.max_abs_int
        conversion = 0.0 if largest <= 2**53 else largest * 2.0**-53 / 2.0**self.frac_bits
        return rounding + conversion

    def packed_bytes(self, length: int) -> int:
        """Bytes of a vector of ``length`` ring elements packed at k bits each: what an upload costs."""
        return math.ceil(self.ring_bits * int(length) / 8)
