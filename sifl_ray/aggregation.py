"""Aggregation as a stage of the round: in the clear, or under secure aggregation; the arm picks one.

Both stages have the same interface (:class:`Aggregation`), so :func:`~sifl_ray.round.run_round` is one
protocol for every arm and never asks which it runs (Flower's ``SecAggPlusWorkflow`` beside its default
workflow is the model):

* before step 2, :meth:`~Aggregation.open`: nothing in the clear; under secure aggregation the sampled
  clients agree on keys and share their secrets, all routed by the aggregator (Bonawitz steps 0–1);
* step 2, :meth:`~Aggregation.train`: each worker trains its clients and sums their uploads, in the clear or
  masked in a ring;
* step 3, :meth:`~Aggregation.reduce`: every shard averages its rows of the workers' partials (in the clear:
  a partial one shard refuses is left out of every shard's next attempt); under secure aggregation the
  shards check the masked partials' stamps (3a), the aggregator announces the survivors and their workers
  answer with shares (3b), the aggregator rebuilds the masks left in the sum (3c), each shard unmasks and
  averages its rows (3d);
* simulation only, :meth:`~Aggregation.measure`: the evaluator's measurement of the ring's quantisation
  error, and :meth:`~Aggregation.metrics`: what the protocol cost.

Blocking reads of the secure stage: each phase reads only what decides the next one, all of them small:
SecAgg's server's status after opening, after each routing and after the announcement, and its report after
rebuilding the masks (a failed step reveals nothing and ends the round: five reads); each worker's answer to
each of its three steps (advertise, share, unmask), to know who is still in (a dead one leaves the
protocol, which tolerates it up to its threshold); each shard's refusals of the masked partials. No
parameter vector and no secret reaches the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from sifl_ray.backends import Backend
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.evaluator import Evaluator
from sifl_ray.parties.handle import Handle, Ref, collect
from sifl_ray.parties.messages import (
    MaskedReduced,
    MaskedTrained,
    PlanInfo,
    Reduced,
    ShardInfo,
    Step,
    Trained,
    UnmaskCosts,
    WorkerReport,
)
from sifl_ray.parties.server import ServerHost
from sifl_ray.parties.workers import ClientWorker
from sifl_ray.specs import Coding

T = TypeVar("T")


class Supervisor(Protocol):
    """What a round asks of the runner when a worker fails (and where the runner injects faults)."""

    def replace_worker(self, k: int, *, arm: str, t: int, reason: str) -> float:
        """Kill worker ``k`` if it still runs and put a fresh one with the same clients in its place;
        return the seconds it took."""
        ...

    def after_submit(self, stage: str, *, arm: str, t: int) -> None:
        """Called after step 2 (``"train"``) and step 3 (``"reduce"``) were submitted (fault injection)."""
        ...


@dataclass
class Parties:
    """Every party's handle, shared by all arms."""

    server: Handle[ServerHost]
    aggregators: list[
        Handle[AggregatorHost]
    ]  # one per shard: a host of several shards is there several times
    workers: list[Handle[ClientWorker]]
    evaluator: Handle[Evaluator]


Reduction = tuple[list[int], list[Reduced] | list[MaskedReduced], list[ShardInfo], dict[int, str]]
"""Step 3's outcome: the workers averaged, the shards' outputs and infos, the refused partials."""


@dataclass
class RoundContext:
    """Who and what a stage works with in one round of one arm."""

    backend: Backend
    parties: Parties
    arm: str
    t: int
    key_epoch: int
    shards: list[Handle[AggregatorHost]]  # the arm's shards (an arm with a short vector may have fewer)
    supervisor: Supervisor | None = None
    every_round: bool = False  # the arm's guarantee releases every round: its step runs on an empty sum


class Aggregation(Protocol):
    """How a round gathers the clients' uploads into the shards' aggregates (see the module docstring)."""

    retries: bool
    """A worker that failed may be retried in the round (never under secure aggregation: its clients'
    secrets for the round died with it, and a client cannot rejoin a round)."""

    failure: str | None
    """Why nothing could be revealed this round (``None``: nothing went wrong in the protocol)."""

    dropped: list[dict[str, Any]]
    """Workers lost during the stage's own phases."""

    silent: frozenset[int]
    """Clients that answer nothing once their upload is in (the simulated clock's devices gone after it):
    under secure aggregation their self masks are rebuilt from the others' shares; in the clear nothing is
    asked of a client after its upload."""

    def open(self, assignment: list[list[int]]) -> list[list[int]]: ...

    def train(
        self,
        worker: Handle[ClientWorker],
        broadcast: Ref[torch.Tensor],
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int,
    ) -> Trained | MaskedTrained: ...

    def reduce(self, sources: list[int], trained: Any) -> Reduction: ...

    def measure(self, reduced: Any, trained: Any) -> Ref[float] | None: ...

    def metrics(self, reports: list[WorkerReport], infos: list[ShardInfo]) -> dict[str, float]: ...


@dataclass
class PlainAggregation:
    """Step 3 in the clear: every shard averages its rows of the workers' partials (and, in M2, encodes
    them with π2); a partial one shard refuses is left out of every shard's next attempt, until all shards
    accept the same workers (an aggregate over different workers in different shards would show the
    server more than an aggregate, and decode to nonsense)."""

    round: RoundContext
    retries: bool = True
    failure: str | None = None
    dropped: list[dict[str, Any]] = field(default_factory=list)
    silent: frozenset[int] = frozenset()

    def open(self, assignment: list[list[int]]) -> list[list[int]]:
        return assignment

    def train(
        self,
        worker: Handle[ClientWorker],
        broadcast: Ref[torch.Tensor],
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int,
    ) -> Trained:
        r = self.round
        return worker.call(ClientWorker.train_round, r.arm, r.t, broadcast, coding, clients, bounds, attempt)

    def reduce(self, sources: list[int], trained: dict[int, Trained]) -> Reduction:
        r = self.round
        refused: dict[int, str] = {}
        reduced: list[Reduced] = []
        infos: list[ShardInfo] = []
        while sources or r.every_round:  # a guarantee that releases every round: on a zero sum too
            reduced = [
                shard.call(
                    AggregatorHost.reduce,
                    r.arm,
                    r.t,
                    r.key_epoch,
                    *[trained[k].partials[s] for k in sources],
                    shard=s,
                    every_round=r.every_round,
                )
                for s, shard in enumerate(r.shards)
            ]
            if r.supervisor is not None:
                r.supervisor.after_submit("reduce", arm=r.arm, t=r.t)
            infos = [
                collect(r.backend, out.info, "aggregator", s, arm=r.arm, t=r.t)
                for s, out in enumerate(reduced)
            ]
            now_refused = {k: why for info in infos for k, why in info["rejected"].items()}
            if not now_refused:
                break
            reduced, infos = [], []
            refused.update(now_refused)
            sources = [k for k in sources if k not in now_refused]
        return sources, reduced, infos, refused

    def measure(self, reduced: list[Reduced], trained: list[Trained]) -> Ref[float] | None:
        return None

    def metrics(self, reports: list[WorkerReport], infos: list[ShardInfo]) -> dict[str, float]:
        return {}


@dataclass
class SecureAggregation:
    """One round of secure aggregation (Bonawitz et al., CCS 2017; the SecAgg+ graph of Bell et al., CCS
    2020), as the driver sees it: the references it passes on and public facts (who is still in, what the
    protocol cost, why it failed). Nothing secret: every message between clients passes the aggregator,
    encrypted, and every value the driver reads is a status or a count."""

    round: RoundContext
    retries: bool = False
    failure: str | None = None  # the round could not be run or unmasked (nothing was revealed)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # workers lost during the protocol's steps
    silent: frozenset[int] = frozenset()  # clients that do not answer the unmasking (gone after upload)
    inboxes: Ref[dict[int, dict[int, bytes]]] | None = None  # each client's encrypted shares (step 1)
    workers: set[int] = field(default_factory=set)  # workers whose clients took part in the key agreement
    costs: list[UnmaskCosts] = field(default_factory=list)  # per answering worker: its clients' costs
    plan_info: PlanInfo = field(default_factory=lambda: PlanInfo())  # SecAgg server's report of step 3c

    def open(self, assignment: list[list[int]]) -> list[list[int]]:
        """Bonawitz steps 0–1: open the round over the sampled clients ``assignment[k]`` of each worker
        ``k``, route their public keys and their encrypted shares. Returns the assignment of step 2: the
        clients of the workers that took part in the whole key agreement (none if it failed)."""
        r = self.round
        head, workers = r.shards[0], r.parties.workers
        hosted = {k: list(c) for k, c in enumerate(assignment) if c}
        roster = sorted(c for clients in hosted.values() for c in clients)
        public = self._passed(head.call(AggregatorHost.secagg_open, r.arm, r.t, roster))
        if public is None:
            return [[] for _ in assignment]
        keys = {
            k: workers[k].call(ClientWorker.secagg_advertise, r.arm, public, c) for k, c in hosted.items()
        }
        alive = list(self._alive(keys, step="advertise keys", clients=hosted))
        routed = self._passed(
            head.call(AggregatorHost.secagg_route_keys, r.arm, r.t, *[keys[k] for k in alive])
        )
        if routed is None:
            return [[] for _ in assignment]
        outboxes = {k: workers[k].call(ClientWorker.secagg_share, r.arm, r.t, routed) for k in alive}
        alive = list(self._alive(outboxes, step="share keys", clients=hosted))
        shared = head.call(AggregatorHost.secagg_route_shares, r.arm, r.t, *[outboxes[k] for k in alive])
        self.inboxes = self._passed(shared)
        if self.inboxes is not None:
            self.workers = set(alive)
        return [clients if k in self.workers else [] for k, clients in enumerate(assignment)]

    def train(
        self,
        worker: Handle[ClientWorker],
        broadcast: Ref[torch.Tensor],
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int,
    ) -> MaskedTrained:
        r = self.round
        assert self.inboxes is not None, "open() routes the shares before step 2"
        return worker.call(
            ClientWorker.train_masked, r.arm, r.t, broadcast, coding, clients, bounds, self.inboxes, attempt
        )

    def reduce(self, sources: list[int], trained: dict[int, MaskedTrained]) -> Reduction:
        """Step 3 over the masked partials of workers ``sources``: 3a every shard checks their stamps and
        shapes (their content cannot be checked) until all shards accept the same workers; 3b the
        aggregator announces the survivors U3 and their workers answer with shares (a worker that dies now
        leaves its clients' inputs in the sum: the others' shares rebuild their masks); 3c the aggregator
        rebuilds the masks left in the sum; 3d each shard unmasks, decodes and averages its rows. Sources
        empty: the round could not be unmasked (nothing was revealed)."""
        r = self.round
        sources, refused = self._check(sources, trained)
        if not sources:
            return [], [], [], refused
        head = r.shards[0]
        partials = [trained[k].partials[0] for k in sources]
        announced = self._passed(head.call(AggregatorHost.secagg_announce, r.arm, r.t, *partials))
        if announced is None:
            return [], [], [], refused
        workers = r.parties.workers
        answers = {
            k: workers[k].call(ClientWorker.secagg_unmask, r.arm, r.t, announced, self.silent)
            for k in sources
        }
        hosted: dict[int, list[int]] = {k: [] for k in sources}  # a worker lost now drops no client
        costs = self._alive({k: a.costs for k, a in answers.items()}, step="unmask", clients=hosted)
        self.costs = list(costs.values())
        planned = head.call(AggregatorHost.secagg_plan, r.arm, r.t, *[answers[k].responses for k in costs])
        self.plan_info = collect(r.backend, planned.info, "aggregator", 0, arm=r.arm, t=r.t)
        if self.plan_info["error"] is not None or planned.plan is None:
            self.failure = self.plan_info["error"]
            return [], [], [], refused
        reduced = [
            shard.call(
                AggregatorHost.reduce_masked,
                r.arm,
                r.t,
                *[trained[k].partials[s] for k in sources],
                plan=planned.plan,
                shard=s,
            )
            for s, shard in enumerate(r.shards)
        ]
        if r.supervisor is not None:
            r.supervisor.after_submit("reduce", arm=r.arm, t=r.t)
        infos = [
            collect(r.backend, out.info, "aggregator", s, arm=r.arm, t=r.t) for s, out in enumerate(reduced)
        ]
        return sources, reduced, infos, refused

    def _check(
        self, sources: list[int], trained: dict[int, MaskedTrained]
    ) -> tuple[list[int], dict[int, str]]:
        """Step 3a: the workers whose masked partials every shard accepts, and the refused ones."""
        r = self.round
        refused: dict[int, str] = {}
        while sources:
            checks = [
                shard.call(
                    AggregatorHost.check_masked,
                    r.arm,
                    r.t,
                    r.key_epoch,
                    *[trained[k].partials[s] for k in sources],
                    shard=s,
                )
                for s, shard in enumerate(r.shards)
            ]
            now: dict[int, str] = {}
            for s, ref in enumerate(checks):
                now.update(collect(r.backend, ref, "aggregator", s, arm=r.arm, t=r.t))
            if not now:
                break
            refused.update(now)
            sources = [k for k in sources if k not in now]
        return sources, refused

    def measure(self, reduced: list[MaskedReduced], trained: list[MaskedTrained]) -> Ref[float] | None:
        """Simulation only: the evaluator's measurement of the ring's quantisation error, the shards'
        decoded sums against the averaged workers' exact ones (``None``: nothing was unmasked)."""
        if not reduced or self.plan_info.get("error") is not None:
            return None
        r = self.round
        summed = [out.summed for out in reduced]
        exact = [out.exact for out in trained]
        return r.parties.evaluator.call(Evaluator.sum_error, r.arm, r.t, len(reduced), *summed, *exact)

    def metrics(self, reports: list[WorkerReport], infos: list[ShardInfo]) -> dict[str, float]:
        """Per round: bytes and compute per client, the server's compute, the messages, who dropped and was
        recovered, and the quantisation bound (the measured error comes from the evaluator)."""
        clients = max(sum(c["clients"] for c in self.costs), 1)
        info = self.plan_info
        out = {
            "secagg/bytes_per_client": sum(c["bytes_sent"] + c["bytes_received"] for c in self.costs)
            / clients,
            "secagg/client_s": sum(c["compute_s"] for c in self.costs) / clients,
            **{
                f"secagg/sent_per_client/{step}": sum(c["sent_by"].get(step, 0) for c in self.costs) / clients
                for step in ("keys", "shares", "masked", "unmask")
            },
            "secagg/server_s": float(info.get("server_s", 0.0)),
            "secagg/messages": float(sum(c["messages"] for c in self.costs) + info.get("server_messages", 0)),
            "secagg/survivors": float(info.get("survivors", 0)),
            # dropped after sharing keys (their neighbours' masks rebuilt) / after uploading (shares do)
            "secagg/recovered": float(info.get("shared", 0) - info.get("survivors", 0)),
            "secagg/unanswered": float(info.get("survivors", 0) - info.get("responders", 0)),
            "secagg/mask_terms": float(info.get("mask_terms", 0)),  # masks rebuilt: self and dropped pairs
            "secagg/clipped_coordinates": float(sum(r.coords_clipped for r in reports)),
        }
        if infos:
            out["secagg/quantisation_bound"] = max(i["secagg_bound"] for i in infos)
        return out

    def _passed(self, step: Step[T]) -> T | None:
        """A step of SecAgg's server: the reference to its result, or ``None`` when it failed (its status,
        read here, says why; the first failure is the round's)."""
        r = self.round
        why = collect(r.backend, step.error, "aggregator", 0, arm=r.arm, t=r.t)
        self.failure = self.failure or why
        return None if why is not None else step.result

    def _alive(
        self, refs: dict[int, Ref[Any]], *, step: str, clients: dict[int, list[int]]
    ) -> dict[int, Any]:
        """The values of the workers' calls of a protocol step that returned, by worker; a worker that died
        is replaced (for the next round) and its clients leave this one, which the protocol tolerates up to
        its threshold."""
        r = self.round
        alive = {}
        for k, ref in refs.items():
            try:
                alive[k] = r.backend.get(ref)
            except Exception as err:
                if r.supervisor is None or not r.backend.is_lost(err):
                    raise
                reason = f"died in {step}"
                replace_s = round(r.supervisor.replace_worker(k, arm=r.arm, t=r.t, reason=reason), 3)
                self.dropped.append(
                    {
                        "worker": k,
                        "clients": list(clients.get(k, [])),
                        "reason": reason,
                        "replace_s": replace_s,
                    }
                )
        return alive
