"""Secure aggregation (Bonawitz et al., CCS 2017) with the sparse masking graph of SecAgg+ (Bell et al., CCS
2020): the server learns the sum of the clients' updates and nothing else, exactly, despite dropouts.

* :mod:`.ring`: fixed-point encoding into ``Z_(2^k)`` sized so that the sum cannot wrap, and its error bound.
* :mod:`.crypto`: HKDF seeds, X25519 key agreement, ChaCha20 mask expansion, AES-GCM share encryption.
* :mod:`.shamir`: Shamir secret sharing over ``GF(2^521 − 1)``.
* :mod:`.graph`: the masking graph (complete, or a shuffled Harary graph of degree k).
* :mod:`.messages`: the messages of a round and the per-party costs (bytes, messages, compute).
* :mod:`.protocol`: the round step by step, and its parties: :mod:`.params` (public), :mod:`.client`,
  :mod:`.server`.

The platform's arms use it through :mod:`sifl_ray.parties.secure` (the client workers play the clients, the
aggregator plays the server), driven by :mod:`sifl_ray.secure_aggregation`: one driver of the protocol, the
one a run uses (its tests play rounds through it, with dropouts at any step).
"""

from sifl_ray.privacy.secagg.crypto import prg_ring
from sifl_ray.privacy.secagg.graph import NeighbourGraph, complete_graph, default_threshold, harary_graph
from sifl_ray.privacy.secagg.protocol import (
    MaskedInput,
    MaskPlan,
    PartyStats,
    PublicKeys,
    SecAggClient,
    SecAggError,
    SecAggParams,
    SecAggServer,
    UnmaskResponse,
    recovery_problems,
)
from sifl_ray.privacy.secagg.ring import FixedPointCodec, ring_sum

__all__ = [
    "FixedPointCodec",
    "MaskPlan",
    "MaskedInput",
    "NeighbourGraph",
    "PartyStats",
    "PublicKeys",
    "SecAggClient",
    "SecAggError",
    "SecAggParams",
    "SecAggServer",
    "UnmaskResponse",
    "complete_graph",
    "default_threshold",
    "harary_graph",
    "prg_ring",
    "recovery_problems",
    "ring_sum",
]
