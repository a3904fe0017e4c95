"""Secure aggregation beside the round: the protocol's extra phases, driven from the driver.

A secure arm (:attr:`sifl_ray.arms.Arm.secure_aggregation`) runs the same four steps as every arm
(:func:`~sifl_ray.round.run_round`); what secure aggregation adds (Bonawitz et al., CCS 2017; the SecAgg+
graph of Bell et al., CCS 2020) is here, behind one object the round holds for the round
(:class:`SecureAggregation`; ``None`` for every other arm):

* step 2a, :meth:`SecureAggregation.agree_keys`: the aggregator opens the round over the sampled clients,
  their workers advertise the clients' public keys and share their secrets, all routed by the aggregator
  (Bonawitz steps 0–1). Step 2 then masks each upload with what was shared (:mod:`sifl_ray.roles.secure`).
* step 3, :meth:`SecureAggregation.reduce`: every shard checks the masked partials' stamps (3a), the
  aggregator announces the survivors and their workers answer with shares (3b), the aggregator rebuilds
  the masks left in the sum (3c), each shard unmasks and averages its rows (3d).

Blocking reads: each phase reads only what decides the next one, all of them small: SecAgg's server's
status after opening, after each routing and after the announcement, and its report after rebuilding the
masks (a failed step reveals nothing and ends the round: five reads); each worker's answer to each of its
three steps (advertise, share, unmask), to know who is still in (a dead one leaves the protocol, which
tolerates it up to its threshold); each shard's refusals of the masked partials. The worker's reports and
the shards' infos are the plain round's reads. No parameter vector and no secret reaches the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sifl_ray.backend import Backend
from sifl_ray.handles import (
    AggregatorHandle,
    EvaluatorHandle,
    Parties,
    PlanInfo,
    Reduced,
    Ref,
    ShardInfo,
    Supervisor,
    Trained,
    UnmaskCosts,
    WorkerHandle,
    collect,
)
from sifl_ray.roles.messages import WorkerReport

Reduction = tuple[list[int], list[Reduced], list[ShardInfo], dict[int, str]]
"""Step 3's outcome: the workers averaged, the shards' outputs and infos, the refused partials."""


@dataclass
class SecureAggregation:
    """One round of secure aggregation, as the driver sees it: the references it passes on and public
    facts (who is still in, what the protocol cost, why it failed). Nothing secret: every message between
    clients passes the aggregator, encrypted, and every value the driver reads is a status or a count.
    """

    backend: Backend
    parties: Parties
    arm: str
    t: int
    key_epoch: int
    supervisor: Supervisor | None = None
    inboxes: Ref = None  # each client's encrypted shares, routed by the aggregator (step 1)
    workers: set[int] = field(default_factory=set)  # workers whose clients took part in the key agreement
    dropped: list[dict[str, Any]] = field(default_factory=list)  # workers lost during the protocol's steps
    costs: list[UnmaskCosts] = field(default_factory=list)  # per answering worker: its clients' costs
    plan_info: PlanInfo = field(default_factory=lambda: PlanInfo())  # SecAgg server's report of step 3c
    failure: str | None = None  # the round could not be run or unmasked (nothing was revealed)

    def agree_keys(self, assignment: list[list[int]]) -> list[list[int]]:
        """Step 2a (Bonawitz steps 0–1): open the round over the sampled clients ``assignment[k]`` of each
        worker ``k``, route their public keys and their encrypted shares. Returns the assignment of step
        2: the clients of the workers that took part in the whole key agreement (none if it failed)."""
        aggregator = AggregatorHandle(self.backend, self.parties.aggregators[0])
        hosted = {k: list(c) for k, c in enumerate(assignment) if c}
        roster = sorted(c for clients in hosted.values() for c in clients)
        opened = aggregator.secagg_open(self.arm, self.t, roster)
        if self._failed(opened.error):
            return [[] for _ in assignment]
        keys = {k: self._worker(k).secagg_advertise(self.arm, opened.result, c) for k, c in hosted.items()}
        workers = list(self._alive(keys, step="advertise keys", clients=hosted))
        routed = aggregator.secagg_route_keys(self.arm, self.t, [keys[k] for k in workers])
        if self._failed(routed.error):
            return [[] for _ in assignment]
        outboxes = {k: self._worker(k).secagg_share(self.arm, self.t, routed.result) for k in workers}
        workers = list(self._alive(outboxes, step="share keys", clients=hosted))
        shared = aggregator.secagg_route_shares(self.arm, self.t, [outboxes[k] for k in workers])
        self.inboxes = shared.result
        if not self._failed(shared.error):
            self.workers = set(workers)
        return [clients if k in self.workers else [] for k, clients in enumerate(assignment)]

    def reduce(
        self, shards: list[AggregatorHandle], sources: list[int], trained: dict[int, Trained]
    ) -> Reduction:
        """Step 3 of a secure arm over the partials of workers ``sources``: 3a every shard checks the
        stamps and shapes of its masked partials (their content cannot be checked) until all shards accept
        the same workers; 3b the aggregator announces the survivors U3 and their workers answer with
        shares (a worker that dies now leaves its clients' inputs in the sum: the others' shares rebuild
        their masks); 3c the aggregator rebuilds the masks left in the sum; 3d each shard unmasks, decodes
        and averages its rows. Sources empty: the round could not be unmasked (nothing was revealed)."""
        refused: dict[int, str] = {}
        while sources:
            checks = [
                shard.check_masked(
                    self.arm, self.t, self.key_epoch, [trained[k].partials[s] for k in sources], shard=s
                )
                for s, shard in enumerate(shards)
            ]
            now: dict[int, str] = {}
            for s, ref in enumerate(checks):
                now.update(collect(self.backend, ref, "aggregator", s, arm=self.arm, t=self.t))
            if not now:
                break
            refused.update(now)
            sources = [k for k in sources if k not in now]
        if not sources:
            return [], [], [], refused
        head = shards[0]
        announced = head.secagg_announce(self.arm, self.t, [trained[k].partials[0] for k in sources])
        if self._failed(announced.error):
            return [], [], [], refused
        answers = {k: self._worker(k).secagg_unmask(self.arm, self.t, announced.result) for k in sources}
        hosted: dict[int, list[int]] = {k: [] for k in sources}  # a worker lost now drops no client
        costs = self._alive({k: a.costs for k, a in answers.items()}, step="unmask", clients=hosted)
        self.costs = list(costs.values())
        planned = head.secagg_plan(self.arm, self.t, [answers[k].responses for k in costs])
        self.plan_info = collect(self.backend, planned.info, "aggregator", 0, arm=self.arm, t=self.t)
        if self.plan_info["error"] is not None:
            self.failure = self.plan_info["error"]
            return [], [], [], refused
        reduced = [
            shard.reduce(
                self.arm,
                self.t,
                self.key_epoch,
                [trained[k].partials[s] for k in sources],
                shard=s,
                plan=planned.plan,
            )
            for s, shard in enumerate(shards)
        ]
        if self.supervisor is not None:
            self.supervisor.after_submit("reduce", arm=self.arm, t=self.t)
        infos = [
            collect(self.backend, r.info, "aggregator", s, arm=self.arm, t=self.t)
            for s, r in enumerate(reduced)
        ]
        return sources, reduced, infos, refused

    def measure(self, evaluator: EvaluatorHandle, reduced: list[Reduced], exact: list[Ref]) -> Ref | None:
        """Simulation only: the evaluator's measurement of the ring's quantisation error, the shards'
        decoded sums against the workers' exact ones (``None``: nothing was unmasked)."""
        if not reduced or self.plan_info.get("error") is not None:
            return None
        return evaluator.sum_error(self.arm, self.t, len(reduced), [r.summed for r in reduced], exact)

    def metrics(self, reports: list[WorkerReport], agg_infos: list[ShardInfo]) -> dict[str, float]:
        """Per round: bytes and compute per client, the server's compute, the messages, who dropped and was
        recovered, and the quantisation bound (the measured error comes from the evaluator)."""
        clients = sum(c["clients"] for c in self.costs)
        info = self.plan_info
        out = {
            "secagg/bytes_per_client": sum(c["bytes_sent"] + c["bytes_received"] for c in self.costs)
            / max(clients, 1),
            "secagg/client_s": sum(c["compute_s"] for c in self.costs) / max(clients, 1),
            **{
                f"secagg/sent_per_client/{step}": sum(c["sent_by"].get(step, 0) for c in self.costs)
                / max(clients, 1)
                for step in ("keys", "shares", "masked", "unmask")
            },
            "secagg/server_s": float(info.get("server_s", 0.0)),
            "secagg/messages": float(sum(c["messages"] for c in self.costs) + info.get("server_messages", 0)),
            "secagg/survivors": float(info.get("survivors", 0)),
            # dropped after sharing keys (their neighbours' masks rebuilt) / after uploading (shares do)
            "secagg/recovered": float(info.get("shared", 0) - info.get("survivors", 0)),
            "secagg/unanswered": float(info.get("survivors", 0) - info.get("responders", 0)),
            "secagg/clipped_coordinates": float(sum(r.coords_clipped for r in reports)),
        }
        if agg_infos:
            out["secagg/quantisation_bound"] = max(i["secagg_bound"] for i in agg_infos)
        return out

    def _worker(self, k: int) -> WorkerHandle:
        return WorkerHandle(self.backend, self.parties.workers[k])

    def _failed(self, error: Ref) -> bool:
        """Read a step's status from SecAgg's server; a failure is kept (the first one: the round's)."""
        why = collect(self.backend, error, "aggregator", 0, arm=self.arm, t=self.t)
        self.failure = self.failure or why
        return why is not None

    def _alive(self, refs: dict[int, Ref], *, step: str, clients: dict[int, list[int]]) -> dict[int, Any]:
        """The values of the workers' calls of a protocol step that returned, by worker; a worker that died
        is replaced (for the next round) and its clients leave this one, which the protocol tolerates up to
        its threshold."""
        alive = {}
        for k, ref in refs.items():
            try:
                alive[k] = self.backend.get(ref)
            except Exception as err:
                if self.supervisor is None or not self.backend.is_lost(err):
                    raise
                reason = f"died in {step}"
                replace_s = round(self.supervisor.replace_worker(k, arm=self.arm, t=self.t, reason=reason), 3)
                self.dropped.append(
                    {
                        "worker": k,
                        "clients": list(clients.get(k, [])),
                        "reason": reason,
                        "replace_s": replace_s,
                    }
                )
        return alive
