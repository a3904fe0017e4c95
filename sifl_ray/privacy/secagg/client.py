"""The client's half of secure aggregation (steps 0-3 of :mod:`sifl_ray.privacy.secagg.protocol`): it alone
holds its private keys and its self-mask seed, and forgets them when the round ends."""

from __future__ import annotations

import secrets
import struct
from collections.abc import Collection, Mapping

import numpy as np
from cryptography.exceptions import InvalidTag

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
from sifl_ray.privacy.secagg.ring import ring_reduce_


def _share_header(round_index: int, sender: int, receiver: int) -> bytes:
    return b"sifl-ray secagg share" + struct.pack(">III", round_index, sender, receiver)


def _share_key(
    key: crypto.X25519PrivateKey, peer: bytes, round_index: int, sender: int, receiver: int
) -> bytes:
    return crypto.agree(key, peer, f"round={round_index} from={sender} to={receiver} share-encryption")


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
            xs = [holder_x(h) for h in holders]
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
            self._held = {i: (key_shares[holder_x(i)], mask_shares[holder_x(i)])}
            outbox: dict[int, bytes] = {}
            for j in holders[:-1]:
                x = holder_x(j)
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
                seed = crypto.agree(self._mask_key, self._peers[j].mask_key, pair_label(r, i, j))
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
