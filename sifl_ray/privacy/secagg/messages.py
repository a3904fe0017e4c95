"""The messages of a secure-aggregation round and what each party counts about them (see :mod:`.protocol`).

Wire sizes: public keys 32 bytes each, client ids 4 bytes, Shamir shares 66 bytes (one element of
``GF(2^521 − 1)``), AES-GCM ciphertexts with their 16-byte tag, masked vectors packed at k bits per element.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from sifl_ray.errors import SiflError
from sifl_ray.privacy.secagg import crypto, shamir

ID_BYTES = 4


class SecAggError(SiflError, RuntimeError):
    """The round cannot finish (too few clients or shares left) or a message is malformed.

    A round that fails reveals nothing about the inputs: no self mask of a dropped client was revealed.
    """


@dataclass
class PartyStats:
    """What one party sent, received and computed in one round (see the module docstring for the units)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    compute_s: float = 0.0
    sent_by: dict[str, int] = field(default_factory=dict)  # bytes sent per step: keys, shares, masked, unmask

    def sent(self, nbytes: int, messages: int = 1, *, step: str = "other") -> None:
        """Count an outgoing message (or ``messages`` of them) of ``nbytes`` in total, sent in ``step``."""
        self.bytes_sent += int(nbytes)
        self.messages_sent += messages
        self.sent_by[step] = self.sent_by.get(step, 0) + int(nbytes)

    def received(self, nbytes: int, messages: int = 1) -> None:
        """Count an incoming message (or ``messages`` of them) of ``nbytes`` in total."""
        self.bytes_received += int(nbytes)
        self.messages_received += messages

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Add the wall time of the block to ``compute_s``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.compute_s += time.perf_counter() - start


@dataclass(frozen=True)
class PublicKeys:
    """Step 0's message: a client's two X25519 public keys."""

    client_id: int
    encryption_key: bytes
    mask_key: bytes

    NBYTES = 2 * crypto.PUBLIC_KEY_BYTES


@dataclass(frozen=True)
class MaskedInput:
    """Step 2's message: ``y_i`` in ``Z_(2^k)`` as ``uint64``."""

    client_id: int
    masked: np.ndarray


@dataclass(frozen=True)
class UnmaskResponse:
    """Step 3's message: for each owner j, the share of ``s_j`` (j dropped) or of ``b_j`` (j survived)."""

    client_id: int
    key_shares: Mapping[int, int] = field(default_factory=dict)
    self_mask_shares: Mapping[int, int] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Wire size: an owner id and a field element per share."""
        return (len(self.key_shares) + len(self.self_mask_shares)) * (ID_BYTES + shamir.SHARE_BYTES)
