"""One step of many clients as one sum (:mod:`sifl_ray.optim.summed`): the weighted gradient is the clients'
gradients weighted, and each client's bound on its gradient norm is a bound, on every built-in model (the
MLP's linear layers, the CNNs' convolutions), with full and ragged minibatches."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sifl_ray.models import build_model
from sifl_ray.optim import summed
from sifl_ray.seeding import torch_generator

SIZES = [5, 3, 5, 4]  # samples in each client's one minibatch (width 5: two ragged, masked)
WEIGHTS = [12.0, 3.0, 7.0, 1.0]  # each client's FedAvg weight


def setting(name: str):
    shape = (1, 28, 28) if name != "digits_mlp" else (1, 8, 8)
    model = build_model(name, input_shape=shape, num_classes=10, generator=torch_generator(0, "init"))
    gen = torch.Generator().manual_seed(1)
    width = max(SIZES)
    x = torch.randn((len(SIZES), width, *shape), generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (len(SIZES), width), generator=gen)
    mask = torch.zeros((len(SIZES), width))
    for c, size in enumerate(SIZES):
        mask[c, :size] = 1
        x[c, size:] = 0
    return model.double(), x, y, mask.double(), torch.tensor(SIZES, dtype=torch.float64)


def client_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One client's mean-loss gradient, as the loop computes it (flat, float64)."""
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()


@pytest.mark.parametrize("name", ["mlp", "cnn", "cnn2", "digits_mlp"])
def test_the_sum_is_the_clients_gradients_weighted_and_each_bound_holds(name):
    model, x, y, mask, count = setting(name)
    names = [n for n, _ in model.named_parameters()]
    start = [p.detach().clone() for p in model.parameters()]
    weights = torch.tensor(WEIGHTS, dtype=torch.float64)
    total, losses, bounds = summed.gradient_and_bounds(model, names, start, (x, y, mask, count), weights)
    grads = [client_gradient(model, x[c, :size], y[c, :size]) for c, size in enumerate(SIZES)]
    expect = sum(w * g for w, g in zip(WEIGHTS, grads, strict=True))
    # in float64: the two computations differ by sums of at most a few thousand terms in another order,
    # about 1e-13 of the weighted gradients' norms; 1e-9 leaves a margin of ten thousand
    scale = sum(w * float(torch.linalg.vector_norm(g)) for w, g in zip(WEIGHTS, grads, strict=True))
    assert float(torch.linalg.vector_norm(total - expect)) <= 1e-9 * scale
    for c, (size, g) in enumerate(zip(SIZES, grads, strict=True)):
        norm = float(torch.linalg.vector_norm(g))
        assert norm <= float(bounds[c]) * (1 + 1e-9), (c, norm, float(bounds[c]))
        assert float(bounds[c]) < 100 * norm  # a bound, not infinity
        with torch.no_grad():
            loss = float(F.cross_entropy(model(x[c, :size]), y[c, :size]))
        assert abs(float(losses[c]) - loss) <= 1e-12 * max(1.0, loss)


class Scaled(nn.Module):
    """A parameter of the model's own, outside any linear or convolutional layer."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x * self.scale)


class Twice(nn.Module):
    """One linear layer called twice: its per-sample gradient is a sum of two outer products."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.fc(x)))


@pytest.mark.parametrize("model", [Scaled(), Twice()], ids=["own parameter", "layer called twice"])
def test_what_the_per_sample_bounds_do_not_cover_gives_no_bound(model):
    names = [n for n, _ in model.named_parameters()]
    start = [p.detach().clone() for p in model.parameters()]
    x, y = torch.randn(2, 3, 4), torch.randint(0, 4, (2, 3))
    assert summed.gradient_and_bounds(model, names, start, (x, y, None, None), torch.ones(2)) is None


def test_the_convolution_bound_holds_where_every_window_sees_the_same_input():
    """A constant image under a 5 × 5 convolution averaged over its 24 × 24 positions: every window holds
    the same values and every position the same output gradient, so each weight's gradient is 25 windows'
    worth, 5 × ‖δ‖ ‖a‖ × (24 / 28) here: the kernel's √25 is needed, and the bias's bound is met exactly."""
    model = nn.Sequential(nn.Conv2d(1, 10, 5), nn.AvgPool2d(24), nn.Flatten()).double()
    names = [n for n, _ in model.named_parameters()]
    start = [p.detach().clone() for p in model.parameters()]
    x = torch.ones((1, 1, 1, 28, 28), dtype=torch.float64)
    y = torch.tensor([[3]])
    _, _, bounds = summed.gradient_and_bounds(model, names, start, (x, y, None, None), torch.ones(1).double())
    g = client_gradient(model, x[0], y[0])
    assert float(torch.linalg.vector_norm(g)) <= float(bounds[0]) * (1 + 1e-9)
