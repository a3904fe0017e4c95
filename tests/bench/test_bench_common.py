"""The benchmarks' statistics and turn-taking helpers."""

from __future__ import annotations

import pytest

from bench._common import quantile, ratio_of_medians, result_line, rotation, spread, table
from bench.overhead import lowest_vectorised_over_loop, target_for, vectorised_target


def test_quantile_interpolates_and_spread_summarises():
    assert quantile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.5
    assert quantile([1.0], 0.25) == 1.0
    s = spread([5.0, 1.0, 3.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 5.0, 3)
    assert s["p25"] == 2.0 and s["p75"] == 4.0


def test_ratio_is_of_medians_and_its_spread_of_paired_ratios():
    r = ratio_of_medians([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])
    assert r["ratio"] == 2.0  # median 4 over median 2
    assert (r["ratio_p25"], r["ratio_p75"]) == (2.0, 2.5)  # paired ratios 2, 2, 3


def test_rotation_gives_every_arm_every_position():
    arms = ["a", "b", "c"]
    orders = [rotation(arms, t) for t in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert rotation(["fl", "m2"], 1) == ["m2", "fl"]


@pytest.mark.parametrize(
    ("clients", "target"),
    [(1, 1.10), (10, 1.10), (100, 1.25), (101, 1.5), (999, 1.5), (1000, 0.45), (5000, 0.45)],
)  # from N = 1000 a worker trains its clients together
def test_overhead_targets_follow_the_issue(clients, target):
    assert target_for(clients) == target


def test_the_vectorised_lead_has_its_target_and_its_lowest_value_from_the_shared_part_of_a_round():
    assert [vectorised_target(n) for n in (10, 999, 1000, 5000)] == [1.0, 1.0, 0.6, 0.6]
    res = {
        "noop": {"round_s": {"median": 0.25}},
        "floor": {"train_floor_s": 0.15},
        "round_s": {"fl loop": {"median": 0.8}},
    }
    assert lowest_vectorised_over_loop(res) == (0.25 + 0.15) / 0.8  # 0.5: both pay the no-op round
    assert lowest_vectorised_over_loop({**res, "noop": {}}) is None  # --noop-rounds 0: no shared part


def test_result_line_and_table_format():
    assert result_line("overhead_n10", 1.23456, 1.1) == "RESULT overhead_n10 ratio=1.235 target=1.1"
    text = table([["fl", "1.0"], ["bare 1t", "10.25"]], ["arm", "s"])
    assert text.splitlines() == ["arm          s", "-------  -----", "fl         1.0", "bare 1t  10.25"]
