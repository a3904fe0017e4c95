"""Ray shell around a client worker: many virtual clients, optionally pinned to a (fraction of a) GPU."""

from __future__ import annotations

import os

import numpy as np
import torch

from actors.process import node_id, prepare_process
from sifl_ray.faults import WorkerFaults
from sifl_ray.keys import key_inventory
from sifl_ray.models import build_model
from sifl_ray.optim import TorchTrainer
from sifl_ray.roles.client import ArmSetup, ClientWorkerRole, LocalTraining
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import ModelSpec, TrainSpec


def pick_device() -> torch.device:
    """The GPU Ray assigned to this worker if there is one and CUDA works, else the CPU."""
    try:
        import ray

        gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
    except Exception:  # not inside Ray
        gpu_ids = []
    if gpu_ids and torch.cuda.is_available():
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the assigned GPU(s)
    return torch.device("cpu")


class ClientWorkerActor:
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
        self.device = pick_device()
        gen = torch_generator(seed, "init")
        net = build_model(
            model.name, input_shape=model.input_shape, num_classes=model.num_classes, generator=gen
        ).to(self.device, getattr(torch, model.dtype))
        trainer = TorchTrainer(net, train.optimizer, lr=train.lr)
        training = LocalTraining(
            batch_size=train.batch_size,
            local_epochs=train.local_epochs,
            local_steps=train.local_steps,
            seed=seed,
            skip_training=train.skip_training,
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

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`actors.process.node_id`)."""
        return node_id()

    def placement(self) -> dict:
        """Where this worker runs: its GPU ids as Ray assigned them and what CUDA sees."""
        import ray

        return {
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()] if ray.is_initialized() else [],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(self.device),
            "pid": os.getpid(),
        }

    def set_arm(self, arm: str, setup: dict, server_view=None, aggregator_view=None) -> None:
        if server_view is not None:
            server_view = server_view.to(self.device) if hasattr(server_view, "to") else server_view
        if aggregator_view is not None and hasattr(aggregator_view, "to"):
            aggregator_view = aggregator_view.to(self.device)
        self.role.set_arm(arm, ArmSetup(server_view=server_view, aggregator_view=aggregator_view, **setup))

    def train_round(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        clients: list[int],
        bounds: list[tuple[int, int]],
        attempt: int = 0,
    ):
        """One partial sum per aggregator shard, then the report (``attempt`` > 0: the round is retried)."""
        if self.faults:
            self.faults.before_training(arm, t, attempt)
        partials, report = self.role.train_round(arm, t, broadcast, clients, bounds)
        if self.faults:
            partials = self.faults.corrupt_partials(arm, t, partials)
        return (*partials, report)

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
