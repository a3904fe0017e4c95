"""Target optimizers: the client's base optimizer immersed in the encoded coordinates (docs/method.md "SIFL
M1")."""

from sifl_ray.optim.target import fused_update, stepwise_update
from sifl_ray.optim.trainer import Batch, TorchTrainer, Trainer, loss_values, make_optimizer_factory

__all__ = [
    "Batch",
    "TorchTrainer",
    "Trainer",
    "fused_update",
    "loss_values",
    "make_optimizer_factory",
    "stepwise_update",
]
