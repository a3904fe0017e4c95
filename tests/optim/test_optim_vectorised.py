"""Vectorised clients (:mod:`sifl_ray.optim.vectorised`) train every client as the loop does.

Each client's local model and mean loss from the stacked trainer are compared with the loop's
(:class:`~sifl_ray.optim.TorchTrainer`, one client after another) on the same minibatches: within 2E, E the
rigorous round-off bound of :mod:`training_roundoff` on any execution's distance from exact arithmetic
(float64: round-off; float32: the same bound with float32's unit round-off). The bound is checked to hold
on this CPU (the loop against the float64 reference) and to catch a minibatch out of order, so a test that
passes says something. Unequal client sizes (grouped by minibatch count, ragged last minibatches masked),
several chunks, SGD, Momentum and Adam.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from training_roundoff import reference

from sifl_ray.data import client_batches
from sifl_ray.device import SampleStore
from sifl_ray.models import MLP, flatten_params
from sifl_ray.optim import TorchTrainer, loss_values
from sifl_ray.optim import vectorised as V
from sifl_ray.seeding import torch_generator

BATCH, SEED, ROUND = 8, 3, 2
EQUAL = [24, 24, 24, 24, 24]
UNEQUAL = [24, 17, 40, 9, 24, 31, 9]  # 3, 3, 5, 2, 3, 4, 2 minibatches an epoch: four groups, ragged steps
# (optimizer, lr, local steps): Adam's bound grows fastest with the steps (its normalised step turns a
# relative gradient error into an absolute one), so its float32 case takes two steps, enough to exercise
# its state and bias corrections; every other case runs an epoch (``0``: all of a client's minibatches).
OPTIMIZERS = [("sgd", 0.1, 0), ("momentum", 0.1, 0), ("adam", 0.01, 2)]


@pytest.fixture(autouse=True)
def every_chunk_together(monkeypatch):
    """These workers host a handful of clients: train every chunk together, however small (the threshold
    is tested on its own below)."""
    monkeypatch.setattr(V, "MIN_TOGETHER", 1)


def data(sizes: list[int]) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((sum(sizes), 1, 4, 4)).astype(np.float32)
    y = rng.integers(0, 5, sum(sizes)).astype(np.int64)
    bounds = np.cumsum([0, *sizes])
    return x, y, {c: np.arange(bounds[c], bounds[c + 1]) for c in range(len(sizes))}


def model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    net = MLP(16, (12,), 5)
    gen = torch_generator(0, "init")
    with torch.no_grad():
        for p in net.parameters():
            p.uniform_(-0.5, 0.5, generator=gen)
    return net.to(dtype)


def indices(parts: dict[int, np.ndarray], steps: int) -> dict[int, list[np.ndarray]]:
    return {
        c: client_batches(i, batch_size=BATCH, epochs=1, steps=steps, seed=SEED, client_id=c, round=ROUND)
        for c, i in parts.items()
    }


def loop(trainer: TorchTrainer, w0: torch.Tensor, x, y, batches: list[np.ndarray]):
    """One client as the worker's loop trains it: a fresh optimizer, its minibatches in order."""
    trainer.reset(w0)
    dtype = trainer._params[0].dtype
    losses = [trainer.step((torch.from_numpy(x[b]).to(dtype), torch.from_numpy(y[b]))) for b in batches]
    return trainer.params(), float(np.mean(loss_values(losses)))


def vectorised(trainer: TorchTrainer, w0: torch.Tensor, x, y, idx, chunk_bytes: int | None = None):
    stacked = V.StackedTrainer(trainer)
    dtype = trainer._params[0].dtype
    samples = SampleStore(x, y, idx.values(), device=torch.device("cpu"), dtype=dtype)
    rnd = V.ClientRound(stacked, samples, idx, w0=w0, start=w0.to(dtype), chunk_bytes=chunk_bytes)
    out = {c: rnd.local(c, torch.empty_like(w0)) for c in rnd.order}
    return {c: (w.clone(), loss) for c, (w, loss) in out.items()}, rnd


def bounded(net, w0, x, y, batches, optimizer, lr, dtype):
    dt = net.net[0].weight.dtype
    data_ = [(torch.from_numpy(x[b]).to(dt), torch.from_numpy(y[b])) for b in batches]
    return reference(net, w0, data_, optimizer=optimizer, lr=lr, dtype=dtype)


@pytest.mark.parametrize("sizes", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("optimizer", "lr", "steps"), OPTIMIZERS, ids=[o for o, *_ in OPTIMIZERS])
def test_each_client_trains_as_in_the_loop(optimizer, lr, steps, dtype, sizes):
    x, y, parts = data(sizes)
    net = model(dtype)
    w0 = flatten_params(net)
    trainer = TorchTrainer(net, optimizer, lr=lr)
    idx = indices(parts, steps)
    per = 4 * trainer.n * dtype.itemsize
    got, rnd = vectorised(trainer, w0, x, y, idx, chunk_bytes=2 * per)  # two clients a chunk
    assert sorted(rnd.order) == sorted(parts) and max(len(c) for c in rnd.chunks) == 2
    if sizes is UNEQUAL and not steps:  # grouped by minibatch count, sorted within a group
        assert rnd.order == [0, 1, 4, 2, 3, 6, 5]
    for c, batches in idx.items():
        ref = bounded(net, w0, x, y, batches, optimizer, lr, dtype)
        ref64 = bounded(net, w0, x, y, batches, optimizer, lr, torch.float64)
        w_loop, loss_loop = loop(trainer, w0, x, y, batches)
        w_vec, loss_vec = got[c]
        # the bound is a bound here: the loop is within E of the exact result (the reference is within
        # its own float64 E of it)
        assert bool(((w_loop - ref.w).abs() <= ref.e + ref64.e).all()), c
        # the vectorised client is an execution of the same arithmetic: within 2E of the loop
        excess = ((w_vec - w_loop).abs() - 2 * ref.e).max()
        assert float(excess) <= 0, (c, float(excess))
        assert abs(loss_vec - loss_loop) <= 2 * ref.mean_loss_bound, c
        if dtype == torch.float64:  # round-off, and nowhere near the bound's looseness
            assert float((w_vec - w_loop).abs().max()) <= 1e3 * torch.finfo(torch.float64).eps


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("optimizer", "lr", "steps"), OPTIMIZERS, ids=[o for o, *_ in OPTIMIZERS])
def test_the_tolerance_catches_a_minibatch_out_of_order(optimizer, lr, steps, dtype):
    """The same comparison fails when one client's last two minibatches are swapped: 2E is tight enough
    to see a wrong order (and so a wrong client, a wrong mask, a lost step)."""
    x, y, parts = data(UNEQUAL)
    net = model(dtype)
    w0 = flatten_params(net)
    trainer = TorchTrainer(net, optimizer, lr=lr)
    idx = indices(parts, steps)
    swapped = {**idx, 2: [*idx[2][:-2], idx[2][-1], idx[2][-2]]}
    got, _ = vectorised(trainer, w0, x, y, swapped)
    ref = bounded(net, w0, x, y, idx[2], optimizer, lr, dtype)
    w_loop, _ = loop(trainer, w0, x, y, idx[2])
    assert bool(((got[2][0] - w_loop).abs() > 2 * ref.e).any())


def test_a_chunk_is_one_minibatch_count_and_fits_the_budget():
    steps = {0: 3, 1: 2, 2: 3, 3: 3, 4: 2, 5: 3, 6: 3}
    assert V.chunks(steps, 3) == [[0, 2], [3, 5, 6], [1, 4]]  # 5 clients of 3 steps: two near-equal chunks
    assert V.chunks(dict.fromkeys(range(5), 1), 10) == [[0, 1, 2, 3, 4]]  # equal sizes: the sorted order
    # 22 clients, 21 a chunk, 12 at least together: one chunk of 22 rather than two of 11 trained alone
    assert V.chunks(dict.fromkeys(range(22), 1), 21, 12) == [list(range(22))]
    assert [len(c) for c in V.chunks(dict.fromkeys(range(50), 1), 21, 12)] == [17, 16, 17]


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda net: TorchTrainer(net, "RMSprop", lr=0.1), "optimizer RMSprop has no vectorised form"),
        (lambda net: TorchTrainer(net, "sgd", lr=0.1, weight_decay=0.1), "weight_decay=0.1"),
        (lambda net: TorchTrainer(net, "adam", lr=0.1, amsgrad=True), "amsgrad=True"),
        (lambda net: TorchTrainer(net, "sgd", lr=0.1, loss_fn=lambda o, y: o.sum()), "is not cross-entropy"),
        (lambda net: TorchTrainer(nn.Sequential(net, nn.Dropout()), "sgd", lr=0.1), "(Dropout) is not known"),
        (lambda net: TorchTrainer(nn.Sequential(net, nn.BatchNorm1d(5)), "sgd", lr=0.1), "has buffers"),
    ],
)
def test_what_cannot_be_vectorised_is_named(make, why):
    trainer = make(model(torch.float64))
    reason = V.fallback_reason(trainer)
    assert reason is not None and why in reason
    with pytest.raises(ValueError):
        if "optimizer" in why or "=" in why:
            V.StackedTrainer(trainer)
        else:
            raise ValueError(reason)


def test_every_supported_trainer_is_accepted():
    for name in ("sgd", "momentum", "adam"):
        assert V.fallback_reason(TorchTrainer(model(torch.float32), name, lr=0.1)) is None
    trainer = TorchTrainer(model(torch.float32), "sgd", lr=0.1)
    assert "recorder" in V.fallback_reason(trainer, recorder=object())


def test_a_fallback_is_said_once(capsys, monkeypatch):
    monkeypatch.setattr(V, "_SAID", set())
    for _ in range(3):
        V.say_fallback("optimizer RMSprop has no vectorised form (sgd, momentum and adam have)")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[sifl] client workers train their clients one at a time")


def test_chunks_below_the_threshold_train_one_client_at_a_time(monkeypatch):
    """A chunk of fewer than MIN_TOGETHER clients trains each alone on the worker's own trainer: the loop's
    bits; a round with no chunk that large is the loop's altogether (``client_round`` declines it)."""
    x, y, parts = data(UNEQUAL)  # groups of 3, 1, 2 and 1 clients
    net = model(torch.float32)
    w0 = flatten_params(net)
    trainer = TorchTrainer(net, "momentum", lr=0.1)
    idx = indices(parts, 0)
    monkeypatch.setattr(V, "MIN_TOGETHER", 3)  # the group of three together, the others alone
    stacked_steps = []
    step = V.StackedTrainer.step
    monkeypatch.setattr(V.StackedTrainer, "step", lambda self, *a: stacked_steps.append(1) or step(self, *a))
    got, rnd = vectorised(trainer, w0, x, y, idx)
    assert rnd.together and rnd.order == [0, 1, 4, 2, 3, 6, 5]
    assert len(stacked_steps) == 3  # the three minibatches of clients 0, 1 and 4, each taken once by all
    for c, batches in idx.items():
        if c not in (0, 1, 4):  # alone: the loop's bits
            w_loop, loss_loop = loop(trainer, w0, x, y, batches)
            assert torch.equal(got[c][0], w_loop) and got[c][1] == loss_loop, c
    monkeypatch.setattr(V, "MIN_TOGETHER", 4)
    samples = SampleStore(x, y, idx.values(), device=torch.device("cpu"), dtype=torch.float32)
    stacked = V.StackedTrainer(trainer)
    assert V.client_round(stacked, samples, idx.get, idx, w0=w0, start=w0.float()) is None
