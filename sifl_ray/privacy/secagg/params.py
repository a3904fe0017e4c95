"""What the parties of a secure-aggregation round agree on in public: the round's parameters, the labels of
the seeds two clients agree on, and where each holder's Shamir share sits (the protocol itself is described
in :mod:`sifl_ray.privacy.secagg.protocol`)."""

from __future__ import annotations

from dataclasses import dataclass

from sifl_ray.privacy.secagg.graph import default_threshold
from sifl_ray.privacy.secagg.ring import FixedPointCodec


@dataclass(frozen=True)
class SecAggParams:
    """What every party of one round agrees on (public).

    Attributes:
        num_clients: N; clients are numbered ``0..N-1`` within the round.
        vector_len: length of each update.
        codec: the fixed-point ring encoding; its ``num_summands`` must be at least N.
        degree: neighbours per client; None or ≥ N − 1 for the complete graph of the original protocol.
        threshold: t of the Shamir sharing, per closed neighbourhood; None for :func:`default_threshold`.
        round_index: which round; keys and masks are fresh in every round.
    """

    num_clients: int
    vector_len: int
    codec: FixedPointCodec
    degree: int | None = None
    threshold: int | None = None
    round_index: int = 0

    def __post_init__(self) -> None:
        if int(self.num_clients) != self.num_clients or self.num_clients < 2:
            raise ValueError(f"secure aggregation needs num_clients >= 2, got {self.num_clients!r}")
        if int(self.vector_len) != self.vector_len or self.vector_len < 1:
            raise ValueError(f"vector_len must be an integer >= 1, got {self.vector_len!r}")
        if self.codec.num_summands < self.num_clients:
            raise ValueError(
                f"the codec is sized for {self.codec.num_summands} summands but the round has "
                f"{self.num_clients} clients: their sum could wrap; build the codec with "
                f"num_summands={self.num_clients}"
            )
        if self.degree is not None and (int(self.degree) != self.degree or self.degree < 1):
            raise ValueError(f"degree must be None (complete graph) or an integer >= 1, got {self.degree!r}")
        size = self.closed_size
        t = self.t
        if not size // 2 + 1 <= t <= size:
            raise ValueError(
                f"threshold must be in [{size // 2 + 1}, {size}] for closed neighbourhoods of {size} "
                f"clients, got {t}: above {size} no secret could be reconstructed, and at or below half a "
                "server could collect both the key shares and the self-mask shares of one client from two "
                "disjoint halves"
            )

    @property
    def graph_degree(self) -> int:
        """The degree actually used: ``min(degree, N − 1)``."""
        full = self.num_clients - 1
        return full if self.degree is None else min(int(self.degree), full)

    @property
    def closed_size(self) -> int:
        """k + 1: the holders of one client's shares (itself and its neighbours)."""
        return self.graph_degree + 1

    @property
    def t(self) -> int:
        """The threshold in force."""
        return default_threshold(self.closed_size) if self.threshold is None else int(self.threshold)


def pair_label(round_index: int, i: int, j: int) -> str:
    """The label of the seed clients i and j agree on for their pairwise mask (one per pair and round)."""
    lo, hi = min(i, j), max(i, j)
    return f"round={round_index} pair={lo},{hi} pairwise-mask"


def holder_x(client_id: int) -> int:
    """The Shamir abscissa of the share a client holds."""
    return client_id + 1  # Shamir's x must be nonzero
