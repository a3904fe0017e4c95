"""Secure aggregation on the platform: the client workers play SecAgg's clients, the aggregator its server.

The protocol itself (Bonawitz et al., CCS 2017; SecAgg+ graph of Bell et al., CCS 2020) is
:mod:`sifl_ray.privacy.secagg`; this module fits its two halves to the platform's parties, so that an arm
whose uploads are masked (:attr:`sifl_ray.arms.Arm.secure_aggregation`) runs on the same round, the same
hosts and the same faults as every other arm:

* :class:`SecAggSpec`: the public parameters an arm hands every party (the fixed-point ring, the graph
  degree, the threshold, the weight scale).
* :class:`WorkerSecAgg`: in a client worker, the SecAgg client of every virtual client it hosts, one round
  at a time. Each client's secrets (its two X25519 keys, its self-mask seed, its Shamir coefficients) are
  made in the worker from the client's own :func:`~sifl_ray.party_seeds.party_seed` and never leave it,
  except as the protocol sends them: public keys, shares encrypted to a neighbour, and at the end the shares
  the aggregator needs.
* :class:`AggregatorSecAgg`: in aggregator shard 0, SecAgg's server for one round at a time: it opens the
  round (roster, graph), routes the public keys and the encrypted shares it cannot read, announces the
  survivors and reconstructs the masks left in the sum (:class:`~sifl_ray.privacy.secagg.MaskPlan`). Every
  shard then removes those masks from its own rows (:func:`unmask_rows`).

Why the workers may add up masked inputs. A worker is where its virtual clients' devices are simulated; the
sum of its clients' masked inputs is still masked by their self masks until the aggregator removes them, and
then by the pairwise masks towards the clients of other workers, which it never learns. So the aggregator
learns what the protocol lets it learn, the sum over every survivor, and nothing per worker, while the
object store carries one vector per worker instead of one per client.

A client numbers itself by its position in the round's roster (the sampled clients, sorted): the protocol's
ids ``0..N-1``. Each round is a fresh protocol run: keys, graph and masks are new every round.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from sifl_ray.parties.messages import MaskedPartial, WorkerReport
from sifl_ray.parties.upload import Local
from sifl_ray.party_seeds import party_seed
from sifl_ray.privacy.secagg import (
    FixedPointCodec,
    MaskPlan,
    PartyStats,
    PublicKeys,
    SecAggClient,
    SecAggError,
    SecAggParams,
    SecAggServer,
    UnmaskResponse,
    harary_graph,
    ring_sum,
)
from sifl_ray.privacy.secagg.graph import NeighbourGraph
from sifl_ray.privacy.secagg.ring import ring_reduce_
from sifl_ray.privacy.secagg.spec import SecAggSpec


@dataclass(frozen=True)
class RoundPublic:
    """Round ``t``'s public set-up, from the aggregator to every client: who takes part, and the graph."""

    t: int
    roster: tuple[int, ...]  # the sampled clients' platform ids, sorted: position = protocol id
    params: SecAggParams
    graph: NeighbourGraph

    def index(self, client: int) -> int:
        """The client's protocol id: its position in the sorted roster (a binary search, not a scan: a
        worker asks once per client, a thousand clients a round)."""
        i = bisect_left(self.roster, client)
        if i == len(self.roster) or self.roster[i] != client:
            raise SecAggError(f"client {client} is not in round {self.t}'s roster")
        return i


@dataclass
class ClientCosts:
    """What a worker's clients spent on the protocol in one round, summed over them (metrics only)."""

    clients: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    messages: int = 0  # sent
    compute_s: float = 0.0
    sent_by: dict[str, int] = field(default_factory=dict)  # bytes sent per step (keys, shares, masked, ...)

    def add(self, stats: PartyStats) -> None:
        self.clients += 1
        self.bytes_sent += stats.bytes_sent
        self.bytes_received += stats.bytes_received
        self.messages += stats.messages_sent
        self.compute_s += stats.compute_s
        for step, nbytes in stats.sent_by.items():
            self.sent_by[step] = self.sent_by.get(step, 0) + nbytes


class WorkerSecAgg:
    """The SecAgg clients of the virtual clients one worker hosts, for one arm (see the module docstring).

    Only the current round's clients are kept: a round that starts discards the previous one's secrets.
    """

    def __init__(self, spec: SecAggSpec, arm: str) -> None:
        self.spec = spec
        self.arm = arm
        self._public: RoundPublic | None = None
        self._clients: dict[int, SecAggClient] = {}  # protocol id → the client's half

    def _seed(self, client: int, t: int) -> bytes:

        return party_seed(self.spec.key_seed, self.arm, f"secagg-client-{client}-round-{t}")

    def _round(self, t: int) -> RoundPublic:
        if self._public is None or self._public.t != t:
            raise SecAggError(f"{self.arm}: no secure-aggregation round {t} was opened on this worker")
        return self._public

    def advertise(self, public: RoundPublic, clients: Collection[int]) -> dict[int, PublicKeys]:
        """Step 0 for this worker's ``clients`` of the round: each one's two public keys, by protocol id."""
        self._public = public
        self._clients = {}
        out = {}
        for c in sorted(clients):
            i = public.index(c)
            self._clients[i] = SecAggClient(i, public.params, public.graph, seed=self._seed(c, public.t))
            out[i] = self._clients[i].advertise_keys()
        return out

    def share(self, t: int, routed: Mapping[int, Mapping[int, PublicKeys]]) -> dict[int, dict[int, bytes]]:
        """Step 1: each client's encrypted shares for its neighbours (clients the aggregator routed no
        keys to dropped out of the round)."""
        self._round(t)
        return {i: client.share_keys(routed[i]) for i, client in self._clients.items() if i in routed}

    def mask(
        self, t: int, client: int, x: np.ndarray, inboxes: Mapping[int, Mapping[int, bytes]]
    ) -> np.ndarray:
        """Step 2 for one client: its masked, fixed-point encoded ``x`` (``uint64``).

        Raises:
            SecAggError: the client is not in the round's key agreement (its shares were not routed), or the
                protocol refuses (too few neighbours left, a share that does not decrypt).
        """
        public = self._round(t)
        i = public.index(client)
        if i not in self._clients or i not in inboxes:
            raise SecAggError(f"client {client} is not in round {t}'s key agreement")
        return self._clients[i].mask_update(x, inboxes[i]).masked

    def index(self, t: int, client: int) -> int:
        """The client's protocol id in round ``t``."""
        return self._round(t).index(client)

    def clipped(self, t: int, client: int) -> int:
        """How many coordinates of the client's last masked input the codec clipped."""
        return self._clients[self._round(t).index(client)].clipped

    def round_sum(self, t: int, n: int, inboxes: Mapping[int, Mapping[int, bytes]]) -> MaskedSum:
        """Step 2 for round ``t``: an empty ring sum of this worker's clients' masked inputs."""
        return MaskedSum(self, t, n, inboxes)

    def unmask(
        self, t: int, survivors: Collection[int], silent: Collection[int] = ()
    ) -> tuple[dict[int, UnmaskResponse], ClientCosts]:
        """Step 3: the answer of each of this worker's clients that is a survivor (U3) and not ``silent``
        (platform ids of clients gone after their upload: they answer nothing), and what the protocol cost
        this worker's clients over the round."""
        public = self._round(t)
        gone = {public.index(c) for c in silent if c in public.roster}
        answering = [i for i in self._clients if i in survivors and i not in gone]
        responses = {i: self._clients[i].unmask(survivors) for i in answering}
        costs = ClientCosts()
        for i in answering:
            costs.add(self._clients[i].stats)
        self._clients = {}  # the round is over: its secrets go
        return responses, costs


class MaskedSum:
    """A worker's sum of its clients' masked inputs for one round, in the ring (SecAgg step 2).

    Each client adds ``(weight_i / weight_ref)·u_i`` fixed-point encoded and masked; a client not in the
    round's key agreement, or one the protocol refuses, adds nothing (the aggregator recovers the masks its
    neighbours added). Beside the ring it keeps the exact float64 sum of the clipped inputs: a
    simulation-only instrument for the evaluator, which measures the ring's quantisation error with it.
    """

    def __init__(self, secure: WorkerSecAgg, t: int, n: int, inboxes: Mapping[int, Mapping[int, bytes]]):
        self.secure, self.t, self.n, self.inboxes = secure, t, n, inboxes
        self.codec = secure.spec.codec
        self.ring = np.zeros(n, dtype=np.uint64)
        self.exact = np.zeros(n, dtype=np.float64)
        self.ids: list[int] = []
        self._last: np.ndarray | None = None

    shortcut = False  # every upload is masked on its own

    def add(self, local: Local, report: WorkerReport) -> str | None:
        """Mask the client's upload (times its FedAvg weight) and add it to the ring sum; return why the
        protocol refused it (``None``: added). Its compute goes to ``report``'s encoding time."""
        client = local.client
        t0 = time.perf_counter()
        x = local.upload.detach().cpu().numpy() * (local.size / self.secure.spec.weight_ref)
        try:
            masked = self.secure.mask(self.t, client, x, self.inboxes)
        except SecAggError as err:
            return f"secure aggregation: {err}"
        report.encode_s += time.perf_counter() - t0
        report.coords_clipped += self.secure.clipped(self.t, client)
        np.add(self.ring, masked, out=self.ring)
        self.exact += np.clip(x, -self.codec.clip, self.codec.clip)
        self.ids.append(self.secure.index(self.t, client))
        self._last = masked
        return None

    def sent(self, local: Local) -> torch.Tensor:
        """The client's masked input as the aggregator reads it: ring elements decoded as numbers."""
        assert self._last is not None, "no input was masked yet"
        return torch.from_numpy(self.codec.decode(self._last))

    def partials(
        self, source: int, bounds: Sequence[tuple[int, int]], *, key_epoch: int, weight: float
    ) -> tuple[list[MaskedPartial], torch.Tensor]:
        """One masked partial per aggregator shard (rows ``bounds``), and the exact sum (the instrument)."""
        ring_reduce_(self.ring, self.codec.ring_bits)
        ids = tuple(self.ids)
        partials = [
            MaskedPartial(
                source=source,
                round=self.t,
                key_epoch=key_epoch,
                masked_sum=self.ring[a:b].copy(),
                weight=weight,
                accepted=len(ids),
                clients=ids,
            )
            for a, b in bounds
        ]
        return partials, torch.from_numpy(self.exact)

    def packed_bytes(self) -> int:
        """What the worker's partials carry through the object store."""
        return self.codec.packed_bytes(self.n)


@dataclass
class AggregatorSecAgg:
    """SecAgg's server for one arm, hosted by aggregator shard 0, one round at a time."""

    spec: SecAggSpec
    arm: str
    _server: SecAggServer | None = field(default=None, repr=False)
    _public: RoundPublic | None = field(default=None, repr=False)

    def open(self, t: int, roster: Sequence[int]) -> RoundPublic:
        """Start round ``t`` over ``roster``: its public parameters and its masking graph (the shuffle from
        the aggregator's own seed)."""
        roster = tuple(sorted(int(c) for c in roster))
        params = self.spec.params(len(roster), t)
        graph_seed = party_seed(self.spec.key_seed, self.arm, f"secagg-graph-round-{t}")
        graph = harary_graph(params.num_clients, params.graph_degree, seed=graph_seed)
        self._server = SecAggServer(params, graph)
        self._public = RoundPublic(t=t, roster=roster, params=params, graph=graph)
        return self._public

    def _round(self, t: int) -> SecAggServer:
        if self._server is None or self._public is None or self._public.t != t:
            raise SecAggError(f"{self.arm}: secure-aggregation round {t} was not opened")
        return self._server

    def route_keys(
        self, t: int, keys: Sequence[Mapping[int, PublicKeys]]
    ) -> dict[int, dict[int, PublicKeys]]:
        """Step 0: U1, and each client's neighbours' public keys."""
        merged: dict[int, PublicKeys] = {}
        for part in keys:
            merged.update(part)
        return self._round(t).collect_keys(merged)

    def route_shares(
        self, t: int, outboxes: Sequence[Mapping[int, Mapping[int, bytes]]]
    ) -> dict[int, dict[int, bytes]]:
        """Step 1: U2, and each client's inbox of encrypted shares."""
        merged: dict[int, Mapping[int, bytes]] = {}
        for part in outboxes:
            merged.update(part)
        return self._round(t).route_shares(merged)

    def announce(self, t: int, survivors: Collection[int]) -> frozenset[int]:
        """Step 2: U3, the clients whose masked inputs are in the partial sums that arrived."""
        server = self._round(t)
        codec = self.spec.codec
        return server.announce(survivors, nbytes=codec.packed_bytes(self.spec.vector_len) * len(survivors))

    def plan(self, t: int, responses: Sequence[Mapping[int, UnmaskResponse]]) -> MaskPlan:
        """Step 3: the masks left in the sum, from the survivors' answers (raises :class:`SecAggError` when
        too few answered: the round then reveals nothing)."""
        merged: dict[int, UnmaskResponse] = {}
        for part in responses:
            merged.update(part)
        return self._round(t).mask_plan(merged)

    def stats(self) -> PartyStats:
        return self._server.stats if self._server is not None else PartyStats()

    def round_sets(self) -> dict[str, int]:
        """Sizes of the round's client sets (public): roster, U1 (advertised), U2 (shared), U3 (survivors),
        U4 (responders)."""
        s, p = self._server, self._public
        if s is None or p is None:
            return {}
        return {
            "roster": len(p.roster),
            "advertised": len(s.advertised),
            "shared": len(s.shared),
            "survivors": len(s.survivors),
            "responders": len(s.responders),
        }


def unmask_rows(
    masked_sums: Sequence[np.ndarray], plan: MaskPlan, *, offset: int, codec: FixedPointCodec
) -> np.ndarray:
    """Rows ``offset ..`` of the survivors' sum: add the partial sums in the ring, remove the plan's masks,
    decode to float64 (``Σ_{U3} (weight_i/weight_ref)·u_i``, within the codec's bound)."""
    total = ring_sum(masked_sums, codec.ring_bits)
    plan.apply_(total, offset=offset)
    return codec.decode(total)
