"""Ray shell around a client worker: many virtual clients, optionally pinned to a (fraction of a) GPU."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import torch

from actors.process import memory, node_id, pick_device, placement, prepare_process, reset_peak_memory
from sifl_ray.faults import WorkerFaults
from sifl_ray.keys import key_inventory
from sifl_ray.models import build_model
from sifl_ray.optim import TorchTrainer
from sifl_ray.roles.client import ArmSetup, ClientWorkerRole, LocalTraining
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding, ModelSpec, TrainSpec


class ClientWorkerActor:
    """A client worker as a Ray actor: hosts many virtual clients (their data, the arms' set-ups) in one
    process pinned to its resources; the work is :class:`~sifl_ray.roles.client.ClientWorkerRole`'s, shared
    with the in-process backend."""

    def __init__(
        self,
        worker: int,
        data: dict,
        partitions: dict[int, np.ndarray],
        model: ModelSpec,
        train: TrainSpec,
        seed: int,
        threads: int = 1,
        materialize: bool = False,
    ) -> None:
        prepare_process(threads)
        self.device, self.fallback = pick_device()
        gen = torch_generator(seed, "init")
        net = build_model(
            model.name,
            input_shape=model.input_shape,
            num_classes=model.num_classes,
            generator=gen,
            args=model.args,
            factory=model.factory,
        ).to(self.device, getattr(torch, model.dtype))
        trainer = TorchTrainer(net, train.optimizer, lr=train.lr)
        training = LocalTraining(
            batch_size=train.batch_size,
            local_epochs=train.local_epochs,
            local_steps=train.local_steps,
            seed=seed,
            skip_training=train.skip_training,
            vectorise=train.vectorise,
        )
        self.role = ClientWorkerRole(
            worker=worker,
            x_train=data["x_train"],
            y_train=data["y_train"],
            partitions=partitions,
            trainer=trainer,
            training=training,
            device=self.device,
        )
        self.role.materialize = materialize
        self.faults = WorkerFaults([])

    def set_faults(self, events: list[dict]) -> None:
        """The faults this worker fires itself (:class:`sifl_ray.faults.WorkerFaults`); tests and drills only.

        The upload hook is installed only when a hosted client is to send garbage: it turns off the fused
        shortcut (every upload is then built and checked on its own), which other runs must not pay for.
        """
        self.faults = WorkerFaults(events)
        self.role.upload_hook = self.faults.upload_hook if self.faults.has_upload_faults() else None

    def set_vectorise(self, on: bool) -> None:
        """Benches only: ``train.vectorise`` from now on, without respawning the worker (``python -m bench
        overhead`` measures the clients trained together and one at a time in one run)."""
        self.role.training = replace(self.role.training, vectorise=bool(on))

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`actors.process.node_id`)."""
        return node_id()

    def placement(self) -> dict:
        """Where this worker runs: its GPU ids as Ray assigned them, what CUDA sees, its device, the devices
        of what it holds (model, staged samples, every arm's key views) and why it fell back to the CPU
        if Ray assigned a GPU that CUDA cannot use here."""
        role = self.role
        held = (role.trainer.model, role.samples.staged_tensors(), role.arms)
        return placement(self.device, *held, fallback=self.fallback)

    def memory(self) -> dict:
        """Peak memory of this worker (GPU allocator and resident set; :func:`actors.process.memory`)."""
        return memory(self.device)

    def reset_peak_memory(self) -> None:
        reset_peak_memory(self.device)

    def set_canaries(self, seed: bytes, canaries: dict[int, int], weight: float, directions: int = 0) -> None:
        self.role.set_canaries(seed, canaries, weight, directions)

    def set_arm(self, arm: str, setup: ArmSetup, server_view=None, aggregator_view=None) -> None:
        self.role.set_arm(arm, setup, server_view, aggregator_view)

    def train_round(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int = 0,
        inboxes: dict | None = None,
    ):
        """One partial sum per aggregator shard, then the report (``attempt`` > 0: the round is retried).
        A secure arm (``inboxes``: its round's routed shares) returns the evaluator's instrument between
        the partials and the report (:meth:`ClientWorkerRole.train_round`)."""
        if self.faults:
            self.faults.before_training(arm, t, attempt)
        partials, report, *tap = self.role.train_round(arm, t, broadcast, coding, clients, bounds, inboxes)
        if self.faults:
            partials = self.faults.corrupt_partials(arm, t, partials)
        return (*partials, *tap, report)

    # Secure aggregation: steps 0, 1 and 3 of the hosted clients (roles.secure.WorkerSecAgg).
    def secagg_advertise(self, arm: str, public, clients: list[int]) -> dict:
        return self.role.secagg_advertise(arm, public, clients)

    def secagg_share(self, arm: str, t: int, routed: dict) -> dict:
        return self.role.secagg_share(arm, t, routed)

    def secagg_unmask(self, arm: str, t: int, survivors):
        """Step 3's answers and the round's protocol costs (``num_returns=2``)."""
        if self.faults:
            self.faults.before_unmask(arm, t)
        return self.role.secagg_unmask(arm, t, survivors)

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
