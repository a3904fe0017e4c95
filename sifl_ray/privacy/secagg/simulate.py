"""One secure-aggregation round played in process: the four steps of :mod:`.protocol`, with dropouts.

This is the reference driver: an arm that runs the parties in separate actors calls the same methods in the
same order and passes the same messages. Dropouts are given per step, so a test (or a fault model) can make a
client vanish before it advertises keys, before it shares them, before it uploads its masked vector, or after
uploading but before it answers the unmasking request.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sifl_ray.party_seeds import party_seed
from sifl_ray.privacy.secagg.graph import NeighbourGraph, harary_graph
from sifl_ray.privacy.secagg.protocol import PartyStats, SecAggClient, SecAggParams, SecAggServer


@dataclass(frozen=True)
class Dropouts:
    """Which clients vanish, and before which step (a client listed twice drops at the earlier step)."""

    before_keys: frozenset[int] = frozenset()
    before_shares: frozenset[int] = frozenset()
    before_upload: frozenset[int] = frozenset()
    before_unmask: frozenset[int] = frozenset()

    @classmethod
    def of(
        cls,
        *,
        before_keys: Collection[int] = (),
        before_shares: Collection[int] = (),
        before_upload: Collection[int] = (),
        before_unmask: Collection[int] = (),
    ) -> Dropouts:
        """Build from any collections of client ids."""
        return cls(
            frozenset(before_keys),
            frozenset(before_shares),
            frozenset(before_upload),
            frozenset(before_unmask),
        )


@dataclass(frozen=True)
class SecAggResult:
    """What one round produced.

    Attributes:
        ring_sum: ``Σ_{i ∈ included} encode(x_i) mod 2^k`` (``uint64``), exact.
        sum: ``codec.decode(ring_sum)``: the float64 sum, within ``codec.sum_error_bound(len(included))`` of
            the exact sum of the clipped updates.
        included: U3, the clients whose updates are in the sum.
        responders: U4, the clients that answered the unmasking request.
        graph: the masking graph of the round.
        client_stats: per client that took part in any step, its :class:`PartyStats`.
        server_stats: the server's :class:`PartyStats`.
        clipped: per included client, how many coordinates the codec clipped.
    """

    ring_sum: np.ndarray
    sum: np.ndarray
    included: frozenset[int]
    responders: frozenset[int]
    graph: NeighbourGraph
    client_stats: Mapping[int, PartyStats] = field(repr=False)
    server_stats: PartyStats = field(repr=False)
    clipped: Mapping[int, int] = field(repr=False)


def make_graph(params: SecAggParams, *, key_seed: int | None = None) -> NeighbourGraph:
    """The round's masking graph; its shuffle derives from ``key_seed`` (else ``secrets``)."""
    seed = party_seed(key_seed, "secagg", f"graph round={params.round_index}")
    return harary_graph(params.num_clients, params.graph_degree, seed=seed)


def make_parties(
    params: SecAggParams, *, key_seed: int | None = None, graph: NeighbourGraph | None = None
) -> tuple[SecAggServer, list[SecAggClient], NeighbourGraph]:
    """The server and the N clients of one round, each with only its own secrets."""
    graph = make_graph(params, key_seed=key_seed) if graph is None else graph
    clients = [
        SecAggClient(
            i, params, graph, seed=party_seed(key_seed, "secagg", f"client={i} round={params.round_index}")
        )
        for i in range(params.num_clients)
    ]
    return SecAggServer(params, graph), clients, graph


def secure_sum(
    updates: Sequence[np.ndarray],
    params: SecAggParams,
    *,
    key_seed: int | None = None,
    dropouts: Dropouts = Dropouts(),
    graph: NeighbourGraph | None = None,
) -> SecAggResult:
    """Run one round of secure aggregation over ``updates`` (one float vector per client, ``0..N-1``).

    Args:
        updates: N float vectors of length ``params.vector_len``.
        params: the round's public parameters.
        key_seed: makes every secret of the round reproducible (for experiments only); None uses ``secrets``.
        dropouts: who vanishes before which step.
        graph: a masking graph to reuse; None builds one from ``key_seed``.

    Raises:
        SecAggError: too many dropouts for the threshold (see :func:`.protocol.recovery_problems`).
    """
    if len(updates) != params.num_clients:
        raise ValueError(f"{len(updates)} updates for a round of {params.num_clients} clients")
    server, clients, graph = make_parties(params, key_seed=key_seed, graph=graph)
    gone: set[int] = set()

    def present(step_dropouts: frozenset[int]) -> list[SecAggClient]:
        gone.update(step_dropouts)
        return [c for c in clients if c.client_id not in gone]

    # 0. Clients advertise their public keys; the server forwards each its neighbours'.
    keys = {c.client_id: c.advertise_keys() for c in present(dropouts.before_keys)}
    routed_keys = server.collect_keys(keys)
    # 1. Clients share their secrets with their neighbours, encrypted; the server routes the ciphertexts.
    outboxes = {c.client_id: c.share_keys(routed_keys[c.client_id]) for c in present(dropouts.before_shares)}
    inboxes = server.route_shares(outboxes)
    # 2. Clients upload masked, fixed-point encoded updates; the server announces who did.
    masked = {
        c.client_id: c.mask_update(updates[c.client_id], inboxes[c.client_id])
        for c in present(dropouts.before_upload)
    }
    survivors = server.collect_masked(masked)
    # 3. Survivors reveal shares; the server unmasks the sum.
    responses = {c.client_id: c.unmask(survivors) for c in present(dropouts.before_unmask)}
    ring = server.unmask(responses)
    return SecAggResult(
        ring_sum=ring,
        sum=params.codec.decode(ring),
        included=server.survivors,
        responders=server.responders,
        graph=graph,
        client_stats={c.client_id: c.stats for c in clients if c.stats.messages_sent},
        server_stats=server.stats,
        clipped={i: clients[i].clipped for i in server.survivors},
    )
