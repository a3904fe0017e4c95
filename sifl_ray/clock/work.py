"""What one round of an arm moves and computes, as the clock charges it (docs/clock.md "What a round costs").

Bytes per message follow from what travels: a plain arm's vectors in the model's dtype (``train.dtype``: a
deployment sends what it trains), a coded arm's in float64 (the coding's arithmetic: docs/method.md
"Precision"), ``ñ`` long, and M2's broadcast ``W'`` with its ``p`` columns; under secure aggregation the
masked upload packed at ``k`` bits per element, and the protocol's own messages at the wire sizes of
:mod:`sifl_ray.privacy.secagg` (public keys, encrypted shares, unmasking shares).

Compute is counted in FLOPs, the same unit as a device's speed:

- local training: the samples a client's minibatches hold in the round (:func:`samples_per_round`, exactly
  what :func:`sifl_ray.data.client_batches` deals) times one sample's forward and backward pass, counted by
  torch's ``FlopCounterMode`` (matrix products and convolutions; element-wise operations and the optimizer's
  update are not counted);
- the coding: one π1 transform (:func:`transform_flops`) to decode the broadcast and one to encode the
  upload, M2's ``W' P2R`` strip, the server's decode and next encoding, M2's aggregator code;
- secure aggregation: a pseudo-random mask of ``n`` ring elements per mask a party expands
  (:data:`PRG_OPS_PER_ELEMENT`): a client its self mask and one per neighbour, the server one per mask the
  unmasking rebuilds;
- the aggregate: one addition per element of each upload that arrived.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from sifl_ray.models import build_model
from sifl_ray.specs import Coding, ModelSpec

#: ChaCha20 (the masks' generator, :func:`sifl_ray.privacy.secagg.crypto.prg_ring`) costs about 976 integer
#: operations per 64-byte block (20 rounds of four quarter-rounds of 12 operations, and the final additions),
#: and a ring element takes 8 bytes of it: an operation counted as one FLOP of the device's speed.
PRG_OPS_PER_ELEMENT = 976 * 8 / 64
FLOAT64_BYTES = 8


def model_flops(model: ModelSpec) -> float:
    """FLOPs of one sample's forward and backward pass through ``model`` (torch's ``FlopCounterMode``)."""
    net = build_model(
        model.name,
        input_shape=model.input_shape,
        num_classes=model.num_classes,
        generator=torch.Generator().manual_seed(0),  # the count does not depend on the weights
        args=model.args,
        factory=model.factory,
    )
    x = torch.zeros((1, *model.input_shape))
    with FlopCounterMode(display=False) as counter:
        net(x).sum().backward()
    return float(counter.get_total_flops())


def samples_per_round(sizes: np.ndarray, *, batch_size: int, epochs: int, steps: int) -> np.ndarray:
    """The samples each client's minibatches hold in one round: ``epochs`` passes over its ``|D_i|``, or
    (``steps`` > 0) ``steps`` batches cut from consecutive epochs, whose last batch is the short one."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if steps <= 0:
        return (epochs * sizes).astype(np.float64)
    per_epoch = -(-sizes // batch_size)  # batches in one pass, the last one short
    samples: np.ndarray = (steps // per_epoch) * sizes + (steps % per_epoch) * batch_size
    return samples.astype(np.float64)


def transform_flops(backend: str, *, n: int, n_tilde: int, block_size: int) -> float:
    """FLOPs of one π1 transform (an encoding or a decoding of one column): the dense key's ñ×n product;
    the block key's ñ/b blocks of b×b; the fast key's structured orthogonal transform (and any other
    backend's, as an estimate), ñ log₂ ñ additions of its Hadamard stage."""
    if backend == "dense":
        return 2.0 * n * n_tilde
    if backend == "block":
        return 2.0 * n_tilde * block_size
    return float(n_tilde * math.ceil(math.log2(max(n_tilde, 2))))


@dataclass(frozen=True)
class SecureSizes:
    """Secure aggregation's messages, in bytes (the protocol's wire sizes), for a client with ``d``
    neighbours: step 0 its public keys, step 1 an encrypted pair of shares per neighbour, step 2 the masked
    vector, step 3 one share per client whose shares it holds (its neighbours and itself)."""

    keys_up: int  # two public keys
    keys_down: int  # per neighbour: its id and keys, routed by the server
    shares: int  # per neighbour, each way: two ids and the sealed pair of shares
    masked: int  # the masked upload, k bits per element
    survivor_id: int  # per survivor the server announces
    unmask_share: int  # per share revealed: an owner id and a field element
    degree: int | None  # neighbours per client (None: every other client of the round)

    def neighbours(self, roster: int) -> int:
        """A client's neighbours in a round of ``roster`` clients."""
        full = max(roster - 1, 0)
        return full if self.degree is None else min(self.degree, full)

    @classmethod
    def of(cls, spec: Any) -> SecureSizes:
        """The sizes of an arm's :class:`~sifl_ray.privacy.secagg.spec.SecAggSpec`."""
        # deferred: cryptography, which only a secure arm's driver has loaded
        from sifl_ray.privacy.secagg import crypto, shamir

        # deferred: cryptography, which only a secure arm's driver has loaded
        from sifl_ray.privacy.secagg.messages import ID_BYTES, PublicKeys

        sealed = 2 * shamir.SHARE_BYTES + crypto.GCM_TAG_BYTES
        return cls(
            keys_up=PublicKeys.NBYTES,
            keys_down=ID_BYTES + PublicKeys.NBYTES,
            shares=2 * ID_BYTES + sealed,
            masked=int(spec.codec.packed_bytes(spec.vector_len)),
            survivor_id=ID_BYTES,
            unmask_share=ID_BYTES + shamir.SHARE_BYTES,
            degree=None if spec.degree is None else int(spec.degree),
        )


@dataclass(frozen=True)
class ArmWork:
    """What one round of an arm moves and computes (see the module docstring).

    Attributes:
        n, n_tilde: the model's and the encoded vector's lengths (equal for a plain arm).
        columns: code 2's columns p (M2's broadcast and aggregate are ñ×p).
        coding: the arm's coding.
        element_bytes: bytes per element of a plain vector (the model's dtype).
        transform: FLOPs of one π1 transform (0 for a plain arm).
        train_flops: FLOPs of one sample's forward and backward pass.
        secure: secure aggregation's sizes (``None``: uploads in the clear).
    """

    n: int
    n_tilde: int
    columns: int
    coding: Coding
    element_bytes: int
    transform: float
    train_flops: float
    secure: SecureSizes | None = None

    def download(self, broadcast: Coding) -> float:
        """Bytes of the broadcast a client downloads, in its own coding (M2 broadcasts in M1 until its first
        aggregate)."""
        if not broadcast.coded:
            return float(self.n * self.element_bytes)
        return float(self.n_tilde * FLOAT64_BYTES * (self.columns if broadcast.aggregator_encodes else 1))

    def upload(self) -> float:
        """Bytes of one client's upload."""
        if self.secure is not None:
            return float(self.secure.masked)
        if self.coding.coded:
            return float(self.n_tilde * FLOAT64_BYTES)
        return float(self.n * self.element_bytes)

    def client_flops(self, samples: np.ndarray, broadcast: Coding) -> np.ndarray:
        """FLOPs of each client's training and coding (``samples``: per client, :func:`samples_per_round`)."""
        coding = 0.0
        if broadcast.coded:
            coding = 2.0 * self.transform  # decode the broadcast, encode the upload
            if broadcast.aggregator_encodes:
                coding += 2.0 * self.n_tilde * self.columns  # W' P2R
        return samples * self.train_flops + coding

    def mask_flops(self, neighbours: int) -> float:
        """A secure client's masking: its self mask and one pairwise mask per neighbour."""
        return (1 + neighbours) * self.n * PRG_OPS_PER_ELEMENT

    def server_flops(self, arrived: int, *, mask_terms: int = 0) -> float:
        """The aggregator's and the server's FLOPs once ``arrived`` uploads are in: rebuilding ``mask_terms``
        masks (secure aggregation), the sum, M2's code 2, the server's decode and next encoding (a plain
        arm: adding the update)."""
        length = self.n if self.secure is not None or not self.coding.coded else self.n_tilde
        flops = mask_terms * self.n * PRG_OPS_PER_ELEMENT + arrived * length
        if self.coding.aggregator_encodes:
            flops += 2.0 * self.n_tilde * self.columns * self.columns
        cols = self.columns if self.coding.aggregator_encodes else 1
        return flops + (2.0 * cols * self.transform if self.coding.coded else float(self.n))

    def aggregate_bytes(self) -> float:
        """Bytes of the aggregate the aggregator hands the server (float64: the sum is the coding's)."""
        if not self.coding.coded:
            return float(self.n * FLOAT64_BYTES)
        return float(self.n_tilde * FLOAT64_BYTES * (self.columns if self.coding.aggregator_encodes else 1))


def arm_work(
    cfg: Any, *, coding: Coding, n: int, n_tilde: int, train_flops: float, secagg: Any = None
) -> ArmWork:
    """The :class:`ArmWork` of an arm from the run's configuration (``secagg``: the arm's SecAggSpec)."""
    c = cfg.coding
    transform = (
        transform_flops(str(c.backend), n=n, n_tilde=n_tilde, block_size=int(c.block_size))
        if coding.coded
        else 0.0
    )
    return ArmWork(
        n=n,
        n_tilde=n_tilde,
        columns=int(c.p),
        coding=coding,
        element_bytes=int(torch.empty((), dtype=getattr(torch, str(cfg.train.dtype))).element_size()),
        transform=transform,
        train_flops=train_flops,
        secure=None if secagg is None else SecureSizes.of(secagg),
    )
