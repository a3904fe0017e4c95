"""Partitions across clients, and the partitioner registry."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from sifl_ray.data import (
    PARTITIONERS,
    partition_dataset,
    partition_dirichlet,
    partition_iid,
    partition_shards,
    register_partitioner,
)
from sifl_ray.data.partition import PARTITION_OPTIONS
from sifl_ray.seeding import numpy_generator


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    every = np.concatenate(parts)
    assert every.dtype == np.int64
    np.testing.assert_array_equal(np.sort(every), np.arange(n))  # each sample once, none missing
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats


def _labels(n: int = 3000, classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.arange(n) % classes)


def test_iid_partition_covers_and_balances() -> None:
    labels = _labels(1003)
    parts = partition_iid(labels, 10, np.random.default_rng(0))
    _assert_exact_cover(parts, labels.size)
    assert {len(p) for p in parts} == {100, 101}
    again = partition_iid(labels, 10, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def _skew(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between a client's label distribution and the global one."""
    k = labels.max() + 1
    overall = np.bincount(labels, minlength=k) / labels.size
    return float(
        np.mean([0.5 * np.abs(np.bincount(labels[p], minlength=k) / len(p) - overall).sum() for p in parts])
    )


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    labels = _labels(5000)
    skews = []
    for alpha in (100.0, 1.0, 0.1):
        parts = partition_dirichlet(labels, 20, alpha, np.random.default_rng(0))
        _assert_exact_cover(parts, labels.size)
        skews.append(_skew(labels, parts))
    assert skews[0] < 0.1 < skews[1] < skews[2]
    assert skews[2] > 0.6
    assert _skew(labels, partition_iid(labels, 20, np.random.default_rng(0))) < 0.1


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(60, 400),  # ≥ clients × min_size, so every draw is feasible
    clients=st.integers(1, 20),
    alpha=st.sampled_from([1e-3, 0.05, 0.5, 5.0]),
    min_size=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_always_covers_and_respects_min_size(
    n: int, clients: int, alpha: float, min_size: int, seed: int
) -> None:
    labels = _labels(n, classes=7, seed=seed % 1000)
    parts = partition_dirichlet(labels, clients, alpha, np.random.default_rng(seed), min_size=min_size)
    assert len(parts) == clients
    _assert_exact_cover(parts, n)
    assert min(len(p) for p in parts) >= min_size


def test_shards_give_few_classes_per_client() -> None:
    labels = _labels(2000)
    parts = partition_shards(labels, 50, 2, np.random.default_rng(0))
    _assert_exact_cover(parts, labels.size)
    assert {len(p) for p in parts} == {40}
    classes_per_client = [len(np.unique(labels[p])) for p in parts]
    assert max(classes_per_client) <= 4 and np.mean(classes_per_client) <= 2.5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda y, g: partition_iid(y, 11, g), "11 clients but only 10 samples"),
        (lambda y, g: partition_iid(y, 0, g), "num_clients must be at least 1"),
        (lambda y, g: partition_dirichlet(y, 2, 0.0, g), "alpha must be a positive finite number; got 0.0"),
        (lambda y, g: partition_dirichlet(y, 2, float("nan"), g), "alpha must be a positive finite"),
        (lambda y, g: partition_dirichlet(y, 4, 1.0, g, min_size=3), "12 samples needed, only 10"),
        (lambda y, g: partition_shards(y, 3, 4, g), "12 shards, more than the 10 samples"),
        (lambda y, g: partition_shards(y, 3, 0, g), "shards.per_client must be at least 1"),
        (lambda y, g: partition_iid(y.reshape(2, 5), 2, g), "labels must be a 1-D array"),
    ],
)
def test_partition_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(np.arange(10) % 3, np.random.default_rng(0))


def test_partition_dataset_uses_named_streams() -> None:
    labels = _labels(500)
    a = partition_dataset(labels, scheme="dirichlet", num_clients=5, seed=1, settings={"alpha": 0.3})
    b = partition_dirichlet(labels, 5, 0.3, numpy_generator(1, "partition", "dirichlet"))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(partition_dataset(labels, scheme="shards", num_clients=5, seed=1)) == 5
    with pytest.raises(ValueError, match="unknown partition scheme 'pathological'"):
        partition_dataset(labels, scheme="pathological", num_clients=5, seed=1)


@pytest.fixture
def restore_partitioners() -> Iterator[None]:
    """Put :data:`PARTITIONERS` back as it was, so a toy scheme registered by a test does not leak."""
    with PARTITIONERS.restored():
        yield


def test_a_registered_partitioner_is_accepted_and_unknown_schemes_list_the_registry(
    restore_partitioners: None,
) -> None:
    labels = _labels(103)
    before = ", ".join(PARTITIONERS)  # read, not pinned: a new built-in scheme changes no test
    with pytest.raises(ValueError, match=f"unknown partition scheme 'round_robin'; registered: {before}"):
        partition_dataset(labels, scheme="round_robin", num_clients=4, seed=1)

    @register_partitioner("round_robin")
    def partition_round_robin(
        labels: np.ndarray, num_clients: int, generator: np.random.Generator
    ) -> list[np.ndarray]:
        """Deal the samples out like cards, starting from a random client."""
        order = np.roll(np.arange(num_clients), int(generator.integers(num_clients)))
        return [np.arange(k, labels.size, num_clients, dtype=np.int64) for k in order]

    # Accepted by name, on its own stream, given none of the options it did not ask for.
    parts = partition_dataset(labels, scheme="round_robin", num_clients=4, seed=1)
    _assert_exact_cover(parts, labels.size)
    direct = partition_round_robin(labels, 4, numpy_generator(1, "partition", "round_robin"))
    assert all(np.array_equal(a, b) for a, b in zip(parts, direct, strict=True))

    with pytest.raises(ValueError, match=rf"registered: {before}, round_robin\. Fix:"):
        partition_dataset(labels, scheme="pathological", num_clients=4, seed=1)
    with pytest.raises(ValueError, match="'round_robin' is already registered"):
        register_partitioner("round_robin")(partition_round_robin)
    with pytest.raises(ValueError, match=r"unknown option.*beta"):
        register_partitioner("skewed", options=("beta",))


def test_partition_options_are_partition_datasets_keywords() -> None:
    """The options a scheme may ask for are exactly the knobs partition_dataset hands out."""
    keywords = [
        p.name
        for p in inspect.signature(partition_dataset).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
        and p.name not in ("scheme", "num_clients", "seed", "settings")  # settings: a scheme's own section
    ]
    assert keywords == list(PARTITION_OPTIONS)
    for name, scheme in PARTITIONERS.items():  # every registered scheme asks only for knobs that exist
        assert set(scheme.options) <= set(PARTITION_OPTIONS), name
