"""One round of SIFL (Algorithm 2), with plain FedAvg and M1 as the same pipeline with fewer codes.

``run_round`` is the protocol in four visible steps. It only passes references between parties (ObjectRefs
on Ray, resolved stand-ins in-process) and reads back metrics, so the driver never holds a parameter vector
or a key. Each call names the party's method itself (:class:`~sifl_ray.parties.handle.Handle`), so a
reader's tools follow the round into the party that does the work.

How the uploads are gathered is a stage the arm picks (:mod:`sifl_ray.aggregation`): in the clear, or under
secure aggregation, which adds its own phases (key agreement before step 2, unmasking in step 3) behind the
same interface.

Failures. A client worker that dies or misses the deadline is retried (respawned; its clients re-run
deterministically) or dropped (the shards average the survivors, with weights renormalised to sum to one),
as :class:`RoundPolicy` says. The driver reads two small things before going on: the workers' reports
(after step 2) and the shards' infos (after step 3). The second is why this function is not one fire-and-
forget pipeline: if a shard refuses a worker's partial sum, every shard must reduce again without that
worker before the server sees anything. A server, aggregator or evaluator that dies raises
:class:`~sifl_ray.parties.handle.PartyLost`; the runner restores it from the last checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sifl_ray.aggregation import (
    Aggregation,
    Parties,
    PlainAggregation,
    RoundContext,
    Supervisor,
)
from sifl_ray.arms.steps import client_metrics, party_metrics
from sifl_ray.backends import Backend
from sifl_ray.parties.evaluator import Evaluator
from sifl_ray.parties.handle import PartyLost, Ref, collect
from sifl_ray.parties.messages import Finished, MaskedTrained, ServerInfo, ShardInfo, Trained, WorkerReport
from sifl_ray.parties.server import ServerHost
from sifl_ray.specs import Coding

__all__ = [
    "ArmState",
    "Parties",
    "PartyLost",
    "RoundPolicy",
    "RoundResult",
    "Supervisor",
    "collect",
    "run_round",
]


@dataclass
class ArmState:
    """What the driver keeps about one arm between rounds: a reference to its broadcast, nothing more."""

    name: str
    coding: Coding  # the arm's: what each party encodes and decodes
    n_tilde: int
    bounds: list[tuple[int, int]]  # rows of each aggregator shard
    broadcast: Ref[torch.Tensor] | None = None  # w^t (plain), w~^t (M1, and M2 round 0) or W'^t (M2)
    # the broadcast's own coding: the arm's, except an M2 arm's before its first aggregate (M1)
    broadcast_coding: Coding = field(init=False)
    key_epoch: int = 0
    server_step: bool = False  # the arm's server step needs the previous global model (this broadcast)
    # how the uploads are gathered (the arm's choice): in the clear, or under secure aggregation
    aggregation: Callable[[RoundContext], Aggregation] = PlainAggregation
    every_round: bool = False  # the arm's guarantee releases every round (Arm.every_round): a zero sum too
    audit: bool = (
        False  # canary clients take part: the evaluator scores each round's change (simulation only)
    )

    def __post_init__(self) -> None:
        self.broadcast_coding = self.coding.first_broadcast


@dataclass(frozen=True)
class RoundPolicy:
    """What a round does when a client worker fails (``faults.*`` in the configuration)."""

    worker_policy: str = "retry"  # a worker died: retry | drop
    straggler_policy: str = "drop"  # a worker missed the deadline: retry | drop
    deadline_s: float | None = None  # seconds from submission; None: wait as long as it takes
    max_retries: int = 2  # per worker and round; then its clients are dropped (and logged)


@dataclass
class RoundResult:
    """What one round of one arm produced, as the runner logs and checkpoints it: its metrics, who was
    accepted, refused or dropped, and why."""

    arm: str
    round: int
    metrics: dict[str, float] = field(default_factory=dict)
    accepted: int = 0
    rejected: dict[int, str] = field(default_factory=dict)  # client → why its upload was refused
    dropped: list[dict[str, Any]] = field(default_factory=list)  # {"worker", "clients", "reason", ...}
    retried: list[dict[str, Any]] = field(
        default_factory=list
    )  # {"worker", "attempt", "reason", "replace_s"}
    refused_partials: dict[int, str] = field(default_factory=dict)  # worker → why the aggregator refused it
    skipped: bool = False  # no update reached the aggregator: the model stays as it was
    skip_reason: str | None = None  # why, when it is not that every worker dropped (secure aggregation)
    # the in-run audit: the evaluator's inner products of the round's change with the audit directions,
    # and per direction the aggregator's best cosine with an upload (the workers measure it)
    audit: dict[str, Any] | None = None
    audit_uploads: list[float] | None = None


def run_round(
    backend: Backend,
    parties: Parties,
    arm: ArmState,
    t: int,
    assignment: list[list[int]],
    *,
    policy: RoundPolicy | None = None,
    supervisor: Supervisor | None = None,
) -> RoundResult:
    """Run round ``t`` of ``arm`` over the sampled clients ``assignment[k]`` of each worker ``k``.

    Returns metrics and what went wrong; ``arm.broadcast`` is advanced to the reference of the next round's
    broadcast.

    Raises:
        PartyLost: the server, an aggregator shard or the evaluator died (the runner restores it).
    """
    start = time.perf_counter()
    assert arm.broadcast is not None, "the arm's set-up makes its first broadcast"
    shards = parties.aggregators[: len(arm.bounds)]
    context = RoundContext(backend, parties, arm.name, t, arm.key_epoch, shards, supervisor, arm.every_round)
    stage = arm.aggregation(context)

    # 1. Server encodes: ``arm.broadcast`` already holds ``π1(w^t)`` (made at the end of round t − 1).
    broadcast = arm.broadcast

    # 2. Clients train on encoded parameters; each worker checks its clients' uploads and sums them
    #    (weighted by |D_i|), one partial per aggregator shard. Dead or late workers: retry or drop. Under
    #    secure aggregation the sampled clients first agree on keys, through the aggregator, which routes
    #    what it cannot read, and each upload is masked.
    assignment = stage.open(assignment)
    trained = _train_clients(backend, parties, arm, t, assignment, policy or RoundPolicy(), supervisor, stage)

    # 3. Aggregator averages each shard (weights renormalised to sum to 1) and, in M2, encodes it with π2.
    #    Every shard must average the same workers: a refused partial means reducing again without it.
    sources = sorted(k for k, r in trained.reports.items() if r.weight > 0)
    sources, reduced, infos, refused = stage.reduce(sources, trained.outs)

    # 4. Server decodes (M1: the plain average; M2: P1L W'_a, code 2 still on) and encodes the next broadcast.
    #    Nothing usable this round (everyone dropped or refused): the model stays, the broadcast is reused,
    #    unless the arm's guarantee releases every round: its aggregator step noised the zero sum.
    finished: Finished | None = None
    released = bool(sources) or bool(reduced)
    if released:
        previous = broadcast if arm.server_step else None
        aggregates = [out.aggregate for out in reduced]
        finished = parties.server.call(ServerHost.finish_round, arm.name, t, *aggregates, previous=previous)
        next_broadcast, next_coding = finished.broadcast, arm.coding  # M2: code 2 on from now
    else:
        next_broadcast, next_coding, infos = broadcast, arm.broadcast_coding, []

    # Simulation only: the evaluator decodes the new global model for test metrics (and, under secure
    # aggregation, measures the ring's quantisation error against the clients' exact sum).
    previous = broadcast if arm.audit else None  # the audit scores the round's change
    evaluation = parties.evaluator.call(
        Evaluator.evaluate, arm.name, t, next_broadcast, next_coding, previous, arm.broadcast_coding
    )
    quantisation = stage.measure(reduced, [trained.outs[k] for k in sources])
    server_stats = ServerInfo(decode_s=0.0, encode_s=0.0, step_metrics={})
    if finished is not None:  # read first: if the server died, the evaluation fails because of it
        server_stats = collect(backend, finished.info, "server", 0, arm=arm.name, t=t)
    eval_stats: dict[str, Any] = collect(backend, evaluation, "evaluator", 0, arm=arm.name, t=t)
    if quantisation is not None:  # the decoded sum's error, in the units of the mean (like its bound)
        error = collect(backend, quantisation, "evaluator", 0, arm=arm.name, t=t)
        eval_stats["secagg/quantisation_error"] = error * infos[0]["secagg_scale"]
    arm.broadcast, arm.broadcast_coding = next_broadcast, next_coding

    wall = time.perf_counter() - start
    return _result(arm, t, trained, stage, sources, refused, infos, server_stats, eval_stats, released, wall)


def _result(
    arm: ArmState,
    t: int,
    trained: _Training,
    stage: Aggregation,
    sources: list[int],
    refused: dict[int, str],
    infos: list[ShardInfo],
    server: ServerInfo,
    evaluated: dict[str, Any],
    released: bool,
    wall: float,
) -> RoundResult:
    """The round as the runner records it: the evaluator's figures and the round's own, who was accepted,
    refused or dropped, and the in-run audit's readings."""
    reports = [r for k, r in sorted(trained.reports.items()) if k in sources]
    dropped = [*trained.dropped, *stage.dropped]
    for k, why in sorted(refused.items()):
        clients = list(trained.reports[k].accepted)
        dropped.append({"worker": k, "clients": clients, "reason": f"partial refused: {why}"})
    audit = evaluated.pop("audit", None)
    metrics = {**evaluated, **_round_metrics(arm, trained, reports, dropped, infos, server, wall)}
    metrics.update(stage.metrics(reports, infos))
    return RoundResult(
        arm=arm.name,
        round=t,
        metrics=metrics,
        accepted=int(metrics["clients/accepted"]),
        rejected={c: why for r in trained.reports.values() for c, why in r.rejected.items()},
        dropped=dropped,
        retried=trained.retried,
        refused_partials=refused,
        skipped=not released,
        skip_reason=stage.failure,
        audit=audit,
        audit_uploads=_largest([r.audit_max for r in trained.reports.values() if r.audit_max is not None]),
    )


def _round_metrics(
    arm: ArmState,
    trained: _Training,
    reports: list[WorkerReport],
    dropped: list[dict[str, Any]],
    infos: list[ShardInfo],
    server: ServerInfo,
    wall: float,
) -> dict[str, float]:
    """The round's figures: where the time went, what moved, who took part, and the arm's steps' metrics."""
    train_s = max((r.train_s for r in trained.reports.values()), default=0.0)
    client_code_s = max((r.encode_s for r in trained.reports.values()), default=0.0)
    aggregate_s = max((i["aggregate_s"] for i in infos), default=0.0)
    encode_s = client_code_s + max((i["encode_s"] for i in infos), default=0.0) + server["encode_s"]
    compute = train_s + encode_s + aggregate_s + server["decode_s"]
    cols = 2 if arm.coding.aggregator_encodes else 1  # code 2's columns, counted as p = 2
    return {
        "train_loss": _train_loss(reports),
        "time/round": wall,
        "time/train": train_s,
        "time/encode": encode_s,
        "time/aggregate": aggregate_s,
        "time/decode": server["decode_s"],
        "time/transfer": max(0.0, wall - compute),
        # objects put per round: each worker's shard partials, each shard's result, the next broadcast
        "bytes/object_store": float(sum(r.bytes_out for r in reports) + 2 * arm.n_tilde * 8 * cols),
        "clients/accepted": float(sum(len(r.accepted) for r in reports)),
        "clients/canaries": float(sum(r.canaries for r in reports)),
        "clients/rejected": float(sum(len(r.rejected) for r in trained.reports.values())),
        "clients/dropped": float(sum(len(d["clients"]) for d in dropped)),
        # models scaled back into the ball ‖w_i‖ ≤ C that every ε assumes (privacy.clip, nbafl.clip)
        "clients/clipped": float(sum(r.clipped for r in reports)),
        # the arm's client step: each metric's mean over the clients (client/clipped, client/sparsity)
        **client_metrics((r.step_metrics, r.stepped) for r in reports),
        # the arm's aggregator step (mean over the shards) and server step (aggregator/noise_std, ...)
        **party_metrics("aggregator", (i["step_metrics"] for i in infos)),
        **party_metrics("server", [server["step_metrics"]]),
    }


def _largest(rows: list[list[float]]) -> list[float] | None:
    """Elementwise maximum over the workers' rows (``None``: no worker scored an upload)."""
    return [max(col) for col in zip(*rows, strict=True)] if rows else None


def _train_loss(reports: list[WorkerReport]) -> float:
    """The round's train loss, weighted like FedAvg, over the clients that trained (not the canaries)."""
    weight = sum(r.weight - r.canary_weight for r in reports)
    return sum(r.train_loss_sum for r in reports) / weight if weight else float("nan")


@dataclass
class _Training:
    """Step 2 as the driver holds it: each worker's refs and report, and who was retried or dropped."""

    outs: dict[int, Any] = field(default_factory=dict)  # worker → the refs of its step 2
    reports: dict[int, WorkerReport] = field(default_factory=dict)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    retried: list[dict[str, Any]] = field(default_factory=list)


def _train_clients(
    backend: Backend,
    parties: Parties,
    arm: ArmState,
    t: int,
    assignment: list[list[int]],
    policy: RoundPolicy,
    supervisor: Supervisor | None,
    stage: Aggregation,
) -> _Training:
    """Step 2 with its failure policy: submit every worker's clients, collect the small reports, and retry
    or drop the workers that died (or missed the deadline). A stage that cannot retry (secure aggregation:
    a client cannot rejoin a round) drops them."""
    broadcast = arm.broadcast
    assert broadcast is not None, "the arm's set-up makes its first broadcast"

    def submit(k: int, attempt: int) -> Trained | MaskedTrained:
        worker = parties.workers[k]  # read at each submission: a replaced worker is called anew
        return stage.train(worker, broadcast, arm.broadcast_coding, assignment[k], arm.bounds, attempt)

    out = _Training()
    pending = {k: submit(k, 0) for k, clients in enumerate(assignment) if clients}
    out.outs.update(pending)
    if supervisor is not None:
        supervisor.after_submit("train", arm=arm.name, t=t)
    attempts = dict.fromkeys(pending, 0)
    while pending:
        failed = _collect_reports(backend, pending, out, policy, supervisor)
        pending = {}
        if not failed:
            break
        if supervisor is None:
            raise TimeoutError(f"round {t} of {arm.name}: workers {sorted(failed)} missed the deadline")
        for k, (action, reason) in sorted(failed.items()):
            # A straggler is still busy (and would delay its next round), a dead worker is gone: either way
            # a fresh worker with the same clients takes its place; the round then retries or drops it.
            replace_s = round(supervisor.replace_worker(k, arm=arm.name, t=t, reason=reason), 3)
            if not stage.retries and action == "retry":
                action, reason = "drop", reason + " (secure aggregation: its clients cannot rejoin the round)"
            if action == "retry" and attempts[k] < policy.max_retries:
                attempts[k] += 1
                out.retried.append(
                    {"worker": k, "attempt": attempts[k], "reason": reason, "replace_s": replace_s}
                )
                out.outs[k] = pending[k] = submit(k, attempts[k])
                continue
            if action == "retry":
                reason += f"; {policy.max_retries} retries exhausted"
            out.dropped.append(
                {"worker": k, "clients": list(assignment[k]), "reason": reason, "replace_s": replace_s}
            )
            out.outs.pop(k)
    return out


def _collect_reports(
    backend: Backend,
    pending: dict[int, Trained | MaskedTrained],
    out: _Training,
    policy: RoundPolicy,
    supervisor: Supervisor | None,
) -> dict[int, tuple[str, str]]:
    """Wait for the pending workers' reports (until the deadline); return the failed ones, worker →
    (the policy that applies, why)."""
    by_ref = {refs.report: k for k, refs in pending.items()}
    ready, late = backend.wait(list(by_ref), policy.deadline_s)
    failed: dict[int, tuple[str, str]] = {}
    for ref in ready:
        k = by_ref[ref]
        try:
            out.reports[k] = backend.get(ref)
        except Exception as err:
            if supervisor is None or not backend.is_lost(err):
                raise
            failed[k] = (policy.worker_policy, f"died ({type(err).__name__})")
    for ref in late:
        failed[by_ref[ref]] = (policy.straggler_policy, f"missed the {policy.deadline_s:g} s deadline")
    return failed
