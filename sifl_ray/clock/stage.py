"""The clock as a stage of the round: around the arm's aggregation, never a branch inside the round.

:func:`~sifl_ray.round.run_round` asks its aggregation stage (:mod:`sifl_ray.aggregation`) to open the round,
gather the uploads and report the round's metrics. :class:`ClockedAggregation` is that stage with a clock
around it (habit 17: substitute a stage, don't branch on it): before the arm's own stage opens, it plays the
round on the simulated clock (:func:`~sifl_ray.clock.timeline.plan_round`) and the clients the clock drops
leave the real protocol at the step where they would:

* offline at the start, or lost in the key agreement: they never enter the round (nothing to recover);
* late for the upload (or not among the first ``keep``): they are in the key agreement, not in step 2, so
  under secure aggregation their neighbours' masks with them are rebuilt; in the clear, simply absent;
* gone after the masked upload: their upload is in the sum, they answer no unmasking request
  (:attr:`~sifl_ray.aggregation.Aggregation.silent`), and their self masks are rebuilt from the others'.

So secure aggregation recovers, or aborts as its threshold dictates, on its own: the real protocol runs. Its
:meth:`~ClockedAggregation.metrics` then charges the round: the clients' phases as planned, then the server's
side (rebuilding the masks the real protocol rebuilt, summing what really arrived, coding, the link to the
server), and adds ``clock/*`` to the round's metrics. A round's start on an arm's clock is the previous
round's end, as the arm's own records (:attr:`Clock.history`, checkpointed with them) or this process's
ledger say: a restored or resumed run replays the same times.

Canary clients (the in-run audit, ids from ``clients.num_clients`` on) are instruments, not devices: they
take no time and never drop.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.aggregation import Aggregation, Reduction, RoundContext
from sifl_ray.clock.availability import Availability
from sifl_ray.clock.profiles import Devices, client_devices
from sifl_ray.clock.timeline import (
    AFTER_MASKING,
    BEFORE_UPLOAD,
    KEY_AGREEMENT,
    NOT_KEPT,
    OFFLINE,
    STEPS,
    Phase,
    RoundPlan,
    plan_round,
)
from sifl_ray.clock.work import ArmWork, arm_work, model_flops, samples_per_round
from sifl_ray.parties.handle import Handle, Ref
from sifl_ray.parties.messages import MaskedTrained, ShardInfo, Trained, WorkerReport
from sifl_ray.parties.workers import ClientWorker
from sifl_ray.round import ArmState
from sifl_ray.specs import Coding, ModelSpec

History = Callable[[str], Sequence[dict[str, float]]]
"""``history(arm)``: the arm's recorded rounds so far (the driver's records)."""


class Clock:
    """The run's clock: every client's device and its availability, the run's local work, and each arm's
    time (docs/clock.md). :meth:`of` makes one where the configuration turns the clock on."""

    def __init__(self, cfg: DictConfig, *, sizes: np.ndarray, model: ModelSpec, history: History) -> None:
        self.cfg = cfg
        clock = cfg.clock
        self.devices: Devices = client_devices(cfg, int(cfg.clients.num_clients))
        self.availability = Availability(self.devices, int(cfg.seed))
        train = cfg.train
        self.samples = samples_per_round(
            sizes,
            batch_size=int(train.batch_size),
            epochs=int(train.local_epochs),
            steps=int(train.local_steps),
        )
        self.train_flops = 0.0 if train.skip_training else model_flops(model)
        self.history = history
        self.deadline = None if clock.deadline_s is None else float(clock.deadline_s)
        self.keep = None if clock.keep is None else int(clock.keep)
        self.timeout = float(clock.phase_timeout_s)
        server = clock.server
        self.server_flops = float(server.gflops) * 1e9
        self.server_link = (float(server.latency_ms) * 1e-3, float(server.gbps) * 1e9 / 8)
        self.arms: dict[str, ArmClock] = {}

    @classmethod
    def of(cls, cfg: DictConfig, *, sizes: np.ndarray, model: ModelSpec, history: History) -> Clock | None:
        """The run's clock, or ``None`` when no profile and no trace name the devices (no clock)."""
        if cfg.clock.profile is None and cfg.clock.trace is None:
            return None
        return cls(cfg, sizes=sizes, model=model, history=history)

    def attach(self, state: ArmState, *, n: int, secagg: Any = None) -> None:
        """Put the clock around ``state``'s aggregation stage (``secagg``: the arm's SecAggSpec, if its
        uploads are masked)."""
        work = arm_work(
            self.cfg,
            coding=state.coding,
            n=n,
            n_tilde=state.n_tilde,
            train_flops=self.train_flops,
            secagg=secagg,
        )
        arm = self.arms[state.name] = ArmClock(self, state, work)
        inner = state.aggregation
        state.aggregation = lambda context: ClockedAggregation(inner(context), arm, context)

    def describe(self) -> dict[str, Any]:
        """The clock's settings and its devices, as summary.json reports them."""
        clock = self.cfg.clock
        return {
            "profile": None if clock.trace is not None else clock.profile,
            "trace": clock.trace,
            "deadline_s": self.deadline,
            "keep": self.keep,
            "phase_timeout_s": self.timeout,
            "train_flops_per_sample": self.train_flops,
            "server": {k: float(v) for k, v in clock.server.items()},
            **self.devices.describe(),
        }


@dataclass
class ArmClock:
    """One arm's clock: what its rounds move and compute, and when each of its rounds ended."""

    clock: Clock
    state: ArmState
    work: ArmWork
    ends: dict[int, float] = field(default_factory=dict)  # round → its end, s from the arm's start

    def start_of(self, t: int) -> float:
        """When round ``t`` starts: the end of round ``t − 1`` (this process's ledger, else the arm's
        records, which a resumed run has back), 0 for the first."""
        if t == 0:
            return 0.0
        if t - 1 in self.ends:
            return self.ends[t - 1]
        rows = self.clock.history(self.state.name)
        if len(rows) >= t and "clock/elapsed_s" in rows[t - 1]:
            return float(rows[t - 1]["clock/elapsed_s"])
        return 0.0  # a round played alone (a bench): its own clock starts at 0

    def plan(self, t: int, start: float, assignment: list[list[int]]) -> RoundPlan:
        """Round ``t`` of the arm, from ``start``, for its sampled clients (canaries aside)."""
        devices = int(self.clock.cfg.clients.num_clients)
        clients = np.array(sorted(c for cs in assignment for c in cs if c < devices), dtype=np.int64)
        online, leaves = self.clock.availability.window(clients, start)
        coding = self.state.broadcast_coding  # the round's broadcast: M2's is M1 until its first aggregate
        work = self.work.client_flops(self.clock.samples[clients], coding)
        rows = self.clock.devices.rows(clients)
        return plan_round(
            lambda inside: self._phases(inside, coding, work),
            clients=clients,
            devices=rows,
            online=online,
            leaves=leaves,
        )

    def _phases(
        self, inside: np.ndarray, coding: Coding, work: np.ndarray
    ) -> Generator[Phase, np.ndarray, None]:
        """The round's phases (see :mod:`~sifl_ray.clock.timeline`), each told who is still in."""
        clock, w = self.clock, self.work
        deadline, keep = clock.deadline, clock.keep
        secure = w.secure
        if secure is None:
            yield Phase("upload", w.download(coding), work, w.upload(), deadline=deadline, keep=keep)
            return
        timeout = clock.timeout
        d = secure.neighbours(int(inside.sum()))
        inside = yield Phase("keys", 0.0, 0.0, secure.keys_up, timeout=timeout)
        inside = yield Phase("shares", secure.keys_down * d, 0.0, secure.shares * d, timeout=timeout)
        d = secure.neighbours(int(inside.sum()))  # the roster after the key agreement
        # with the broadcast come the shares its neighbours sealed for it; it masks with each of them
        down = w.download(coding) + secure.shares * d
        inside = yield Phase("upload", down, work + w.mask_flops(d), w.upload(), deadline=deadline, keep=keep)
        survivors = int(inside.sum())
        down, up = secure.survivor_id * survivors, secure.unmask_share * (d + 1)
        yield Phase("unmask", down, 0.0, up, timeout=timeout)

    def record(
        self, t: int, start: float, plan: RoundPlan, *, released: bool, arrived: int, mask_terms: int
    ) -> dict[str, float]:
        """Round ``t``'s time: the clients' phases as planned, then the server's side of what really happened
        (``released``: an aggregate was made; ``arrived``: uploads in it; ``mask_terms``: masks the
        unmasking rebuilt). Returns its ``clock/*`` metrics and keeps its end in the ledger."""
        clock = self.clock
        server = 0.0
        if released:
            latency, bandwidth = clock.server_link
            flops = self.work.server_flops(arrived, mask_terms=mask_terms)
            server = flops / clock.server_flops + latency + self.work.aggregate_bytes() / bandwidth
        duration = plan.end + server
        self.ends[t] = start + duration
        counts = plan.counts()
        out = {
            "clock/round_s": duration,
            "clock/elapsed_s": start + duration,
            "clock/clients_s": plan.end,
            "clock/server_s": server,
            "clock/arrived": float(arrived),
            **{f"clock/{name}": float(counts[name]) for name in STEPS[1:]},
        }
        for name, begin, end in plan.phases:
            out[f"clock/phase_{name}_s"] = end - begin
        return out


@dataclass
class ClockedAggregation:
    """The arm's aggregation stage with the clock around it (see the module docstring)."""

    inner: Aggregation
    clock: ArmClock
    round: RoundContext
    plan: RoundPlan | None = None
    start: float = 0.0

    # the arm's stage's state, read and written through: the round reads the failure, the clock the silent
    @property
    def retries(self) -> bool:
        return self.inner.retries

    @retries.setter
    def retries(self, value: bool) -> None:
        self.inner.retries = value

    @property
    def failure(self) -> str | None:
        return self.inner.failure

    @failure.setter
    def failure(self, value: str | None) -> None:
        self.inner.failure = value

    @property
    def dropped(self) -> list[dict[str, Any]]:
        return self.inner.dropped

    @dropped.setter
    def dropped(self, value: list[dict[str, Any]]) -> None:
        self.inner.dropped = value

    @property
    def silent(self) -> frozenset[int]:
        return self.inner.silent

    @silent.setter
    def silent(self, value: frozenset[int]) -> None:
        self.inner.silent = value

    def open(self, assignment: list[list[int]]) -> list[list[int]]:
        """Play the round on the clock, open the arm's stage without the clients gone before the key
        agreement, and return step 2's clients without those late for the upload."""
        t = self.round.t
        self.start = self.clock.start_of(t)
        plan = self.plan = self.clock.plan(t, self.start, assignment)
        opened = self.inner.open(_without(assignment, plan.left(OFFLINE, KEY_AGREEMENT)))
        self.inner.silent = frozenset(plan.left(AFTER_MASKING))
        return _without(opened, plan.left(BEFORE_UPLOAD, NOT_KEPT))

    def train(
        self,
        worker: Handle[ClientWorker],
        broadcast: Ref[torch.Tensor],
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int,
    ) -> Trained | MaskedTrained:
        return self.inner.train(worker, broadcast, coding, clients, bounds, attempt)

    def reduce(self, sources: list[int], trained: Any) -> Reduction:
        return self.inner.reduce(sources, trained)

    def measure(self, reduced: Any, trained: Any) -> Ref[float] | None:
        return self.inner.measure(reduced, trained)

    def metrics(self, reports: list[WorkerReport], infos: list[ShardInfo]) -> dict[str, float]:
        """The arm's stage's metrics, and the round's time on the clock."""
        out = self.inner.metrics(reports, infos)
        assert self.plan is not None, "open() plans the round"
        arrived = sum(len(r.accepted) - r.canaries for r in reports)
        mask_terms = int(out.get("secagg/mask_terms", 0))
        out.update(
            self.clock.record(
                self.round.t,
                self.start,
                self.plan,
                released=bool(infos),
                arrived=arrived,
                mask_terms=mask_terms,
            )
        )
        return out


def _without(assignment: list[list[int]], gone: set[int]) -> list[list[int]]:
    """``assignment`` without the clients ``gone``."""
    if not gone:
        return assignment
    return [[c for c in clients if c not in gone] for clients in assignment]
