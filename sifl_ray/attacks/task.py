"""The small learning task the attack suite plays every arm on: synthetic binary classification split over
clients, a small float64 model, and the clients' own data as the platform's client workers hold it.

Why small: the attacks need whole encoded vectors over tens of rounds, cheap only for small models (n in the
hundreds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

from sifl_ray.arms import ArmContext
from sifl_ray.coding.base import CODING_DTYPE
from sifl_ray.optim import TorchTrainer
from sifl_ray.seeding import torch_generator


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
        worker is given: :class:`~sifl_ray.parties.workers.ClientWorker`)."""
        x = torch.cat(self.X).numpy()
        y = torch.cat(self.y).numpy()
        ends = np.cumsum([0, *(int(s) for s in self.sizes)])
        return x, y, {c: np.arange(ends[c], ends[c + 1]) for c in range(self.clients)}


def task_context(task: SmallTask, platform: DictConfig, arm: str, **norms: Any):
    """The :class:`~sifl_ray.arms.ArmContext` an arm is set up with on ``task`` (``norms``: the keys' public
    norms, for a coded arm's privacy report)."""
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
