"""The scenario runner: build the parties, run every arm round by round, log, summarise.

All arms of a scenario share the data, the partition, the initial model, the client sampling and the
minibatch order (every one of these streams is derived from the run seed and its name), so their curves
differ only by what the arm does: nothing (fl), SIFL coding (sifl_m1, sifl_m2) or NbAFL noise.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from actors.aggregator import AggregatorActor
from actors.client_worker import ClientWorkerActor
from actors.evaluator import EvaluatorActor
from actors.server import ServerActor
from sifl_ray.checkpoint import CheckpointError, describe_error
from sifl_ray.config import ConfigError, arm_kind, arm_names, nbafl_epsilon, to_yaml
from sifl_ray.data import load_dataset, partition_dataset, sample_clients
from sifl_ray.faults import FaultJournal, FaultPlan
from sifl_ray.keys import ClientNoiseSeeds
from sifl_ray.logging import RunLogger
from sifl_ray.models import build_model, flatten_params
from sifl_ray.privacy.nbafl import nbafl_exposures, nbafl_guarantee, nbafl_sigma
from sifl_ray.round import ArmState, Parties, PartyLost, RoundPolicy, RoundResult, run_round
from sifl_ray.runner.state import (
    Checkpoints,
    DriverState,
    ResumePoint,
    arm_shape,
    default_key_dir,
    is_checkpoint_error,
    open_resume,
)
from sifl_ray.runner.summary import (
    RunResult,
    end_of_run_messages,
    epsilon_metrics,
    flat_hparams,
    record_text,
    result_line,
    round_incidents,
    summarise,
)
from sifl_ray.seeding import torch_generator
from sifl_ray.sizing import arm_precision, arm_releases, arm_round_bound, describe_arm


def make_backend(cfg: DictConfig, **ray_kwargs: Any):
    if cfg.ray.backend == "sequential":
        from sifl_ray.sequential import SequentialBackend

        return SequentialBackend()
    from actors.backend import RayBackend

    return RayBackend(address=cfg.ray.address, **ray_kwargs)


def partition(cfg: DictConfig, labels: np.ndarray) -> list[np.ndarray]:
    return partition_dataset(
        labels,
        scheme=cfg.data.partition,
        num_clients=cfg.clients.num_clients,
        seed=cfg.seed,
        alpha=cfg.data.dirichlet_alpha,
        shards_per_client=cfg.data.shards_per_client,
    )


def _worker_count(cfg: DictConfig, backend) -> int:
    if cfg.ray.num_workers:
        return min(cfg.ray.num_workers, cfg.clients.num_clients)
    if backend.name == "sequential":
        return min(2, cfg.clients.num_clients)
    cpus = backend.cluster().get("CPU", 1.0)
    per = cfg.ray.cpus_per_worker or 1.0
    return max(1, min(int(cpus // per) or 1, cfg.clients.num_clients))


class Progress:
    """One line per round on stderr (a bar over rounds with the latest accuracy of every arm)."""

    def __init__(self, total: int, enabled: bool):
        self.total = total
        self.enabled = enabled
        self.start = time.perf_counter()

    def update(self, t: int, accs: dict[str, float]) -> None:
        if not self.enabled:
            return
        done = t + 1
        width = 20
        bar = "#" * (width * done // self.total) + "." * (width - width * done // self.total)
        arms = " ".join(f"{a}={100 * v:.1f}%" for a, v in accs.items())
        elapsed = time.perf_counter() - self.start
        print(f"[{bar}] round {done}/{self.total} {elapsed:6.1f}s | {arms}", file=sys.stderr, flush=True)


class Simulation:
    """A configured scenario with its parties spawned; :meth:`run` executes it.

    Reliability (see ``faults`` and ``checkpoint`` in :mod:`sifl_ray.config`): a client worker that dies
    or straggles is retried or dropped inside the round (:func:`~sifl_ray.round.run_round`); a server,
    aggregator or evaluator that dies is respawned, takes its key back from its own key file, and the run
    continues from the last checkpoint (the rounds since are replayed: every stream is deterministic, so
    nothing changes but the wall time); :meth:`resume` continues a run whose driver died.
    """

    def __init__(
        self,
        cfg: DictConfig,
        *,
        backend=None,
        run_dir: Path | None = None,
        _resume: ResumePoint | None = None,
    ):
        self.cfg = cfg
        self.arms = arm_names(cfg)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        self.run_dir = Path(run_dir) if run_dir else Path(cfg.output.dir) / cfg.scenario / stamp
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
        if backend is None:
            backend = make_backend(cfg)
            # The first line a run prints: a private Ray instance or a joined cluster, and its size.
            if getattr(backend, "description", ""):
                print(backend.description, flush=True)
        self.backend = backend
        self.driver = DriverState(self.arms)
        self.restores = 0
        self.logger: RunLogger | None = None
        try:
            self._build()
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        """Undo a failed set-up: stop the actors spawned so far, and Ray if this simulation started it."""
        parties = getattr(self, "parties", None)
        if parties is not None and self.backend.name == "ray":
            for handle in self.actors().values():
                with contextlib.suppress(Exception):
                    self.backend.kill(handle)
        self.backend.shutdown()

    @classmethod
    def resume(cls, path: str | Path, *, backend=None) -> Simulation:
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
        # The server and the aggregator need nothing of the data: spawned first, their processes boot
        # (each imports torch, ~1-1.5 s of CPU) while this driver loads the data set.
        self.parties = Parties(
            server=backend.spawn(ServerActor),
            aggregators=[backend.spawn(AggregatorActor, s) for s in range(cfg.ray.num_shards)],
            workers=[],
            evaluator=None,
        )
        self.dataset = load_dataset(
            cfg.data.name,
            seed=cfg.seed,
            root=cfg.data.root or "data_cache",
            download=cfg.data.download,
            test_fraction=cfg.data.test_fraction,
            synthetic_train=cfg.data.n_train,
            synthetic_test=cfg.data.n_test,
            limit_train=cfg.data.limit_train,
            limit_test=cfg.data.limit_test,
        )
        parts = partition(cfg, np.asarray(self.dataset.y_train))
        self.sizes = np.array([len(p) for p in parts], dtype=np.int64)
        self.num_workers = _worker_count(cfg, backend)
        owners = np.array_split(np.arange(cfg.clients.num_clients), self.num_workers)
        self.owner = {int(c): k for k, cs in enumerate(owners) for c in cs}
        for ev in self.plan.events:
            if ev.worker is not None and ev.worker >= self.num_workers:
                raise ConfigError(
                    [
                        f"faults.inject[{ev.index}].worker: this run has {self.num_workers} workers, "
                        f"got worker {ev.worker}; set ray.num_workers or change the worker"
                    ]
                )
        self.model_spec = {
            "name": cfg.train.model,
            "input_shape": list(self.dataset.x_train.shape[1:]),
            "num_classes": int(self.dataset.num_classes),
            "dtype": cfg.train.dtype,
        }
        net = build_model(
            cfg.train.model,
            input_shape=tuple(self.model_spec["input_shape"]),
            num_classes=self.model_spec["num_classes"],
            generator=torch_generator(cfg.seed, "init"),
        )
        self.w0 = flatten_params(net).to(torch.float64)
        self.n = int(self.w0.numel())
        self._train = OmegaConf.to_container(cfg.train)
        self._data_ref = backend.put(
            {"x_train": np.asarray(self.dataset.x_train), "y_train": np.asarray(self.dataset.y_train)}
        )
        self._test_ref = backend.put(
            {"x_test": np.asarray(self.dataset.x_test), "y_test": np.asarray(self.dataset.y_test)}
        )
        self._threads = max(1, int(cfg.ray.cpus_per_worker)) if backend.name == "ray" else 1
        self._partitions = [{int(c): parts[c] for c in owners[k]} for k in range(self.num_workers)]
        self.checkpoints.make_key_dir()
        self.states: dict[str, ArmState] = {}
        self.setups: dict[str, dict] = {}
        self.views: dict[str, tuple] = {}  # arm → refs of the clients' key views (made by their owners)
        self.precision: dict[str, dict[str, Any]] = {}
        self.privacy: dict[str, dict[str, Any]] = {}
        self.releases: dict[str, tuple] = {}
        # On a resume the server and aggregator take their keys and the broadcasts back (and refuse
        # damaged files) before any worker is started or anything is written.
        if self._resume is not None:
            try:
                self.checkpoints.restore_keys(backend, self.parties, self.n)
                self.checkpoints.load_broadcasts(
                    backend, self.parties.server, self.states, self.w0, self._resume.checkpoint
                )
            except Exception as err:
                if not is_checkpoint_error(err):
                    raise
                raise CheckpointError(describe_error(err)) from None
        self.parties.workers = [self._spawn_worker(k) for k in range(self.num_workers)]
        self.parties.evaluator = self._spawn_evaluator()
        for arm in self.arms:
            self._setup_arm(arm, self.checkpoints.coding, restore=self._resume is not None)
        self.driver.load(self._resume.state if self._resume else None)
        if self._resume is not None and self._resume.state is not None:
            self.driver.restored = list(self._resume.state.get("restored", []))

    def _spawn_worker(self, k: int):
        cfg = self.cfg
        handle = self.backend.spawn(
            ClientWorkerActor,
            k,
            self._data_ref,
            self._partitions[k],
            self.model_spec,
            self._train,
            cfg.seed,
            self._threads,
            cfg.ray.materialize_uploads,
            num_cpus=cfg.ray.cpus_per_worker,
            num_gpus=cfg.ray.gpus_per_worker,
        )
        events = self.plan.for_worker(k, sorted(self._partitions[k]))
        if events:
            self.backend.call(handle, "set_faults", events)
        return handle

    def _spawn_evaluator(self):
        return self.backend.spawn(
            EvaluatorActor, self._test_ref, self.model_spec, self.cfg.seed, self.cfg.train.eval_batch_size
        )

    def _setup_arm(self, arm: str, coding: dict, *, restore: bool) -> None:
        """Give every party its part of ``arm``: fresh keys, or (``restore``) the keys already taken back
        from their files by :meth:`Checkpoints.restore_keys`."""
        cfg, backend, parties = self.cfg, self.backend, self.parties
        kind = arm_kind(arm)
        mode, n_tilde, bounds = arm_shape(cfg, arm, self.n)
        if mode != "plain":
            # Refuse (or warn) before any work if float64 cannot carry this configuration (SPEC "Precision").
            self.precision[arm] = arm_precision(cfg, mode=mode, n=self.n, w_max=float(self.w0.abs().max()))
        server_kw = dict(
            mode=mode,
            n=self.n,
            coding=coding,
            run_seed=cfg.seed,
            key_path=self.checkpoints.key_path("server", arm),
        )
        if restore:
            done = []
        else:
            server_view = backend.call(parties.server, "setup_arm", arm, **server_kw)
            agg_state = backend.call(
                parties.aggregators[0],
                "create_key",
                arm,
                mode=mode,
                coding=coding,
                run_seed=cfg.seed,
                key_path=self.checkpoints.key_path("aggregator", arm),
            )
            done = [
                backend.call(a, "setup_arm", arm, mode=mode, coding=coding, state=agg_state, bounds=bounds[s])
                for s, a in enumerate(parties.aggregators[: len(bounds)])
            ]
        backend.get(done)
        if restore:
            server_view = backend.call(parties.server, "client_view", arm)
        agg_view = backend.call(parties.aggregators[0], "client_view", arm)
        self.views[arm] = (server_view, agg_view)
        setup = {"mode": mode, "client_form": cfg.coding.client_form, "key_epoch": 0}
        if kind != "nbafl":
            # Every SIFL ε assumes ‖w_i‖ ≤ C; fl, the SIFL arms' paired reference, trains under the same
            # constraint so that the paired deviation measures coding alone. NbAFL clips to its own C.
            setup["model_clip"] = float(cfg.privacy.clip)
        if kind == "nbafl":
            eps, nb = nbafl_epsilon(cfg, arm), cfg.nbafl
            # L = T: a client can upload in every round (also under sampling), see nbafl_exposures.
            exposures = nbafl_exposures(exposures=nb.exposures, rounds=cfg.train.rounds)
            setup["nbafl_clip"] = float(nb.clip)
            # Each client's noise seed is made in its worker (secure random, or from coding.key_seed): never
            # the run seed, which would let anyone holding the configuration subtract the noise.
            setup["nbafl_noise"] = ClientNoiseSeeds(key_seed=cfg.coding.key_seed)
            setup["nbafl_sigma"] = float(
                nbafl_sigma(
                    epsilon=eps,
                    delta=nb.delta,
                    clip=nb.clip,
                    local_size=int(self.sizes.min()),
                    exposures=exposures,
                    calibration=nb.calibration,
                )
            )
            self.privacy[arm] = {
                "mechanism": "nbafl-gaussian",
                "epsilon": eps,
                "delta": nb.delta,
                "sigma": setup["nbafl_sigma"],
                "clip": nb.clip,
                "exposures": nb.exposures,
                "uploads_covered": exposures,
                "calibration": nb.calibration,
                "guarantee": nbafl_guarantee(
                    exposures=nb.exposures, rounds=cfg.train.rounds, calibration=nb.calibration
                ),
                "scope": "the whole upload vector, "
                + (f"all {exposures} rounds together" if exposures > 1 else "each round alone"),
            }
        self.setups[arm] = setup
        done = [backend.call(w, "set_arm", arm, setup, server_view, agg_view) for w in parties.workers]
        done.append(backend.call(parties.evaluator, "set_arm", arm, mode, server_view, agg_view))
        broadcast = None
        if not restore:
            broadcast = backend.call(parties.server, "initial_broadcast", arm, backend.put(self.w0))
        backend.get(done)
        if mode != "plain":
            key_norms, agg_norms = backend.get(
                [
                    backend.call(parties.server, "key_norms", arm),
                    backend.call(parties.aggregators[0], "key_norms", arm),
                ]
            )
            key_ro, agg_ro = backend.get(
                [
                    backend.call(parties.server, "roundoff", arm),
                    backend.call(parties.aggregators[0], "roundoff", arm),
                ]
            )
            bound = arm_round_bound(
                cfg,
                mode=mode,
                n=self.n,
                key_roundoff=key_ro,
                aggregator_roundoff=agg_ro,
                clients_per_worker=max(len(p) for p in self._partitions),
                workers=self.num_workers,
                initial_norm=float(torch.linalg.vector_norm(self.w0)),
            )
            self.precision[arm].update(bound or {"round_bound": None})
            sizes = {"local_size": int(self.sizes.min()), "total_size": int(self.sizes.sum())}
            self.privacy[arm] = describe_arm(
                cfg, mode=mode, key_norms=key_norms, agg_norms=agg_norms, **sizes
            )
            self.releases[arm] = arm_releases(
                cfg, mode=mode, key_norms=key_norms, agg_norms=agg_norms, **sizes
            )
        if restore:
            broadcast = self.states[arm].broadcast  # from the checkpoint (see Checkpoints.load_broadcasts)
        self.states[arm] = ArmState(name=arm, mode=mode, n_tilde=n_tilde, bounds=bounds, broadcast=broadcast)

    # ---------------------------------------------------------------- checkpoints
    @property
    def next_round(self) -> int:
        """The first round :meth:`run` will play (0, or the round after the restored checkpoint)."""
        return self.driver.next_round

    def _checkpoint(self, t: int) -> None:
        """End of round ``t``: save the broadcasts and the driver's state (see :meth:`Checkpoints.save`).

        A checkpoint that cannot be written (disk full, a folder gone) does not stop the run: it says so,
        and the previous complete checkpoint stays the one a restore or a resume would use.
        """
        try:
            self.checkpoints.save(t, self.backend, self.parties.server, self.states, self.driver)
        except PartyLost:
            raise
        except (OSError, CheckpointError) as err:
            last = self.checkpoints.store.available()
            self.driver.incidents.append(
                {"round": t, "arm": None, "what": f"checkpoint not written: {err}", "action": "run continues"}
            )
            self._say(
                f"round {t}: the checkpoint could not be written ({err}); the run continues, the last "
                f"complete checkpoint is {last[-1] if last else 'none'}"
            )

    # ---------------------------------------------------------------- failures
    def replace_worker(self, k: int, *, arm: str, t: int, reason: str) -> float:
        """:class:`~sifl_ray.round.Supervisor`: a fresh worker ``k`` (same clients, every arm set up)."""
        with contextlib.suppress(Exception):  # already gone
            self.backend.kill(self.parties.workers[k])
        tic = time.perf_counter()
        handle = self._spawn_worker(k)
        ready = [self.backend.call(handle, "set_arm", a, self.setups[a], *self.views[a]) for a in self.arms]
        self.backend.get(ready)
        self.parties.workers[k] = handle
        took = time.perf_counter() - tic
        self._say(f"round {t} {arm}: worker {k} {reason}; replaced it ({took:.1f} s)")
        return took

    def after_submit(self, stage: str, *, arm: str, t: int) -> None:
        """:class:`~sifl_ray.round.Supervisor`: the faults the driver injects itself (``ray.kill``)."""
        if stage == "train":
            for ev in self.plan.at("worker_kill", arm, t):
                self.journal.append(
                    {"event": "fired", "fault": ev.index, "kind": ev.kind, "round": t, "arm": arm}
                )
                self.backend.kill(self.parties.workers[ev.worker])
            return
        targets = {
            "server_kill": lambda ev: self.parties.server,
            "aggregator_kill": lambda ev: self.parties.aggregators[ev.shard],
            "evaluator_kill": lambda ev: self.parties.evaluator,
        }
        for kind, handle in targets.items():
            for ev in self.plan.at(kind, arm, t):
                if ev.index in self.fired_once:
                    continue
                self.fired_once.add(ev.index)
                self.journal.append(
                    {"event": "fired", "fault": ev.index, "kind": ev.kind, "round": t, "arm": arm}
                )
                self.backend.kill(handle(ev))

    def _maybe_kill_driver(self, arm: str, t: int) -> None:
        for ev in self.plan.at("driver_kill", arm, t):
            if ev.index in self.fired_once:
                continue
            self.journal.append(
                {"event": "fired", "fault": ev.index, "kind": ev.kind, "round": t, "arm": arm}
            )
            self._say(f"round {t} {arm}: injected fault: the driver SIGKILLs itself (resume with --resume)")
            os.kill(os.getpid(), signal.SIGKILL)

    def _recover(self, lost: PartyLost) -> int:
        """Respawn the lost party, restore it from its key file and every arm from the last checkpoint;
        return the round to continue from."""
        cfg = self.cfg
        self.restores += 1
        if not cfg.checkpoint.every:
            raise RuntimeError(
                f"{lost}; checkpointing is off (checkpoint.every=0), so its key is lost and the run cannot "
                "continue. Set checkpoint.every ≥ 1 to make a party restorable."
            ) from lost
        if self.restores > cfg.faults.max_restores:
            raise RuntimeError(f"{lost}; gave up after {cfg.faults.max_restores} restores") from lost
        tic = time.perf_counter()
        self.journal.append(
            {
                "event": "party_lost",
                "party": lost.party,
                "index": lost.index,
                "round": lost.round,
                "arm": lost.arm,
            }
        )
        try:
            self._respawn_party(lost.party, lost.index)
            ckpt = self.checkpoints.store.latest()
            self.checkpoints.load_broadcasts(self.backend, self.parties.server, self.states, self.w0, ckpt)
            self.driver.load(self.checkpoints.driver_state(ckpt))
        except PartyLost:
            raise
        except Exception as err:
            raise RuntimeError(f"{lost}; it could not be restored: {describe_error(err)}") from err
        resume_at = self.next_round
        record = {
            "party": lost.party if lost.party != "aggregator" else f"aggregator{lost.index}",
            "died_in_round": lost.round,
            "arm": lost.arm,
            "from_checkpoint": ckpt.dir.name if ckpt else "start",
            "replayed_from_round": resume_at,
            "restore_s": round(time.perf_counter() - tic, 3),
        }
        self.driver.restored.append(record)
        self.journal.append({"event": "restored", **record})
        self._open_logger(purge_step=resume_at)
        for arm in self.arms:
            self.logger.log_text(arm, "faults/restored", record_text(record), resume_at)
        self._say(
            f"round {lost.round} {lost.arm}: {lost}; restored it from "
            f"{record['from_checkpoint']} and replaying from round {resume_at}"
        )
        return resume_at

    def _respawn_party(self, party: str, index: int) -> None:
        backend, parties = self.backend, self.parties
        if party == "server":
            old, parties.server = parties.server, backend.spawn(ServerActor)
        elif party == "aggregator":
            old = parties.aggregators[index]
            parties.aggregators[index] = backend.spawn(AggregatorActor, index)
        else:
            old, parties.evaluator = parties.evaluator, self._spawn_evaluator()
        with contextlib.suppress(Exception):  # already gone
            backend.kill(old)
        if party == "evaluator":
            backend.get(
                [
                    backend.call(parties.evaluator, "set_arm", a, self.states[a].mode, *self.views[a])
                    for a in self.arms
                ]
            )
        else:
            which = ("server",) if party == "server" else (f"aggregator{index}",)
            self.checkpoints.restore_keys(backend, parties, self.n, which)

    # ---------------------------------------------------------------- rounds
    def assignment(self, t: int) -> list[list[int]]:
        sampled = sample_clients(self.cfg.clients.num_clients, self.cfg.clients.fraction, t, self.cfg.seed)
        out: list[list[int]] = [[] for _ in range(self.num_workers)]
        for c in sampled:
            out[self.owner[int(c)]].append(int(c))
        return out

    def _open_logger(self, *, purge_step: int | None) -> None:
        """(Re)open the TensorBoard writers; ``purge_step=t`` makes TensorBoard drop the steps ≥ t that an
        earlier writer left (a round replayed after a restore or a resume is then logged once)."""
        if self.logger is not None:
            for writer in self.logger.writers.values():  # not close(): the run is not over
                writer.close()
        self.logger = RunLogger(
            self.run_dir,
            self.arms,
            config_yaml=to_yaml(self.cfg),
            hparams=flat_hparams(self.cfg),
            tensorboard=self.cfg.output.tensorboard,
            purge_step=purge_step,
        )

    def _play_round(self, t: int, progress: Progress) -> None:
        assignment = self.assignment(t)
        latest: dict[str, float] = {}
        for arm in self.arms:
            result: RoundResult = run_round(
                self.backend,
                self.parties,
                self.states[arm],
                t,
                assignment,
                policy=self.policy,
                supervisor=self,
            )
            metrics = dict(result.metrics)
            if arm in self.releases:
                # A round starts from the server's initial M1 encoding until one round was not skipped (M2's
                # round 0 is an M1 round: see ArmReleases). Read before this round joins the history.
                initial = not any(r.get("clients/accepted", 1) > 0 for r in self.driver.history[arm])
                releases = self.releases[arm].of_round(from_initial_broadcast=initial)
                self.driver.accountant.record(arm=arm, round=t, releases=releases)
                metrics.update({f"privacy/epsilon_{r.release}": r.epsilon for r in releases})
            else:
                metrics.update(epsilon_metrics(self.privacy.get(arm)))
            self.driver.wall[arm] += metrics["time/round"]
            self.logger.log_round(arm, t, metrics)
            self.driver.history[arm].append({"round": t, **metrics})
            latest[arm] = metrics["test_accuracy"]
            self._record_incidents(arm, t, result)
            self._maybe_kill_driver(arm, t)
        progress.update(t, latest)

    def _record_incidents(self, arm: str, t: int, result: RoundResult) -> None:
        got = round_incidents(arm, t, result)
        if got is None:
            return
        self.driver.dropped[arm].append(got.entry)
        self.logger.log_text(arm, "faults", record_text(got.entry), t)
        self.driver.incidents.extend(got.incidents)
        for message in got.messages:
            self._say(message)

    def _say(self, text: str) -> None:
        print(f"[sifl] {text}", file=sys.stderr, flush=True)

    def run(self, *, on_round_end: Callable[[Simulation, int], None] | None = None) -> RunResult:
        """Play the remaining rounds (all of them, or those after the restored checkpoint).

        Args:
            on_round_end: called as ``on_round_end(sim, t)`` after round ``t`` (and its checkpoint).
        """
        cfg = self.cfg
        start = self.next_round
        resumed = self._resume is not None
        self._open_logger(purge_step=start if resumed else None)
        if resumed:
            ckpt = self._resume.checkpoint
            record = {
                "party": "driver",
                "from_checkpoint": ckpt.dir.name if ckpt else "start",
                "replayed_from_round": start,
                "journal": [r for r in self.journal.records() if r.get("kind") == "driver_kill"],
            }
            self.driver.restored.append(record)
            self.journal.append({"event": "resumed", **record})
            for arm in self.arms:
                self.logger.log_text(arm, "faults/restored", record_text(record), start)
            self._say(
                f"resumed {self.run_dir} from {record['from_checkpoint']}: "
                f"rounds {start}..{cfg.train.rounds - 1}"
            )
        else:
            for arm, info in self.privacy.items():
                self.logger.log_text(arm, "privacy", record_text(info))
        progress = Progress(cfg.train.rounds, cfg.output.progress)
        t = start
        while t < cfg.train.rounds:
            try:
                self._play_round(t, progress)
                if cfg.checkpoint.every and (
                    (t + 1) % cfg.checkpoint.every == 0 or t == cfg.train.rounds - 1
                ):
                    self._checkpoint(t)
            except PartyLost as lost:
                t = self._recover(lost)
                continue
            if on_round_end is not None:
                on_round_end(self, t)
            t += 1
        summary = self._summary()
        for message in end_of_run_messages(summary, self.precision):
            self._say(message)
        self.logger.write_summary(summary)
        if len(self.driver.accountant):
            report = self.driver.accountant.report()
            for arm in self.releases:
                self.logger.log_text(arm, "privacy/accountant", report, cfg.train.rounds - 1)
        if cfg.output.plot:
            self.logger.plot(self.driver.history, f"{cfg.scenario}: test accuracy")
        self.logger.close()
        return RunResult(
            run_dir=self.run_dir,
            summary=summary,
            history=self.driver.history,
            result_line=result_line(summary),
        )

    def _summary(self) -> dict[str, Any]:
        return summarise(
            self.cfg,
            run_dir=self.run_dir,
            n=self.n,
            num_workers=self.num_workers,
            backend=self.backend.name,
            history=self.driver.history,
            wall=self.driver.wall,
            dropped=self.driver.dropped,
            privacy=self.privacy,
            precision=self.precision,
            accountant=self.driver.accountant.summary() if len(self.driver.accountant) else None,
            injected=[ev.describe() for ev in self.plan.events],
            incidents=self.driver.incidents,
            journal=str(self.journal.path) if self.journal.path.exists() else None,
            restored=self.driver.restored,
            checkpoint_dir=str(self.checkpoints.store.root),
            checkpoint_s=self.driver.checkpoint_s,
        )

    def global_model(self, arm: str) -> torch.Tensor:
        """The decoded global model of ``arm`` (simulation only: the evaluator decodes it for the driver)."""
        ref = self.backend.call(self.parties.evaluator, "decode", arm, self.states[arm].broadcast)
        return self.backend.get(ref)

    def actors(self) -> dict[str, Any]:
        p = self.parties
        out = {"server": p.server} if p.evaluator is None else {"server": p.server, "evaluator": p.evaluator}
        out.update({f"aggregator{i}": a for i, a in enumerate(p.aggregators)})
        out.update({f"worker{i}": w for i, w in enumerate(p.workers)})
        return out

    def close(self) -> None:
        """Stop this simulation's actors (their CPUs go back to Ray); shut Ray down if we started it."""
        if self.backend.name == "ray":
            for handle in self.actors().values():
                self.backend.kill(handle)
        self.backend.shutdown()


def run_scenario(cfg: DictConfig, *, backend=None, run_dir: Path | None = None) -> RunResult:
    sim = Simulation(cfg, backend=backend, run_dir=run_dir)
    try:
        return sim.run()
    finally:
        sim.close()


def cpu_count() -> int:
    return os.cpu_count() or 1
