"""The simulation: a scenario's parties built, then every arm played round by round, recorded, summarised.

All arms of a scenario share the data, the partition, the initial model, the client sampling and the
minibatch order (every one of these streams is derived from the run seed and its name), so their curves
differ only by what the arm does: nothing (fl), SIFL coding (sifl_m1, sifl_m2) or NbAFL noise.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray import canvas
from sifl_ray.arms import arm_of, play_order, unpaired_arms
from sifl_ray.backends import Backend, make_backend
from sifl_ray.checkpoint import CheckpointError, describe_error
from sifl_ray.clock.stage import Clock
from sifl_ray.config import ConfigError, arm_names
from sifl_ray.data import sample_clients
from sifl_ray.faults import FaultJournal, FaultPlan
from sifl_ray.parties.evaluator import Evaluator
from sifl_ray.parties.handle import PartyLost
from sifl_ray.privacy.canaries import CanaryAudit
from sifl_ray.round import ArmState, Parties, RoundPolicy, RoundResult, run_round
from sifl_ray.runner.arms import setup_arm
from sifl_ray.runner.canaries import plan_canaries
from sifl_ray.runner.hosts import WarmHosts, default_hosts
from sifl_ray.runner.parties import PartyPool, say, worker_count
from sifl_ray.runner.recorder import Recorder, RoundLines
from sifl_ray.runner.recovery import record_resume, recover
from sifl_ray.runner.startup import StartupMarks
from sifl_ray.runner.state import (
    Checkpoints,
    DriverState,
    ResumePoint,
    default_key_dir,
    is_checkpoint_error,
    open_resume,
)
from sifl_ray.runner.summary import RunResult, run_name
from sifl_ray.runner.workload import load_workload


class Simulation:
    """A configured scenario with its parties spawned; :meth:`run` executes it.

    Reliability (see ``faults`` and ``checkpoint`` in :mod:`sifl_ray.config`): a client worker that dies
    or straggles is retried or dropped inside the round (:func:`~sifl_ray.round.run_round`); a server,
    aggregator or evaluator that dies is respawned, takes its key back from its own key file, and the run
    continues from the last checkpoint (the rounds since are replayed: every stream is deterministic, so
    nothing changes but the wall time); :meth:`resume` continues a run whose driver died.

    Who does what: the actors are :attr:`pool`'s (:mod:`~sifl_ray.runner.parties`); the checkpoints and
    the driver's records :attr:`checkpoints`' and :attr:`driver`'s (:mod:`~sifl_ray.runner.state`); the
    logs and ``summary.json`` :attr:`recorder`'s (:mod:`~sifl_ray.runner.recorder`). To play rounds
    without the run loop (benches, paired tests): :meth:`play_round`, :meth:`global_model`,
    :meth:`set_start`.
    """

    def __init__(
        self,
        cfg: DictConfig,
        *,
        backend: Backend | None = None,
        hosts: WarmHosts | None = None,
        run_dir: Path | None = None,
        startup_marks: dict[str, float] | None = None,
        draw_later: bool = False,
        _resume: ResumePoint | None = None,
    ):
        self.cfg = cfg
        self.arms = arm_names(cfg)
        # The order each round plays them in: each paired arm's reference first (see play_order); the
        # records, the table and the RESULT line keep self.arms, the scenario's order.
        self.play_order = play_order(cfg, self.arms)
        self.run_dir = Path(run_dir) if run_dir else new_run_dir(cfg)
        self._resume = _resume
        key_dir = Path(_resume.key_dir) if _resume and _resume.key_dir else default_key_dir(cfg, self.run_dir)
        self.checkpoints = Checkpoints(cfg, run_dir=self.run_dir, key_dir=key_dir, arms=self.arms)
        self.plan = FaultPlan.from_config(cfg, self.arms)
        self.journal = FaultJournal(self.run_dir)
        self.fired_once = self.journal.fired_once() if _resume else set()
        self.policy = RoundPolicy(
            worker_policy=cfg.faults.worker_policy,
            straggler_policy=cfg.faults.straggler_policy,
            deadline_s=cfg.faults.deadline_s,
            max_retries=cfg.faults.max_retries,
        )
        # Where a run's fixed cost goes (summary.json "startup"): wall-clock marks from the driver's start. A
        # caller that started the backend itself passes its marks (the CLI starts Ray while it imports).
        self.marks = StartupMarks(startup_marks)
        # a session's warm hosts: its backend too, which outlives this run (never shut down here)
        if hosts is None and backend is None:
            hosts = default_hosts(str(cfg.backend))
        self.hosts = hosts
        backend = hosts.backend if hosts is not None else backend
        if backend is None:
            self.marks.mark("backend_start")
            backend = make_backend(cfg)
            self.marks.mark("backend")
            # The first line a run prints: a private Ray instance or a joined cluster, and its size.
            if backend.description:
                print(backend.description, flush=True)
        self.backend = backend
        self.driver = DriverState(self.arms)
        self.recorder = Recorder(cfg, run_dir=self.run_dir, driver=self.driver, journal=self.journal)
        self.recorder.draw_later = draw_later  # the figures in a thread (a session's run: canvas.Drawing)
        self.restores = 0
        self._closed = False
        try:
            self._build()
            self.marks.mark("parties")
        except BaseException:
            if getattr(self, "pool", None) is not None:  # undo a failed set-up: the actors spawned so far
                self.pool.stop(quiet=True)
            if hosts is None:
                self.backend.shutdown()  # and Ray, if this simulation started it
            raise

    @classmethod
    def resume(cls, path: str | Path, *, backend: Backend | None = None) -> Simulation:
        """Continue the run in ``path`` (a run folder, or one of its ``checkpoints/round-*`` folders).

        Everything is verified before anything is written or any actor is asked to restore: the saved
        configuration, the manifest and the driver's state (here), the broadcasts and key files (by the
        server and aggregator actors, which alone may read them).

        Raises:
            CheckpointError: nothing to resume from, or a file is missing, truncated or corrupted.
        """
        cfg, run_dir, point = open_resume(path)
        return cls(cfg, backend=backend, run_dir=run_dir, _resume=point)

    # ---------------------------------------------------------------- set-up
    def _build(self) -> None:
        cfg, backend = self.cfg, self.backend
        self.pool = PartyPool(
            cfg, backend, plan=self.plan, journal=self.journal, fired_once=self.fired_once, hosts=self.hosts
        )
        self.num_workers = worker_count(cfg, backend)
        clients, workers = cfg.clients.num_clients, self.num_workers
        say(f"loading {cfg.data.name} for {clients} clients while the server and aggregator start")
        work = load_workload(cfg, self.num_workers)
        self.dataset, self.sizes, self.owner = work.dataset, work.sizes, work.owner
        self.partition = work.partition
        self.model_spec, self.w0, self.n = work.model_spec, work.w0, work.n
        # the simulated clock (clock.profile or clock.trace), put around each arm's aggregation; None: off
        self.clock = self.recorder.clock = Clock.of(
            cfg, sizes=self.sizes, model=self.model_spec, history=lambda arm: self.driver.history[arm]
        )
        self.pool.host_shards(self.n + cfg.coding.n_extra)  # the largest encoded vector of any arm
        self._check_fault_workers()
        data_ref = backend.put(
            {"x_train": np.asarray(self.dataset.x_train), "y_train": np.asarray(self.dataset.y_train)}
        )
        test_ref = backend.put(
            {"x_test": np.asarray(self.dataset.x_test), "y_test": np.asarray(self.dataset.y_test)}
        )
        # From here the driver reads the stored arrays (on Ray: the object store's shared, read-only pages)
        # and lets its own copy go: it held the whole data set a second time for the run's length (219 MiB
        # of the 60,000-sample reference workload).
        train, test = backend.get(data_ref), backend.get(test_ref)
        self.dataset = work.dataset = dataclasses.replace(self.dataset, **train, **test)
        self.checkpoints.make_key_dir()
        self._sampler_seed = self.checkpoints.sampler_seed()  # the sampling party's secret (the server's)
        self._plan_canaries()
        self.states: dict[str, ArmState] = {}
        self.precision: dict[str, dict[str, Any]] = {}
        self.privacy: dict[str, dict[str, Any]] = {}
        self.releases: dict[str, tuple] = {}
        # On a resume the server and aggregator take their keys and the broadcasts back (and refuse
        # damaged files) before any worker is started or anything is written.
        if self._resume is not None:
            try:
                pool = self.pool
                self.checkpoints.restore_keys(backend, pool.server, pool.aggregators, self.n)
                self.checkpoints.load_broadcasts(
                    backend, pool.server, self.states, self.w0, self._resume.checkpoint
                )
            except Exception as err:
                if not is_checkpoint_error(err):
                    raise
                raise CheckpointError(describe_error(err)) from None
        say(f"starting {workers} client worker{'s' if workers != 1 else ''} and the evaluator")
        self.pool.spawn_clients(
            data_ref=data_ref, test_ref=test_ref, partitions=work.partitions, model_spec=self.model_spec
        )
        for arm in self.arms:
            got = setup_arm(
                cfg,
                self.pool,
                self.checkpoints,
                arm,
                w0=self.w0,
                sizes=self.sizes,
                clients_per_worker=max(len(p) for p in work.partitions),
                restored=self.states[arm] if self._resume is not None else None,
                clock=self.clock,
            )
            self.states[arm] = got.state
            for table, value in ((self.precision, got.precision), (self.privacy, got.privacy)):
                if value is not None:
                    table[arm] = value
            if got.releases is not None:
                self.releases[arm] = got.releases
        self.driver.load(self._resume.state if self._resume else None)
        if self._resume is not None and self._resume.state is not None:
            self.driver.restored = list(self._resume.state.get("restored", []))

    def _check_fault_workers(self) -> None:
        """A fault drill names a worker this run has (the count is known only once the backend is)."""
        for ev in self.plan.events:
            if ev.worker is not None and ev.worker >= self.num_workers:
                raise ConfigError(
                    [
                        f"faults.inject[{ev.index}].worker: this run has {self.num_workers} workers, "
                        f"got worker {ev.worker}; set ray.num_workers or change the worker"
                    ]
                )

    def _plan_canaries(self) -> None:
        """The in-run audit's canaries (:mod:`~sifl_ray.runner.canaries`): their hosts join the client
        owners, the workers learn the auditor's seed, and the driver keeps each arm's record of the scores
        (:class:`~sifl_ray.privacy.canaries.CanaryAudit`)."""
        self.canaries = plan_canaries(
            self.cfg,
            n=self.n,
            num_workers=self.num_workers,
            sizes=self.sizes,
            auditor_seed=self.checkpoints.auditor_seed,
        )
        if self.canaries.seed is None:
            return
        k, m = int(self.cfg.audit.canaries), int(self.cfg.audit.nulls)
        for arm in self.arms:
            self.driver.audits[arm] = CanaryAudit(k=k, m=m, seed=self.canaries.seed)
        self.owner.update(self.canaries.owner)
        self.pool.audit = self.canaries.workers

    @property
    def parties(self) -> Parties:
        return self.pool.parties

    @property
    def setups(self) -> dict[str, dict]:
        """Per arm, what every client worker was told (coding, clipping, NbAFL noise)."""
        return self.pool.setups

    @property
    def views(self) -> dict[str, tuple]:
        """Per arm, the refs of the clients' key views (made by their owners)."""
        return self.pool.views

    def actors(self) -> dict[str, Any]:
        return self.pool.actors()

    @property
    def next_round(self) -> int:
        """The first round :meth:`run` will play (0, or the round after the restored checkpoint)."""
        return self.driver.next_round

    # ---------------------------------------------------------------- one round
    def assignment(self, t: int, arm: str | None = None) -> list[list[int]]:
        """The clients of each worker in round ``t`` (the same in every arm), drawn from the sampling party's
        secret seed (:meth:`Checkpoints.sampler_seed`), never from the public run seed.

        Canaries (``audit.canaries``) are sampled like clients, from their own stream. An inserted canary
        takes part when sampled; one left out takes no part, except in an arm whose guarantee is zero-out
        (``arm``'s neighbour relation), where the neighbour of a client's update is the same client
        uploading 0: there the canary takes part and uploads no change (its worker knows which)."""
        clients = self.cfg.clients
        sampled = sample_clients(
            clients.num_clients, clients.fraction, t, self._sampler_seed, clients.sampling
        )
        out: list[list[int]] = [[] for _ in range(self.num_workers)]
        for c in sampled:
            out[self.owner[int(c)]].append(int(c))
        zero_out = arm is not None and bool(self.canaries.ids) and self.zero_out(arm)
        for c in self.canaries.taking_part(
            t, sampler_seed=self._sampler_seed, fraction=clients.fraction, zero_out=zero_out
        ):
            out[self.owner[c]].append(c)
        return out

    def zero_out(self, arm: str) -> bool:
        """Whether ``arm`` states its guarantee under the zero-out relation (:attr:`Arm.zero_out`)."""
        return arm_of(self.cfg, arm).zero_out

    def play_round(
        self, arm: str, t: int, assignment: list[list[int]] | None = None, *, supervise: bool = True
    ) -> RoundResult:
        """Play round ``t`` of ``arm`` (Algorithm 2: :func:`~sifl_ray.round.run_round`); its broadcast
        advances to the next round's.

        Nothing is recorded: :meth:`run` logs, accounts and checkpoints around this call. A bench or a test
        may call it alone, in any order of arms; a paired arm's ``max_deviation`` is there only when fl
        played round ``t`` before it (the evaluator keeps fl's model of the round: :attr:`play_order`).

        Args:
            assignment: the clients of each worker (default: round ``t``'s sampling, :meth:`assignment`).
            supervise: as :meth:`run` does, replace a worker that dies or misses the deadline and inject
                the configured faults; ``False``: no supervisor, a failing worker raises (a bench's bare
                round).

        Raises:
            PartyLost: the server, an aggregator shard or the evaluator died.
        """
        return run_round(
            self.backend,
            self.pool.parties,
            self.states[arm],
            t,
            self.assignment(t, arm) if assignment is None else assignment,
            policy=self.policy,
            supervisor=self.pool if supervise else None,
        )

    def global_model(self, arm: str) -> torch.Tensor:
        """The decoded global model of ``arm`` (simulation only: the evaluator decodes it for the driver)."""
        state = self.states[arm]
        ref = self.parties.evaluator.call(Evaluator.plain_model, arm, state.broadcast, state.broadcast_coding)
        return self.backend.get(ref)

    def set_start(self, arm: str, w: torch.Tensor) -> None:
        """Simulation only: the next round of the plain arm ``arm`` (fl, NbAFL) starts from the model ``w``.

        For paired comparisons: FedAvg from a SIFL arm's own decoded start (:meth:`global_model`), so that
        the two next models differ by the coding alone. No deployment can do this; a coded arm's start is
        the server's encoding, which this method does not make.

        Raises:
            ValueError: ``arm`` is a coded arm.
        """
        state = self.states[arm]
        if state.coding.coded:
            raise ValueError(
                f"set_start: {arm} is a coded ({state.coding.scheme}) arm; only a plain arm takes a start"
            )
        state.broadcast = self.backend.put(w)

    # ---------------------------------------------------------------- the run
    def run(
        self, *, on_round_end: Callable[[Simulation, int], None] | None = None, close: bool = False
    ) -> RunResult:
        """Play the remaining rounds (all of them, or those after the restored checkpoint), then summarise.

        Args:
            on_round_end: called as ``on_round_end(sim, t)`` after round ``t`` (and its checkpoint).
            close: :meth:`close` once the last round is played, while the summary, TensorBoard and the
                plots are written (they need nothing of the parties): Ray's stop, most of it waiting for its
                autoscaler monitor, then overlaps the plots (``python -m bench startup`` measures a run's
                end). For callers done with the simulation when ``run`` returns (``sifl run``).
        """
        rounds = self.cfg.train.rounds
        t = self._start()
        self.marks.mark("first_round")
        canvas.rounds_begin()  # the last run's figures, drawn while the parties play these rounds
        if self.cfg.output.plot:
            # matplotlib, imported while the parties play the rounds; figures drawn behind a session's run
            # are drawn side by side in helper processes
            canvas.prefetch(helpers=self.recorder.draw_later)
        progress = RoundLines(rounds, self.cfg.output.progress)
        while t < rounds:
            try:
                # 1. The clients of round t: the same in every arm (and its canaries, if the run audits).
                latest: dict[str, float] = {}
                for arm in self.play_order:
                    # 2. Every arm plays round t (encode → train → aggregate → decode), fl first, then the
                    #    driver records it: metrics, privacy releases, incidents.
                    start = self.states[arm].broadcast_coding  # what the round's clients start from
                    result = self.play_round(arm, t, self.assignment(t, arm))
                    latest[arm] = self.recorder.round(
                        arm,
                        t,
                        result,
                        start=start,
                        releases=self.releases.get(arm),
                        privacy=self.privacy.get(arm),
                    )
                    self.pool.maybe_kill_driver(arm, t)
                progress.update(t, {arm: latest[arm] for arm in self.arms})
                # 3. A checkpoint every checkpoint.every rounds, and after the last.
                if self.checkpoints.due(t):
                    self.checkpoints.save(t, self.backend, self.pool.server, self.states, self.driver)
            except PartyLost as lost:
                # 4. A party died: respawn it, restore the last checkpoint and replay the rounds since.
                t = recover(self, lost)
                continue
            if on_round_end is not None:
                on_round_end(self, t)
            t += 1
        self.marks.mark("rounds_done")
        return self._finish(close=close)

    def _start(self) -> int:
        """Open the records at the first round to play; log a resume, or (a fresh run) each arm's privacy."""
        start = self.next_round
        self.recorder.open(purge_step=start if self._resume is not None else None)
        for arm, reference in unpaired_arms(self.cfg, self.arms).items():
            say(
                f"{arm}: no max deviation will be reported: it is measured against the model of {reference} "
                f"each round, and {reference} is not among the arms; add {reference} to arms to check the "
                "coding's precision"
            )
        if self._resume is None:
            self.recorder.privacy(self.privacy)
        else:
            record_resume(self, self._resume, start)
        return start

    def _finish(self, *, close: bool = False) -> RunResult:
        placement = self.pool.placement()  # the last thing asked of the parties
        errors: list[BaseException] = []

        def stop() -> None:
            try:
                self.close()
            except BaseException as err:  # raised below, once the outputs are written
                errors.append(err)

        closing = threading.Thread(target=stop, name="sifl-close") if close else None
        if closing is not None:
            closing.start()
        try:
            result = self.recorder.finish(
                precision=self.precision,
                privacy=self.privacy,
                coded_arms=list(self.releases),
                chance_accuracy=1 / self.dataset.num_classes,
                n=self.n,
                num_workers=self.num_workers,
                backend=self.backend.name,
                injected=[ev.describe() for ev in self.plan.events],
                checkpoint_dir=str(self.checkpoints.store.root),
                placement=placement,
                startup=self.startup(),
                partition=self.partition,
            )
        finally:
            if closing is not None:
                closing.join()
        if errors:
            raise errors[0]
        return result

    def startup(self) -> dict[str, float | None]:
        """Seconds of this run's start (:meth:`StartupMarks.spans`). ``bench/startup.py`` adds what follows:
        the end of the run."""
        return self.marks.spans()

    def stop_actors(self) -> None:
        """Stop this simulation's actors (their CPUs go back to Ray) and leave Ray running (a bench then
        builds another simulation in the same session)."""
        self.pool.stop()

    def close(self) -> None:
        """Stop this simulation's hosts (their CPUs go back to Ray; a session's go back to the session) and
        shut Ray down if this run started it (never a session's). Once: a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.pool.stop()
        if self.hosts is None:
            self.backend.shutdown()


def new_run_dir(cfg: DictConfig) -> Path:
    """A fresh run folder: ``output.dir/<name>/<date-time>`` (the name: ``output.name`` or the scenario's)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path(cfg.output.dir) / run_name(cfg) / stamp


def cpu_count() -> int:
    """The CPUs of this machine (at least 1), for sizing the workers when Ray does not say."""
    return os.cpu_count() or 1
