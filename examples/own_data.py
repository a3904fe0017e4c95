"""Your own data, split by its own clients: a loader returning ``(x, y, client_ids)`` and the ``natural``
partition (each client holds whole writers, the non-IID split federated learning is studied on).

Run it (docs/data.md walks through it)::

    python examples/own_data.py                         # 30 writers on 10 clients, 20 rounds, on Ray
    python examples/own_data.py train.rounds=2 backend=local

The loader's settings are a dataclass, the configuration section ``digit_writers``
(``digit_writers.writers_per_class=5``), checked like every section. The loader runs in the driver only (the
workers receive its arrays), is called with the section's typed values as keyword arguments and returns
NumPy arrays or tensors: samples ``x`` (``(N, D)``, ``(N, H, W)`` or ``(N, C, H, W)``), integer
labels ``y`` and, optionally, the client each sample belongs to. Without a test set a stratified
``data.test_fraction`` is held out. Files work the same way without code: ``data.name=arrays`` with
``arrays.path=my.npz`` (``x_train``, ``y_train``, ``client_train``, ...) or ``data.name=leaf`` with
``leaf.path`` at LEAF's JSON.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from sifl_ray.cli import main
from sifl_ray.config import Range, setting
from sifl_ray.data.own import register_dataset


@dataclass
class DigitWritersSettings:
    """The section ``digit_writers``: its keys, types, defaults and ranges, declared once, here."""

    # writers of each digit: 10 × this many users, the clients' natural split
    writers_per_class: int = setting(3, rule=Range(lambda v: v >= 1, "an integer >= 1"))
    # which writer wrote which sample (the data's own seed, not the run's)
    seed: int = 0


@register_dataset("digit_writers", settings=DigitWritersSettings)
def digit_writers(writers_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's 8×8 digits, each sample given to one of ``writers_per_class`` writers of its class:
    a writer writes a single digit, so a client of a few writers sees a few classes (label skew)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)  # (N, 8, 8), scaled to [0, 1]
    y = digits.target.astype(np.int64)
    writer = y * writers_per_class + np.random.default_rng(seed).integers(0, writers_per_class, y.size)
    return x, y, writer


if __name__ == "__main__":
    sys.exit(
        main(
            [
                "run",
                "scenario=quickstart",
                "data.name=digit_writers",
                "digit_writers.writers_per_class=3",
                "data.partition=natural",  # 30 writers dealt to 10 clients, 3 whole writers each
                "arms=[fl,sifl_m1,sifl_m2]",
                *sys.argv[1:],
            ]
        )
    )
