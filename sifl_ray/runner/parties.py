"""The party pool: the parties' actors spawned, replaced when they die, and the faults the driver injects.

:class:`PartyPool` is the round's :class:`~sifl_ray.round.Supervisor`: ``run_round`` asks it for a fresh
client worker when one dies or straggles, and tells it when a step was submitted (the moment the driver
kills the actors a fault plan names). A server, aggregator or evaluator that dies is respawned here; the
keys and broadcasts it held are restored by :class:`~sifl_ray.runner.state.Checkpoints`.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from omegaconf import DictConfig

from sifl_ray.aggregation import Parties
from sifl_ray.backends import Backend, Placement
from sifl_ray.config import ConfigError
from sifl_ray.faults import FaultJournal, FaultPlan
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.evaluator import Evaluator, EvaluatorHost
from sifl_ray.parties.handle import Handle
from sifl_ray.parties.process import Host
from sifl_ray.parties.server import ServerHost
from sifl_ray.parties.workers import ArmSetup, ClientWorker, WorkerHost
from sifl_ray.runner.hosts import WarmHosts, spawn_making_room
from sifl_ray.specs import ModelSpec, TrainSpec

Spawn = Callable[..., Handle[Any]]
"""How the pool gets a host: the backend's ``spawn``, or a session's warm hosts' (same signature)."""


def say(text: str) -> None:
    """A message of the driver, on stderr."""
    print(f"[sifl] {text}", file=sys.stderr, flush=True)


#: With ``ray.aggregator_actors=0`` (auto), one aggregator actor per this many rows of the encoded vector (at
#: most one per shard): below it a shard's reduce costs far less than a process of its own (a second or more
#: of CPU to start and a torch import's memory: ``python -m bench startup``), while the paper's CNNs (582,539
#: and 1,200,011 rows) keep a host per shard.
ROWS_PER_AGGREGATOR_ACTOR = 1 << 19


def aggregator_actor_count(cfg: DictConfig, n_tilde: int) -> int:
    """How many actors host the ``ray.num_shards`` aggregator shards of an ``n_tilde``-row vector."""
    shards = cfg.ray.num_shards
    if cfg.ray.aggregator_actors:
        return min(cfg.ray.aggregator_actors, shards)
    return max(1, min(shards, -(-n_tilde // ROWS_PER_AGGREGATOR_ACTOR)))


def worker_count(cfg: DictConfig, backend: Backend) -> int:
    """How many client workers: ``ray.num_workers``, else as many as the cluster's CPUs allow (and, with
    ``ray.gpus_per_worker``, its GPUs beside the evaluator's ``ray.evaluator_gpus``).

    Raises:
        ConfigError: the workers and the evaluator ask Ray for more GPUs than the cluster has (they would
            wait for them for ever).
    """
    fixed = backend.capabilities.default_workers
    if cfg.ray.num_workers:
        workers = min(cfg.ray.num_workers, cfg.clients.num_clients)
    elif fixed is not None:
        workers = min(fixed, cfg.clients.num_clients)
    else:
        cpus = backend.cluster().get("CPU", 1.0)
        per = cfg.ray.cpus_per_worker or 1.0
        workers = max(1, min(int(cpus // per) or 1, cfg.clients.num_clients))
        if cfg.ray.gpus_per_worker:
            gpus = backend.cluster().get("GPU", 0.0) - cfg.ray.evaluator_gpus
            workers = max(1, min(workers, math.floor(round(gpus / cfg.ray.gpus_per_worker, 6))))
    if backend.capabilities.placement:
        check_gpus(cfg, workers, backend.cluster().get("GPU", 0.0))
    return workers


#: The drills that kill or stall a client worker's process (``faults.inject[i].kind``).
WORKER_PROCESS_FAULTS = ("worker_exit", "worker_kill", "straggle")


def worker_shares(cfg: DictConfig, backend: Backend, plan: FaultPlan) -> bool:
    """Whether client worker 0 runs in the light parties' process (``ray.placement=compact``).

    Why: on a small machine the run's start is the parties' processes, each importing torch while the others
    do (``python -m bench startup``: on 2 cores, one process fewer starts round 0 about a second sooner).
    A round is synchronous, so the worker and the light parties seldom compute at once; each is still its
    own object, with its own secrets. Not where the worker's process may be killed or stalled (a drill that
    does, or ``faults.deadline_s``, which replaces a late worker: the light parties would go with it), nor
    where the worker has a GPU or the workers are spread over a cluster's nodes.
    """
    if cfg.ray.placement != "compact" or not backend.capabilities.own_processes:
        return False
    if cfg.ray.gpus_per_worker or cfg.ray.spread_workers or cfg.faults.deadline_s is not None:
        return False
    return not any(ev.kind in WORKER_PROCESS_FAULTS for ev in plan.events)


def check_gpus(cfg: DictConfig, workers: int, cluster_gpus: float) -> None:
    """Refuse a run whose workers and evaluator ask for more GPUs than the cluster has (Ray would leave
    them pending, and the run would wait without a word)."""
    per, evaluator = float(cfg.ray.gpus_per_worker), float(cfg.ray.evaluator_gpus)
    need = workers * per + evaluator
    if need > cluster_gpus + 1e-9:
        raise ConfigError(
            [
                f"ray.gpus_per_worker: {workers} workers × {per:g} GPU + ray.evaluator_gpus {evaluator:g} = "
                f"{need:g} GPUs, but the Ray cluster has {cluster_gpus:g}; lower ray.gpus_per_worker, "
                "ray.num_workers or ray.evaluator_gpus, or join a cluster with GPUs (ray.address)"
            ]
        )


class PartyPool:
    """Every party's actor, shared by all arms, and what it takes to replace one.

    Built in steps: the server and the first aggregator actor at once (they need nothing of the data),
    the other aggregator actors with :meth:`host_shards` once the model's size is known, the client workers
    and the evaluator with :meth:`spawn_clients`.

    :attr:`aggregators` has one handle per shard; a host may host several shards (then its handle is there
    several times): :attr:`aggregator_actors` lists each host once.
    """

    def __init__(
        self,
        cfg: DictConfig,
        backend: Backend,
        *,
        plan: FaultPlan,
        journal: FaultJournal,
        fired_once: set[int],
        hosts: WarmHosts | None = None,
    ):
        self.cfg, self.backend, self.hosts = cfg, backend, hosts
        # a session's warm hosts, started again for this run; else a new host per party, once any session's
        # idle hosts have made room for it
        self.spawn: Spawn = partial(spawn_making_room, backend) if hosts is None else hosts.spawn
        self.plan, self.journal, self.fired_once = plan, journal, fired_once
        self.worker_shares = worker_shares(cfg, backend, plan)
        # The server and the aggregator need nothing of the data: spawned first, their process (or, under
        # separate placement, processes) boots and imports torch while this driver loads the data set.
        self.server = self.spawn(self._light(), ServerHost)
        self.aggregator_actors: list[Handle[AggregatorHost]] = []
        self._aggregators: list[Handle[AggregatorHost]] = []
        self._spawn_aggregators(min(cfg.ray.aggregator_actors, cfg.ray.num_shards) or 1)
        self.workers: list[Handle[ClientWorker]] = []
        self.evaluator: Handle[Evaluator] | None = None
        self.setups: dict[str, ArmSetup] = {}  # arm → its workers' ArmSetup (to set up a replacement)
        self.steps: dict[str, Any] = {}  # arm → its PartySteps (the server's and aggregator's, for respawns)
        self.views: dict[
            str, tuple[Any, Any]
        ] = {}  # arm → refs of the clients' key views (made by their owners)
        # in-run audit (simulation only): the auditor's seed, each worker's canaries, their weight, sizes
        self.audit: dict[str, Any] | None = None
        self.paired: dict[str, str | None] = {}  # arm → the arm it is measured against (the evaluator)

    @property
    def parties(self) -> Parties:
        """Every party's handle, as a round calls them (the workers' list is shared: a worker replaced
        during a round is called anew)."""
        assert self.evaluator is not None, "spawn_clients comes first"
        return Parties(
            server=self.server, aggregators=self.aggregators, workers=self.workers, evaluator=self.evaluator
        )

    def _light(self, gpus: float = 0.0) -> Placement:
        """Where a light party runs (the server, the first aggregator host, the evaluator, and client worker
        0 where :func:`worker_shares`): in one shared process under ``ray.placement=compact`` (a party with
        a GPU keeps its own), else its own. With worker 0 the process reserves the worker's CPUs, and has
        another name: a session's next run of the other shape starts a process of its own."""
        if self.cfg.ray.placement != "compact" or gpus:
            return Placement(gpus=gpus)
        if self.worker_shares:
            return Placement(cpus=self.cfg.ray.cpus_per_worker, share="light+worker0")
        return Placement(share="light")

    def _spawn_aggregators(self, count: int) -> None:
        """``count`` aggregator hosts (missing ones spawned); shard ``s`` on host ``s·count // shards``."""
        shards = self.cfg.ray.num_shards
        host = [s * count // shards for s in range(shards)]
        while len(self.aggregator_actors) < count:
            j = len(self.aggregator_actors)
            where = self._light() if j == 0 else Placement()  # one host per shard group beyond the first
            self.aggregator_actors.append(self.spawn(where, AggregatorHost, host.index(j)))
        self.aggregators = [self.aggregator_actors[j] for j in host]

    def host_shards(self, n_tilde: int) -> None:
        """Spawn the aggregator hosts an ``n_tilde``-row vector needs (``ray.aggregator_actors``, or auto:
        :func:`aggregator_actor_count`), before any arm is set up."""
        self._spawn_aggregators(aggregator_actor_count(self.cfg, n_tilde))

    def shards_of(self, shard: int) -> list[int]:
        """The shards hosted by the host of ``shard``."""
        handle = self.aggregators[shard]
        return [s for s, h in enumerate(self.aggregators) if h is handle]

    def aggregator_name(self, shard: int) -> str:
        """``aggregator<j>``: the name of the host of ``shard`` (as in :meth:`actors`)."""
        handle = self.aggregators[shard]
        return f"aggregator{next(j for j, h in enumerate(self.aggregator_actors) if h is handle)}"

    def spawn_clients(
        self, *, data_ref: Any, test_ref: Any, partitions: list[dict[int, Any]], model_spec: ModelSpec
    ) -> None:
        """The client workers (worker ``k`` owns ``partitions[k]``) and the evaluator."""
        self._data_ref, self._test_ref = data_ref, test_ref
        self._partitions, self._model_spec = partitions, model_spec
        self._train = TrainSpec.from_config(self.cfg)
        own = self.backend.capabilities.own_processes
        self._threads = max(1, int(self.cfg.ray.cpus_per_worker)) if own else 1
        self.workers = [self._spawn_worker(k) for k in range(len(partitions))]
        self.evaluator = self._spawn_evaluator()
        if self.backend.capabilities.placement and (
            self.cfg.ray.gpus_per_worker or self.cfg.ray.evaluator_gpus
        ):
            self._say_fallbacks()

    def _say_fallbacks(self) -> None:
        """Say which parties Ray gave a GPU that CUDA cannot use there (they compute on the CPU)."""
        hosts: dict[str, Handle[Any]] = {f"worker {k}": w for k, w in enumerate(self.workers)}
        hosts["evaluator"] = self.parties.evaluator
        placed = self.backend.get_all([h.call(WorkerHost.placement) for h in hosts.values()])
        fell = [(name, p["fallback"]) for name, p in zip(hosts, placed, strict=True) if p["fallback"]]
        if fell:
            names = ", ".join(name for name, _ in fell)
            say(f"{names}: {fell[0][1]}; computing on the CPU")

    def _spawn_worker(self, k: int) -> Handle[ClientWorker]:
        cfg = self.cfg
        where = Placement(
            cpus=cfg.ray.cpus_per_worker, gpus=cfg.ray.gpus_per_worker, spread=cfg.ray.spread_workers
        )
        if k == 0 and self.worker_shares:
            where = self._light()
        worker = self.spawn(
            where,
            WorkerHost,
            k,
            self._data_ref,
            self._partitions[k],
            self._model_spec,
            self._train,
            cfg.seed,
            self._threads,
            cfg.ray.materialize_uploads,
        )
        events = self.plan.for_worker(k, sorted(self._partitions[k]))
        if events:
            worker.call(WorkerHost.set_faults, events)
        if self.audit is not None:  # every worker scores the aggregator's view; some host canaries too
            a = self.audit
            directions = a["canaries"] + a["nulls"]
            worker.call(WorkerHost.set_canaries, a["seed"], a["hosted"].get(k, {}), a["weight"], directions)
        return worker

    def _spawn_evaluator(self) -> Handle[Evaluator]:
        where = self._light(gpus=self.cfg.ray.evaluator_gpus)
        evaluator = self.spawn(
            where,
            EvaluatorHost,
            self._test_ref,
            self._model_spec,
            self.cfg.seed,
            self.cfg.train.eval_batch_size,
        )
        if self.audit is not None:
            a = self.audit
            evaluator.call(EvaluatorHost.set_audit, a["seed"], a["canaries"], a["nulls"], a["n"])
        return evaluator

    def hand_arm(self, arm: str, *, setup: ArmSetup, views: tuple[Any, Any], paired: str | None) -> list[Any]:
        """Give every client worker and the evaluator their part of ``arm`` (kept, to set up a replacement);
        return the calls' references. ``paired``: the arm the evaluator measures this one's deviation from."""
        self.setups[arm], self.views[arm] = setup, views
        self.paired[arm] = paired
        done = [w.call(ClientWorker.set_arm, arm, setup, *views) for w in self.workers]
        done.append(self.parties.evaluator.call(Evaluator.set_arm, arm, setup.coding, *views, paired=paired))
        return done

    def hand_steps(self, arm: str, steps: Any, *, shards: int) -> list[Any]:
        """Give the server and the aggregator shards the arm's steps (kept, to set up a replacement); return
        the calls' references. The client step travels with the workers' set-up (:meth:`hand_arm`)."""
        self.steps[arm] = steps
        done = []
        if steps.server is not None:
            done.append(self.server.call(ServerHost.set_step, arm, steps.server))
        hosts = list({id(a): a for a in self.aggregators[:shards]}.values())  # each host once
        if steps.aggregator is not None:
            done += [a.call(AggregatorHost.set_step, arm, steps.aggregator) for a in hosts]
        if steps.secagg is not None:
            done += [a.call(AggregatorHost.set_secagg, arm, steps.secagg) for a in hosts]
        return done

    # ---------------------------------------------------------------- Supervisor
    def replace_worker(self, k: int, *, arm: str, t: int, reason: str) -> float:
        """The round's supervisor: a fresh worker ``k`` (same clients, every arm set up)."""
        with contextlib.suppress(Exception):  # already gone
            self._kill(self.workers[k])
        tic = time.perf_counter()
        worker = self._spawn_worker(k)
        ready = [worker.call(ClientWorker.set_arm, a, self.setups[a], *self.views[a]) for a in self.setups]
        self.backend.get_all(ready)
        self.workers[k] = worker
        took = time.perf_counter() - tic
        say(f"round {t} {arm}: worker {k} {reason}; replaced it ({took:.1f} s)")
        return took

    def after_submit(self, stage: str, *, arm: str, t: int) -> None:
        """The round's supervisor: the faults the driver injects itself (killing a party)."""
        if stage == "train":
            for ev in self.plan.at("worker_kill", arm, t):
                self._fired(ev, arm, t)
                self._kill(self.workers[ev.worker])
            return
        targets: dict[str, Any] = {
            "server_kill": lambda ev: self.server,
            "aggregator_kill": lambda ev: self.aggregators[ev.shard],
            "evaluator_kill": lambda ev: self.evaluator,
        }
        for kind, handle in targets.items():
            for ev in self.plan.at(kind, arm, t):
                if ev.index in self.fired_once:
                    continue
                self.fired_once.add(ev.index)
                self._fired(ev, arm, t)
                self._kill(handle(ev))

    def maybe_kill_driver(self, arm: str, t: int) -> None:
        """The driver's own injected fault, after round ``t`` of ``arm`` was recorded: SIGKILL itself."""
        for ev in self.plan.at("driver_kill", arm, t):
            if ev.index in self.fired_once:
                continue
            self._fired(ev, arm, t)
            say(f"round {t} {arm}: injected fault: the driver SIGKILLs itself (resume with --resume)")
            os.kill(os.getpid(), signal.SIGKILL)

    def _fired(self, ev: Any, arm: str, t: int) -> None:
        self.journal.append({"event": "fired", "fault": ev.index, "kind": ev.kind, "round": t, "arm": arm})

    # ---------------------------------------------------------------- failures
    def respawn(self, party: str, index: int) -> tuple[str, ...]:
        """A fresh ``party`` (``server``, the ``aggregator`` host of shard ``index``, ``evaluator``) in place
        of the old one, with the arms' steps and set-ups it held; a server or aggregator still has to take
        its keys back (:meth:`~sifl_ray.runner.state.Checkpoints.restore_keys`): returns who (``("server",)``,
        or ``aggregator<s>`` for every shard the new host hosts; ``()``: nobody)."""
        if party == "server":
            old: Handle[Any] = self.server
            self.server = self.spawn(self._light(), ServerHost)
            calls = [
                self.server.call(ServerHost.set_step, a, s.server) for a, s in self.steps.items() if s.server
            ]
            restore: tuple[str, ...] = ("server",)
        elif party == "aggregator":
            shards, old = self.shards_of(index), self.aggregators[index]
            new = self.spawn(Placement(), AggregatorHost, shards[0])
            self.aggregator_actors[next(j for j, h in enumerate(self.aggregator_actors) if h is old)] = new
            for s in shards:
                self.aggregators[s] = new
            calls = [
                new.call(AggregatorHost.set_step, a, s.aggregator)
                for a, s in self.steps.items()
                if s.aggregator
            ]
            calls += [
                new.call(AggregatorHost.set_secagg, a, s.secagg) for a, s in self.steps.items() if s.secagg
            ]
            restore = tuple(f"aggregator{s}" for s in shards)
        else:
            assert self.evaluator is not None
            old, self.evaluator = self.evaluator, self._spawn_evaluator()
            calls = [
                self.evaluator.call(
                    Evaluator.set_arm, a, self.setups[a].coding, *self.views[a], paired=self.paired[a]
                )
                for a in self.setups
            ]
            restore = ()
        with contextlib.suppress(Exception):  # already gone
            self._kill(old)
        self.backend.get_all(calls)
        return restore

    def actors(self) -> dict[str, Handle[Any]]:
        """Every host by name (``server``, ``evaluator``, ``aggregator<j>``, ``worker<k>``)."""
        out: dict[str, Handle[Any]] = {"server": self.server}
        if self.evaluator is not None:
            out["evaluator"] = self.evaluator
        out.update({f"aggregator{j}": a for j, a in enumerate(self.aggregator_actors)})
        out.update({f"worker{i}": w for i, w in enumerate(self.workers)})
        return out

    def placement(self) -> dict[str, Any] | None:
        """Where every party runs: ``{"nodes": [node ids], "parties": {party: node id}}`` (``None`` where
        the backend places nothing). A cluster run reports it in ``summary.json``, so that a user sees
        which nodes hosted the client workers (``ray.spread_workers``)."""
        if not self.backend.capabilities.placement:
            return None
        actors = self.actors()
        nodes = self.backend.get_all([h.call(Host.node) for h in actors.values()])
        parties = dict(zip(actors, nodes, strict=True))
        return {"nodes": sorted({n for n in nodes if n}), "parties": parties}

    def _kill(self, handle: Handle[Any]) -> None:
        """Stop one host at once (a fault drill, a replaced party): a session never gives it out again."""
        if self.hosts is not None:
            self.hosts.forget(handle)
        self.backend.kill(handle)

    def stop(self, *, quiet: bool = False) -> None:
        """Stop every host (their CPUs go back to Ray; in-process there is nothing to stop), or give them
        back to the session, which starts them again for its next run. ``quiet``: ignore failures (undoing a
        set-up that failed half-way)."""
        if self.hosts is not None:
            self.hosts.release(list(self.actors().values()))
            return
        if not self.backend.capabilities.kill:
            return
        for handle in self.actors().values():
            if quiet:
                with contextlib.suppress(Exception):
                    self.backend.kill(handle)
            else:
                self.backend.kill(handle)
