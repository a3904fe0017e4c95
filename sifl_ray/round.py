"""One round of SIFL (Algorithm 2), with plain FedAvg and M1 as the same pipeline with fewer codes.

``run_round`` is the protocol in four visible steps. It only passes references between parties (ObjectRefs
on Ray, :class:`~sifl_ray.sequential.LocalRef` in-process) and reads back metrics, so the driver never holds
a parameter vector or a key. What it asks of the backend is :class:`~sifl_ray.backend.Backend`.

Failures. A client worker that dies or misses the deadline is retried (respawned; its clients re-run
deterministically) or dropped (the shards average the survivors, with weights renormalised to sum to one),
as :class:`RoundPolicy` says. The driver reads two small things before going on: the workers' reports
(after step 2) and the shards' infos (after step 3). The second is why this function is not one fire-and-
forget pipeline: if a shard refuses a worker's partial sum, every shard must reduce again without that
worker before the server sees anything, because an aggregate over different workers in different shards
would show the server more than an aggregate (and decode to nonsense). A server, aggregator or evaluator
that dies raises :class:`PartyLost`; the runner restores it from the last checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from sifl_ray.backend import Backend


@dataclass
class Parties:
    """Handles of every party, shared by all arms."""

    server: Any
    aggregators: list[Any]
    workers: list[Any]
    evaluator: Any


@dataclass
class ArmState:
    """What the driver keeps about one arm between rounds: a reference to its broadcast, nothing more."""

    name: str
    mode: str  # the arm's coding: plain | m1 | m2
    n_tilde: int
    bounds: list[tuple[int, int]]  # rows of each aggregator shard
    broadcast: Any = None  # ref to w^t (plain), w~^t (M1, and M2 round 0) or W'^t (M2)
    key_epoch: int = 0
    server_step: bool = False  # the arm's server step needs the previous global model (this broadcast)


@dataclass(frozen=True)
class RoundPolicy:
    """What a round does when a client worker fails (``faults.*`` in the configuration)."""

    worker_policy: str = "retry"  # a worker died: retry | drop
    straggler_policy: str = "drop"  # a worker missed the deadline: retry | drop
    deadline_s: float | None = None  # seconds from submission; None: wait as long as it takes
    max_retries: int = 2  # per worker and round; then its clients are dropped (and logged)


class Supervisor(Protocol):
    """What ``run_round`` asks of the runner when a worker fails (and where the runner injects faults)."""

    def replace_worker(self, k: int, *, arm: str, t: int, reason: str) -> float:
        """Kill worker ``k`` if it still runs and put a fresh one with the same clients in its place;
        return the seconds it took."""

    def after_submit(self, stage: str, *, arm: str, t: int) -> None:
        """Called after step 2 (``"train"``) and step 3 (``"reduce"``) were submitted (fault injection)."""


class PartyLost(RuntimeError):
    """The server, an aggregator shard or the evaluator died during a round."""

    def __init__(self, party: str, index: int, *, arm: str, round: int, error: BaseException):
        self.party, self.index, self.arm, self.round = party, index, arm, round
        name = party if party != "aggregator" else f"aggregator shard {index}"
        super().__init__(f"the {name} died in round {round} of {arm} ({type(error).__name__})")


@dataclass
class RoundResult:
    arm: str
    round: int
    metrics: dict[str, float] = field(default_factory=dict)
    accepted: int = 0
    rejected: dict[int, str] = field(default_factory=dict)  # client → why its upload was refused
    dropped: list[dict] = field(default_factory=list)  # {"worker", "clients", "reason"[, "replace_s"]}
    retried: list[dict] = field(default_factory=list)  # {"worker", "attempt", "reason", "replace_s"}
    refused_partials: dict[int, str] = field(default_factory=dict)  # worker → why the aggregator refused it
    skipped: bool = False  # no update reached the aggregator: the model stays as it was


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
    policy = policy or RoundPolicy()
    start = time.perf_counter()
    num_shards = len(arm.bounds)

    # 1. Server encodes: ``arm.broadcast`` already holds ``π1(w^t)`` (made at the end of round t − 1).
    broadcast = arm.broadcast

    # 2. Clients train on encoded parameters; each worker validates its clients' uploads and sums them
    #    (weighted by |D_i|), one partial per aggregator shard. Dead or late workers: retry or drop.
    trained = _train_clients(backend, parties, arm, t, assignment, policy, supervisor)

    # 3. Aggregator averages each shard (weights renormalised to sum to 1) and, in M2, encodes it with π2.
    #    Every shard must average the same workers: a refused partial means reducing again without it.
    sources = sorted(k for k, r in trained.reports.items() if r.weight > 0)
    refused: dict[int, str] = {}
    shard_outs: list = []
    agg_infos: list[dict] = []
    while sources:
        shard_outs = [
            backend.call(
                aggregator,
                "reduce",
                arm.name,
                t,
                arm.key_epoch,
                *[trained.outs[k][s] for k in sources],
                num_returns=2,
                shard=s,
            )
            for s, aggregator in enumerate(parties.aggregators[:num_shards])
        ]
        if supervisor is not None:
            supervisor.after_submit("reduce", arm=arm.name, t=t)
        agg_infos = [
            collect(backend, out[1], "aggregator", s, arm=arm.name, t=t) for s, out in enumerate(shard_outs)
        ]
        now_refused = {k: why for info in agg_infos for k, why in info["rejected"].items()}
        if not now_refused:
            break
        refused.update(now_refused)
        sources = [k for k in sources if k not in now_refused]

    # 4. Server decodes (M1: the plain average; M2: P1L W'_a, code 2 still on) and encodes the next broadcast.
    #    Nothing usable this round (everyone dropped or refused): the model stays, the broadcast is reused.
    server_info = None
    if sources:
        previous = {"previous": broadcast} if arm.server_step else {}
        next_broadcast, server_info = backend.call(
            parties.server,
            "finish_round",
            arm.name,
            t,
            *[out[0] for out in shard_outs],
            num_returns=2,
            **previous,
        )
    else:
        next_broadcast, agg_infos = broadcast, []

    # Simulation only: the evaluator decodes the new global model for test metrics.
    evaluation = backend.call(parties.evaluator, "evaluate", arm.name, t, next_broadcast)
    server_stats = {"decode_s": 0.0, "encode_s": 0.0}
    if server_info is not None:  # read first: if the server died, the evaluation fails because of it
        server_stats = collect(backend, server_info, "server", 0, arm=arm.name, t=t)
    eval_stats = collect(backend, evaluation, "evaluator", 0, arm=arm.name, t=t)
    arm.broadcast = next_broadcast
    wall = time.perf_counter() - start

    reports = [r for k, r in sorted(trained.reports.items()) if k in sources]
    weight = sum(r.weight for r in reports)
    train_s = max((r.train_s for r in trained.reports.values()), default=0.0)
    client_code_s = max((r.encode_s for r in trained.reports.values()), default=0.0)
    aggregate_s = max((i["aggregate_s"] for i in agg_infos), default=0.0)
    agg_encode_s = max((i["encode_s"] for i in agg_infos), default=0.0)
    encode_s = client_code_s + agg_encode_s + server_stats["encode_s"]
    decode_s = server_stats["decode_s"]
    compute = train_s + encode_s + aggregate_s + decode_s
    rejected: dict[int, str] = {}
    for r in trained.reports.values():
        rejected.update(r.rejected)
    vector_bytes = arm.n_tilde * 8
    cols = 1 if arm.mode != "m2" else 2
    dropped = list(trained.dropped)
    for k, why in sorted(refused.items()):
        report = trained.reports[k]
        dropped.append({"worker": k, "clients": list(report.accepted), "reason": f"partial refused: {why}"})
    metrics = dict(eval_stats)
    metrics.update(
        {
            "train_loss": sum(r.train_loss_sum for r in reports) / weight if weight else float("nan"),
            "time/round": wall,
            "time/train": train_s,
            "time/encode": encode_s,
            "time/aggregate": aggregate_s,
            "time/decode": decode_s,
            "time/transfer": max(0.0, wall - compute),
            # objects put per round: each worker's shard partials, each shard's result, the next broadcast
            "bytes/object_store": float(sum(r.bytes_out for r in reports) + 2 * vector_bytes * cols),
            "clients/accepted": float(sum(len(r.accepted) for r in reports)),
            "clients/rejected": float(len(rejected)),
            "clients/dropped": float(sum(len(d["clients"]) for d in dropped)),
            # models scaled back into the ball ‖w_i‖ ≤ C that every ε assumes (privacy.clip, nbafl.clip)
            "clients/clipped": float(sum(r.clipped for r in reports)),
        }
    )
    return RoundResult(
        arm=arm.name,
        round=t,
        metrics=metrics,
        accepted=int(metrics["clients/accepted"]),
        rejected=rejected,
        dropped=dropped,
        retried=trained.retried,
        refused_partials=refused,
        skipped=not sources,
    )


@dataclass
class _Trained:
    outs: dict[int, list] = field(default_factory=dict)  # worker → refs (one partial per shard, the report)
    reports: dict[int, Any] = field(default_factory=dict)  # worker → WorkerReport
    dropped: list[dict] = field(default_factory=list)
    retried: list[dict] = field(default_factory=list)


def _train_clients(
    backend: Backend,
    parties: Parties,
    arm: ArmState,
    t: int,
    assignment: list[list[int]],
    policy: RoundPolicy,
    supervisor: Supervisor | None,
) -> _Trained:
    """Step 2 with its failure policy: submit every worker's clients, collect the small reports, and retry
    or drop the workers that died (or missed the deadline)."""
    num_returns = len(arm.bounds) + 1

    def submit(k: int, attempt: int) -> list:
        extra = {"attempt": attempt} if attempt else {}
        return backend.call(
            parties.workers[k],
            "train_round",
            arm.name,
            t,
            arm.broadcast,
            assignment[k],
            arm.bounds,
            num_returns=num_returns,
            **extra,
        )

    out = _Trained()
    pending = {k: submit(k, 0) for k, clients in enumerate(assignment) if clients}
    out.outs.update(pending)
    if supervisor is not None:
        supervisor.after_submit("train", arm=arm.name, t=t)
    attempts = dict.fromkeys(pending, 0)
    while pending:
        by_ref = {refs[-1]: k for k, refs in pending.items()}
        ready, late = backend.wait(list(by_ref), policy.deadline_s)
        failed: dict[int, tuple[str, str]] = {}  # worker → (policy, reason)
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
        pending = {}
        if failed and supervisor is None:
            raise TimeoutError(f"round {t} of {arm.name}: workers {sorted(failed)} missed the deadline")
        for k, (action, reason) in sorted(failed.items()):
            # A straggler is still busy (and would delay its next round), a dead worker is gone: either way
            # a fresh worker with the same clients takes its place; the round then retries or drops it.
            replace_s = round(supervisor.replace_worker(k, arm=arm.name, t=t, reason=reason), 3)
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


def collect(backend: Backend, ref: Any, party: str, index: int, *, arm: str, t: int):
    """``backend.get(ref)``, naming the party when the call failed because that party is gone."""
    try:
        return backend.get(ref)
    except Exception as err:
        if backend.is_lost(err):
            raise PartyLost(party, index, arm=arm, round=t, error=err) from err
        raise
