"""The round's arithmetic floor (``bench/floor.py``) counts a model's matrix products as written down by
hand, and turns them into seconds with the CPU's own speed."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench import floor

#: A small MLP whose products are counted by hand: 6 → 4 → 3.
IN, HIDDEN, OUT = 6, 4, 3


def model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def test_a_samples_products_are_those_counted_by_hand():
    """Per sample, a linear layer's forward is 2·in·out operations and its weight gradient as many; the
    gradient with respect to its input (every layer but the first: the samples need none) another 2·in·out.
    Evaluation is the forward alone."""
    products = IN * HIDDEN + HIDDEN * OUT
    forward, weights, inputs = 2 * products, 2 * products, 2 * HIDDEN * OUT
    assert floor.flops_per_sample(model(), (IN,), OUT) == forward + weights + inputs
    assert floor.flops_per_sample(model(), (IN,), OUT, train=False) == forward


def test_the_floor_is_the_training_shared_by_the_workers_then_the_evaluation(monkeypatch):
    """The floor is the training's operations over the workers' threads plus the evaluation's on one, at
    the speed measured (set here: 2 GFLOP/s): both parts are checked, each with its own count by hand."""
    monkeypatch.setattr(floor, "matmul_gflops", lambda: 2.0)
    got = floor.round_floor(model(), (IN,), OUT, samples=600, epochs=2, workers=3, test_samples=500)
    per_sample = 2 * (IN * HIDDEN + HIDDEN * OUT)  # the forward's; training: twice that and the inputs'
    train = (2 * per_sample + 2 * HIDDEN * OUT) * 600 * 2
    test = per_sample * 500
    assert got["gflops_one_thread"] == 2.0
    assert got["floor_s"] == pytest.approx(train / (3 * 2e9) + test / 2e9, rel=1e-12)
    assert got["gflop_per_round"] == pytest.approx((train + test) / 1e9, rel=1e-12)


def test_the_cpus_speed_is_measured_on_one_thread_and_the_setting_given_back():
    """The speed is a single thread's (the workers' threads, one each), whatever the caller had set; a
    core multiplies at more than 1 GFLOP/s on any x86-64 CPU this runs on."""
    before = torch.get_num_threads()
    speed = floor.matmul_gflops(repeats=1)
    assert torch.get_num_threads() == before
    assert speed > 1.0
