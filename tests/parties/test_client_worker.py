"""The client worker's fast paths give what its validated path gives: the same partial sums to the bit,
the same rejections (a non-finite local model is never summed), with or without NbAFL and no-op clients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sifl_ray.arms.steps import chain, clip, gaussian
from sifl_ray.faults import WorkerFaults
from sifl_ray.models import build_model, flatten_params
from sifl_ray.optim import TorchTrainer
from sifl_ray.parties.upload import all_finite
from sifl_ray.parties.workers import ArmSetup, ClientWorker, LocalTraining
from sifl_ray.party_seeds import ClientNoiseSeeds
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding

BIG = torch.finfo(torch.float64).max / 4


@pytest.mark.parametrize(
    "values",
    [
        [0.0, 1.0, -2.0],
        [0.0, float("nan"), 1.0],
        [float("inf"), 1.0, 2.0],
        [float("-inf"), float("inf"), 0.0],
        [BIG, BIG, BIG, BIG, BIG],  # finite, but the sum overflows
        [BIG, BIG, BIG, float("nan")],
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_finite_decides_like_isfinite_all(values, dtype):
    x = torch.tensor(values, dtype=torch.float64).to(dtype)
    assert all_finite(x) == bool(torch.isfinite(x).all())


def _worker(poisoned: int | None = None, skip: bool = False) -> tuple[ClientWorker, torch.Tensor]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((120, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 120).astype(np.int64)
    parts = {c: np.arange(20 * c, 20 * c + 20) for c in range(6)}
    if poisoned is not None:
        x[parts[poisoned][0]] = np.nan  # that client's local model becomes NaN
    gen = torch_generator(0, "init")
    net = build_model("digits_mlp", input_shape=(1, 8, 8), num_classes=10, generator=gen)
    w0 = flatten_params(net)
    role = ClientWorker(
        worker=0,
        x_train=x,
        y_train=y,
        partitions=parts,
        trainer=TorchTrainer(net, "sgd", lr=0.1),
        training=LocalTraining(batch_size=8, local_epochs=1, local_steps=0, seed=3, skip_training=skip),
        device=torch.device("cpu"),
    )
    role.set_arm("fl", ArmSetup(coding=Coding.PLAIN))
    noise = chain(clip(1.0), gaussian(0.01, ClientNoiseSeeds()))
    role.set_arm("nbafl", ArmSetup(coding=Coding.PLAIN, step=noise))
    return role, w0


def _run(role, w0, arm, hook):
    # hook: a drill's fault tap that corrupts a client of another round, so every upload of this one goes
    # through the tap and the full check unchanged (the validated path)
    other = {"index": 0, "kind": "corrupt_upload", "round": 99, "arm": arm, "client": 0}
    role.faults = WorkerFaults([other] if hook else [])
    bounds = [(0, 1000), (1000, w0.numel())]
    out = role.train_round(arm, 2, w0, Coding.PLAIN, [5, 0, 3, 1], bounds)
    return out.partials, out.report


@pytest.mark.parametrize(
    ("arm", "poisoned"), [("fl", None), ("fl", 3), ("nbafl", None)]
)  # NbAFL refuses to privatize a NaN model (clipping cannot bound it): it raises on either path
@pytest.mark.parametrize("skip", [False, True])
def test_direct_path_equals_the_validated_path(arm, poisoned, skip):
    role, w0 = _worker(poisoned, skip)
    fast, fast_report = _run(role, w0, arm, hook=False)  # no hook: the direct path
    slow, slow_report = _run(role, w0, arm, hook=True)  # an identity hook: every upload is validated
    for a, b in zip(fast, slow, strict=True):
        assert torch.equal(a.weighted_sum, b.weighted_sum) and a.weight == b.weight
    assert fast_report.accepted == slow_report.accepted
    assert fast_report.rejected == slow_report.rejected
    assert fast_report.train_loss_sum == slow_report.train_loss_sum
    if poisoned is not None and not skip:
        assert fast_report.rejected == {poisoned: "non-finite values"}
        assert bool(torch.isfinite(torch.cat([p.weighted_sum for p in fast])).all())
    else:
        assert fast_report.rejected == {} and fast_report.accepted == [0, 1, 3, 5]


def test_no_op_clients_upload_the_broadcast():
    role, w0 = _worker(skip=True)
    partials, report = _run(role, w0, "fl", hook=False)
    total = torch.cat([p.weighted_sum for p in partials])
    assert torch.allclose(total, w0 * 80.0, rtol=1e-15, atol=0.0)
    assert report.weight == 80.0 and report.train_loss_sum == 0.0
