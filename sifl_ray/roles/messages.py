"""Small records passed between roles (they travel through the Ray object store as ObjectRefs)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Partial:
    """One shard of a worker's weighted sum of accepted client uploads for one round.

    The aggregator's summation runs as a tree: each client worker adds up the uploads of the virtual
    clients it hosts (after validating each one) and hands the aggregator one partial per shard, so no
    actor ever holds every client's full update at once and memory does not grow with the client count.
    """

    source: int  # the worker that summed these uploads (fixes the summation order)
    round: int
    key_epoch: int
    weighted_sum: torch.Tensor  # Σ_i |D_i| · upload_i over accepted clients, rows of this shard (float64)
    weight: float  # Σ_i |D_i| over accepted clients
    accepted: int


@dataclass
class WorkerReport:
    """What a worker tells the driver about one round (metrics only, never parameters or keys)."""

    worker: int
    round: int
    train_s: float = 0.0
    encode_s: float = 0.0
    train_loss_sum: float = 0.0  # Σ_i |D_i| · mean loss of client i (weighted like FedAvg)
    weight: float = 0.0
    accepted: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)  # client id → reason
    clipped: int = 0  # clients whose model was scaled back to ‖w_i‖ ≤ C before upload
    # the arm's client step: each metric summed over the clients that ran it, and how many did
    step_metrics: dict[str, float] = field(default_factory=dict)
    stepped: int = 0
    bytes_out: int = 0
    coords_clipped: int = 0  # secure aggregation: coordinates the fixed-point codec clipped to [-B, B]
    canaries: int = 0  # of the accepted uploads, canary clients' (the in-run audit: never trained)
    canary_weight: float = 0.0  # their share of ``weight`` (the train loss is over the real clients)
    # in-run audit: per audit direction, the largest cosine of the aggregator's reading of an upload
    audit_max: list[float] | None = None


@dataclass
class MaskedPartial:
    """One shard of a worker's sum of its clients' masked inputs under secure aggregation (a secure arm's
    :class:`Partial`): ``Σ_i y_i mod 2^k`` over the clients in ``clients``, still masked.

    Its content cannot be checked by anyone (it is uniform in the ring until the masks are removed); its
    stamps and shape can, and are (:func:`sifl_ray.roles.aggregator.check_masked_partial`).
    """

    source: int
    round: int
    key_epoch: int
    masked_sum: np.ndarray  # uint64, rows of this shard, reduced modulo 2^k
    weight: float  # Σ_i weight_i over the clients in the sum (FedAvg |D_i|, or 1 each)
    accepted: int
    clients: tuple[
        int, ...
    ]  # their protocol ids (positions in the round's roster): U3's share of this worker
