"""The aggregator halves without Ray: validation rejects bad uploads, reduction is order-independent and
renormalises the weights over what was accepted."""

from __future__ import annotations

import itertools

import pytest
import torch

from sifl_ray.coding.base import NoiseSpec
from sifl_ray.parties.aggregator import Aggregator
from sifl_ray.parties.checks import check_upload, shard_bounds
from sifl_ray.parties.messages import Partial
from sifl_ray.specs import Coding

GOOD = {"shape": (5,), "round": 3, "stamped_round": 3, "key_epoch": 1, "stamped_epoch": 1}


def test_check_upload_accepts_a_good_upload():
    assert check_upload(torch.zeros(5, dtype=torch.float64), **GOOD) is None


@pytest.mark.parametrize(
    ("upload", "changes", "reason"),
    [
        (torch.tensor([0.0, float("nan"), 0, 0, 0]), {}, "non-finite"),
        (torch.tensor([0.0, float("inf"), 0, 0, 0]), {}, "non-finite"),
        (torch.zeros(4), {}, "wrong shape"),
        (torch.zeros(5), {"stamped_round": 2}, "round 2"),
        (torch.zeros(5), {"stamped_epoch": 0}, "key epoch 0"),
        ([0.0] * 5, {}, "not a tensor"),
    ],
)
def test_check_upload_rejects_bad_uploads(upload, changes, reason):
    got = check_upload(upload, **{**GOOD, **changes})
    assert got is not None and reason in got


def _partials(values: list[torch.Tensor], weights: list[float]) -> list[Partial]:
    return [
        Partial(source=i, round=0, key_epoch=0, weighted_sum=v * w, weight=w, accepted=1)
        for i, (v, w) in enumerate(zip(values, weights, strict=True))
    ]


def test_reduce_is_independent_of_arrival_order():
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(64, generator=gen, dtype=torch.float64) * 1e6 for _ in range(4)]
    parts = _partials(values, [1.0, 3.0, 7.0, 11.0])
    agg = Aggregator(coding=Coding.M1, key=None, noise=NoiseSpec(), noise_seed=b"", bounds=(0, 64))
    results = {tuple(agg.reduce(0, 0, list(perm))[0].tolist()) for perm in itertools.permutations(parts)}
    assert len(results) == 1  # bitwise identical for all 24 orders


def test_reduce_renormalises_over_accepted_weights_and_skips_stale():
    values = [torch.full((3,), 2.0, dtype=torch.float64), torch.full((3,), 5.0, dtype=torch.float64)]
    parts = _partials(values, [1.0, 3.0])
    stale = Partial(
        source=9,
        round=1,
        key_epoch=0,
        weighted_sum=torch.full((3,), 1e9, dtype=torch.float64),
        weight=1.0,
        accepted=1,
    )
    agg = Aggregator(coding=Coding.PLAIN, key=None, noise=NoiseSpec(), noise_seed=b"", bounds=(0, 3))
    out, info = agg.reduce(0, 0, [*parts, stale])
    assert torch.allclose(out, torch.full((3,), (2.0 + 15.0) / 4.0, dtype=torch.float64))
    assert info["stale_partials"] == [9]
    nothing = agg.reduce(0, 0, [stale])  # nothing usable: no aggregate, and who was refused
    assert (
        nothing.aggregate is None and nothing.info["accepted"] == 0 and nothing.info["stale_partials"] == [9]
    )


def test_shard_bounds_cover_the_vector():
    for length, shards in [(10, 3), (7, 7), (5, 9), (1_200_011, 4)]:
        b = shard_bounds(length, shards)
        assert b[0][0] == 0 and b[-1][1] == length
        assert all(x[1] == y[0] for x, y in itertools.pairwise(b))
