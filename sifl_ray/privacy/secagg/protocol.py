"""The secure aggregation protocol as two plain roles a simulation drives: :class:`SecAggClient` and
:class:`SecAggServer` (Bonawitz et al., CCS 2017, Fig. 4, semi-honest variant; SecAgg+ graph of Bell et al.).

One round, with U1 ⊇ U2 ⊇ U3 ⊇ U4 the clients still present after each step:

0. **Advertise keys.** Each client sends two X25519 public keys, ``c`` (to encrypt shares) and ``s`` (to
   agree on masks); the server forwards to each client those of its neighbours in U1.
1. **Share keys.** Each client in U1 draws a self-mask seed ``b_i`` and Shamir-shares (threshold t) both
   ``b_i`` and its private key ``s_i`` among its closed neighbourhood in U1; each share travels
   AES-GCM-encrypted under a key agreed with ``c``, so the server routes shares it cannot read. U2: the
   clients whose shares arrived.
2. **Masked input.** Each client in U2 uploads
   ``y_i = x_i + PRG(b_i) + Σ_{j ∈ N(i) ∩ U2} ±PRG(s_ij) mod 2^k``, ``+`` for ``i < j`` and ``−`` for
   ``i > j``, so every pairwise mask appears once with each sign in the sum. U3: the clients whose ``y_i``
   arrived; the server announces U3.
3. **Unmask.** Each client in U4 ⊆ U3 reveals, for each j whose shares it holds, the share of ``b_j`` if j is
   in U3 and the share of ``s_j`` if j dropped (in U2 ∖ U3), never both. The server reconstructs, removes
   ``PRG(b_j)`` for j in U3 and, with ``s_j`` and the public keys, the masks the survivors added for dropped
   j; the result is ``Σ_{i ∈ U3} x_i mod 2^k``, exact.

A client that drops at any step costs nothing as long as each closed neighbourhood that matters keeps t
responders (:func:`recovery_problems`); with the complete graph that is ``|U4| ≥ t``, so up to N − t dropouts.

What is not modelled: the signatures and consistency round that protect against an *active* server
(Bonawitz §4.2 / Fig. 4's round 3), and the network. The trust boundary is the object: each party's
secrets live only in its own object; the server holds public keys, ciphertexts it routes, masked vectors and
the shares it is sent, and it reconstructs a dropped client's key (as the protocol intends) only inside
:meth:`SecAggServer.unmask`, never keeping it.

Costs are counted per party (:class:`PartyStats`): bytes are what would cross the network (public keys 32
bytes each, client ids 4 bytes, shares 66 bytes, AES-GCM ciphertexts with their 16-byte tag, masked vectors
packed at k bits per element), messages are one per step per direction, and compute is the wall time inside
each party's methods.
"""

from __future__ import annotations

import secrets
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag

from sifl_ray.privacy.secagg import crypto, shamir
from sifl_ray.privacy.secagg.graph import NeighbourGraph, default_threshold
from sifl_ray.privacy.secagg.messages import (
    ID_BYTES,
    MaskedInput,
    PartyStats,
    PublicKeys,
    SecAggError,
    UnmaskResponse,
)
from sifl_ray.privacy.secagg.ring import FixedPointCodec, ring_reduce_, ring_sum

__all__ = [
    "ID_BYTES",
    "MaskPlan",
    "MaskedInput",
    "PartyStats",
    "PublicKeys",
    "SecAggClient",
    "SecAggError",
    "SecAggParams",
    "SecAggServer",
    "UnmaskResponse",
    "recovery_problems",
]


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


def _pair_label(round_index: int, i: int, j: int) -> str:
    lo, hi = min(i, j), max(i, j)
    return f"round={round_index} pair={lo},{hi} pairwise-mask"


def _share_header(round_index: int, sender: int, receiver: int) -> bytes:
    return b"sifl-ray secagg share" + struct.pack(">III", round_index, sender, receiver)


def _share_key(
    key: crypto.X25519PrivateKey, peer: bytes, round_index: int, sender: int, receiver: int
) -> bytes:
    return crypto.agree(key, peer, f"round={round_index} from={sender} to={receiver} share-encryption")


def _holder_x(client_id: int) -> int:
    return client_id + 1  # Shamir's x must be nonzero


class SecAggClient:
    """One client's half of the protocol; it alone holds its private keys and its self-mask seed.

    Args:
        client_id: this client's number in ``0..N-1``.
        params: the round's public parameters.
        graph: the round's public masking graph.
        seed: 32 bytes from which all of this client's secrets for the round derive; None draws them from
            ``secrets``. A simulation passes a :func:`sifl_ray.party_seeds.party_seed` to reproduce a run.
    """

    def __init__(
        self, client_id: int, params: SecAggParams, graph: NeighbourGraph, *, seed: bytes | None = None
    ) -> None:
        if not 0 <= client_id < params.num_clients or graph.num_clients != params.num_clients:
            raise ValueError(f"client {client_id} is not one of the {params.num_clients} in the round")
        self.client_id = client_id
        self.params = params
        self.graph = graph
        self.stats = PartyStats()
        self.clipped = 0
        seed = secrets.token_bytes(crypto.SEED_BYTES) if seed is None else seed
        r = params.round_index
        self._encryption_key = crypto.x25519_from_seed(crypto.derive(seed, f"round={r} x25519-encryption"))
        self._mask_key = crypto.x25519_from_seed(crypto.derive(seed, f"round={r} x25519-mask"))
        self._self_mask_seed = crypto.derive(seed, f"round={r} self-mask")
        self._coins = crypto.RandomStream(crypto.derive(seed, f"round={r} shamir-coefficients"))
        self._peers: dict[int, PublicKeys] = {}
        self._held: dict[int, tuple[int, int]] = {}  # owner j -> (share of s_j, share of b_j), x = my id + 1
        self._shared = False  # step 1 runs once: its AES-GCM keys take one message each (fixed nonce)
        self._answered = False

    # 0. -----------------------------------------------------------------------------------------------------
    def advertise_keys(self) -> PublicKeys:
        """Step 0: the two public keys."""
        with self.stats.timing():
            msg = PublicKeys(
                self.client_id,
                crypto.public_bytes(self._encryption_key),
                crypto.public_bytes(self._mask_key),
            )
        self.stats.sent(PublicKeys.NBYTES, step="keys")
        return msg

    # 1. -----------------------------------------------------------------------------------------------------
    def share_keys(self, neighbour_keys: Mapping[int, PublicKeys]) -> dict[int, bytes]:
        """Step 1: encrypted shares of ``s_i`` and ``b_i`` for each neighbour that advertised keys.

        Returns:
            ``{receiver: ciphertext}``; this client keeps its own share.

        Raises:
            SecAggError: a key comes from a non-neighbour, two keys are equal, fewer than t - 1 neighbours
                are left (the client's secrets could not be reconstructed: the original protocol aborts), or
                it was asked a second time in the round (each pair's share key is used for one message:
                :func:`~sifl_ray.privacy.secagg.crypto.seal` has a fixed nonce, and fresh Shamir coins
                would seal other shares under the same key and nonce, which breaks AES-GCM).
        """
        i, r, t = self.client_id, self.params.round_index, self.params.t
        if self._shared:
            raise SecAggError(
                f"client {i} already shared its keys in round {r}: a second set of shares would reuse each "
                "pair's encryption key and fixed nonce; start a new round (a new SecAggClient) instead"
            )
        self.stats.received((ID_BYTES + PublicKeys.NBYTES) * len(neighbour_keys))
        with self.stats.timing():
            strangers = set(neighbour_keys) - self.graph.neighbours[i]
            if strangers:
                raise SecAggError(f"client {i} was sent keys of non-neighbours {sorted(strangers)}")
            own = [crypto.public_bytes(self._encryption_key), crypto.public_bytes(self._mask_key)]
            keys = [k for pk in neighbour_keys.values() for k in (pk.encryption_key, pk.mask_key)] + own
            if len(set(keys)) != len(keys):
                raise SecAggError(f"client {i} received repeated public keys: the round is aborted")
            holders = [*sorted(neighbour_keys), i]
            if len(holders) < t:
                raise SecAggError(
                    f"client {i} has {len(holders) - 1} neighbours left, fewer than t - 1 = {t - 1}: its "
                    "secrets could not be reconstructed, the round is aborted"
                )
            self._shared = True  # from here the coins advance: no second call, even after an error
            xs = [_holder_x(h) for h in holders]
            key_shares = shamir.split(
                shamir.secret_to_int(crypto.private_bytes(self._mask_key)),
                holders=xs,
                threshold=t,
                draw=self._coins.below,
            )
            mask_shares = shamir.split(
                shamir.secret_to_int(self._self_mask_seed), holders=xs, threshold=t, draw=self._coins.below
            )
            self._peers = dict(neighbour_keys)
            self._held = {i: (key_shares[_holder_x(i)], mask_shares[_holder_x(i)])}
            outbox: dict[int, bytes] = {}
            for j in holders[:-1]:
                x = _holder_x(j)
                plaintext = key_shares[x].to_bytes(shamir.SHARE_BYTES, "big") + mask_shares[x].to_bytes(
                    shamir.SHARE_BYTES, "big"
                )
                key = _share_key(self._encryption_key, neighbour_keys[j].encryption_key, r, i, j)
                outbox[j] = crypto.seal(key, plaintext, _share_header(r, i, j))
        self.stats.sent(sum(2 * ID_BYTES + len(c) for c in outbox.values()), step="shares")
        return outbox

    # 2. -----------------------------------------------------------------------------------------------------
    def mask_update(self, update: np.ndarray, inbox: Mapping[int, bytes]) -> MaskedInput:
        """Step 2: decrypt the neighbours' shares and upload the masked, fixed-point encoded update.

        Args:
            update: float vector of length ``vector_len`` (clipped per coordinate by the codec; the number of
                clipped coordinates is left in ``self.clipped``).
            inbox: ``{sender: ciphertext}`` routed by the server: the neighbours in U2.

        Raises:
            SecAggError: a share is not from a neighbour that advertised keys, does not decrypt, or fewer than
                t holders of this client's shares are left.
        """
        i, r, t = self.client_id, self.params.round_index, self.params.t
        codec = self.params.codec
        self.stats.received(sum(2 * ID_BYTES + len(c) for c in inbox.values()))
        with self.stats.timing():
            update = np.asarray(update, dtype=np.float64)
            if update.shape != (self.params.vector_len,):
                raise ValueError(f"update has shape {update.shape}, expected ({self.params.vector_len},)")
            for j, ciphertext in inbox.items():
                if j not in self._peers:
                    raise SecAggError(f"client {i} received shares from {j}, not a neighbour in this round")
                key = _share_key(self._encryption_key, self._peers[j].encryption_key, r, j, i)
                try:
                    plaintext = crypto.open_sealed(key, ciphertext, _share_header(r, j, i))
                except InvalidTag as err:
                    raise SecAggError(f"client {i}: the shares from {j} do not decrypt (altered)") from err
                n = shamir.SHARE_BYTES
                self._held[j] = (int.from_bytes(plaintext[:n], "big"), int.from_bytes(plaintext[n:], "big"))
            if len(self._held) < t:
                raise SecAggError(
                    f"client {i} holds shares of {len(self._held)} clients, fewer than t = {t}: aborted"
                )
            self.clipped = codec.count_clipped(update)
            y = codec.encode(update)
            k = codec.ring_bits
            np.add(y, crypto.prg_ring(self._self_mask_seed, y.size, k), out=y)
            for j in sorted(inbox):
                seed = crypto.agree(self._mask_key, self._peers[j].mask_key, _pair_label(r, i, j))
                mask = crypto.prg_ring(seed, y.size, k)
                (np.add if i < j else np.subtract)(y, mask, out=y)
            ring_reduce_(y, k)
        self.stats.sent(codec.packed_bytes(y.size), step="masked")
        return MaskedInput(i, y)

    # 3. -----------------------------------------------------------------------------------------------------
    def unmask(self, survivors: Collection[int]) -> UnmaskResponse:
        """Step 3: reveal one share per owner j: of ``b_j`` if j is in ``survivors`` (U3), else of ``s_j``.

        Raises:
            SecAggError: this client was not announced as a survivor, fewer than t survivors were announced,
                or it was asked a second time (a second answer to another survivor set could reveal both
                secrets of one client).
        """
        i, t = self.client_id, self.params.t
        survivors = frozenset(survivors)
        self.stats.received(ID_BYTES * len(survivors))
        with self.stats.timing():
            if self._answered:
                raise SecAggError(f"client {i} already answered the unmasking request of this round")
            if i not in survivors:
                raise SecAggError(f"client {i} is not in the announced survivor set: it does not answer")
            if len(survivors) < t:
                raise SecAggError(f"only {len(survivors)} survivors announced, fewer than t = {t}: aborted")
            self._answered = True
            key_shares = {j: s for j, (s, _) in self._held.items() if j not in survivors}
            mask_shares = {j: b for j, (_, b) in self._held.items() if j in survivors}
            response = UnmaskResponse(i, key_shares, mask_shares)
        self.stats.sent(response.nbytes, step="unmask")
        return response


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
                    _holder_x(h): responses[h].self_mask_shares[j]
                    for h in self.graph.closed(j) & self.responders
                    if j in responses[h].self_mask_shares
                }
                terms.append((shamir.int_to_secret(shamir.reconstruct(shares, t)), -1))
            for j in sorted(self.shared - self.survivors):
                partners = sorted(self.graph.neighbours[j] & self.survivors)
                if not partners:
                    continue
                shares = {
                    _holder_x(h): responses[h].key_shares[j]
                    for h in self.graph.neighbours[j] & self.responders
                    if j in responses[h].key_shares
                }
                key_j = crypto.x25519_from_seed(shamir.int_to_secret(shamir.reconstruct(shares, t)))
                if crypto.public_bytes(key_j) != self._public_keys[j].mask_key:
                    raise SecAggError(f"the key shares of dropped client {j} do not match its public key")
                for h in partners:
                    # h added +PRG(s_hj) if h < j, −PRG(s_hj) if h > j: take it back out.
                    seed = crypto.agree(key_j, self._public_keys[h].mask_key, _pair_label(r, j, h))
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
