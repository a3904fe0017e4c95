"""The arithmetic floor of a training round: its matrix products at this CPU's own matrix-product speed.

Why: at a thousand clients a round is mostly matrix products, and how close a round can come to a bare
loop depends on the CPU (a core with AVX-512 multiplies one client's small matrices about as fast as a
stack of them). Counting the round's floating-point operations (:class:`torch.utils.flop_counter.
FlopCounterMode`, on one minibatch's forward and backward) and timing a large single-thread matrix product
on the same CPU gives the time no implementation of the round can beat on it, so that a ratio target can be
read against what this CPU allows (``python -m bench overhead``: the floor's row).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

#: The side of the square single-precision product that measures a core's matrix speed: large enough for
#: the library's best kernel (about 17 GFLOP a product), small enough to repeat a few times.
SIDE = 2048


def flops_per_sample(
    model: torch.nn.Module, input_shape: tuple[int, ...], num_classes: int, *, train: bool = True
) -> float:
    """Floating-point operations of one sample's forward and backward (``train``; else its forward alone,
    as evaluated): the matrix products and convolutions that :class:`FlopCounterMode` counts, averaged
    over a minibatch of 64."""
    batch = 64
    x = torch.zeros((batch, *input_shape), dtype=next(model.parameters()).dtype)
    y = torch.arange(batch) % num_classes
    with FlopCounterMode(display=False) as counter:
        if train:
            F.cross_entropy(model(x), y).backward()
        else:
            with torch.no_grad():
                model(x)
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def matmul_gflops(repeats: int = 5) -> float:
    """The best of ``repeats`` single-thread ``SIDE``-square float32 products, in GFLOP/s."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(SIDE, SIDE), torch.randn(SIDE, SIDE)
        a @ b  # the library's first call (its kernel choice) is not timed
        best = float("inf")
        for _ in range(repeats):
            tic = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - tic)
    finally:
        torch.set_num_threads(previous)
    return 2 * SIDE**3 / best / 1e9


def round_floor(
    model: torch.nn.Module,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    samples: int,
    epochs: int,
    workers: int,
    test_samples: int,
) -> dict[str, Any]:
    """A round's matrix products and the seconds they take at this CPU's single-thread speed: every
    training sample ``epochs`` times, split over ``workers`` of one thread each, then the evaluation of
    ``test_samples`` on one thread (it follows the training: the round's model is its average)."""
    train = flops_per_sample(model, input_shape, num_classes) * samples * epochs
    test = flops_per_sample(model, input_shape, num_classes, train=False) * test_samples
    speed = matmul_gflops() * 1e9
    return {
        "gflop_per_round": (train + test) / 1e9,
        "mflop_per_sample": train / samples / epochs / 1e6,
        "gflops_one_thread": speed / 1e9,
        "workers": workers,
        "floor_s": train / (workers * speed) + test / speed,
        "train_floor_s": train / (workers * speed),
    }
