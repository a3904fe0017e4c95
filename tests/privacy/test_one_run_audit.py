"""One-run audits: canaries and Steinke et al.'s bound (sifl_ray.privacy.one_run), Andrew et al.'s estimate
(sifl_ray.privacy.estimate), both bounds under one union.

Statistical checks run over fixed seeds; each threshold comes from a binomial tail computed in the test (a
count that a correct implementation misses with probability below 1e-4), never from a printed number.
"""

from __future__ import annotations

import itertools
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_mechanism
from scipy import special, stats

from sifl_ray.privacy import dp_fedavg
from sifl_ray.privacy import estimate as E
from sifl_ray.privacy import one_run as O
from sifl_ray.seeding import derive_bytes

DELTA = 1e-5
SLIP = 1e-4  # the largest chance, per test, that a correct implementation fails a count threshold below


def secret(i: int) -> bytes:
    return derive_bytes(i, "test", "one_run")


def fewest_successes(trials: int, p: float) -> int:
    """The smallest count c with P[Binom(trials, p) < c] ≤ SLIP: at least c successes are expected."""
    return int(stats.binom.ppf(SLIP, trials, p))


def most_failures(trials: int, p: float) -> int:
    """The largest count c with P[Binom(trials, p) > c] ≤ SLIP: at most c failures are expected."""
    return int(stats.binom.isf(SLIP, trials, p))


# ------------------------------------------------------------------------------------------------------------
# Canaries.


def test_canary_directions_sit_on_the_clip_sphere_and_each_has_its_own_stream():
    dirs = O.canary_directions(d=300, k=6, seed=secret(0), clip=2.5)
    assert dirs.shape == (6, 300)
    np.testing.assert_allclose(np.linalg.norm(dirs, axis=1), 2.5, rtol=1e-12)
    # canary j does not depend on how many are drawn, nor on where the draw starts
    np.testing.assert_array_equal(
        O.canary_directions(d=300, k=2, seed=secret(0), clip=2.5, first=4), dirs[4:]
    )
    np.testing.assert_array_equal(O.canary_directions(d=300, k=3, seed=secret(0), clip=2.5), dirs[:3])
    assert not np.array_equal(O.canary_directions(d=300, k=6, seed=secret(1), clip=2.5), dirs)
    # random unit directions in d = 300 are nearly orthogonal: |cos| ≤ 6/sqrt(d) fails with chance ~1e-9 each
    gram = dirs @ dirs.T / 2.5**2
    assert np.max(np.abs(gram - np.eye(6))) < 6 / math.sqrt(300)


def test_canaries_refuse_a_public_seed_and_bad_sizes():
    with pytest.raises(ValueError, match="secret seed"):
        O.canary_directions(d=10, k=2, seed=b"short", clip=1.0)
    with pytest.raises(ValueError, match="secret seed"):
        O.inclusion_draws(k=2, seed=7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clip must be finite and > 0"):
        O.canary_directions(d=10, k=2, seed=secret(0), clip=0.0)
    with pytest.raises(ValueError, match="need integers d >= 1"):
        O.canary_directions(d=0, k=2, seed=secret(0), clip=1.0)


def test_inclusion_draws_are_fair_coins_fixed_per_canary():
    bits = O.inclusion_draws(k=2000, seed=secret(2))
    assert bits.dtype == bool and bits.shape == (2000,)
    np.testing.assert_array_equal(O.inclusion_draws(k=50, seed=secret(2)), bits[:50])
    low, high = stats.binom.ppf(SLIP / 2, 2000, 0.5), stats.binom.isf(SLIP / 2, 2000, 0.5)
    assert low <= bits.sum() <= high
    assert not np.array_equal(O.inclusion_draws(k=2000, seed=secret(3)), bits)


def test_cosines_are_zero_safe():
    dirs = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [-3.0, 0.0, 0.0]])
    delta = np.array([2.0, 2.0, 0.0])
    np.testing.assert_allclose(
        O.cosines(delta, dirs), [1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, -1 / math.sqrt(2)]
    )
    np.testing.assert_array_equal(O.cosines(np.zeros(3), dirs), np.zeros(4))
    assert O.cosines(delta, dirs[0]).shape == (1,)
    with pytest.raises(ValueError, match="directions of shape"):
        O.cosines(np.zeros(4), dirs)


# ------------------------------------------------------------------------------------------------------------
# μ-GDP to (ε, δ), anchored to dp_accounting.


@pytest.mark.parametrize("z", [0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_gdp_epsilon_is_the_gaussian_mechanisms_epsilon_in_dp_accounting(z, delta):
    """μ-GDP with μ = 1/z is the Gaussian mechanism of noise multiplier z (Dong, Roth, Su 2022).

    Exact: dp_accounting's analytic Gaussian privacy loss gives back δ at our ε (Brent's xtol 1e-12 moves
    δ by far less than 1e-9 relative). Accountant: the PLD accountant rounds the privacy loss up to its grid
    (pessimistic), so its ε lies in [ours, ours + one discretisation step] (plus its truncated tail mass, at
    most e^-50 in δ: nothing at these δ).
    """
    ours = E.gdp_epsilon(mu=1 / z, delta=delta)
    exact = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=z).get_delta_for_epsilon(ours)
    assert exact == pytest.approx(delta, rel=1e-9)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=dp_fedavg.PLD_DISCRETIZATION)
    acc.compose(dp_accounting.GaussianDpEvent(z))
    pld = acc.get_epsilon(delta)
    assert ours - 1e-9 <= pld <= ours + dp_fedavg.PLD_DISCRETIZATION


def test_gdp_epsilon_edges():
    assert E.gdp_epsilon(mu=0.0, delta=DELTA) == 0.0
    assert E.gdp_epsilon(mu=-1.0, delta=DELTA) == 0.0
    assert E.gdp_epsilon(mu=math.inf, delta=DELTA) == math.inf
    # δ already covers ε = 0 when δ ≥ 2Φ(μ/2) − 1
    mu = 0.1
    assert E.gdp_epsilon(mu=mu, delta=2 * special.ndtr(mu / 2) - 1 + 1e-6) == 0.0
    assert E.gdp_epsilon(mu=mu, delta=2 * special.ndtr(mu / 2) - 1 - 1e-6) > 0.0
    mus = [0.05, 0.3, 1.0, 3.0, 10.0]
    eps = [E.gdp_epsilon(mu=m, delta=DELTA) for m in mus]
    assert all(a < b for a, b in itertools.pairwise(eps))
    with pytest.raises(ValueError, match="delta must be in"):
        E.gdp_epsilon(mu=1.0, delta=0.0)


# ------------------------------------------------------------------------------------------------------------
# The estimate (Andrew et al.).


def test_two_gaussians_epsilon_is_gdp_at_equal_spreads_and_the_hockey_stick_divergence_otherwise():
    """Equal spreads: the pair N(0, s²), N(μs, s²) is μ-GDP, whatever s and the common mean. Unequal: δ(ε) is
    the larger hockey-stick divergence ∫ (p − e^ε q)₊, both ways, computed here on a dense grid."""
    from scipy import integrate

    for mu in (0.1, 0.3, 1.0, 3.0, 8.0):
        for s in (1.0, 0.01):
            got = E.gaussians_epsilon(
                mean_null=0.5, sd_null=s, mean_canary=0.5 + mu * s, sd_canary=s, delta=DELTA
            )
            assert float(got) == pytest.approx(E.gdp_epsilon(mu=mu, delta=DELTA), rel=1e-9)

    grid = np.linspace(-60, 60, 2_400_001)  # a step of 5e-5: the tails of every pair below, to 1e-9

    def hockey(eps, p, q):  # densities on the grid
        gap = p - math.exp(eps) * q
        return float(integrate.trapezoid(np.maximum(gap, 0.0), grid))

    for pair in [(0, 1, 0.5, 1.1), (0, 1, 1, 0.8), (0, 1, 0, 1.05), (0, 1, 3, 2.0), (0.2, 0.5, 0.0, 0.45)]:
        p, q = stats.norm.pdf(grid, *pair[:2]), stats.norm.pdf(grid, *pair[2:])  # once for every ε
        for eps in (0.0, 0.5, 2.0):
            want = max(hockey(eps, p, q), hockey(eps, q, p))
            got = E.gaussians_delta(
                epsilon=eps, mean_null=pair[0], sd_null=pair[1], mean_canary=pair[2], sd_canary=pair[3]
            )
            assert float(got) == pytest.approx(want, rel=1e-5, abs=1e-14)
    # the ε solves δ(ε) = δ; a wider canary spread alone (no shift) is a privacy loss
    eps = float(E.gaussians_epsilon(mean_null=0, sd_null=1, mean_canary=0, sd_canary=1.05, delta=DELTA))
    assert eps > 0.3
    at = E.gaussians_delta(epsilon=eps, mean_null=0, sd_null=1, mean_canary=0, sd_canary=1.05)
    assert float(at) == pytest.approx(DELTA, rel=1e-6)
    with pytest.raises(ValueError, match="spreads must be > 0"):
        E.gaussians_epsilon(mean_null=0, sd_null=0, mean_canary=1, sd_canary=1, delta=DELTA)


def test_the_estimate_is_andrew_et_als_two_gaussian_fit_with_the_equal_variance_figure_beside_it():
    """Each sample gets its own Gaussian (mean, sd with ddof 1): the estimate is their pair's ε; the
    equal-variance fit is the μ-GDP figure of μ = shift / the nulls' sd, under its own name."""
    rng = np.random.default_rng(5)
    c, n = rng.normal(1, 1.3, 200), rng.normal(0, 1, 300)
    est = E.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3)
    pair = E.gaussians_epsilon(
        mean_null=n.mean(), sd_null=n.std(ddof=1), mean_canary=c.mean(), sd_canary=c.std(ddof=1), delta=DELTA
    )
    assert est.estimate == float(pair)
    assert est.mu == pytest.approx((c.mean() - n.mean()) / n.std(ddof=1), rel=1e-12)
    assert est.gdp_estimate == E.gdp_epsilon(mu=est.mu, delta=DELTA)
    assert est.spread_ratio == pytest.approx(c.std(ddof=1) / n.std(ddof=1))
    assert est.estimate > est.gdp_estimate  # the canaries spread wider: told apart in the tails too
    assert est.low <= est.estimate <= est.high


def test_the_interval_is_a_parametric_bootstrap_over_the_fitted_gaussians():
    """The interval holds the middle 95 % of the estimates that the two fitted Gaussians give on fresh
    samples of the same sizes: over many fresh samples drawn from the fitted pair, at least 90 % of their
    estimates fall inside (at most 500 draws; fewest_successes bounds the count a correct implementation
    misses with probability ≤ SLIP)."""
    rng = np.random.default_rng(11)
    k, m, mu = 300, 600, 1.0
    est = E.epsilon_estimate(
        canary_cosines=rng.normal(mu, 1.2, k), null_cosines=rng.normal(0, 1, m), delta=DELTA, rng_seed=0
    )
    # ε does not change under one affine map of both samples: the fitted pair is N(0, 1) for the nulls and
    # N(μ, ratio²) for the canaries, in units of the nulls' fit
    fresh = np.random.default_rng(12)
    draws = 300
    fits = []  # (mean_null, sd_null, mean_canary, sd_canary) of each fresh sample
    for _ in range(draws):
        c = fresh.normal(est.mu, est.spread_ratio, k)
        n = fresh.normal(0.0, 1.0, m)
        fits.append((n.mean(), n.std(ddof=1), c.mean(), c.std(ddof=1)))
    # one call for every pair, as the bootstrap itself calls it: each element is bisected on its own, to a
    # pair's ε alone within an ulp (NumPy's vectorised log and exp), the same 280 of 300 inside here
    pairs = E.gaussians_epsilon(*np.array(fits).T, delta=DELTA)
    inside = int(np.sum((est.low <= pairs) & (pairs <= est.high)))
    assert inside >= fewest_successes(draws, 0.9)


def test_the_estimate_can_lie_above_the_true_epsilon_where_the_spreads_are_estimated():
    """What the guide says: with equal true spreads, the fitted spreads differ by sampling alone, and the
    pair's ε exceeds the mechanism's; the equal-variance figure does not carry that bias. Over 30 seeds of a
    μ = 0.25 mechanism (ε ≈ 0.93) with 500 canaries and 2000 nulls, the median estimate lies above the true
    ε and above the median equal-variance figure."""
    truth = E.gdp_epsilon(mu=0.25, delta=DELTA)
    two, gdp = [], []
    for seed in range(30):
        rng = np.random.default_rng(200 + seed)
        est = E.epsilon_estimate(
            canary_cosines=rng.normal(0.25, 1, 500),
            null_cosines=rng.normal(0, 1, 2000),
            delta=DELTA,
            rng_seed=seed,
            resamples=1,
        )
        two.append(est.estimate)
        gdp.append(est.gdp_estimate)
    assert np.median(two) > truth and np.median(two) > np.median(gdp)


def test_estimate_without_a_shift_is_small():
    """μ = 0 and equal spreads: (0, δ)-DP. The estimate comes only from the sampling error of the fitted
    spreads and means; with 500 + 500 samples it stays below the ε of a 5-sd error in μ plus a 10 % spread
    ratio (each beyond 5 of its standard deviations), and the equal-variance figure below that of 5 sd."""
    k, n, seeds = 500, 500, 20
    cap_gdp = E.gdp_epsilon(mu=5 * math.sqrt(1 / k + 1 / n), delta=DELTA)
    cap = float(
        E.gaussians_epsilon(
            mean_null=0, sd_null=1, mean_canary=5 * math.sqrt(1 / k + 1 / n), sd_canary=1.1, delta=DELTA
        )
    )
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        est = E.epsilon_estimate(
            canary_cosines=rng.normal(0, 1, k), null_cosines=rng.normal(0, 1, n), delta=DELTA, rng_seed=seed
        )
        assert est.estimate <= cap and est.gdp_estimate <= cap_gdp


def test_estimate_is_reproducible_and_refuses_bad_samples():
    rng = np.random.default_rng(5)
    c, n = rng.normal(1, 1, 50), rng.normal(0, 1, 60)
    a = E.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3)
    assert a == E.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3)
    # a wider confidence gives a wider interval from the same bootstrap stream
    wide = E.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3, confidence=0.99)
    assert wide.low <= a.low and wide.high >= a.high
    with pytest.raises(ValueError, match="all equal: no spread"):
        E.epsilon_estimate(canary_cosines=c, null_cosines=np.zeros(5), delta=DELTA, rng_seed=0)
    with pytest.raises(ValueError, match="at least 2 finite values"):
        E.epsilon_estimate(canary_cosines=c[:1], null_cosines=n, delta=DELTA, rng_seed=0)
    with pytest.raises(ValueError, match="at least 2 finite values"):
        E.epsilon_estimate(canary_cosines=np.append(c, np.nan), null_cosines=n, delta=DELTA, rng_seed=0)


def test_the_pipeline_on_a_gaussian_mechanism_over_canary_directions():
    """What the run will do, end to end: canaries drawn, half inserted, a Gaussian mechanism of noise σ per
    coordinate on their sum (sensitivity C = 1 per canary), cosines scored.

    Towards one canary the release is a Gaussian mechanism of noise multiplier σ (the other canaries only add
    noise), so its true ε is at most ε(μ = 1/σ), and its trade-off is Gaussian: both lower bounds (95 %
    together) sit below it. The estimate measures μ_eff = 1/sqrt(σ² + k_in/d) ≤ 1/σ (the other canaries'
    projections add variance k_in/d), here within 0.2 % of 1/σ; over the seeds its median lies within a
    factor 2 of ε(1/σ).
    """
    d, k, nulls, sigma = 5_000, 100, 200, 2.0
    truth = E.gdp_epsilon(mu=1 / sigma, delta=DELTA)
    estimates, below, seeds = [], 0, 8
    for seed in range(seeds):
        key = secret(10 + seed)
        dirs = O.canary_directions(d=d, k=k, seed=key, clip=1.0)
        null_dirs = O.canary_directions(d=d, k=nulls, seed=key, clip=1.0, first=k)
        included = O.inclusion_draws(k=k, seed=key)
        noise = np.random.default_rng(seed).normal(0.0, sigma, d)
        release = dirs[included].sum(axis=0) + noise
        scores = O.cosines(release, dirs)
        est = E.epsilon_estimate(
            canary_cosines=scores[included],
            null_cosines=O.cosines(release, null_dirs),
            delta=DELTA,
            rng_seed=seed,
        )
        estimates.append(est.estimate)
        bounds = O.audit_bounds(scores=scores, included=included, delta=DELTA)
        below += bounds.bound(gaussian=True) <= truth
    assert truth / 2 <= np.median(estimates) <= 2 * truth
    assert below >= fewest_successes(seeds, 0.95)


# ------------------------------------------------------------------------------------------------------------
# The lower bound (Steinke et al.).


def randomized_response(epsilon: float, included: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Score 1 with probability e^ε/(1+e^ε) for an included canary, 1 − that for an excluded one: ε-DP."""
    q = float(special.expit(epsilon))
    return np.where(included, rng.random(included.size) < q, rng.random(included.size) < 1 - q).astype(float)


def test_lower_bound_stays_below_the_true_epsilon_and_finds_it():
    """Randomised response at ε = 2 over k = 1000 canaries. Validity: each seed's bound exceeds 2 with
    probability ≤ 5%. Power: at g = 25% (250 per side) about 0.88 of the 500 guesses are right (±15 at 2 sd)
    while refuting even ε = 0 at β/5 needs only ≈ 250 + 2.3·11 ≈ 276: a zero bound would take a 25-sd miss."""
    eps, k, seeds = 2.0, 1000, 20
    above = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        included = rng.random(k) < 0.5
        res = O.epsilon_lower_bound(
            scores=randomized_response(eps, included, rng), included=included, delta=DELTA
        )
        above += res.bound > eps
        assert 0 < res.bound <= res.ceiling
        assert 1 <= res.guesses <= k // 2 and 0 <= res.correct <= 2 * res.guesses
    assert above <= most_failures(seeds, 0.05)


def test_lower_bound_is_zero_without_signal():
    """Scores independent of inclusion are (0, 0)-DP: a positive bound is a false refutation of ε = 0,
    probability ≤ 5% per seed."""
    k, seeds = 500, 30
    positive = 0
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        included = rng.random(k) < 0.5
        positive += O.epsilon_lower_bound(scores=rng.normal(size=k), included=included, delta=DELTA).bound > 0
    assert positive <= most_failures(seeds, 0.05)
    # tied scores carry no signal either: ranks follow the canary index, not the inclusion bits
    included = np.random.default_rng(0).random(k) < 0.5
    res = O.epsilon_lower_bound(scores=np.zeros(k), included=included, delta=DELTA, guesses=k // 2)
    assert res.correct == (included[: k // 2].sum() + (~included[k // 2 :]).sum())


def test_perfect_separation_reaches_the_ceiling():
    """ε = ∞: scores equal the inclusion bits. With exactly half included, g = 50% guesses all right, and
    the bound is the ceiling (the same search on the same numbers)."""
    k = 400
    included = np.zeros(k, dtype=bool)
    included[np.random.default_rng(0).permutation(k)[: k // 2]] = True
    for delta in (0.0, DELTA):
        res = O.epsilon_lower_bound(scores=included.astype(float), included=included, delta=delta)
        assert res.bound == res.ceiling == O.lower_bound_ceiling(k=k, delta=delta)
        assert (res.guesses, res.correct) == (k // 2, k)
    # reversed scores: every guess wrong, nothing refuted
    res = O.epsilon_lower_bound(scores=-included.astype(float), included=included, delta=DELTA)
    assert res.bound == 0.0


def test_ceiling_grows_with_k_and_matches_the_pure_epsilon_formula():
    """With δ = 0 and every guess right, the p-value is q^r: the ceiling is logit((β/5)^(1/r)) (0 where that
    is negative), with r the largest guess count 2·(k//2). With δ > 0 the theorem's extra term only lowers
    it, and grows with k: the ceiling rises over even k, and an odd k loses a little against k − 1."""
    ks = [*range(2, 41), 60, 100, 250, 1000, 3000]
    beta = 0.05 / len(O.GUESS_FRACTIONS)
    pure = [O.lower_bound_ceiling(k=k, delta=0.0) for k in ks]
    for k, c in zip(ks, pure, strict=True):
        r = 2 * (k // 2)
        assert c == pytest.approx(max(0.0, float(special.logit(beta ** (1 / r)))), abs=1e-8)
    with_delta = [O.lower_bound_ceiling(k=k, delta=DELTA) for k in ks]
    assert all(a <= b for a, b in itertools.pairwise(pure))
    even = [c for k, c in zip(ks, with_delta, strict=True) if k % 2 == 0]
    assert all(a < b or a == b == 0.0 for a, b in itertools.pairwise(even))  # 0 up to k = 6
    # an odd k's last canary is never guessed (2g ≤ k − 1) but counts in the theorem's 2kδ term
    for k in (9, 39, 1001):
        assert O.lower_bound_ceiling(k=k, delta=0.0) == O.lower_bound_ceiling(k=k - 1, delta=0.0)
        assert O.lower_bound_ceiling(k=k, delta=DELTA) < O.lower_bound_ceiling(k=k - 1, delta=DELTA)
    assert with_delta[ks.index(100)] < with_delta[ks.index(1000)] < with_delta[-1]
    assert all(w <= p for w, p in zip(with_delta, pure, strict=True))
    # a lower confidence asks less of the same guesses
    assert O.lower_bound_ceiling(k=1000, delta=DELTA, confidence=0.8) > with_delta[ks.index(1000)]


def test_p_value_is_steinke_et_al_theorem():
    """The δ term recomputed from binomial tails, f(v−i) − f(v), rather than from summed masses."""
    for m, r, v, eps, delta in [
        (100, 40, 30, 0.5, 1e-3),
        (1000, 200, 180, 2.0, 1e-5),
        (50, 10, 10, 1.0, 1e-2),
    ]:
        q = float(special.expit(eps))
        f = lambda u, q=q, r=r: float(stats.binom.sf(u - 1, r, q))  # noqa: E731
        term = max((f(v - i) - f(v)) / i for i in range(1, v + 1))
        want = min(f(v) + 2 * m * delta * term, 1.0)
        assert O.audit_p_value(m=m, r=r, v=v, epsilon=eps, delta=delta) == pytest.approx(want, rel=1e-9)
        assert O.audit_p_value(m=m, r=r, v=v, epsilon=eps, delta=0.0) == pytest.approx(f(v), rel=1e-12)
    with pytest.raises(ValueError, match="0 <= v <= r <= m"):
        O.audit_p_value(m=10, r=12, v=3, epsilon=1.0, delta=0.0)


def test_the_bound_refutes_exactly_below_it():
    """At the bound the p-value is β (Brent's root); a little below it is under β."""
    k, g = 1000, 250
    res = O.epsilon_lower_bound(
        scores=np.r_[np.ones(g), np.zeros(k - g)],
        included=np.r_[np.ones(g - 10, dtype=bool), np.zeros(k - g + 10, dtype=bool)],
        delta=DELTA,
        guesses=g,
    )
    assert res.correct == 2 * g - 10
    p = lambda e: O.audit_p_value(m=k, r=2 * g, v=res.correct, epsilon=e, delta=DELTA)  # noqa: E731
    assert p(res.bound) == pytest.approx(0.05, abs=1e-6)
    assert p(res.bound - 1e-3) < 0.05 < p(res.bound + 1e-3)


def test_lower_bound_refuses_bad_input():
    scores, included = np.zeros(10), np.zeros(10, dtype=bool)
    with pytest.raises(ValueError, match=r"guesses must be integers in \[1, k//2\] = \[1, 5\]"):
        O.epsilon_lower_bound(scores=scores, included=included, delta=DELTA, guesses=6)
    with pytest.raises(TypeError, match="boolean"):
        O.epsilon_lower_bound(scores=scores, included=included.astype(int), delta=DELTA)
    with pytest.raises(ValueError, match="one shape"):
        O.epsilon_lower_bound(scores=scores[:5], included=included, delta=DELTA)
    with pytest.raises(ValueError, match="need k >= 2"):
        O.lower_bound_ceiling(k=1, delta=DELTA)
    with pytest.raises(ValueError, match="confidence must be in"):
        O.lower_bound_ceiling(k=10, delta=DELTA, confidence=1.0)


# ------------------------------------------------------------------------------------------------------------
# Both bounds under one union.


def test_both_bounds_share_the_confidence_and_the_report_takes_the_one_that_speaks_to_the_claim():
    """Steinke's bound at 1 − β/4 and the f-DP bound at 1 − 3β/4 (each recomputed alone at its share); the
    reported bound is the larger where the claim is a Gaussian mechanism's, Steinke's elsewhere."""
    from sifl_ray.privacy.fdp_audit import fdp_ceiling, fdp_lower_bound

    rng = np.random.default_rng(3)
    k = 1000
    included = rng.random(k) < 0.5
    scores = np.where(included, rng.normal(4, 1, k), rng.normal(0, 1, k))
    got = O.audit_bounds(scores=scores, included=included, delta=DELTA, confidence=0.95)
    assert O.FDP_SHARE == 0.75
    steinke_level, fdp_level = 1 - 0.25 * 0.05, 1 - 0.75 * 0.05
    steinke = O.epsilon_lower_bound(scores=scores, included=included, delta=DELTA, confidence=steinke_level)
    fdp = fdp_lower_bound(scores=scores, included=included, delta=DELTA, confidence=fdp_level)[0]
    assert got.steinke == pytest.approx(steinke.bound, rel=1e-9) and got.fdp == pytest.approx(fdp, rel=1e-9)
    assert got.fdp > got.steinke > 0  # strong signal: the f-DP bound refutes far more
    assert got.bound(gaussian=True) == got.fdp and got.bound(gaussian=False) == got.steinke
    assert got.steinke_ceiling == pytest.approx(
        O.lower_bound_ceiling(k=k, delta=DELTA, confidence=steinke_level), rel=1e-9
    )
    top = fdp_ceiling(k=k, delta=DELTA, confidence=fdp_level, inserted=int(included.sum()))
    assert got.fdp_ceiling == pytest.approx(top, rel=1e-9)
    assert got.ceiling(gaussian=True) == got.fdp_ceiling > got.ceiling(gaussian=False)
    # 1000 canaries, half of them in: the f-DP ceiling above 8 at 95 %, Steinke's near 5
    assert fdp_ceiling(k=1000, delta=DELTA, confidence=fdp_level) > 8 > 5 > got.steinke_ceiling


def test_both_bounds_stay_below_the_epsilon_of_a_gaussian_mechanism():
    """Scores of a Gaussian mechanism (inserted N(μ, 1), left out N(0, 1)) are μ-GDP: each seed's reported
    bound (Gaussian claim) exceeds ε(μ) with probability at most 5 % (the union)."""
    mu, k, seeds = 2.0, 1000, 20
    truth = E.gdp_epsilon(mu=mu, delta=DELTA)
    above = 0
    for seed in range(seeds):
        rng = np.random.default_rng(500 + seed)
        included = rng.random(k) < 0.5
        scores = np.where(included, rng.normal(mu, 1, k), rng.normal(0, 1, k))
        bounds = O.audit_bounds(scores=scores, included=included, delta=DELTA)
        above += bounds.bound(gaussian=True) > truth
        assert bounds.fdp > 0
    assert above <= most_failures(seeds, 0.05)
