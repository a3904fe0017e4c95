"""Client sampling and minibatch order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sifl_ray.data import (
    client_batches,
    sample_clients,
)


@pytest.mark.parametrize(("clients", "fraction"), [(10, 1.0), (10, 0.3), (50, 0.1), (7, 0.5), (100, 0.001)])
def test_sample_clients_respects_the_fraction(clients: int, fraction: float) -> None:
    expected = max(1, math.ceil(round(fraction * clients, 9)))
    chosen = sample_clients(clients, fraction, 3, 42)
    assert len(chosen) == expected
    assert np.all(np.diff(chosen) > 0) and chosen.min() >= 0 and chosen.max() < clients
    np.testing.assert_array_equal(chosen, sample_clients(clients, fraction, 3, 42))


def test_sample_clients_varies_by_round_and_is_fair() -> None:
    rounds = [sample_clients(20, 0.25, t, 7) for t in range(400)]
    assert len({tuple(r) for r in rounds}) > 300
    counts = np.bincount(np.concatenate(rounds), minlength=20)
    assert counts.min() > 60 and counts.max() < 140  # 100 expected each
    assert not np.array_equal(sample_clients(20, 0.25, 0, 7), sample_clients(20, 0.25, 0, 8))
    np.testing.assert_array_equal(sample_clients(20, 1.0, 5, 7), np.arange(20))


@pytest.mark.parametrize(("fraction", "round_"), [(0.0, 0), (1.5, 0), (0.5, -1)])
def test_sample_clients_errors(fraction: float, round_: int) -> None:
    with pytest.raises(ValueError):
        sample_clients(10, fraction, round_, 0)


def test_client_batches_epochs_cover_each_sample_once_per_epoch() -> None:
    idx = np.arange(100, 123)
    batches = client_batches(idx, batch_size=5, epochs=2, seed=0, client_id=3, round=4)
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3] * 2
    for epoch in (batches[:5], batches[5:]):
        np.testing.assert_array_equal(np.sort(np.concatenate(epoch)), idx)
    assert not np.array_equal(np.concatenate(batches[:5]), np.concatenate(batches[5:]))
    dropped = client_batches(idx, batch_size=5, epochs=2, seed=0, client_id=3, round=4, drop_last=True)
    assert [len(b) for b in dropped] == [5] * 8


def test_client_batches_are_deterministic_per_seed_client_and_round() -> None:
    idx = np.arange(50)

    def order(**kw: int) -> np.ndarray:
        args = {"seed": 1, "client_id": 2, "round": 3, **kw}
        return np.concatenate(client_batches(idx, batch_size=8, epochs=1, **args))

    np.testing.assert_array_equal(order(), order())
    assert not np.array_equal(order(), order(round=4))
    assert not np.array_equal(order(), order(client_id=5))
    assert not np.array_equal(order(), order(seed=9))
    assert not np.array_equal(order(), idx)  # actually shuffled


def test_client_batches_steps_run_across_epochs() -> None:
    idx = np.arange(10)
    batches = client_batches(idx, batch_size=4, steps=7, seed=0, client_id=0, round=0)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2, 4]
    same_start = client_batches(idx, batch_size=4, epochs=2, seed=0, client_id=0, round=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches[:6], same_start, strict=True))
    # The scenario convention: positive steps win over epochs; steps=0 means "use epochs".
    both = client_batches(idx, batch_size=4, epochs=1, steps=7, seed=0, client_id=0, round=0)
    assert all(np.array_equal(a, b) for a, b in zip(both, batches, strict=True))
    zero = client_batches(idx, batch_size=4, epochs=2, steps=0, seed=0, client_id=0, round=0)
    assert all(np.array_equal(a, b) for a, b in zip(zero, same_start, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give epochs >= 1 or steps >= 1"),
        ({"epochs": 0}, "give epochs >= 1 or steps >= 1"),
        ({"epochs": 0, "steps": 0}, "give epochs >= 1 or steps >= 1"),
        ({"epochs": 1, "steps": -1}, "steps must be non-negative"),
        ({"epochs": 1, "batch_size": 0}, "batch_size must be at least 1"),
        ({"epochs": 1, "batch_size": 20, "drop_last": True}, "fewer than batch_size 20"),
    ],
)
def test_client_batches_errors(kwargs: dict, message: str) -> None:
    args = {"batch_size": 4, "seed": 0, "client_id": 0, "round": 0, **kwargs}
    with pytest.raises(ValueError, match=message):
        client_batches(np.arange(10), **args)
    with pytest.raises(ValueError, match="client 0 has no samples"):
        client_batches(np.array([], dtype=np.int64), batch_size=4, epochs=1, seed=0, client_id=0, round=0)


def test_poisson_sampling_takes_each_client_with_probability_q() -> None:
    """Each client joins independently: round sizes vary around qN (binomial), each client's count over
    rounds is Binomial(T, q); fraction 1 takes everyone; a round may be empty."""
    q, n, rounds = 0.2, 30, 2000
    draws = [sample_clients(n, q, t, 11, "poisson") for t in range(rounds)]
    sizes = np.array([len(d) for d in draws])
    # mean of T binomial(n, q) sizes: std of the mean is sqrt(n q (1-q) / T); allow 6 of them
    assert abs(sizes.mean() - q * n) <= 6 * math.sqrt(n * q * (1 - q) / rounds)
    assert sizes.min() < q * n < sizes.max()  # not a fixed size
    counts = np.bincount(np.concatenate(draws), minlength=n)
    assert np.all(np.abs(counts - q * rounds) <= 6 * math.sqrt(rounds * q * (1 - q)))
    np.testing.assert_array_equal(draws[5], sample_clients(n, q, 5, 11, "poisson"))
    np.testing.assert_array_equal(sample_clients(n, 1.0, 3, 11, "poisson"), np.arange(n))
    assert any(len(sample_clients(3, 0.05, t, 0, "poisson")) == 0 for t in range(200))
    with pytest.raises(ValueError, match="sampling must be one of"):
        sample_clients(n, q, 0, 0, "bernoulli")
