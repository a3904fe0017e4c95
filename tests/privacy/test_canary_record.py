"""The driver's record of one arm's canaries (``CanaryAudit``), figure by figure: how a round's readings are
folded into each statistic, and what the figures of a record are, recomputed here from the estimators and the
bounds on the same scores. Each value is checked where it is made, so that a wrong sign, a dropped field or
a guard one off is caught without a run."""

from __future__ import annotations

import numpy as np
import pytest

from sifl_ray.privacy.canaries import CanaryAudit, verdict
from sifl_ray.privacy.estimate import epsilon_estimate
from sifl_ray.privacy.one_run import audit_bounds

SEED = bytes(range(16))


def test_each_round_is_folded_into_both_statistics_in_float64():
    """The final model's statistic sums the inner products; all iterates' sums each round's cosines, the
    inner products over the change's norm, computed in float64 even from float32 readings; a round in which
    the model did not move (norm 0) adds no cosine."""
    record = CanaryAudit(k=2, m=2, seed=SEED)
    rounds = [
        (np.array([0.1, -0.7, 0.3, 1.9], dtype=np.float32), 0.3),
        (np.array([-2.0, 0.5, 0.25, -0.1], dtype=np.float32), 1.7),
        (np.array([0.4, 0.4, -0.2, 0.6], dtype=np.float32), 0.0),
    ]
    for dots, norm in rounds:
        record.observe(dots, norm)
    exact = [d.astype(np.float64) for d, _ in rounds]
    np.testing.assert_array_equal(record.sums, exact[0] + exact[1] + exact[2])
    np.testing.assert_array_equal(record.cos_sums, exact[0] / 0.3 + exact[1] / 1.7)
    assert record.sums.dtype == record.cos_sums.dtype == np.float64


def test_the_uploads_view_keeps_each_directions_largest_cosine_in_float64():
    record = CanaryAudit(k=2, m=1, seed=SEED)
    assert record.statistic("uploads") is None  # nothing read yet
    record.observe_uploads(np.array([0.1, 0.9, -0.3], dtype=np.float32))
    assert record.upload_max.dtype == np.float64  # kept in float64 from the first reading on
    record.observe_uploads([0.5, 0.2, -0.4])
    np.testing.assert_array_equal(record.upload_max, [0.5, np.float32(0.9), np.float32(-0.3)])
    assert record.upload_max.dtype == np.float64


def test_a_verdict_at_each_boundary():
    """A bound equal to the claim does not refute it; a claim equal to the ceiling cannot be refuted by these
    canaries (untestable), nor one above it."""
    assert verdict(claimed=2.0, lower_bound=2.0, ceiling=5.0) == "not refuted"
    assert verdict(claimed=2.0, lower_bound=2.0 + 1e-12, ceiling=5.0) == "refuted"
    assert verdict(claimed=5.0, lower_bound=1.0, ceiling=5.0) == "untestable"
    assert verdict(claimed=6.0, lower_bound=1.0, ceiling=5.0) == "untestable"
    assert verdict(claimed=4.9, lower_bound=1.0, ceiling=5.0) == "not refuted"
    assert verdict(claimed=None, lower_bound=9.0, ceiling=5.0) == "no claim"
    assert verdict(claimed=float("inf"), lower_bound=9.0, ceiling=5.0) == "no claim"


def _strong(k: int = 200, m: int = 100) -> CanaryAudit:
    """A record whose inserted canaries stand out (shift 4): the f-DP bound then exceeds Steinke's."""
    record = CanaryAudit(k=k, m=m, seed=SEED)
    rng = np.random.default_rng(1)
    dots = rng.normal(size=k + m)
    dots[:k] += 4.0 * record.included
    record.observe(dots, norm=2.0)
    return record


def test_the_figures_are_the_estimators_and_the_bounds_on_the_record():
    """Every field of a threat model's row, against the estimate and both bounds recomputed on the record's
    scores; the defaults: an interval, a claim that is not a Gaussian mechanism's."""
    record = _strong()
    figures = record.figures(delta=1e-5, confidence=0.9, claims={"final_model": 3.0}, t=4)
    assert set(figures) == {"final_model", "all_iterates"}  # the uploads' view was never read
    scores = record.sums
    canary, null = scores[:200], scores[200:]
    est = epsilon_estimate(
        canary_cosines=canary[record.included], null_cosines=null, delta=1e-5, confidence=0.9, rng_seed=4
    )
    bounds = audit_bounds(scores=canary, included=record.included, delta=1e-5, confidence=0.9)
    assert bounds.bound(gaussian=True) > bounds.bound(gaussian=False)  # the default matters here
    row = figures["final_model"]
    assert row == {
        "estimate": est.estimate,
        "estimate_low": est.low,
        "estimate_high": est.high,
        "gdp_estimate": est.gdp_estimate,
        "mu": est.mu,
        "spread_ratio": est.spread_ratio,
        "lower_bound": bounds.bound(gaussian=False),
        "ceiling": bounds.ceiling(gaussian=False),
        "steinke_bound": bounds.steinke,
        "steinke_ceiling": bounds.steinke_ceiling,
        "fdp_bound": bounds.fdp,
        "fdp_ceiling": bounds.fdp_ceiling,
        "fdp_applies": False,
        "guesses": bounds.guesses,
        "correct": bounds.correct,
        "confidence": 0.9,
        "claimed_epsilon": 3.0,
        "verdict": verdict(
            claimed=3.0, lower_bound=bounds.bound(gaussian=False), ceiling=bounds.ceiling(gaussian=False)
        ),
    }
    assert figures["all_iterates"]["claimed_epsilon"] is None  # no claim given for that view
    gaussian = record.figures(delta=1e-5, confidence=0.9, claims={}, t=4, gaussian=True, interval=False)
    row = gaussian["final_model"]
    assert row["lower_bound"] == bounds.bound(gaussian=True) and row["fdp_applies"] is True
    assert row["ceiling"] == bounds.ceiling(gaussian=True)
    assert "estimate_low" not in row and row["estimate"] == est.estimate  # no interval asked


@pytest.mark.parametrize(
    ("inserted", "nulls", "estimated"),
    [
        ([2.0, 3.0], [0.0, 1.0], True),  # two of each, each spread exactly 1: enough to fit
        ([], [0.0, 1.0, 0.5], False),  # no canary inserted (a draw of the inclusion bits can say so)
        ([2.0], [0.0, 1.0, 0.5], False),  # one inserted canary: no spread to fit
        ([2.0, 3.0], [0.5], False),  # one null
        ([2.0, 3.0], [0.5, 0.5, 0.5], False),  # nulls all equal
        ([2.0, 2.0], [0.0, 1.0, 0.5], False),  # inserted canaries all equal
    ],
)
def test_an_estimate_needs_a_spread_in_both_samples(inserted, nulls, estimated):
    """The estimate (two fitted Gaussians) needs two values of each sample and a spread in each; without,
    the row has the bounds only (no estimate: not an error, the model has not moved yet)."""
    k = 4
    record = CanaryAudit(k=k, m=len(nulls), seed=SEED)
    record.included = np.array([True] * len(inserted) + [False] * (k - len(inserted)))
    record.observe(np.array([*inserted, *[0.0] * (k - len(inserted)), *nulls]), norm=1.0)
    row = record.figures(delta=1e-5, confidence=0.95, claims={}, t=0)["final_model"]
    assert ("estimate" in row) is estimated
    if estimated:
        est = epsilon_estimate(
            canary_cosines=np.array(inserted), null_cosines=np.array(nulls), delta=1e-5, rng_seed=0
        )
        assert (row["estimate"], row["mu"], row["spread_ratio"]) == (est.estimate, est.mu, est.spread_ratio)


def test_the_auditors_two_seeds_are_its_named_streams():
    """The directions' seed and the inclusion bits' seed are the auditor's secret's streams named
    ("canary", "directions") and ("canary", "inclusion"): the names are part of a run's reproducibility (a
    checkpoint resumed by a later version draws the same canaries), and the two differ (the scoring parties
    hold the first, never the second)."""
    from sifl_ray.party_seeds import party_seed
    from sifl_ray.runner.canaries import auditor_seeds
    from sifl_ray.seeding import derive_bytes

    auditor = party_seed(5, "run", "auditor")
    directions, inclusion = auditor_seeds(auditor)
    assert directions == derive_bytes(auditor, "canary", "directions")
    assert inclusion == derive_bytes(auditor, "canary", "inclusion")
    assert directions != inclusion and len(directions) == len(inclusion) == 32


def test_a_record_made_with_part_of_its_statistics_starts_from_nothing():
    """A record is made whole or not at all: given both statistics it keeps them, given one it starts from
    zero like a new one (a half-restored record would score one view from one run and the other from
    another)."""
    sums, cos_sums = np.arange(5.0), np.arange(5.0) / 2
    whole = CanaryAudit(k=3, m=2, seed=SEED, sums=sums.copy(), cos_sums=cos_sums.copy())
    np.testing.assert_array_equal(whole.sums, sums)
    np.testing.assert_array_equal(whole.cos_sums, cos_sums)
    for given in ({"sums": sums.copy()}, {"cos_sums": cos_sums.copy()}):
        half = CanaryAudit(k=3, m=2, seed=SEED, **given)
        assert not half.sums.any() and not half.cos_sums.any() and half.sums.shape == (5,)


def test_the_canaries_taking_part_are_the_samplers_named_stream():
    """Each round's draws come from the sampler's stream named ("canaries", t), apart from the clients'
    sample: a canary takes part when its draw is below the fraction, a left-out one only under zero-out."""
    from sifl_ray.runner.canaries import CanaryPlan
    from sifl_ray.seeding import numpy_generator

    seed = bytes(range(32))
    plan = CanaryPlan(ids=[100, 101, 102, 103, 104, 105], included=np.array([True, False] * 3))
    for t in (0, 3):
        draws = numpy_generator(seed, "canaries", t).random(6)
        for zero_out in (False, True):
            want = [c for j, c in enumerate(plan.ids) if (plan.included[j] or zero_out) and draws[j] < 0.5]
            assert plan.taking_part(t, sampler_seed=seed, fraction=0.5, zero_out=zero_out) == want
    everyone = plan.taking_part(1, sampler_seed=seed, fraction=1.0, zero_out=True)
    assert everyone == plan.ids and plan.taking_part(1, sampler_seed=seed, fraction=1.0, zero_out=False) == [
        100,
        102,
        104,
    ]


def test_canaries_whose_directions_outgrow_a_party_are_refused_with_the_numbers_and_a_fix():
    """The directions take (k + m)·n·8 bytes in the evaluator and in every worker: up to AUDIT_BYTES (1 GiB)
    is accepted, one byte more is refused, naming both keys, the size, the limit and nulls that would fit."""
    from sifl_ray.config import ConfigError, load_config
    from sifl_ray.runner.canaries import AUDIT_BYTES, plan_canaries

    assert AUDIT_BYTES == 2**30

    def plan(k: int, m: int, n: int):
        cfg = load_config([f"audit.canaries={k}", f"audit.nulls={m}", "clients.num_clients=4"])
        sizes = np.full(4, 10)
        return plan_canaries(cfg, n=n, num_workers=2, sizes=sizes, auditor_seed=lambda: bytes(32))

    assert plan(0, 10, 100).ids == []  # no canaries: an empty plan
    assert len(plan(2**16, 2**16, 2**10).ids) == 2**16  # exactly 1 GiB: accepted
    for (k, m, n), said in [
        ((10_000, 6_000, 10_000), "10000 + 6000 directions of this model's 10,000 parameters take 1.2 GiB"),
        ((13_420, 10, 10_000), "13420 + 10 directions of this model's 10,000 parameters take 1.0 GiB"),
    ]:
        with pytest.raises(ConfigError) as err:
            plan(k, m, n)
        fit = max(2, 2**30 // (8 * n) - k)  # 3421, then 2 (the fewest nulls the estimate takes)
        assert err.value.problems == [
            f"audit.canaries, audit.nulls: {said} in the evaluator and in every worker (at most 1 GiB); "
            f"lower them, e.g. audit.nulls={fit}"
        ]
    with pytest.raises(ConfigError):
        plan(2**16, 2**16 + 1, 2**10)  # one direction more than 1 GiB holds
