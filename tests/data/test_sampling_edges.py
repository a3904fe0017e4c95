"""Client batches at their edges: the smallest valid batch, a client with exactly one batch under
``drop_last``, the message that names the fix, and the documented stream of the order (written against
the mutants mutmut left alive: tests/mutation)."""

from __future__ import annotations

import numpy as np
import pytest

from sifl_ray.data import client_batches, sample_clients
from sifl_ray.seeding import numpy_generator


def test_a_batch_of_one_sample_is_allowed():
    batches = client_batches(np.arange(5), batch_size=1, epochs=1, seed=0, client_id=0, round=0)
    assert sorted(int(b[0]) for b in batches) == [0, 1, 2, 3, 4] and all(b.size == 1 for b in batches)


def test_drop_last_with_exactly_one_batch_of_samples_keeps_it():
    batches = client_batches(
        np.arange(4), batch_size=4, epochs=2, seed=0, client_id=0, round=0, drop_last=True
    )
    assert [sorted(b.tolist()) for b in batches] == [[0, 1, 2, 3]] * 2


def test_drop_last_with_too_few_samples_names_the_fix():
    with pytest.raises(ValueError) as err:
        client_batches(np.arange(3), batch_size=4, epochs=1, seed=0, client_id=7, round=0, drop_last=True)
    assert str(err.value) == (
        "client 7 has 3 samples, fewer than batch_size 4, and drop_last=True would leave it no batch. "
        "Fix: drop_last=False or a smaller batch."
    )


def test_the_order_comes_from_the_documented_stream():
    """``(seed, "batches", client_id, round)``: named apart from every other stream of the run, and what
    makes FL and the SIFL arms train on identical minibatches."""
    indices = np.arange(100, 130)
    got = client_batches(indices, batch_size=8, epochs=2, seed=5, client_id=3, round=2)
    gen = numpy_generator(5, "batches", 3, 2)
    expected = [
        p[i : i + 8] for p in (indices[gen.permutation(30)] for _ in range(2)) for i in range(0, 30, 8)
    ]
    assert len(got) == len(expected) == 8
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1.0, 0), "num_clients must be at least 1"),
        ((10, 1.5, 0), r"fraction must be in \(0, 1\]"),
        ((10, 0.0, 0), r"fraction must be in \(0, 1\]"),
        ((10, 0.5, -1), "round must be non-negative"),
    ],
)
def test_sample_clients_refuses_bad_input_with_its_own_words(args, message):
    """Each refusal names the argument and what it must be (not a message numpy happens to raise later)."""
    with pytest.raises(ValueError, match=message):
        sample_clients(*args, b"s" * 32)
    with pytest.raises(ValueError, match="sampling must be one of fixed, poisson; got 'bernoulli'"):
        sample_clients(10, 0.5, 0, b"s" * 32, "bernoulli")


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_a_population_of_one_client_is_sampled(sampling):
    assert sample_clients(1, 1.0, 0, b"s" * 32, sampling).tolist() == [0]
