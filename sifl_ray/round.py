"""One round of SIFL (Algorithm 2), with plain FedAvg and M1 as the same pipeline with fewer codes.

``run_round`` is the protocol in four visible steps. It only passes references between parties (ObjectRefs
on Ray, :class:`~sifl_ray.sequential.LocalRef` in-process) and reads back metrics, so the driver never holds
a parameter vector or a key. Both backends offer ``call(handle, method, *args, num_returns)`` and ``get``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


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
    mode: str  # plain | m1 | m2
    n_tilde: int
    bounds: list[tuple[int, int]]  # rows of each aggregator shard
    broadcast: Any = None  # ref to w^t (plain), w~^t (M1, and M2 round 0) or W'^t (M2)
    key_epoch: int = 0


@dataclass
class RoundResult:
    arm: str
    round: int
    metrics: dict[str, float] = field(default_factory=dict)
    accepted: int = 0
    rejected: dict[int, str] = field(default_factory=dict)


def run_round(backend, parties: Parties, arm: ArmState, t: int, assignment: list[list[int]]) -> RoundResult:
    """Run round ``t`` of ``arm`` over the sampled clients ``assignment[k]`` of each worker ``k``.

    Returns metrics only; ``arm.broadcast`` is advanced to the reference of the next round's broadcast.
    """
    start = time.perf_counter()
    num_shards = len(arm.bounds)

    # 1. Server encodes: ``arm.broadcast`` already holds ``π1(w^t)`` (made at the end of round t − 1).
    broadcast = arm.broadcast

    # 2. Clients train on encoded parameters; each worker validates its clients' uploads and sums them
    #    (weighted by |D_i|), one partial per aggregator shard.
    worker_outs = [
        backend.call(
            worker, "train_round", arm.name, t, broadcast, clients, arm.bounds, num_returns=num_shards + 1
        )
        for worker, clients in zip(parties.workers, assignment, strict=True)
        if clients
    ]

    # 3. Aggregator averages each shard (weights renormalised to sum to 1) and, in M2, encodes it with π2.
    shard_outs = [
        backend.call(
            aggregator, "reduce", arm.name, t, arm.key_epoch, *[out[s] for out in worker_outs], num_returns=2
        )
        for s, aggregator in enumerate(parties.aggregators[:num_shards])
    ]

    # 4. Server decodes (M1: the plain average; M2: P1L W'_a, code 2 still on) and encodes the next broadcast.
    next_broadcast, server_info = backend.call(
        parties.server, "finish_round", arm.name, t, *[out[0] for out in shard_outs], num_returns=2
    )

    # Simulation only: the evaluator decodes the new global model for test metrics.
    evaluation = backend.call(parties.evaluator, "evaluate", arm.name, t, next_broadcast)

    reports = backend.get([out[-1] for out in worker_outs])
    agg_infos = backend.get([out[1] for out in shard_outs])
    server_stats, eval_stats = backend.get([server_info, evaluation])
    arm.broadcast = next_broadcast
    wall = time.perf_counter() - start

    weight = sum(r.weight for r in reports)
    train_s = max((r.train_s for r in reports), default=0.0)
    client_code_s = max((r.encode_s for r in reports), default=0.0)
    aggregate_s = max((i["aggregate_s"] for i in agg_infos), default=0.0)
    agg_encode_s = max((i["encode_s"] for i in agg_infos), default=0.0)
    encode_s = client_code_s + agg_encode_s + server_stats["encode_s"]
    decode_s = server_stats["decode_s"]
    compute = train_s + encode_s + aggregate_s + decode_s
    rejected: dict[int, str] = {}
    for r in reports:
        rejected.update(r.rejected)
    vector_bytes = arm.n_tilde * 8
    cols = 1 if arm.mode != "m2" else 2
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
        }
    )
    return RoundResult(
        arm=arm.name, round=t, metrics=metrics, accepted=int(metrics["clients/accepted"]), rejected=rejected
    )
