"""Your own model under SIFL, secure aggregation or DP-FedAvg: a factory, registered by name, is all it takes.

Run it (docs/models.md walks through it)::

    python examples/own_model.py                        # quickstart's digits, 20 rounds, on Ray
    python examples/own_model.py train.rounds=2 backend=local

The model's settings are a dataclass, the configuration section ``tiny_cnn`` (``tiny_cnn.channels=4``),
checked like every section (an unknown key, a wrong type, an odd number of channels: exit code 2 before
anything runs). The factory is called as ``factory(input_shape, num_classes, **settings)`` with
``input_shape`` the data's ``(C, H, W)`` and the section's typed values, and returns any
``torch.nn.Module``. Every party builds it from the run seed (torch's generator is seeded from the run's
``init`` stream while the factory runs), so the server, the aggregator and each client start from the same
``w^0``. On Ray the workers receive the factory and its settings, pickled by value from this script:
nothing needs installing. GroupNorm, not BatchNorm: SIFL codes ``model.parameters()``
only, and BatchNorm's running statistics would be neither coded nor averaged (the platform refuses them).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from torch import nn

from sifl_ray.cli import main
from sifl_ray.config import Range, setting
from sifl_ray.models import register_model


@dataclass
class TinyCnnSettings:
    """The section ``tiny_cnn``: its keys, types, defaults and ranges, declared once, here."""

    # feature maps of the convolution; GroupNorm splits them into two groups, so an even number
    channels: int = setting(8, rule=Range(lambda v: v >= 2 and v % 2 == 0, "an even integer >= 2"))


@register_model("tiny_cnn", settings=TinyCnnSettings)
def tiny_cnn(input_shape: tuple[int, int, int], num_classes: int, channels: int) -> nn.Module:
    """One padded 3×3 convolution, group norm, ReLU and a linear read-out."""
    c, h, w = input_shape
    return nn.Sequential(
        nn.Conv2d(c, channels, 3, padding=1),
        nn.GroupNorm(2, channels),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(channels * h * w, num_classes),
    )


if __name__ == "__main__":
    sys.exit(
        main(
            [
                "run",
                "scenario=quickstart",  # scikit-learn's 8×8 digits, 10 IID clients
                "train.model=tiny_cnn",
                "tiny_cnn.channels=4",
                "arms=[fl,sifl_m1,sifl_m2,dp_fedavg]",
                *sys.argv[1:],  # your overrides win
            ]
        )
    )
