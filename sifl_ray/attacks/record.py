"""Transcripts recorded from the shipped parties: any registered arm, played on a small task, round by round.

Why here. The attacks need whole encoded vectors over tens of rounds, cheap only for small models (n in
the hundreds), and the scorer needs the plain models behind them, which no party of a deployment holds.
So the attack suite does not simulate the protocol: it plays the arm through the platform's own parties
(:class:`~actors.server.ServerActor`, :class:`~actors.aggregator.AggregatorActor`, the client role
:class:`~sifl_ray.roles.client.ClientWorkerRole` with a :class:`~sifl_ray.optim.TorchTrainer` on the task's
loss) and its own round, :func:`~sifl_ray.round.run_round`, on the in-process sequential backend, and
records what travelled on each channel into a :class:`TranscriptRecorder`:

* client → aggregator: each upload, as the client worker (the keyless leaf of the aggregator) accepted it,
  through the worker's ``recorder`` hook;
* aggregator → server: what the server's ``finish_round`` received (:class:`RecordingBackend`);
* server → clients: each round's broadcast, the reference the driver holds (in-process it resolves).

Keys are made by the server and aggregator actors themselves from a ``coding`` section, as the runner has
them make keys (:func:`sifl_ray.roles.factories.make_party_server_key`); the platform never re-keys,
so a design that does (``-rekey<k>``) sets the arm up again every k rounds with a fresh key, from the current
global model.

The scorer's truth (:class:`GroundTruth`) never comes from decoding an upload (that would make a decoding
adversary look perfect by construction). It comes from simulation-only instruments, labelled so:

* :class:`ModelTap` wraps the arm's client step and keeps, per client and round, the plain model the client
  trained and the model its upload carries (the step's output);
* the evaluator (simulation only, as in every platform run) decodes each broadcast to the plain model every
  client starts from, with the clients' own view of the keys: the same operation, the same numbers;
* the keys, read from the server and aggregator actors in this process (no deployment can).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sifl_ray.attacks.config import Design
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, ServerKey
from sifl_ray.handles import AggregatorHandle, EvaluatorHandle, ServerHandle, WorkerHandle
from sifl_ray.optim import TorchTrainer
from sifl_ray.roles.evaluator import EvaluatorRole
from sifl_ray.seeding import derive_seed, torch_generator
from sifl_ray.sequential import SequentialBackend
from sifl_ray.specs import Coding, CodingSpec

if TYPE_CHECKING:
    from sifl_ray.round import ArmState

# ------------------------------------------------------------------------------------------------------------
# The small learning task.


@dataclass(frozen=True)
class SmallTask:
    """Synthetic binary classification split over clients, and a small float64 model for it: logistic
    regression (``hidden == 0``) or a one-layer tanh MLP. Its parameters, in ``model.parameters()`` order,
    are the vector w the codes act on."""

    features: int
    hidden: int
    X: tuple[torch.Tensor, ...]
    y: tuple[torch.Tensor, ...]

    @property
    def n(self) -> int:
        d, h = self.features, self.hidden
        return d + 1 if h == 0 else d * h + 2 * h + 1

    @property
    def clients(self) -> int:
        return len(self.X)

    @property
    def sizes(self) -> np.ndarray:
        """Every client's data set size |D_i| (its FedAvg weight)."""
        return np.array([x.shape[0] for x in self.X], dtype=np.float64)

    def model(self) -> nn.Module:
        """A fresh float64 module (its initial weights are overwritten by the broadcast model)."""
        if self.hidden == 0:
            layers: list[nn.Module] = [nn.Linear(self.features, 1)]
        else:
            layers = [nn.Linear(self.features, self.hidden), nn.Tanh(), nn.Linear(self.hidden, 1)]
        return nn.Sequential(*layers).to(torch.float64)

    def trainer(self, lr: float) -> TorchTrainer:
        """The clients' base optimizer: plain SGD on the logistic loss (``sifl_ray.optim``)."""
        return TorchTrainer(self.model(), "sgd", lr, loss_fn=logistic_loss)

    def pooled(self) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
        """Every client's samples in one array pair, and client id → its sample indices (what a client
        worker is given: :class:`~sifl_ray.roles.client.ClientWorkerRole`)."""
        x = torch.cat(self.X).numpy()
        y = torch.cat(self.y).numpy()
        ends = np.cumsum([0, *(int(s) for s in self.sizes)])
        return x, y, {c: np.arange(ends[c], ends[c + 1]) for c in range(self.clients)}


def task_context(task: SmallTask, platform: DictConfig, arm: str, **norms: Any):
    """The :class:`~sifl_ray.arms.ArmContext` an arm is set up with on ``task`` (``norms``: the keys' public
    norms, for a coded arm's privacy report)."""
    from sifl_ray.arms import ArmContext

    sizes = task.sizes
    return ArmContext(
        cfg=platform,
        arm=arm,
        n=task.n,
        local_size=int(sizes.min()),
        total_size=int(sizes.sum()),
        largest_size=int(sizes.max()),
        **norms,
    )


def logistic_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The task's loss: binary cross-entropy on the model's single logit."""
    return nn.functional.binary_cross_entropy_with_logits(logits.squeeze(-1), y)


def make_task(
    *, features: int, hidden: int, clients: int, samples_per_client: int, teacher_scale: float, seed: int
) -> SmallTask:
    """Gaussian features and labels drawn from a random logistic teacher (noisy labels keep the gradients
    alive, so client updates keep spanning new directions)."""
    gen = torch_generator(seed, "attack-task", "data")
    teacher = torch.randn(features, generator=gen, dtype=torch.float64) * (
        teacher_scale / math.sqrt(features)
    )
    Xs, ys = [], []
    for _ in range(clients):
        X = torch.randn(samples_per_client, features, generator=gen, dtype=torch.float64)
        p = torch.sigmoid(X @ teacher)
        ys.append((torch.rand(samples_per_client, generator=gen, dtype=torch.float64) < p).to(torch.float64))
        Xs.append(X)
    return SmallTask(features=features, hidden=hidden, X=tuple(Xs), y=tuple(ys))


def initial_model(task: SmallTask, cfg: DictConfig) -> torch.Tensor:
    """The first global model (the server's first broadcast encodes it)."""
    gen = torch_generator(cfg.seed, "attack-task", "init")
    return torch.randn(task.n, generator=gen, dtype=CODING_DTYPE) * cfg.train.init_scale


# ------------------------------------------------------------------------------------------------------------
# What the scorer knows.


@dataclass
class GroundTruth:
    """What the scorer knows and no adversary does: keys and the plain models behind every encoding.

    ``local_models[t]`` (n × N_c) are the models the clients of round t trained, ``upload_models[t]`` the
    models their uploads carry (after the arm's client step: clipped, or clipped and noised), both from the
    :class:`ModelTap`; ``broadcast_models[t]`` is the model every client starts round t from (the evaluator's
    decoding of the broadcast), ``updates[t] = upload_models[t] − broadcast_models[t]`` and
    ``aggregate_models[t]`` the FedAvg of the upload models. Columns are in client order.
    """

    design: Design
    n: int
    n_tilde: int
    clients: list[int]
    weights: np.ndarray
    arm: str = ""
    coding: Coding = Coding.M1
    keys: dict[int, ServerKey] = field(default_factory=dict)
    agg_key: AggregatorKey | None = None
    local_models: dict[int, np.ndarray] = field(default_factory=dict)
    upload_models: dict[int, np.ndarray] = field(default_factory=dict)
    updates: dict[int, np.ndarray] = field(default_factory=dict)
    broadcast_models: dict[int, np.ndarray] = field(default_factory=dict)
    aggregate_models: dict[int, np.ndarray] = field(default_factory=dict)

    def key_for_round(self, round: int) -> ServerKey:
        return self.keys[self.epoch_of(round)]

    def epoch_of(self, round: int) -> int:
        k = self.design.rekey_every
        return (round - 1) // k if k else 0


@dataclass(frozen=True)
class ModelTap:
    """Simulation-only instrument of the scorer (no deployment has it): the arm's client step, wrapped so
    that it keeps, per ``(round, client)``, the plain model the client trained and the one it uploads.

    It runs where the step runs, in the client worker, on the plain local model before it is encoded; it
    changes nothing (the arm's own step, or none, decides what is uploaded).
    """

    inner: Any = None  # the arm's ClientStep (sifl_ray.arms.ClientStep), or None
    trained: dict = field(default_factory=dict, compare=False)
    uploaded: dict = field(default_factory=dict, compare=False)

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        self.trained[(t, client)] = w.detach().to("cpu", CODING_DTYPE, copy=True)
        out, metrics = (
            (w, {}) if self.inner is None else self.inner(w, start=start, arm=arm, client=client, t=t)
        )
        self.uploaded[(t, client)] = out.detach().to("cpu", CODING_DTYPE, copy=True)
        return out, metrics

    def take(self, t: int, clients: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Round ``t``'s trained and uploaded models as (n × N_c) columns in ``clients`` order; forgotten."""
        trained = [self.trained.pop((t, c)).numpy() for c in clients]
        uploaded = [self.uploaded.pop((t, c)).numpy() for c in clients]
        return np.stack(trained, axis=1), np.stack(uploaded, axis=1)


# ------------------------------------------------------------------------------------------------------------
# The parties.


class RecordingBackend(SequentialBackend):
    """The sequential backend, which also hands what the server's ``finish_round`` received (the
    aggregator → server channel: M1's ``w~_a``, M2's ``W'_a``) to :attr:`transcript`."""

    def __init__(self) -> None:
        self.transcript: TranscriptRecorder | None = None

    def call(self, handle, method: str, *args: Any, num_returns: int = 1, **kwargs: Any):
        if method == "finish_round" and self.transcript is not None:
            _arm, t, *shards = self.get(list(args))
            self.transcript.record_server_input(t, torch.cat(shards, dim=0))
        return super().call(handle, method, *args, num_returns=num_returns, **kwargs)


class TaskWorker:
    """The client-worker shell for the task: :class:`~actors.client_worker.ClientWorkerActor`'s two round
    methods over a :class:`~sifl_ray.roles.client.ClientWorkerRole` that trains the task's model on its loss
    (the platform's actor builds one of the platform's models)."""

    def __init__(self, role) -> None:
        self.role = role

    def set_arm(self, arm: str, setup, server_view=None, aggregator_view=None) -> None:
        self.role.set_arm(arm, setup, server_view, aggregator_view)

    def train_round(self, arm, t, broadcast, coding, clients, bounds, attempt: int = 0, inboxes=None):
        partials, report, *tap = self.role.train_round(arm, t, broadcast, coding, clients, bounds, inboxes)
        return (*partials, *tap, report)

    def secagg_advertise(self, arm, public, clients):
        return self.role.secagg_advertise(arm, public, clients)

    def secagg_share(self, arm, t, routed):
        return self.role.secagg_share(arm, t, routed)

    def secagg_unmask(self, arm, t, survivors):
        return self.role.secagg_unmask(arm, t, survivors)


class TaskEvaluator(EvaluatorRole):
    """The platform's evaluator (a simulation device holding both decoding views) on the task's loss, over
    the pooled client data (the task has no test split; nothing reports these metrics). The model is a
    single logit, so accuracy thresholds it at 0."""

    @torch.no_grad()
    def evaluate(self, arm: str, t: int, broadcast: torch.Tensor, coding: Coding) -> dict[str, float]:
        from sifl_ray.models import load_flat_params_

        w = self.decode(arm, broadcast, coding)
        load_flat_params_(self.model, w)
        logits = self.model(self.x.to(self.dtype))
        return {
            "test_loss": float(logistic_loss(logits, self.y.to(self.dtype))),
            "test_accuracy": float(((logits.squeeze(-1) > 0).to(self.dtype) == self.y).to(float).mean()),
            "finite": float(bool(torch.isfinite(w).all())),
        }


def platform_config(
    cfg: DictConfig, *, clients: int, rounds: int, coding: Mapping[str, Any] | None = None
) -> DictConfig:
    """The platform configuration (``sifl run``'s schema) the arms and the parties read: the platform's
    defaults, the attacked arms, the task's clients and training, ``coding`` (key design and scales; the
    key seed is the attack's), then the sections of ``cfg.arm_config``. Validated by the platform's loader.

    Raises:
        ConfigError: an override the platform refuses (each problem with its key and fix).
    """
    from sifl_ray.config import load_config

    tr = cfg.train
    values: dict[str, Any] = {
        "arms": list(cfg.arms),
        "seed": int(cfg.seed),
        "clients.num_clients": clients,
        "clients.fraction": 1.0,
        "train.optimizer": "sgd",
        "train.lr": float(tr.lr),
        "train.batch_size": int(tr.batch_size),
        "train.local_steps": int(tr.local_steps),
        "train.rounds": rounds,
        "train.dtype": "float64",
        "coding.client_form": "fused",
        "coding.key_seed": None if cfg.coding.key_seed is None else int(cfg.coding.key_seed),
        "ray.backend": "sequential",
    }
    values.update(_dotted("coding.", dict(coding or {})))
    values.update(_dotted("", OmegaConf.to_container(cfg.arm_config, resolve=True)))
    return load_config([f"{k}={json.dumps(v)}" for k, v in values.items()])


def _dotted(prefix: str, tree: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update(_dotted(f"{prefix}{k}.", v))
        else:
            out[f"{prefix}{k}"] = v
    return out


def party_coding(platform: DictConfig) -> CodingSpec:
    """The ``coding`` section as the server and aggregator actors take it (the runner's
    ``Checkpoints.coding``)."""
    return CodingSpec.from_config(platform)


def epoch_coding(platform: DictConfig, epoch: int) -> CodingSpec:
    """Key epoch ``epoch``'s coding: epoch 0 is the configuration's, every later one has a key seed of its
    own (derived from it, or secure random when it is unset), so the parties make an independent key."""
    coding = party_coding(platform)
    if epoch and coding.key_seed is not None:
        coding = replace(coding, key_seed=derive_seed(coding.key_seed, "attack", "key-epoch", epoch))
    return coding


@dataclass
class TaskParties:
    """Every party of one recorded run, on :attr:`backend`: the server, the aggregator shards, one client
    worker per client (so each partial sum the aggregator reduces is one client's weighted upload) and the
    evaluator."""

    backend: RecordingBackend
    parties: Any  # sifl_ray.round.Parties
    assignment: list[list[int]]

    @classmethod
    def spawn(cls, task: SmallTask, cfg: DictConfig, platform: DictConfig, backend: RecordingBackend):
        from actors.aggregator import AggregatorActor
        from actors.server import ServerActor
        from sifl_ray.roles.client import ClientWorkerRole, LocalTraining
        from sifl_ray.round import Parties

        x, y, partitions = task.pooled()
        training = LocalTraining(
            batch_size=int(cfg.train.batch_size),
            local_epochs=1,
            local_steps=int(cfg.train.local_steps),
            seed=int(cfg.seed),
            vectorise=False,  # one client a worker, and the recorder reads each upload as the loop makes it
        )
        workers = [
            backend.spawn(
                TaskWorker,
                ClientWorkerRole(
                    worker=c,
                    x_train=x,
                    y_train=y,
                    partitions={c: partitions[c]},
                    trainer=task.trainer(float(cfg.train.lr)),
                    training=training,
                    device=torch.device("cpu"),
                ),
            )
            for c in range(task.clients)
        ]
        evaluator = backend.spawn(
            TaskEvaluator,
            model=task.model(),
            x_test=x,
            y_test=y,
            batch_size=len(y),
            device=torch.device("cpu"),
        )
        parties = Parties(
            server=backend.spawn(ServerActor),
            aggregators=[backend.spawn(AggregatorActor, s) for s in range(platform.ray.num_shards)],
            workers=workers,
            evaluator=evaluator,
        )
        return cls(backend=backend, parties=parties, assignment=[[c] for c in range(task.clients)])

    def set_recorder(self, recorder: TranscriptRecorder | None) -> None:
        """Every channel of the coming rounds goes to ``recorder``."""
        self.backend.transcript = recorder
        for worker in self.parties.workers:
            worker.role.recorder = recorder

    def hand_steps(self, arm: str, steps, *, shards: int) -> list:
        """The server and the aggregator shards get the arm's steps (:class:`~sifl_ray.runner.arms.PartyHost`;
        nothing is kept: no party of a task is ever replaced)."""
        backend, parties = self.backend, self.parties
        done = []
        if steps.server is not None:
            done.append(ServerHandle(backend, parties.server).set_step(arm, steps.server))
        for aggregator in [AggregatorHandle(backend, a) for a in parties.aggregators[:shards]]:
            if steps.aggregator is not None:
                done.append(aggregator.set_step(arm, steps.aggregator))
            if steps.secagg is not None:
                done.append(aggregator.set_secagg(arm, steps.secagg))
        return done

    def hand_arm(self, arm: str, *, setup, views: tuple, paired: bool) -> list:
        """Every worker and the evaluator get their part of ``arm`` (a
        :class:`~sifl_ray.runner.arms.PartyHost`). The evaluator reports no deviation from fl (``paired`` is
        ignored): a task plays one arm at a time."""
        backend, parties = self.backend, self.parties
        done = [WorkerHandle(backend, worker).set_arm(arm, setup, *views) for worker in parties.workers]
        done.append(EvaluatorHandle(backend, parties.evaluator).set_arm(arm, setup.coding, *views))
        return done

    def setup_arm(
        self, platform: DictConfig, arm: str, *, spec: CodingSpec, w0: torch.Tensor, epoch: int, steps
    ):
        """Give every party its part of ``arm`` through the runner's own set-up
        (:func:`sifl_ray.runner.arms.hand_out_arm`: keys made by the server and aggregator actors from
        ``spec``; the arm's steps, its client step wrapped in a :class:`ModelTap`), and return the driver's
        :class:`~sifl_ray.round.ArmState` with the first broadcast (which encodes ``w0``). No key files, no
        precision refusal: the attacks run at scales the platform would refuse."""
        from sifl_ray.runner.arms import hand_out_arm

        state, _ = hand_out_arm(self, platform, arm, spec=spec, steps=steps, w0=w0, epoch=epoch)
        return state

    def scorer_keys(self, arm: str) -> tuple[ServerKey | None, AggregatorKey | None]:
        """Simulation only: the keys the server and aggregator actors made for ``arm``, read in this process
        (the scorer's; the actors never send them anywhere)."""
        server_role = self.parties.server.roles[arm]
        key = server_role.key if server_role.coding.coded else None
        return key, self.parties.aggregators[0].roles[arm][0].key

    def global_model(self, arm: str, state: ArmState) -> torch.Tensor:
        """Simulation only: the evaluator's decoding of the arm's broadcast (what every client decodes)."""
        evaluator = EvaluatorHandle(self.backend, self.parties.evaluator)
        return self.backend.get(evaluator.decode(arm, state.broadcast, state.broadcast_coding))


def record_arm(
    task: SmallTask,
    cfg: DictConfig,
    *,
    arm: str,
    design: Design,
    coding: Mapping[str, Any],
    rounds: int,
    recorder: TranscriptRecorder,
    backend: RecordingBackend | None = None,
) -> GroundTruth:
    """Play ``rounds`` rounds (1-based) of the arm instance ``arm`` on ``task`` through the shipped parties;
    fill ``recorder`` with every channel and return the scorer's :class:`GroundTruth`.

    Args:
        cfg: the attack configuration (seed, key seed, training, ``arms``, ``arm_config``).
        design: the key design; ``design.rekey_every`` > 0 sets the arm up again with a fresh key every that
            many rounds (a new key epoch, announced in the transcript).
        coding: the platform ``coding`` values of this run (key backend, left inverse, scales, noise).
        backend: where the parties run (default: a fresh :class:`RecordingBackend`).

    Raises:
        RuntimeError: a party refused or dropped an upload (the truth would no longer match the transcript).
    """
    from sifl_ray.arms import arm_of
    from sifl_ray.round import RoundPolicy, run_round

    platform = platform_config(cfg, clients=task.clients, rounds=rounds, coding=coding)
    protocol = arm_of(platform, arm)
    sizes = task.sizes
    steps = protocol.steps(task_context(task, platform, arm))
    tap = ModelTap(inner=steps.client)
    steps = replace(steps, client=tap)

    run = TaskParties.spawn(task, cfg, platform, backend or RecordingBackend())
    run.set_recorder(recorder)
    recorder.record_weights({c: float(s) for c, s in enumerate(sizes)})
    n_tilde = task.n + int(platform.coding.n_extra) if protocol.coding.coded else task.n
    truth = GroundTruth(
        design=design,
        n=task.n,
        n_tilde=n_tilde,
        clients=list(range(task.clients)),
        weights=sizes / sizes.sum(),
        arm=arm,
        coding=protocol.coding,
    )
    w, state = initial_model(task, cfg), None
    for t in range(1, rounds + 1):
        epoch = truth.epoch_of(t)
        if state is None or epoch != state.key_epoch:
            if state is not None:  # a new key epoch starts from the current global model
                w = run.global_model(arm, state)
            state = run.setup_arm(
                platform, arm, spec=epoch_coding(platform, epoch), w0=w, epoch=epoch, steps=steps
            )
            key, truth.agg_key = run.scorer_keys(arm)
            if key is not None:
                truth.keys[epoch] = key
            recorder.record_key_epoch(t, epoch)
        broadcast = run.backend.get(state.broadcast)
        recorder.record_broadcast(t, broadcast)
        truth.broadcast_models[t] = run.global_model(arm, state).numpy()
        result = run_round(run.backend, run.parties, state, t, run.assignment, policy=RoundPolicy())
        if result.rejected or result.dropped or result.skipped:
            raise RuntimeError(
                f"round {t} of {arm}: uploads were refused or dropped ({result.rejected or result.dropped}); "
                "the recorded transcript would not match the scorer's truth"
            )
        truth.local_models[t], truth.upload_models[t] = tap.take(t, truth.clients)
        truth.updates[t] = truth.upload_models[t] - truth.broadcast_models[t][:, None]
        truth.aggregate_models[t] = truth.upload_models[t] @ truth.weights
    run.set_recorder(None)
    return truth
