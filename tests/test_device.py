"""Device placement, tested where it is device-generic (on the CPU): what a party is told to compute on
it computes on, refuses devices that cannot hold a computation, stages its samples once and reads a
client's losses once, and the staged and host paths give the same partial sums to the bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sifl_ray.coding import NoiseSpec, make_aggregator_key, make_server_key
from sifl_ray.device import HostStaging, SampleStore, resolve_device, tensor_devices
from sifl_ray.models import build_model, flatten_params
from sifl_ray.optim import TorchTrainer, loss_values
from sifl_ray.parties.evaluator import Evaluator
from sifl_ray.parties.workers import ArmSetup, ClientWorker, LocalTraining
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding

CPU = torch.device("cpu")


def _data(n: int = 120):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return x, y


def _net(device=CPU):
    net = build_model(
        "digits_mlp", input_shape=(1, 8, 8), num_classes=10, generator=torch_generator(0, "init")
    )
    return net.to(device)


def _role(*, device=CPU, stage_data=None, net=None):
    x, y = _data()
    parts = {c: np.arange(20 * c, 20 * c + 20) for c in (1, 3, 4)}  # the worker owns 3 of 6 clients
    return ClientWorker(
        worker=0,
        x_train=x,
        y_train=y,
        partitions=parts,
        trainer=TorchTrainer(_net() if net is None else net, "sgd", lr=0.1),
        training=LocalTraining(batch_size=8, local_epochs=2, local_steps=0, seed=3),
        device=device,
        stage_data=stage_data,
    )


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("meta", "holds no data"),
        ("bogus", "not a device torch knows"),
        ("cuda:not-an-index", "not a device torch knows"),
    ],
)
def test_a_device_that_cannot_hold_a_computation_is_refused(device, message):
    with pytest.raises(ValueError, match=message):
        resolve_device(device)
    with pytest.raises(ValueError, match=message):
        _role(device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_without_cuda_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"CUDA is not usable in this process"):
        resolve_device("cuda")
    assert resolve_device("cpu") == CPU


def test_a_model_elsewhere_than_the_worker_is_refused():
    with pytest.raises(ValueError, match="the trainer's model lives on meta"):
        _role(net=_net().to("meta"))


def test_staged_samples_are_the_host_samples():
    x, y = _data()
    parts = [np.arange(40, 60), np.arange(0, 20)]
    batches = [np.array([41, 3, 59, 0]), np.array([7]), np.array([19, 42])]
    host = SampleStore(x, y, parts, device=CPU, dtype=torch.float64, stage=False)
    staged = SampleStore(x, y, parts, device=CPU, dtype=torch.float64, stage=True)
    assert not host.is_staged and host.staged_tensors() == ()
    assert staged.is_staged and SampleStore(x, y, parts, device=CPU, dtype=torch.float32).is_staged is False
    for (xa, ya), (xb, yb) in zip(host.batches(batches), staged.batches(batches), strict=True):
        assert xa.dtype == xb.dtype == torch.float64 and ya.dtype == yb.dtype == torch.int64
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # Only the worker's own samples are staged, and a batch naming another's is refused.
    assert staged.staged_tensors()[0].shape[0] == 40
    with pytest.raises(KeyError, match="no client of this worker owns"):
        list(staged.batches([np.array([20])]))


def test_losses_are_read_once_and_equal_float():
    steps = [torch.tensor(0.25, dtype=torch.float32), 1.5, torch.tensor(1 / 3, dtype=torch.float32)]
    assert loss_values(steps) == [float(steps[0]), 1.5, float(steps[2])]
    assert loss_values([]) == [] and loss_values([2.0]) == [2.0]
    trainer = TorchTrainer(_net(), "sgd", lr=0.1)
    x, y = _data(8)
    loss = trainer.step((torch.from_numpy(x), torch.from_numpy(y)))
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and not loss.requires_grad


def test_host_staging_on_the_cpu_is_the_tensor_itself():
    x = torch.arange(5.0)
    staging = HostStaging(CPU)
    assert not staging.pinned and staging.to_host(x) is x


def _arms(n: int):
    key = make_server_key(n=n, n_tilde=n + 7, backend="fast", alpha=1e-3, beta=1e3, seed=b"k" * 32)
    agg = make_aggregator_key(p=2, gamma=1e-3, eta=1.0, seed=b"a" * 32)
    m1 = ArmSetup(coding=Coding.M1, server_view=key.client_view())
    m2 = ArmSetup(coding=Coding.M2, server_view=key.client_view(), aggregator_view=agg.client_view())
    gen = torch.Generator().manual_seed(1)
    w0 = flatten_params(_net())
    w_tilde = key.encode(w0, NoiseSpec("gaussian", 1e3).sample((7,), gen))
    W = agg.encode(w_tilde, NoiseSpec("gaussian", 1e3).sample((n + 7, 1), gen))
    return {"fl": (ArmSetup(coding=Coding.PLAIN), w0), "sifl_m1": (m1, w_tilde), "sifl_m2": (m2, W)}


@pytest.mark.parametrize("arm", ["fl", "sifl_m1", "sifl_m2"])
def test_a_worker_told_the_cpu_keeps_everything_there_and_staging_changes_no_bit(arm):
    host, staged = _role(stage_data=False), _role(device="cpu", stage_data=True)
    setup, broadcast = _arms(host.trainer.n)[arm]
    out = []
    for role in (host, staged):
        role.set_arm(arm, setup)
        bounds = [(0, 100), (100, broadcast.shape[0])]
        out.append(role.train_round(arm, 2, broadcast, setup.coding, [4, 1, 3], bounds))
    (host_partials, host_report), (staged_partials, staged_report) = ((o.partials, o.report) for o in out)
    for a, b in zip(host_partials, staged_partials, strict=True):
        assert torch.equal(a.weighted_sum, b.weighted_sum) and a.weight == b.weight
    assert host_report.train_loss_sum == staged_report.train_loss_sum > 0
    assert staged.device == CPU
    held = (staged.trainer.model, staged.samples.staged_tensors(), staged.arms)
    assert tensor_devices(*held) == {"cpu"}
    assert {str(p.weighted_sum.device) for p in staged_partials} == {"cpu"}
    if arm != "fl":  # the key views the worker holds are on its device, and they were walked
        assert tensor_devices(staged.arms[arm].server_view) == {"cpu"}


def test_tensor_devices_walks_what_a_party_holds():
    key = make_server_key(n=5, n_tilde=9, backend="fast", alpha=1.0, beta=1.0, seed=b"k" * 32)
    assert tensor_devices(key.client_view()) == {"cpu"}
    assert tensor_devices({"a": [torch.zeros(1, device="meta"), (torch.zeros(1),)]}) == {"cpu", "meta"}
    assert tensor_devices(None, "text", 3) == set()


def test_the_evaluator_reads_its_figures_once_and_gets_them_right():
    x, y = _data(50)
    net = _net()
    role = Evaluator(model=net, x_test=x, y_test=y, batch_size=16, device="cpu")
    role.set_arm("fl", Coding.PLAIN, None, None)
    w = flatten_params(net)
    got = role.evaluate("fl", 0, w, Coding.PLAIN)
    with torch.no_grad():
        logits = net(torch.from_numpy(x))
        loss = sum(
            float(
                torch.nn.functional.cross_entropy(
                    logits[s : s + 16], torch.from_numpy(y[s : s + 16]), reduction="sum"
                )
            )
            for s in range(0, 50, 16)
        )
        correct = int((logits.argmax(1) == torch.from_numpy(y)).sum())
    assert got["test_accuracy"] == correct / 50
    assert got["test_loss"] == pytest.approx(loss / 50, rel=1e-6)
    assert tensor_devices(role.model, role.x, role.y) == {"cpu"}
    with pytest.raises(ValueError, match="holds no data"):
        Evaluator(model=net, x_test=x, y_test=y, batch_size=16, device="meta")
