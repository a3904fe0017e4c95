"""The masking graph of SecAgg+ (Bell et al., CCS 2020): who agrees on pairwise masks with whom.

The original protocol (Bonawitz et al. 2017) masks every pair: the complete graph, O(N) key agreements, masks
and shares per client. SecAgg+ keeps the guarantee with high probability on a random graph of degree
O(log N), so a client's cost grows with log N. Here the graph is a Harary graph ``H_(k,N)`` on a uniformly
shuffled ring: place the clients on a cycle in random order, join each to its ⌊k/2⌋ nearest on either side,
and for odd k also to the client opposite. Every client gets degree k (k + 1 when k and N are both odd),
the graph is k-connected, and the shuffle is the randomness that keeps a coalition from choosing its
neighbours. Degree ``N − 1`` gives the complete graph of the original protocol.

A client's secrets are shared with its closed neighbourhood ``N[i] = N(i) ∪ {i}``; a threshold t applies to
each closed neighbourhood (:func:`default_threshold`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sifl_ray.privacy.secagg.crypto import RandomStream


@dataclass(frozen=True)
class NeighbourGraph:
    """An undirected graph on clients ``0..N-1``: public, the same object for every party.

    Attributes:
        neighbours: ``neighbours[i]`` is N(i), the clients i masks with (never i itself).
    """

    neighbours: tuple[frozenset[int], ...]

    def __post_init__(self) -> None:
        n = len(self.neighbours)
        for i, nbrs in enumerate(self.neighbours):
            if i in nbrs or any(not 0 <= j < n or i not in self.neighbours[j] for j in nbrs):
                raise ValueError(f"neighbours must be a symmetric graph on 0..{n - 1} without loops")

    @property
    def num_clients(self) -> int:
        """N, the number of vertices."""
        return len(self.neighbours)

    @property
    def min_degree(self) -> int:
        """The smallest |N(i)|."""
        return min(len(nbrs) for nbrs in self.neighbours)

    @property
    def is_complete(self) -> bool:
        """Whether every pair masks: the original protocol."""
        return self.min_degree == self.num_clients - 1

    def closed(self, i: int) -> frozenset[int]:
        """``N[i] = N(i) ∪ {i}``: the holders of client i's shares."""
        return self.neighbours[i] | {i}


def complete_graph(num_clients: int) -> NeighbourGraph:
    """Every pair of clients masks (Bonawitz et al. 2017)."""
    everyone = frozenset(range(num_clients))
    return NeighbourGraph(tuple(everyone - {i} for i in range(num_clients)))


def harary_graph(num_clients: int, degree: int, *, seed: bytes | None) -> NeighbourGraph:
    """The Harary graph ``H_(k,N)`` on a ring shuffled by ``seed`` (module docstring).

    Args:
        num_clients: N ≥ 2.
        degree: k ≥ 1; k ≥ N − 1 gives the complete graph.
        seed: 32 bytes fixing the shuffle (from the server's ``key_seed`` or ``secrets``); ignored for the
            complete graph, which has no randomness.
    """
    if int(num_clients) != num_clients or num_clients < 2:
        raise ValueError(f"secure aggregation needs at least 2 clients, got {num_clients!r}")
    if int(degree) != degree or degree < 1:
        raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
    if degree >= num_clients - 1:
        return complete_graph(num_clients)
    if seed is None:
        raise ValueError("a sparse graph needs a 32-byte seed for its shuffle")
    stream = RandomStream(seed)
    order = list(range(num_clients))
    for i in range(num_clients - 1, 0, -1):  # Fisher–Yates
        j = stream.below(i + 1)
        order[i], order[j] = order[j], order[i]
    neighbours: list[set[int]] = [set() for _ in range(num_clients)]
    offsets = list(range(1, degree // 2 + 1))
    if degree % 2:
        offsets.append(num_clients // 2)
    for pos in range(num_clients):
        for off in offsets:
            a, b = order[pos], order[(pos + off) % num_clients]
            neighbours[a].add(b)
            neighbours[b].add(a)
    return NeighbourGraph(tuple(frozenset(s) for s in neighbours))


def default_threshold(closed_size: int) -> int:
    """t for closed neighbourhoods of ``closed_size`` = k + 1 holders: ⌈2(k+1)/3⌉, at least a strict majority.

    A majority is what stops a server from collecting the self-mask shares of a client from one half of its
    neighbours and its key shares from the other half (Bonawitz et al. §4: the honest clients reveal only one
    kind per client, and two disjoint sets of t cannot both exist when t > (k+1)/2). Two thirds is the
    original protocol's choice against an active server; it tolerates ``k + 1 − t`` dropouts per
    neighbourhood.
    """
    return max(closed_size // 2 + 1, math.ceil(2 * closed_size / 3))
