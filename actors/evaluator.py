"""Ray shell around the evaluator (a labelled simulation device; see :mod:`sifl_ray.roles.evaluator`).

It computes on the GPU Ray assigned to it (``ray.evaluator_gpus``), else on the CPU.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from actors.process import memory, node_id, pick_device, placement, prepare_process
from sifl_ray.keys import key_inventory
from sifl_ray.models import build_model
from sifl_ray.roles.evaluator import EvaluatorRole
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding, ModelSpec


class EvaluatorActor:
    """The evaluator as a Ray actor: the test set and a model in their own process, so that evaluating one arm
    overlaps the next arm's training."""

    def __init__(self, data: dict, model: ModelSpec, seed: int, batch_size: int, threads: int = 1) -> None:
        prepare_process(threads)
        net = build_model(
            model.name,
            input_shape=model.input_shape,
            num_classes=model.num_classes,
            generator=torch_generator(seed, "init"),
            args=model.args,
            factory=model.factory,
        )
        net = net.to(getattr(torch, model.dtype))
        self.device, self.fallback = pick_device()
        self.role = EvaluatorRole(
            model=net,
            x_test=np.asarray(data["x_test"]),
            y_test=np.asarray(data["y_test"]),
            batch_size=batch_size,
            device=self.device,
        )

    def set_arm(
        self,
        arm: str,
        coding: Coding,
        server_view=None,
        aggregator_view=None,
        *,
        paired: bool | None = None,
    ) -> None:
        self.role.set_arm(arm, coding, server_view, aggregator_view, paired=paired)

    def decode(self, arm: str, broadcast: torch.Tensor, coding: Coding) -> torch.Tensor:
        """The plain global model (simulation only), on the host: what leaves an actor is never a device
        tensor (unpickled in the driver, it would land on the driver's GPU)."""
        return self.role.decode(arm, broadcast.to(self.device), coding).cpu()

    def set_audit(self, seed: bytes, canaries: int, nulls: int, n: int) -> None:
        self.role.set_audit(seed, canaries, nulls, n)

    def evaluate(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        coding: Coding,
        previous: torch.Tensor | None = None,
        previous_coding: Coding | None = None,
    ) -> dict:
        return self.role.evaluate(arm, t, broadcast, coding, previous, previous_coding)

    def sum_error(self, arm: str, t: int, num_shards: int, *vectors: torch.Tensor) -> float:
        return self.role.sum_error(arm, t, num_shards, *vectors)

    def placement(self) -> dict:
        """Where the evaluator runs and computes (:func:`actors.process.placement`)."""
        role = self.role
        return placement(self.device, role.model, role.x, role.views, fallback=self.fallback)

    def memory(self) -> dict:
        return memory(self.device)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`actors.process.node_id`)."""
        return node_id()

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
