"""One-run audits (sifl_ray.privacy.one_run): canaries, Andrew et al.'s estimate, Steinke et al.'s bound.

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
    ours = O.gdp_epsilon(mu=1 / z, delta=delta)
    exact = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=z).get_delta_for_epsilon(ours)
    assert exact == pytest.approx(delta, rel=1e-9)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=dp_fedavg.PLD_DISCRETIZATION)
    acc.compose(dp_accounting.GaussianDpEvent(z))
    pld = acc.get_epsilon(delta)
    assert ours - 1e-9 <= pld <= ours + dp_fedavg.PLD_DISCRETIZATION


def test_gdp_epsilon_edges():
    assert O.gdp_epsilon(mu=0.0, delta=DELTA) == 0.0
    assert O.gdp_epsilon(mu=-1.0, delta=DELTA) == 0.0
    assert O.gdp_epsilon(mu=math.inf, delta=DELTA) == math.inf
    # δ already covers ε = 0 when δ ≥ 2Φ(μ/2) − 1
    mu = 0.1
    assert O.gdp_epsilon(mu=mu, delta=2 * special.ndtr(mu / 2) - 1 + 1e-6) == 0.0
    assert O.gdp_epsilon(mu=mu, delta=2 * special.ndtr(mu / 2) - 1 - 1e-6) > 0.0
    mus = [0.05, 0.3, 1.0, 3.0, 10.0]
    eps = [O.gdp_epsilon(mu=m, delta=DELTA) for m in mus]
    assert all(a < b for a, b in itertools.pairwise(eps))
    with pytest.raises(ValueError, match="delta must be in"):
        O.gdp_epsilon(mu=1.0, delta=0.0)


# ------------------------------------------------------------------------------------------------------------
# The estimate (Andrew et al.).


def test_estimate_interval_covers_the_true_epsilon_of_a_gaussian_mechanism():
    """Canary scores N(μ, 1) against nulls N(0, 1) are μ-GDP exactly; the interval (95%) must cover its ε.

    A percentile bootstrap with 500 + 500 samples may cover below nominal; assume at least 90% per seed
    (measured over 300 seeds at μ = 0.5, 1 and 2: 95.7%, 95.7%, 95.3%), so over 40 seeds fewer than
    fewest_successes(40, 0.9) covers happen with probability below SLIP.
    """
    mu, k, seeds = 1.0, 500, 40
    truth = O.gdp_epsilon(mu=mu, delta=DELTA)
    covered = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        est = O.epsilon_estimate(
            canary_cosines=rng.normal(mu, 1.0, k),
            null_cosines=rng.normal(0.0, 1.0, k),
            delta=DELTA,
            rng_seed=seed,
        )
        assert est.low <= est.estimate <= est.high and est.k == k and est.nulls == k and est.delta == DELTA
        assert est.estimate == O.gdp_epsilon(mu=est.mu, delta=DELTA)
        covered += est.low <= truth <= est.high
    assert covered >= fewest_successes(seeds, 0.9)


def test_estimate_without_a_shift_is_near_zero():
    """μ = 0: the fitted μ̂ has standard deviation ≈ sqrt(1/k + 1/n) (the null's std is ≈ 1), so |μ̂| stays
    below 5 of them except with probability 6e-7, and ε stays below ε(5·sd); the interval's low end is 0
    whenever the interval of μ reaches 0, in at least 90% of seeds by the coverage argument above."""
    k, n, seeds = 500, 500, 20
    cap = O.gdp_epsilon(mu=5 * math.sqrt(1 / k + 1 / n), delta=DELTA)
    lows_at_zero = 0
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        est = O.epsilon_estimate(
            canary_cosines=rng.normal(0, 1, k), null_cosines=rng.normal(0, 1, n), delta=DELTA, rng_seed=seed
        )
        assert est.estimate <= cap
        lows_at_zero += est.low == 0.0
    assert lows_at_zero >= fewest_successes(seeds, 0.9)


def test_estimate_is_reproducible_and_refuses_bad_samples():
    rng = np.random.default_rng(5)
    c, n = rng.normal(1, 1, 50), rng.normal(0, 1, 60)
    a = O.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3)
    assert a == O.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3)
    assert a.mu == pytest.approx((c.mean() - n.mean()) / n.std(ddof=1), rel=1e-12)
    # a wider confidence gives a wider interval from the same bootstrap stream
    wide = O.epsilon_estimate(canary_cosines=c, null_cosines=n, delta=DELTA, rng_seed=3, confidence=0.99)
    assert wide.low <= a.low and wide.high >= a.high
    with pytest.raises(ValueError, match="null cosines are all equal"):
        O.epsilon_estimate(canary_cosines=c, null_cosines=np.zeros(5), delta=DELTA, rng_seed=0)
    with pytest.raises(ValueError, match="at least 2 finite values"):
        O.epsilon_estimate(canary_cosines=c[:1], null_cosines=n, delta=DELTA, rng_seed=0)
    with pytest.raises(ValueError, match="at least 2 finite values"):
        O.epsilon_estimate(canary_cosines=np.append(c, np.nan), null_cosines=n, delta=DELTA, rng_seed=0)


def test_the_pipeline_on_a_gaussian_mechanism_over_canary_directions():
    """What the run will do, end to end: canaries drawn, half inserted, a Gaussian mechanism of noise σ per
    coordinate on their sum (sensitivity C = 1 per canary), cosines scored.

    Towards one canary the release is a Gaussian mechanism of noise multiplier σ (the other canaries only add
    noise), so its true ε is at most ε(μ = 1/σ): the lower bound (95%) sits below it. The estimate measures
    μ_eff = 1/sqrt(σ² + k_in/d) ≤ 1/σ (the other canaries' projections add variance k_in/d), here within
    0.2% of 1/σ, and its interval covers ε(1/σ) as in the Gaussian test above.
    """
    d, k, nulls, sigma = 5_000, 100, 200, 2.0
    truth = O.gdp_epsilon(mu=1 / sigma, delta=DELTA)
    covered, below, seeds = 0, 0, 8
    for seed in range(seeds):
        key = secret(10 + seed)
        dirs = O.canary_directions(d=d, k=k, seed=key, clip=1.0)
        null_dirs = O.canary_directions(d=d, k=nulls, seed=key, clip=1.0, first=k)
        included = O.inclusion_draws(k=k, seed=key)
        noise = np.random.default_rng(seed).normal(0.0, sigma, d)
        release = dirs[included].sum(axis=0) + noise
        scores = O.cosines(release, dirs)
        est = O.epsilon_estimate(
            canary_cosines=scores[included],
            null_cosines=O.cosines(release, null_dirs),
            delta=DELTA,
            rng_seed=seed,
        )
        covered += est.low <= truth <= est.high
        below += O.epsilon_lower_bound(scores=scores, included=included, delta=DELTA).bound <= truth
    assert covered >= fewest_successes(seeds, 0.9)
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
