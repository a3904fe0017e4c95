"""What every party of a secure-aggregation arm agrees on: the ring, the graph, the threshold, the weights.

Public parameters only (no secret): the arm makes them (:mod:`sifl_ray.arms.secagg`), every party reads them
(:mod:`sifl_ray.parties.secure`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sifl_ray.privacy.secagg import FixedPointCodec, SecAggError, SecAggParams, default_threshold


@dataclass(frozen=True)
class SecAggSpec:
    """What every party of a secure-aggregation arm agrees on (public: no secret in it).

    Attributes:
        codec: the fixed-point ring; its ``num_summands`` is the most clients one round can hold.
        vector_len: the length of every upload (the model's n).
        degree: neighbours per client (SecAgg+); ``None``: every pair, the original protocol.
        threshold: Shamir's t per closed neighbourhood; ``None``: :func:`~sifl_ray.privacy.secagg.
            default_threshold` of the round's neighbourhoods.
        min_survivors: a floor under t. Distributed DP needs it: each client adds ``1/min_survivors`` of the
            noise variance, so a round must never be unmasked with fewer survivors than that (t responders
            imply at least t survivors). A round whose neighbourhoods are smaller than the floor is refused.
        weight_ref: a client encodes ``(weight_i / weight_ref)·u_i`` (``u_i`` its upload, ``weight_i`` its
            FedAvg weight), so that every coordinate stays within the codec's clip whatever its weight; the
            aggregator multiplies the decoded sum back by ``weight_ref / Σ weight_i``.
        key_seed: ``coding.key_seed``; ``None`` draws every secret from ``secrets`` (see
            :func:`sifl_ray.party_seeds.party_seed`).
    """

    codec: FixedPointCodec
    vector_len: int
    degree: int | None = None
    threshold: int | None = None
    weight_ref: float = 1.0
    key_seed: int | None = None
    min_survivors: int = 0

    def params(self, num_clients: int, t: int) -> SecAggParams:
        """Round ``t``'s public parameters for ``num_clients`` clients.

        Raises:
            SecAggError: the round cannot run: fewer than 2 clients, or neighbourhoods too small for the
                threshold (the configured t, or the arm's floor).
        """
        if num_clients < 2:
            raise SecAggError(f"round {t} has {num_clients} client(s); secure aggregation needs at least 2")
        full = num_clients - 1
        closed = (full if self.degree is None else min(self.degree, full)) + 1
        threshold = default_threshold(closed) if self.threshold is None else self.threshold
        threshold = max(threshold, self.min_survivors)
        if threshold > closed:
            raise SecAggError(
                f"round {t} has {num_clients} clients (neighbourhoods of {closed}), fewer than the threshold "
                f"t = {threshold} this arm needs: the round is not run"
            )
        try:
            return SecAggParams(
                num_clients=num_clients,
                vector_len=self.vector_len,
                codec=self.codec,
                degree=self.degree,
                threshold=threshold,
                round_index=t,
            )
        except ValueError as err:
            raise SecAggError(f"round {t}: {err}") from None

    def sum_bound(self, summands: int) -> float:
        """Per-coordinate bound on the decoded ring sum's quantisation error (see :mod:`.ring`)."""
        return self.codec.sum_error_bound(summands)


def fit_codec(*, clip: float, num_summands: int, ring_bits: int, frac_bits: int | None) -> FixedPointCodec:
    """The codec of an arm: ``frac_bits`` as configured, or (``None``) the largest that keeps a sum of
    ``num_summands`` encodings of values in ``[-clip, clip]`` from wrapping in ``ring_bits`` bits.

    Raises:
        ValueError: no precision fits (the ring is too small for that many clients at that clip), with the
            ring size that would.
    """
    if frac_bits is not None:
        return FixedPointCodec(ring_bits=ring_bits, frac_bits=frac_bits, clip=clip, num_summands=num_summands)
    # N·rint(B·2^f) must fit in k − 1 bits: start at the real-valued answer, then step down past rounding.
    f = max(0, math.floor((ring_bits - 1) - math.log2(num_summands * clip)))
    while f > 0 and (num_summands * int(np.rint(clip * 2.0**f))).bit_length() + 1 > ring_bits:
        f -= 1
    return FixedPointCodec(ring_bits=ring_bits, frac_bits=f, clip=clip, num_summands=num_summands)
