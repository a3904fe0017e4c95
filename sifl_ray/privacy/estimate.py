"""The ε estimate of one run (Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot empirical privacy
estimation for federated learning", ICLR 2024): docs/method.md "Auditing inside the run".

The inserted canaries' scores (their cosines with the release's change) and the nulls' (directions never
inserted) are each fitted by a Gaussian, mean and spread apart, as the authors' reference implementation
does; the estimate is the exact ε at δ of telling those two Gaussians apart (:func:`gaussians_epsilon`, the
hockey-stick divergence of two Gaussians of unequal variance, both ways). With equal spreads it is the
μ-GDP figure :func:`gdp_epsilon` of μ = shift / spread, which is also kept, under its own name
(:attr:`EpsilonEstimate.gdp_estimate`): the μ of a Gaussian mechanism, comparable with the accountant's
√T/z directly.

An estimate, not a bound. It can lie above the claim (and above the mechanism's true ε) when:

* the canaries' scores spread more or less than the nulls' for reasons other than the mechanism's noise
  (the model's own change across directions, clients answering a canary): two Gaussians of unequal spread
  are told apart far in their tails, which the fit extrapolates;
* the spreads are estimated from few scores: a spread ratio off by a few percent is already a privacy loss
  at δ = 1e-5 (the interval shows how far);
* the scores are not Gaussian (a fit is an assumption).

The interval: a parametric bootstrap over the fitted mechanism. Fresh canary and null samples of the same
sizes are drawn from the two fitted Gaussians (their sample means and variances, exactly: normal and χ²),
refitted, and the ε of each refit taken; the interval holds the middle ``confidence`` of them. It says how
far the estimate moves with the draw of the scores under the fitted mechanism; it is not a confidence
interval for the true ε (which needs the fit to be right).

Pure: NumPy and SciPy; the bootstrap takes a public seed (analysis, not protection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from sifl_ray.seeding import numpy_generator

# ------------------------------------------------------------------------------------------------------------
# μ-GDP to (ε, δ).


def gdp_delta(*, mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth, Su 2022, Corollary 2.13): ``Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``.

    μ-GDP is exactly the Gaussian mechanism with noise multiplier 1/μ, so this is its tight privacy profile.
    The second term is computed as ``exp(ε + log Φ(·))`` so that it stays finite for large ε.
    """
    if not (mu > 0 and math.isfinite(mu)) or not epsilon >= 0:
        raise ValueError(f"need finite mu > 0 and epsilon >= 0, got mu={mu!r}, epsilon={epsilon!r}")
    a = special.ndtr(-epsilon / mu + mu / 2)
    b = math.exp(epsilon + special.log_ndtr(-epsilon / mu - mu / 2))
    return float(max(a - b, 0.0))


def gdp_epsilon(*, mu: float, delta: float) -> float:
    """The ε at which μ-GDP holds with ``delta``: :func:`gdp_delta` solved for ε (Brent's method).

    ε = 0 when μ ≤ 0 (no shift) or when δ already covers ε = 0 (``δ ≥ 2Φ(μ/2) − 1``). The bracket's upper
    end is exact: ``δ(ε) ≤ Φ(−ε/μ + μ/2) ≤ δ`` once ``ε ≥ μ(μ/2 + Φ⁻¹(1−δ))``. ``inf`` for μ = inf.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if math.isnan(mu):
        raise ValueError("mu is NaN")
    if mu == math.inf:
        return math.inf
    if mu <= 0 or gdp_delta(mu=mu, epsilon=0.0) <= delta:
        return 0.0
    high = mu * (mu / 2 + float(special.ndtri(1 - delta)))
    return float(optimize.brentq(lambda e: gdp_delta(mu=mu, epsilon=e) - delta, 0.0, high, xtol=1e-12))


# ------------------------------------------------------------------------------------------------------------
# Two Gaussians of unequal variance.


def _log_between(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """``log(Φ(high) − Φ(low))`` for ``high ≥ low``, from the side of 0 that keeps it accurate."""
    right = low > 0  # both in the upper tail: Φ(−low) − Φ(−high)
    a = np.where(right, -low, high)
    b = np.where(right, -high, low)
    la, lb = special.log_ndtr(a), special.log_ndtr(b)
    with np.errstate(divide="ignore"):
        return np.asarray(la + np.log1p(-np.exp(np.minimum(lb - la, 0.0))), dtype=np.float64)


def _hockey_stick(eps: np.ndarray, m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``sup_S P(S) − e^ε Q(S)`` for P = N(0, 1) and Q = N(m, s²) (arrays, broadcast).

    S is where the privacy loss ``log p/q`` exceeds ε; times 2s², ``A y² + B y + C > 0`` with A = 1 − s²,
    B = −2m, C = m² − 2s²(ε − log s), whose roots ``(m ± s·R)/A``, R² = m² + 2A(ε − log s), carry no
    cancellation (the textbook discriminant of the unscaled quadratic loses everything when s is far from
    1). A > 0: S lies outside the roots; A < 0: between them; A = 0: one half-line."""
    A = 1 - s**2
    C = m**2 - 2 * s**2 * (eps - np.log(s))
    R2 = m**2 + 2 * A * (eps - np.log(s))
    R = np.sqrt(np.maximum(R2, 0.0))
    q = m + np.where(m >= 0, 1.0, -1.0) * s * R  # the root pair q/A and C/q, both stable
    with np.errstate(divide="ignore", invalid="ignore"):
        r1 = np.where(A != 0, q / np.where(A != 0, A, 1.0), np.inf)
        r2 = np.where(q != 0, C / np.where(q != 0, q, 1.0), 0.0)
    lo, hi = np.minimum(r1, r2), np.maximum(r1, r2)
    # A = 0 (equal spreads): −2m y + C > 0, a half-line below C/2m (m > 0) or above it (m < 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        cut = np.where(m != 0, C / np.where(m != 0, 2 * m, 1.0), 0.0)

    def log_mass(mean: np.ndarray | float, sd: np.ndarray | float) -> np.ndarray:
        outside = np.logaddexp(special.log_ndtr((lo - mean) / sd), special.log_ndtr((mean - hi) / sd))
        between = _log_between((hi - mean) / sd, (lo - mean) / sd)
        half = np.where(m > 0, special.log_ndtr((cut - mean) / sd), special.log_ndtr((mean - cut) / sd))
        out = np.where(A > 0, outside, between)
        out = np.where(A == 0, np.where(m == 0, -np.inf, half), out)
        # no root: the loss stays on one side of ε everywhere (above it when A > 0)
        return np.where((A != 0) & (R2 <= 0), np.where(A > 0, 0.0, -np.inf), out)

    lp, lq = log_mass(0.0, 1.0), log_mass(m, s)
    with np.errstate(invalid="ignore", over="ignore"):
        gap = -np.expm1(np.minimum(eps + lq - lp, 0.0))
        out = np.where(np.isfinite(lp) & (eps + lq < lp), np.exp(lp) * gap, 0.0)
    return np.asarray(out, dtype=np.float64)


Numbers = float | np.ndarray  # a parameter, or an array of them (broadcast)


def gaussians_delta(
    *, epsilon: Numbers, mean_null: Numbers, sd_null: Numbers, mean_canary: Numbers, sd_canary: Numbers
) -> np.ndarray:
    """δ(ε) of telling N(mean_null, sd_null²) and N(mean_canary, sd_canary²) apart, the larger of both
    directions (arrays broadcast). Each direction is taken in the units of its first Gaussian (ε does not
    change under one affine map of both)."""
    eps = np.asarray(epsilon, dtype=np.float64)
    shift = (np.asarray(mean_canary, dtype=np.float64) - mean_null) / sd_null
    ratio = np.asarray(sd_canary, dtype=np.float64) / sd_null
    one = _hockey_stick(eps, shift, ratio)
    other = _hockey_stick(eps, -shift / ratio, 1 / ratio)
    return np.asarray(np.maximum(one, other), dtype=np.float64)


def gaussians_epsilon(
    mean_null: Numbers, sd_null: Numbers, mean_canary: Numbers, sd_canary: Numbers, *, delta: float
) -> np.ndarray:
    """The exact ε at ``delta`` of the pair of Gaussians (arrays broadcast; 0 where δ already covers ε = 0,
    ``inf`` beyond ε = 2^20): δ(ε) falls with ε, so the crossing is bracketed by doubling and bisected to
    float64 resolution.

    The bisection stops once a step leaves every bracket that counts as it was (mid already equals one of
    its ends): a step is a function of the brackets alone, element by element, so every later step would
    leave them as they are too, and the result is the one the full 80 steps give, bit for bit. That takes
    about 55 steps, not 80: the in-run audit solves this for 1,001 bootstrap refits every audited round."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    params = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (mean_null, sd_null, mean_canary, sd_canary))
    )
    if np.any(~(params[1] > 0)) or np.any(~(params[3] > 0)):
        raise ValueError("both spreads must be > 0")

    def above(eps: np.ndarray) -> np.ndarray:
        return (
            gaussians_delta(
                epsilon=eps,
                mean_null=params[0],
                sd_null=params[1],
                mean_canary=params[2],
                sd_canary=params[3],
            )
            > delta
        )

    low = np.zeros(params[0].shape)
    high = np.ones(params[0].shape)
    todo = above(low)
    while True:
        grow = todo & above(high) & (high < 2.0**20)
        if not grow.any():
            break
        low = np.where(grow, high, low)
        high = np.where(grow, 2 * high, high)
    for _ in range(80):  # 2^20 / 2^80: far below float64's resolution of ε
        mid = 0.5 * (low + high)
        up = above(mid)
        step_low, step_high = np.where(up, mid, low), np.where(up, high, mid)
        # the brackets of ε = 0 (not `todo`) go on halving towards 0 and are never read: not waited for
        settled = np.array_equal(step_low[todo], low[todo]) and np.array_equal(step_high[todo], high[todo])
        low, high = step_low, step_high
        if settled:
            break
    out = np.where(todo, high, 0.0)
    return np.asarray(np.where(todo & above(high), np.inf, out), dtype=np.float64)


# ------------------------------------------------------------------------------------------------------------
# The estimate.


@dataclass(frozen=True)
class EpsilonEstimate:
    """An empirical ε of one run with its interval: an estimate, not a bound.

    Attributes:
        estimate: ε at ``delta`` of the two fitted Gaussians (canaries', nulls'), Andrew et al.'s estimator.
        low, high: the parametric bootstrap's interval of that ε (module docstring: what it means).
        gdp_estimate: the equal-variance fit's ε, μ-GDP with ``mu`` (the nulls' spread for both).
        mu: (mean of the canaries − mean of the nulls) / the nulls' spread.
        spread_ratio: the canaries' spread over the nulls' (1 for a Gaussian mechanism's own noise).
        k: number of canary scores; nulls: number of null scores.
        delta: the δ of every ε here.
    """

    estimate: float
    low: float
    high: float
    gdp_estimate: float
    mu: float
    spread_ratio: float
    k: int
    nulls: int
    delta: float


def _as_sample(name: str, values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a 1-D array of at least 2 finite values, got shape {arr.shape}")
    return arr


def epsilon_estimate(
    *,
    canary_cosines: np.ndarray,
    null_cosines: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    rng_seed: int,
    resamples: int = 1000,
) -> EpsilonEstimate:
    """Andrew et al.'s one-shot ε estimate (ICLR 2024): a Gaussian fitted to the inserted canaries' cosines
    and one to the nulls' (sample mean and standard deviation, ddof 1, each its own), the ε at ``delta`` of
    telling them apart (:func:`gaussians_epsilon`); its interval from a parametric bootstrap over the
    fitted pair (``resamples`` refits from the public stream ``(rng_seed, "one_run", "bootstrap")``), and
    the equal-variance μ-GDP figure beside it.

    Args:
        canary_cosines: cosines of the inserted canaries with the release's change.
        null_cosines: cosines of directions never inserted.
        delta: δ of the ε reported.
        confidence: the share of the bootstrap's estimates the interval holds (two-sided).
        rng_seed: public seed of the bootstrap.
        resamples: bootstrap refits.
    """
    canary = _as_sample("canary_cosines", canary_cosines)
    null = _as_sample("null_cosines", null_cosines)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples!r}")
    sd_null, sd_canary = float(null.std(ddof=1)), float(canary.std(ddof=1))
    if sd_null == 0 or sd_canary == 0:
        raise ValueError(
            "the canary or the null cosines are all equal: no spread to fit a Gaussian to "
            f"(canaries' sd {sd_canary}, nulls' sd {sd_null})"
        )
    fitted = (float(null.mean()), sd_null, float(canary.mean()), sd_canary)
    estimate = float(gaussians_epsilon(*fitted, delta=delta))
    rng = numpy_generator(int(rng_seed), "one_run", "bootstrap")
    null_refits = _refit(rng, fitted[0], sd_null, null.size, int(resamples))
    canary_refits = _refit(rng, fitted[2], sd_canary, canary.size, int(resamples))
    boot = gaussians_epsilon(*null_refits, *canary_refits, delta=delta)
    # order statistics, not interpolation: a refit may be told apart beyond any finite ε (inf)
    lo = np.quantile(boot, (1 - confidence) / 2, method="lower")
    hi = np.quantile(boot, (1 + confidence) / 2, method="higher")
    mu = (fitted[2] - fitted[0]) / sd_null
    return EpsilonEstimate(
        estimate=estimate,
        low=float(lo),
        high=float(hi),
        gdp_estimate=gdp_epsilon(mu=mu, delta=delta),
        mu=float(mu),
        spread_ratio=sd_canary / sd_null,
        k=int(canary.size),
        nulls=int(null.size),
        delta=float(delta),
    )


def _refit(
    rng: np.random.Generator, mean: float, sd: float, size: int, resamples: int
) -> tuple[np.ndarray, np.ndarray]:
    """``resamples`` refits (mean, sd) of ``size`` draws from N(mean, sd²): the sample mean is normal, the
    sample variance a scaled χ² of size − 1 degrees of freedom, independent of it (Gaussian samples)."""
    means = rng.normal(mean, sd / math.sqrt(size), resamples)
    sds = sd * np.sqrt(rng.chisquare(size - 1, resamples) / (size - 1))
    return means, sds
