"""A chunk added as one sum (:meth:`sifl_ray.parties.upload.PlainSum.add_summed`) equals its clients added
one by one, for a plain arm and for the shortcut, where the round's start is not a float32 number (every
client starts from its float32 cast, and the shortcut sums the changes from the float64 start)."""

from __future__ import annotations

import pytest
import torch
from training_roundoff import U64, gamma

from sifl_ray.coding import make_server_key
from sifl_ray.parties.messages import WorkerReport
from sifl_ray.parties.upload import Local, PlainSum, RoundStart

N, CLIENTS = 50, 6


def start(coded: bool) -> RoundStart:
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(N, dtype=torch.float64, generator=gen) / 3  # not float32 numbers
    assert not torch.equal(w0, w0.float().double())
    view = None
    if coded:
        key = make_server_key(
            n=N, n_tilde=N + 5, backend="dense", left_inverse="oblique", alpha=1.0, beta=1.0, seed=1
        )
        view = (key.client_view(), key.encode(w0, torch.zeros(5, dtype=torch.float64)))
    return RoundStart(w0=w0, start=w0.float(), coded=view, length=N if view is None else N + 5)


@pytest.mark.parametrize("coded", [False, True], ids=["plain", "shortcut"])
def test_a_summed_chunk_is_its_clients_added_one_by_one(coded):
    s = start(coded)
    gen = torch.Generator().manual_seed(1)
    steps = [torch.randn(N, generator=gen) * 0.1 for _ in range(CLIENTS)]  # −lr·g_i, float32
    models = [(s.start + d).double() for d in steps]  # each client's float32 model, read back
    sizes = [float(10 + c) for c in range(CLIENTS)]
    one_by_one = PlainSum(s, shortcut=coded, device=torch.device("cpu"))
    report = WorkerReport(worker=0, round=0)
    for c, (w, size) in enumerate(zip(models, sizes, strict=True)):
        assert one_by_one.add(Local(c, size, 0.0, w, w), report) is None
    change = sum(size * (w - s.start.double()) for w, size in zip(models, sizes, strict=True))
    summed = PlainSum(s, shortcut=coded, device=torch.device("cpu"))
    assert summed.add_summed(sum(sizes), change)
    a, b = (summed.delta, one_by_one.delta) if coded else (summed.sum, one_by_one.sum)
    # float64 sums of CLIENTS + 2 terms in two orders, each within γ of the magnitudes
    mags = sum(size * (w.abs() + s.w0.abs()) for w, size in zip(models, sizes, strict=True))
    assert float(((a - b).abs() - 2 * gamma(3 * CLIENTS + 3, U64) * mags).max()) <= 0
    assert not torch.equal(a, b) or not coded  # two computations (plain: may agree to the bit)


def test_a_chunk_whose_sum_is_not_finite_is_not_added():
    s = start(False)
    total = PlainSum(s, shortcut=False, device=torch.device("cpu"))
    change = torch.zeros(N, dtype=torch.float64)
    change[3] = float("nan")
    assert not total.add_summed(6.0, change)
    assert torch.equal(total.sum, torch.zeros(N, dtype=torch.float64))
