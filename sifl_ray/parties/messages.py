"""What the parties send each other and the driver: small records that travel through the object store.

The partial sums a worker hands the aggregator (:class:`Partial`, :class:`MaskedPartial`), the report it
hands the driver (:class:`WorkerReport`), the typed figures the driver reads back (:class:`ServerInfo`,
:class:`ShardInfo`, :class:`PlanInfo`, :class:`UnmaskCosts`), and the hosts' results of several objects
(:class:`Finished`, :class:`Reduced`, :class:`Trained`, ...), each item of which is its own reference, so
that it can go to one party without the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, NotRequired, TypedDict, TypeVar, cast

import numpy as np
import torch

if TYPE_CHECKING:  # secure aggregation's types: ``cryptography`` is imported only where a secure arm runs
    from sifl_ray.arms.base import ClientStep
    from sifl_ray.coding.base import AggregatorKey, ClientServerKey
    from sifl_ray.privacy.secagg import MaskPlan, UnmaskResponse
    from sifl_ray.privacy.secagg.spec import SecAggSpec
    from sifl_ray.specs import Coding

T = TypeVar("T")


@dataclass(frozen=True)
class ArmSetup:
    """What a worker needs to play the clients of one arm (and nothing of the server or aggregator keys)."""

    coding: Coding  # the arm's: what the clients decode, strip and encode
    server_view: ClientServerKey | None = None  # P1, P1L
    aggregator_view: AggregatorKey | None = None  # P2R (M2)
    client_form: str = "fused"
    key_epoch: int = 0
    # The arm's step on each local model before upload (clip; clip and add the client's own noise; ...):
    # :class:`sifl_ray.arms.ClientStep`. None: upload the model as trained.
    step: ClientStep | None = None
    # FedAvg weights: each client's |D_i| (False), or 1 for every client (True: a DP mean needs weights that
    # do not depend on the client's data, so that one client moves the sum by at most its clip C)
    uniform_weights: bool = False
    # Secure aggregation (:mod:`sifl_ray.parties.secure`): each upload is masked in a ring and only the sum
    # of the survivors' uploads can be unmasked. None: uploads travel as they are (or immersion-coded).
    secagg: SecAggSpec | None = None
    # In-run audit: the norm of this arm's canary uploads (its update clip, or audit.norm); None: no canaries
    canary_norm: float | None = None
    # what a plain upload carries (Arm.uploads): the local ``model`` or its ``update`` (the audit's reading)
    uploads: str = "model"
    # the arm's relation is zero-out: a canary left out takes part and uploads no change (else it is absent)
    canary_zero_out: bool = False


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

    def accept(self, client: int, size: float, loss: float, *, canary: bool = False) -> None:
        """An accepted upload joins the report; a canary's is counted apart (it never trained, so it has
        no loss: the round's train loss is over the real clients)."""
        self.accepted.append(client)
        self.weight += size
        if canary:
            self.canaries += 1
            self.canary_weight += size
        else:
            self.train_loss_sum += size * loss


@dataclass
class MaskedPartial:
    """One shard of a worker's sum of its clients' masked inputs under secure aggregation (a secure arm's
    :class:`Partial`): ``Σ_i y_i mod 2^k`` over the clients in ``clients``, still masked.

    Its content cannot be checked by anyone (it is uniform in the ring until the masks are removed); its
    stamps and shape can, and are (:func:`sifl_ray.parties.checks.check_masked_partial`).
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


# ------------------------------------------------------------------------------------------------------------
# What the driver reads back (the values behind the refs, as :func:`~sifl_ray.parties.handle.collect` gives
# them), and the hosts' results of several objects (each item its own reference: :func:`returns`).


class ServerInfo(TypedDict):
    """What the server's step 4 cost, and the metrics of the arm's server step (empty: no step)."""

    decode_s: float
    encode_s: float
    step_metrics: dict[str, float]


class ShardInfo(TypedDict):
    """What one aggregator shard's step 3 did: the partials it refused (worker → why; the round reduces
    again without them), the weight it averaged, what that cost, and the metrics of the arm's aggregator
    step on its rows (empty: no step)."""

    aggregate_s: float
    encode_s: float
    weight: float
    rejected: dict[int, str]
    stale_partials: list[int]
    accepted: int
    step_metrics: dict[str, float]
    secagg_scale: NotRequired[float]  # secure arms: the decoded sum times this is the mean
    secagg_bound: NotRequired[float]  # secure arms: the quantisation bound, in the mean's units


class PlanInfo(TypedDict, total=False):
    """What SecAgg's server reports after rebuilding the masks: why the round cannot be unmasked
    (``error``), its cost, and the sizes of the round's client sets (roster, U1–U4)."""

    error: str | None
    server_s: float
    server_bytes: int
    server_messages: int
    roster: int
    advertised: int
    shared: int
    survivors: int
    responders: int
    mask_terms: int  # masks the unmasking rebuilt: a self mask per survivor, a pairwise one per dropped pair


class UnmaskCosts(TypedDict):
    """What the protocol cost one worker's clients over a secure round, summed over them."""

    clients: int
    bytes_sent: int
    bytes_received: int
    messages: int
    compute_s: float
    sent_by: dict[str, int]


class Finished(NamedTuple):
    """The server's step 4: the next broadcast (``π1(w^{t+1})``; ``W'`` in M2) and what it cost."""

    broadcast: torch.Tensor
    info: ServerInfo


class Reduced(NamedTuple):
    """One shard's step 3: its aggregate (to the server) and what it did."""

    aggregate: torch.Tensor | None
    info: ShardInfo


class MaskedReduced(NamedTuple):
    """One shard's step 3 of a secure arm: its aggregate, what it did, and the decoded sum of its rows (to
    the evaluator only: it measures the ring's quantisation error)."""

    aggregate: torch.Tensor
    info: ShardInfo
    summed: torch.Tensor


class Trained(tuple[Any, ...]):
    """One worker's step 2: one partial sum per aggregator shard, then its report."""

    @classmethod
    def of(cls, partials: list[Partial], report: WorkerReport) -> Trained:
        return cls((*partials, report))

    @classmethod
    def _make(cls, values: Sequence[Any]) -> Trained:
        return cls(values)

    @property
    def partials(self) -> list[Partial]:
        return list(self[:-1])

    @property
    def report(self) -> WorkerReport:
        return cast(WorkerReport, self[-1])


class MaskedTrained(tuple[Any, ...]):
    """One worker's step 2 of a secure arm: one masked partial per shard, the exact float64 sum of its
    clients' inputs (the evaluator's instrument: no deployment has it), then its report."""

    @classmethod
    def of(cls, partials: list[MaskedPartial], exact: torch.Tensor, report: WorkerReport) -> MaskedTrained:
        return cls((*partials, exact, report))

    @classmethod
    def _make(cls, values: Sequence[Any]) -> MaskedTrained:
        return cls(values)

    @property
    def partials(self) -> list[MaskedPartial]:
        return list(self[:-2])

    @property
    def exact(self) -> torch.Tensor:
        return cast(torch.Tensor, self[-2])

    @property
    def report(self) -> WorkerReport:
        return cast(WorkerReport, self[-1])


class Step(NamedTuple, Generic[T]):
    """A step of SecAgg's server: its result, and its status (``None``, or why the round cannot go on: it
    then reveals nothing)."""

    result: T | None
    error: str | None


class Planned(NamedTuple):
    """SecAgg's server after the survivors answered: the masks left in the sum, and its report."""

    plan: MaskPlan | None
    info: PlanInfo


class Unmasked(NamedTuple):
    """A worker's answer to the unmasking request: its survivors' shares, and what the protocol cost."""

    responses: dict[int, UnmaskResponse]
    costs: UnmaskCosts
