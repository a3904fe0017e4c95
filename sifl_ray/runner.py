"""The scenario runner: build the parties, run every arm round by round, log, summarise.

All arms of a scenario share the data, the partition, the initial model, the client sampling and the
minibatch order (every one of these streams is derived from the run seed and its name), so their curves
differ only by what the arm does: nothing (fl), SIFL coding (sifl_m1, sifl_m2) or NbAFL noise.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from actors.aggregator import AggregatorActor
from actors.client_worker import ClientWorkerActor
from actors.evaluator import EvaluatorActor
from actors.server import ServerActor
from sifl_ray.config import arm_kind, arm_names, nbafl_epsilon, to_yaml
from sifl_ray.data import load_dataset, partition_dataset, sample_clients
from sifl_ray.logging import RunLogger, format_table
from sifl_ray.models import build_model, flatten_params
from sifl_ray.privacy.accountant import SiflAccountant
from sifl_ray.privacy.nbafl import nbafl_sigma
from sifl_ray.roles.aggregator import shard_bounds
from sifl_ray.round import ArmState, Parties, RoundResult, run_round
from sifl_ray.seeding import torch_generator
from sifl_ray.sizing import arm_precision, arm_releases, describe_arm

MODE = {"fl": "plain", "nbafl": "plain", "sifl_m1": "m1", "sifl_m2": "m2"}


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    result_line: str = ""


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
    """A configured scenario with its parties spawned; :meth:`run` executes it."""

    def __init__(self, cfg: DictConfig, *, backend=None, run_dir: Path | None = None):
        self.cfg = cfg
        self.arms = arm_names(cfg)
        self.backend = backend or make_backend(cfg)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        self.run_dir = Path(run_dir) if run_dir else Path(cfg.output.dir) / cfg.scenario / stamp
        self._build()

    # ---------------------------------------------------------------- set-up
    def _build(self) -> None:
        cfg, backend = self.cfg, self.backend
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
        model_spec = {
            "name": cfg.train.model,
            "input_shape": list(self.dataset.x_train.shape[1:]),
            "num_classes": int(self.dataset.num_classes),
            "dtype": cfg.train.dtype,
        }
        net = build_model(
            cfg.train.model,
            input_shape=tuple(model_spec["input_shape"]),
            num_classes=model_spec["num_classes"],
            generator=torch_generator(cfg.seed, "init"),
        )
        self.w0 = flatten_params(net).to(torch.float64)
        self.n = int(self.w0.numel())
        train = OmegaConf.to_container(cfg.train)
        data_ref = backend.put(
            {"x_train": np.asarray(self.dataset.x_train), "y_train": np.asarray(self.dataset.y_train)}
        )
        test_ref = backend.put(
            {"x_test": np.asarray(self.dataset.x_test), "y_test": np.asarray(self.dataset.y_test)}
        )
        threads = max(1, int(cfg.ray.cpus_per_worker)) if backend.name == "ray" else 1
        self.parties = Parties(
            server=backend.spawn(ServerActor),
            aggregators=[backend.spawn(AggregatorActor, s) for s in range(cfg.ray.num_shards)],
            workers=[
                backend.spawn(
                    ClientWorkerActor,
                    k,
                    data_ref,
                    {int(c): parts[c] for c in owners[k]},
                    model_spec,
                    train,
                    cfg.seed,
                    threads,
                    cfg.ray.materialize_uploads,
                    num_cpus=cfg.ray.cpus_per_worker,
                    num_gpus=cfg.ray.gpus_per_worker,
                )
                for k in range(self.num_workers)
            ],
            evaluator=backend.spawn(
                EvaluatorActor, test_ref, model_spec, cfg.seed, cfg.train.eval_batch_size
            ),
        )
        self.states: dict[str, ArmState] = {}
        self.precision: dict[str, dict[str, Any]] = {}
        self.privacy: dict[str, dict[str, Any]] = {}
        self.releases: dict[str, tuple] = {}
        self.accountant = SiflAccountant()
        coding = OmegaConf.to_container(cfg.coding)
        for arm in self.arms:
            self._setup_arm(arm, coding)

    def _setup_arm(self, arm: str, coding: dict) -> None:
        cfg, backend, parties = self.cfg, self.backend, self.parties
        kind = arm_kind(arm)
        mode = MODE[kind]
        if mode != "plain":
            # Refuse (or warn) before any work if float64 cannot carry this configuration (SPEC "Precision").
            self.precision[arm] = arm_precision(cfg, mode=mode, n=self.n, w_max=float(self.w0.abs().max()))
        n_tilde = self.n if mode == "plain" else self.n + cfg.coding.n_extra
        bounds = shard_bounds(n_tilde, cfg.ray.num_shards)
        server_view = backend.call(
            parties.server, "setup_arm", arm, mode=mode, n=self.n, coding=coding, run_seed=cfg.seed
        )
        agg_state = backend.call(
            parties.aggregators[0], "create_key", arm, mode=mode, coding=coding, run_seed=cfg.seed
        )
        done = [
            backend.call(a, "setup_arm", arm, mode=mode, coding=coding, state=agg_state, bounds=bounds[s])
            for s, a in enumerate(parties.aggregators[: len(bounds)])
        ]
        agg_view = backend.call(parties.aggregators[0], "client_view", arm)
        setup = {"mode": mode, "client_form": cfg.coding.client_form, "key_epoch": 0}
        if kind == "nbafl":
            eps = nbafl_epsilon(cfg, arm)
            setup["nbafl_clip"] = float(cfg.nbafl.clip)
            setup["nbafl_sigma"] = float(
                nbafl_sigma(
                    epsilon=eps, delta=cfg.nbafl.delta, clip=cfg.nbafl.clip, local_size=int(self.sizes.min())
                )
            )
            self.privacy[arm] = {
                "mechanism": "nbafl-gaussian",
                "epsilon": eps,
                "delta": cfg.nbafl.delta,
                "sigma": setup["nbafl_sigma"],
                "clip": cfg.nbafl.clip,
                "scope": "per client upload, per round (Gaussian mechanism)",
            }
        done += [backend.call(w, "set_arm", arm, setup, server_view, agg_view) for w in parties.workers]
        done.append(backend.call(parties.evaluator, "set_arm", arm, mode, server_view, agg_view))
        broadcast = backend.call(parties.server, "initial_broadcast", arm, backend.put(self.w0))
        backend.get(done)
        if mode != "plain":
            key_norms, agg_norms = backend.get(
                [
                    backend.call(parties.server, "key_norms", arm),
                    backend.call(parties.aggregators[0], "key_norms", arm),
                ]
            )
            sizes = {"local_size": int(self.sizes.min()), "total_size": int(self.sizes.sum())}
            self.privacy[arm] = describe_arm(
                cfg, mode=mode, key_norms=key_norms, agg_norms=agg_norms, **sizes
            )
            self.releases[arm] = arm_releases(
                cfg, mode=mode, key_norms=key_norms, agg_norms=agg_norms, **sizes
            )
        self.states[arm] = ArmState(name=arm, mode=mode, n_tilde=n_tilde, bounds=bounds, broadcast=broadcast)

    # ---------------------------------------------------------------- rounds
    def assignment(self, t: int) -> list[list[int]]:
        sampled = sample_clients(self.cfg.clients.num_clients, self.cfg.clients.fraction, t, self.cfg.seed)
        out: list[list[int]] = [[] for _ in range(self.num_workers)]
        for c in sampled:
            out[self.owner[int(c)]].append(int(c))
        return out

    def run(self) -> RunResult:
        cfg = self.cfg
        logger = RunLogger(
            self.run_dir,
            self.arms,
            config_yaml=to_yaml(cfg),
            hparams=_flat_hparams(cfg),
            tensorboard=cfg.output.tensorboard,
        )
        history: dict[str, list[dict[str, float]]] = {arm: [] for arm in self.arms}
        wall: dict[str, float] = dict.fromkeys(self.arms, 0.0)
        dropped: dict[str, list[dict]] = {arm: [] for arm in self.arms}
        for arm, info in self.privacy.items():
            logger.log_text(arm, "privacy", _privacy_text(info))
        progress = Progress(cfg.train.rounds, cfg.output.progress)
        for t in range(cfg.train.rounds):
            assignment = self.assignment(t)
            latest: dict[str, float] = {}
            for arm in self.arms:
                result: RoundResult = run_round(self.backend, self.parties, self.states[arm], t, assignment)
                if arm in self.releases:
                    self.accountant.record(arm=arm, round=t, releases=self.releases[arm])
                metrics = dict(result.metrics)
                metrics.update(_epsilon_metrics(self.privacy.get(arm)))
                wall[arm] += metrics["time/round"]
                logger.log_round(arm, t, metrics)
                history[arm].append({"round": t, **metrics})
                latest[arm] = metrics["test_accuracy"]
                if result.rejected:
                    dropped[arm].append(
                        {"round": t, "rejected": {str(k): v for k, v in result.rejected.items()}}
                    )
            progress.update(t, latest)
        summary = self._summary(history, wall, dropped)
        logger.write_summary(summary)
        if len(self.accountant):
            report = self.accountant.report()
            for arm in self.releases:
                logger.log_text(arm, "privacy/accountant", report, cfg.train.rounds - 1)
        if cfg.output.plot:
            logger.plot(history, f"{cfg.scenario}: test accuracy")
        logger.close()
        return RunResult(
            run_dir=self.run_dir, summary=summary, history=history, result_line=result_line(summary)
        )

    def _summary(self, history, wall, dropped) -> dict[str, Any]:
        cfg = self.cfg
        fl_final = history["fl"][-1]["test_accuracy"] if "fl" in history else None
        arms: dict[str, Any] = {}
        for arm in self.arms:
            rows = history[arm]
            final = rows[-1]["test_accuracy"]
            devs = [r["max_deviation"] for r in rows if "max_deviation" in r]
            priv = self.privacy.get(arm, {})
            arms[arm] = {
                "final_accuracy": final,
                "final_test_loss": rows[-1]["test_loss"],
                "delta_vs_fl_pp": None if fl_final is None or arm == "fl" else 100 * (final - fl_final),
                "max_deviation": max(devs) if devs else None,
                "predicted_bound": self.precision.get(arm, {}).get("run_bound"),
                "privacy": priv,
                "wall_s": wall[arm],
                "timings_median_s": {
                    k[5:]: float(np.median([r[k] for r in rows])) for k in rows[0] if k.startswith("time/")
                },
                "object_store_bytes_per_round": float(np.median([r["bytes/object_store"] for r in rows])),
                "rounds": [{k: v for k, v in r.items()} for r in rows],
                "dropped": dropped[arm],
            }
        bound = max((p["run_bound"] for p in self.precision.values()), default=None)
        return {
            "scenario": cfg.scenario,
            "run_dir": str(self.run_dir),
            "n": self.n,
            "n_tilde": self.n + cfg.coding.n_extra,
            "n_prime": (self.n + cfg.coding.n_extra) * cfg.coding.p,
            "num_clients": cfg.clients.num_clients,
            "num_workers": self.num_workers,
            "rounds": cfg.train.rounds,
            "backend": self.backend.name,
            "predicted_bound": bound,
            "evaluator": "simulation device holding both decoding keys; no real deployment has it",
            "privacy_scope": "ε figures are per-element, per-round guarantees as the paper states them; "
            "they say "
            "nothing about the whole vector or about many rounds (see README, Threat model).",
            "accountant": self.accountant.summary() if len(self.accountant) else None,
            "arms": arms,
        }

    def global_model(self, arm: str) -> torch.Tensor:
        """The decoded global model of ``arm`` (simulation only: the evaluator decodes it for the driver)."""
        ref = self.backend.call(self.parties.evaluator, "decode", arm, self.states[arm].broadcast)
        return self.backend.get(ref)

    def actors(self) -> dict[str, Any]:
        p = self.parties
        out = {"server": p.server, "evaluator": p.evaluator}
        out.update({f"aggregator{i}": a for i, a in enumerate(p.aggregators)})
        out.update({f"worker{i}": w for i, w in enumerate(p.workers)})
        return out

    def close(self) -> None:
        """Stop this simulation's actors (their CPUs go back to Ray); shut Ray down if we started it."""
        if self.backend.name == "ray":
            for handle in self.actors().values():
                self.backend.kill(handle)
        self.backend.shutdown()


def _flat_hparams(cfg: DictConfig) -> dict[str, Any]:
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}{k}.", v) if isinstance(v, dict) else walk(f"{prefix}{k}", v)
        elif isinstance(node, int | float | str | bool):
            flat[prefix.rstrip(".")] = node

    walk("", OmegaConf.to_container(cfg))
    flat.pop("coding.key_seed", None)
    return flat


def _epsilon_metrics(info: dict[str, Any] | None) -> dict[str, float]:
    if not info:
        return {}
    out = {}
    for key in ("epsilon_local", "epsilon_broadcast", "epsilon_global"):
        if info.get(key) is not None:
            out[f"privacy/{key}"] = float(info[key])
    if info.get("mechanism") == "nbafl-gaussian":
        out["privacy/epsilon_local"] = float(info["epsilon"])
    return out


def _privacy_text(info: dict[str, Any]) -> str:
    return "\n".join(f"- **{k}**: {v}" for k, v in info.items())


def result_line(summary: dict[str, Any]) -> str:
    """``RESULT <scenario> <arm>=<acc> ... max_dev_<arm>=<x> ... bound=<b> run_dir=<path>``."""
    parts = [f"RESULT {summary['scenario']}"]
    parts += [f"{arm}={a['final_accuracy']:.4f}" for arm, a in summary["arms"].items()]
    parts += [
        f"max_dev_{arm}={a['max_deviation']:.3e}"
        for arm, a in summary["arms"].items()
        if a["max_deviation"] is not None
    ]
    bound = summary.get("predicted_bound")
    parts.append(f"bound={bound:.3e}" if bound is not None else "bound=none")
    parts.append(f"run_dir={summary['run_dir']}")
    return " ".join(parts)


def summary_table(summary: dict[str, Any]) -> str:
    rows = []
    for arm, a in summary["arms"].items():
        priv = a["privacy"]
        rows.append(
            {
                "arm": arm,
                "final_accuracy": a["final_accuracy"],
                "delta_vs_fl_pp": a["delta_vs_fl_pp"],
                "max_deviation": a["max_deviation"],
                "epsilon_local": priv.get("epsilon_local", priv.get("epsilon")),
                "epsilon_global": priv.get("epsilon_global", priv.get("epsilon_broadcast")),
                "wall_s": a["wall_s"],
            }
        )
    return format_table(rows)


def run_scenario(cfg: DictConfig, *, backend=None, run_dir: Path | None = None) -> RunResult:
    sim = Simulation(cfg, backend=backend, run_dir=run_dir)
    try:
        return sim.run()
    finally:
        sim.close()


def cpu_count() -> int:
    return os.cpu_count() or 1
