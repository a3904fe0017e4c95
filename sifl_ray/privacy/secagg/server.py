"""The server's half of secure aggregation (steps 0-3 of :mod:`sifl_ray.privacy.secagg.protocol`): it routes,
collects and unmasks, and never keeps a client's private key beyond one call."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from sifl_ray.privacy.secagg import crypto, shamir
from sifl_ray.privacy.secagg.graph import NeighbourGraph
from sifl_ray.privacy.secagg.messages import (
    ID_BYTES,
    MaskedInput,
    PartyStats,
    PublicKeys,
    SecAggError,
    UnmaskResponse,
)
from sifl_ray.privacy.secagg.params import SecAggParams, holder_x, pair_label
from sifl_ray.privacy.secagg.ring import ring_reduce_, ring_sum


def recovery_problems(
    graph: NeighbourGraph,
    *,
    shared: Collection[int],
    survivors: Collection[int],
    responders: Collection[int],
    threshold: int,
) -> list[str]:
    """Why the server cannot unmask (empty list: it can), all reasons at once.

    Each survivor j (in U3) needs t responders in N[j] to rebuild ``b_j``; each dropped client j (in U2 ∖ U3)
    with a surviving neighbour needs t responders in N(j) to rebuild ``s_j``. Pure, so a test or a planner can
    predict a round's outcome.
    """
    shared, survivors, responders = set(shared), set(survivors), set(responders)
    problems = []
    if len(responders) < threshold:
        problems.append(f"{len(responders)} clients answered the unmasking request, fewer than t={threshold}")
    for j in sorted(survivors):
        have = len(graph.closed(j) & responders)
        if have < threshold:
            problems.append(f"self mask of survivor {j}: {have} of t = {threshold} shares")
    for j in sorted(shared - survivors):
        if graph.neighbours[j] & survivors:
            have = len(graph.neighbours[j] & responders)
            if have < threshold:
                problems.append(f"pairwise keys of dropped client {j}: {have} of t = {threshold} shares")
    return problems


class SecAggServer:
    """The server's half: routes, collects, unmasks; it never keeps a client's private key beyond one call.

    Attributes (after the round): ``advertised`` (U1), ``shared`` (U2), ``survivors`` (U3, whose updates are
    in the sum), ``responders`` (U4), ``stats``.
    """

    def __init__(self, params: SecAggParams, graph: NeighbourGraph) -> None:
        if graph.num_clients != params.num_clients:
            raise ValueError(f"the graph has {graph.num_clients} clients, the round {params.num_clients}")
        self.params = params
        self.graph = graph
        self.stats = PartyStats()
        self.advertised: frozenset[int] = frozenset()
        self.shared: frozenset[int] = frozenset()
        self.survivors: frozenset[int] = frozenset()
        self.responders: frozenset[int] = frozenset()
        self._public_keys: dict[int, PublicKeys] = {}
        self._masked: dict[int, np.ndarray] = {}

    def _require(self, present: Collection[int], step: str) -> None:
        if len(present) < self.params.t:
            raise SecAggError(
                f"{step}: {len(present)} clients left, fewer than the threshold t = {self.params.t}; the "
                "round cannot be unmasked and is aborted (no input was revealed)"
            )

    # 0. -----------------------------------------------------------------------------------------------------
    def collect_keys(self, keys: Mapping[int, PublicKeys]) -> dict[int, dict[int, PublicKeys]]:
        """Step 0: record U1 and return, per client in U1, the public keys of its neighbours in U1."""
        self.stats.received(PublicKeys.NBYTES * len(keys), messages=len(keys))
        with self.stats.timing():
            for i, pk in keys.items():
                if pk.client_id != i or not 0 <= i < self.params.num_clients:
                    raise SecAggError(f"public keys of client {pk.client_id} arrived as client {i}")
            self._require(keys, "advertise keys")
            self._public_keys = dict(keys)
            self.advertised = frozenset(keys)
            routed = {
                i: {j: keys[j] for j in sorted(self.graph.neighbours[i] & self.advertised)} for i in keys
            }
        for inbox in routed.values():
            self.stats.sent((ID_BYTES + PublicKeys.NBYTES) * len(inbox))
        return routed

    # 1. -----------------------------------------------------------------------------------------------------
    def route_shares(self, outboxes: Mapping[int, Mapping[int, bytes]]) -> dict[int, dict[int, bytes]]:
        """Step 1: record U2 (the senders) and forward each ciphertext to its receiver in U2."""
        self.stats.received(
            sum(2 * ID_BYTES + len(c) for box in outboxes.values() for c in box.values()), len(outboxes)
        )
        with self.stats.timing():
            for i, box in outboxes.items():
                if i not in self.advertised or not set(box) <= (self.graph.neighbours[i] & self.advertised):
                    raise SecAggError(f"client {i} sent shares outside its neighbourhood in U1")
            self._require(outboxes, "share keys")
            self.shared = frozenset(outboxes)
            inboxes: dict[int, dict[int, bytes]] = {j: {} for j in sorted(self.shared)}
            for i, box in outboxes.items():
                for j, ciphertext in box.items():
                    if j in self.shared:
                        inboxes[j][i] = ciphertext
        for inbox in inboxes.values():
            self.stats.sent(sum(2 * ID_BYTES + len(c) for c in inbox.values()))
        return inboxes

    # 2. -----------------------------------------------------------------------------------------------------
    def collect_masked(self, inputs: Mapping[int, MaskedInput]) -> frozenset[int]:
        """Step 2: store the masked vectors; return U3, to announce to each client in it."""
        codec = self.params.codec
        with self.stats.timing():
            for i, msg in inputs.items():
                if msg.client_id != i or i not in self.shared:
                    raise SecAggError(f"a masked input from client {i}, which did not share its keys")
                if msg.masked.dtype != np.uint64 or msg.masked.shape != (self.params.vector_len,):
                    raise SecAggError(f"the masked input of client {i} is not a uint64 vector of the round")
        survivors = self.announce(inputs, nbytes=codec.packed_bytes(self.params.vector_len) * len(inputs))
        self._masked = {i: msg.masked for i, msg in inputs.items()}
        return survivors

    def announce(self, survivors: Collection[int], *, nbytes: int = 0) -> frozenset[int]:
        """Step 2 where the masked vectors are summed elsewhere (the platform's client workers add up their
        clients' masked inputs, and each aggregator shard sums its rows): record U3, the clients whose masked
        input arrived (``nbytes`` of them, for the counters), and return it for announcing."""
        self.stats.received(nbytes, len(survivors))
        with self.stats.timing():
            strangers = set(survivors) - self.shared
            if strangers:
                raise SecAggError(f"masked inputs from clients {sorted(strangers)}, which did not share keys")
            self._require(survivors, "masked input")
            self.survivors = frozenset(survivors)
        self.stats.sent(ID_BYTES * len(self.survivors) * len(self.survivors), len(self.survivors))
        return self.survivors

    # 3. -----------------------------------------------------------------------------------------------------
    def mask_plan(self, responses: Mapping[int, UnmaskResponse]) -> MaskPlan:
        """Step 3, first half: reconstruct from the shares every mask left in the sum of U3's inputs.

        Raises:
            SecAggError: fewer than t responders overall or in a neighbourhood that matters (all such places
                named), or reconstructed keys that do not match their advertised public keys.
        """
        p, t = self.params, self.params.t
        r = p.round_index
        self.stats.received(sum(resp.nbytes for resp in responses.values()), len(responses))
        with self.stats.timing():
            if not set(responses) <= self.survivors:
                raise SecAggError("unmasking responses from clients whose masked input never arrived")
            self.responders = frozenset(responses)
            problems = recovery_problems(
                self.graph,
                shared=self.shared,
                survivors=self.survivors,
                responders=self.responders,
                threshold=t,
            )
            if problems:
                raise SecAggError(
                    "the round cannot be unmasked (too many dropouts for threshold t = "
                    f"{t}; no input was revealed): " + "; ".join(problems)
                )
            terms: list[tuple[bytes, int]] = []
            for j in sorted(self.survivors):
                shares = {
                    holder_x(h): responses[h].self_mask_shares[j]
                    for h in self.graph.closed(j) & self.responders
                    if j in responses[h].self_mask_shares
                }
                terms.append((shamir.int_to_secret(shamir.reconstruct(shares, t)), -1))
            for j in sorted(self.shared - self.survivors):
                partners = sorted(self.graph.neighbours[j] & self.survivors)
                if not partners:
                    continue
                shares = {
                    holder_x(h): responses[h].key_shares[j]
                    for h in self.graph.neighbours[j] & self.responders
                    if j in responses[h].key_shares
                }
                key_j = crypto.x25519_from_seed(shamir.int_to_secret(shamir.reconstruct(shares, t)))
                if crypto.public_bytes(key_j) != self._public_keys[j].mask_key:
                    raise SecAggError(f"the key shares of dropped client {j} do not match its public key")
                for h in partners:
                    # h added +PRG(s_hj) if h < j, −PRG(s_hj) if h > j: take it back out.
                    seed = crypto.agree(key_j, self._public_keys[h].mask_key, pair_label(r, j, h))
                    terms.append((seed, -1 if h < j else 1))
                del key_j
        return MaskPlan(tuple(terms), p.codec.ring_bits)

    def unmask(self, responses: Mapping[int, UnmaskResponse]) -> np.ndarray:
        """Step 3: reconstruct the secrets, remove every mask left in the sum, return ``Σ_{U3} x_i mod 2^k``.

        Raises:
            SecAggError: as :meth:`mask_plan`.
        """
        plan = self.mask_plan(responses)
        with self.stats.timing():
            total = ring_sum((self._masked[i] for i in sorted(self.survivors)), plan.ring_bits)
            plan.apply_(total)
        return total


@dataclass(frozen=True)
class MaskPlan:
    """The masks left in the sum of the survivors' masked inputs, reconstructed in step 3: the self-mask
    seed of every survivor and the pairwise seed of every (dropped, surviving neighbour) pair, each with the
    sign that removes it. Seeds only, so it is small, and any rows of the sum can be unmasked on their own
    (:meth:`apply_` with ``offset``): the platform's aggregator shards each unmask their rows.

    Secret: whoever holds it and one masked input learns nothing more than the sum (the self masks and the
    masks towards dropped clients are the only ones it removes), but it must stay with the aggregator.
    """

    terms: tuple[tuple[bytes, int], ...]  # (seed, sign): add sign·PRG(seed)
    ring_bits: int

    def apply_(self, total: np.ndarray, *, offset: int = 0) -> np.ndarray:
        """Remove the masks from ``total`` (``uint64``; rows ``offset .. offset + len(total)`` of the sum) in
        place, reduce modulo ``2^k`` and return it."""
        k = self.ring_bits
        for seed, sign in self.terms:
            mask = crypto.prg_ring(seed, total.size, k, offset=offset)
            (np.add if sign > 0 else np.subtract)(total, mask, out=total)
        return ring_reduce_(total, k)
