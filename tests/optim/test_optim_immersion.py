"""Immersion (docs/method.md "SIFL M1"): K target steps on an encoded model decode to the trajectory of K
plain steps on the same batches, for SGD, Momentum and Adam and every backend; the stepwise (paper) and fused
forms agree. Tolerances come from the precision model, not from guesses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sifl_ray.coding import NoiseSpec, make_server_key
from sifl_ray.coding.precision import predict_decode_error
from sifl_ray.optim import TorchTrainer, fused_update, stepwise_update

CASES = [
    ("identity", "pinv"),
    ("dense", "pinv"),
    ("dense", "oblique"),
    ("fast", "pinv"),
    ("fast", "oblique"),
    ("block", "pinv"),
    ("block", "oblique"),
]
OPTIMIZERS = [("sgd", 0.05), ("momentum", 0.05), ("adam", 0.01)]
SIGMA, STEPS = 1e3, 4


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def batches(k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 6, generator=gen, dtype=torch.float64), torch.randint(0, 3, (16,), generator=gen))
        for _ in range(k)
    ]


def setup(case, optimizer, lr):
    trainer = TorchTrainer(model(), optimizer, lr=lr)
    n = trainer.n
    backend, left_inverse = case
    key = make_server_key(
        n=n, n_tilde=n if backend == "identity" else n + 13, backend=backend, left_inverse=left_inverse,
        alpha=1e-2, beta=10.0, block_size=16, seed=7,
    )  # fmt: skip
    w0 = trainer.params()
    gen = torch.Generator().manual_seed(2)
    w_tilde = key.encode(w0, NoiseSpec("gaussian", SIGMA).sample((key.n_tilde - n,), gen))
    return trainer, key, w0, w_tilde


def plain_trajectory(trainer, w0, steps):
    trainer.reset(w0)
    out = []
    for batch in steps:
        trainer.step(batch)
        out.append(trainer.params())
    return out


def tolerance(key, w0, k):
    return predict_decode_error(
        key=key, noise=NoiseSpec("gaussian", SIGMA), w_max=float(w0.abs().max()) + 1.0, clients=k
    ).predicted_max_error


@pytest.mark.parametrize("optimizer, lr", OPTIMIZERS, ids=[o for o, _ in OPTIMIZERS])
@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_target_steps_decode_to_the_plain_trajectory(case, optimizer, lr):
    trainer, key, w0, w_tilde = setup(case, optimizer, lr)
    data = batches(STEPS)
    plain = plain_trajectory(trainer, w0, data)
    view = key.client_view()
    for k in range(1, STEPS + 1):
        upload, stats = stepwise_update(view, w_tilde, trainer, data[:k])
        assert stats["steps"] == k
        decoded = key.decode(upload)
        err = float((decoded - plain[k - 1]).abs().max())
        assert err <= tolerance(key, w0, k), (k, err)
    moved = float((plain[-1] - w0).abs().max())
    assert moved > 1e3 * tolerance(key, w0, STEPS)  # the trajectory is far from trivial


@pytest.mark.parametrize("optimizer, lr", OPTIMIZERS, ids=[o for o, _ in OPTIMIZERS])
@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_stepwise_equals_fused(case, optimizer, lr):
    trainer, key, w0, w_tilde = setup(case, optimizer, lr)
    data = batches(STEPS)
    view = key.client_view()
    fused, fused_stats = fused_update(view, w_tilde, trainer, data)
    stepwise, step_stats = stepwise_update(view, w_tilde, trainer, data)
    tol = tolerance(key, w0, STEPS)
    assert float((key.decode(fused) - key.decode(stepwise)).abs().max()) <= 2 * tol
    assert abs(fused_stats["loss"] - step_stats["loss"]) < 1e-6
    plain = plain_trajectory(trainer, w0, data)[-1]
    assert float((key.decode(fused) - plain).abs().max()) <= tol
    # The upload keeps the server's noise: it differs from w~ only inside col(P1).
    assert torch.allclose(
        fused - key.apply_P1(key.decode(fused) - w0), w_tilde, rtol=0, atol=1e-9 * SIGMA * 10
    )
    if case[0] == "identity":  # plain FL through the same pipeline: the plain result up to one rounding
        assert torch.allclose(fused, plain, rtol=4 * 2**-53, atol=4 * 2**-53)


def test_immersion_check_can_fail():
    """The trajectory comparison is sensitive: an encoded start that is off by 1000 bounds in one
    coordinate (a wrong key, a lost update) shows up at the end, far outside the tolerance."""
    trainer, key, w0, w_tilde = setup(("fast", "oblique"), "adam", 0.01)
    data = batches(STEPS)
    tol = tolerance(key, w0, STEPS)
    plain = plain_trajectory(trainer, w0, data)[-1]
    nudge = torch.zeros_like(w0)
    nudge[0] = 1e3 * tol
    upload, _ = fused_update(key.client_view(), w_tilde + key.apply_P1(nudge), trainer, data)
    assert float((key.decode(upload) - plain).abs().max()) > 100 * tol
