"""The f-DP one-run lower bound (Mahloujifar, Melis, Chaudhuri, "Auditing f-differential privacy in one
run", 2024): docs/method.md "Auditing inside the run".

Like Steinke, Nasr and Jagielski's bound (:mod:`sifl_ray.privacy.one_run`) it reads k canaries, each
inserted with probability ½, and the auditor's guesses of which are in; it tests a stronger claim, that the
mechanism is as private as the *Gaussian mechanism* whose (ε, δ) is the claim (its whole trade-off curve,
μ-GDP with the μ that has this (ε, δ)), and in exchange refutes much larger ε from the same guesses: with
every guess right, 1000 canaries refute ε up to about 8.5 (at 95 %) where Steinke's theorem stops near 5.3.

What it refutes is therefore a Gaussian trade-off. A mechanism that *is* Gaussian (T rounds of DP-FedAvg
without sampling compose to μ-GDP with μ = √T/z) is refuted by it exactly when its claim is; a subsampled
Gaussian is not Gaussian, and a refutation of the Gaussian curve with its (ε, δ) does not refute its (ε, δ)
claim: there only Steinke's bound speaks to the claim (:func:`sifl_ray.privacy.one_run.audit_bounds`).

The guesses: one-sided (only "inserted"), every canary scoring at or above a threshold; every threshold on
the Pareto frontier of (false negatives, true negatives) is tried, each at significance β over their number
(a Bonferroni union), the largest refuted ε reported. This is the auditor of DeepMind's
``jax_privacy.auditing`` (``CanaryScoreAuditor.epsilon_one_run_fdp``, default threshold strategy), whose
figures ``tests/privacy/test_fdp_audit.py`` checks these against.

Pure: NumPy, SciPy and ``dp_accounting`` (the Gaussian mechanism's σ for an (ε, δ)).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats

#: Brent's tolerance on ε of every refuted ε here.
XTOL = 1e-6


@lru_cache(maxsize=4096)
def _inverse_blow_up(epsilon: float, delta: float) -> Callable[[float], float]:
    """``x ↦ Φ(Φ⁻¹(x) − μ)``: the inverse of the Gaussian trade-off's blow-up for the μ-GDP mechanism whose
    (ε, δ) is the one given (σ = 1/μ from ``dp_accounting``). σ = 0 (no noise): only x = 1 maps to 1."""
    # deferred: dp_accounting, which the rest of the audit does not load
    import dp_accounting

    sigma = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    if sigma == 0:
        return lambda x: float(x == 1.0)
    mu = 1.0 / sigma
    return lambda x: float(special.ndtr(special.ndtri(x) - mu))


def refutation_margin(
    *, canaries: int, guesses: int, correct: int, significance: float, epsilon: float, delta: float
) -> float:
    """Positive when ``correct`` right guesses out of ``guesses`` refute, at ``significance``, that the
    mechanism is as private as the Gaussian mechanism with (``epsilon``, ``delta``) (the recursion of
    Mahloujifar et al.'s audit with its cap).

    Under the claim, the chance of each number of correct guesses is bounded level by level: starting from
    the mass the significance allows at the observed count (``r`` for right, ``h`` for wrong guesses, as
    fractions of the canaries), each level below moves mass from right to wrong as far as the trade-off
    curve allows. If the two masses cannot reach the guesses' share of the canaries, the observation is
    less likely than the significance under the claim.
    """
    inverse = _inverse_blow_up(float(epsilon), float(delta))
    right = significance * correct / canaries
    wrong = significance * (guesses - correct) / canaries
    for level in range(correct - 1, -1, -1):
        raised = max(wrong, inverse(right))
        if raised == wrong:  # nothing moves from here down
            break
        right = min(right + level / (guesses - level) * (raised - wrong), 1.0)
        wrong = raised
    return right + wrong - guesses / canaries


@lru_cache(maxsize=4096)
def refuted_epsilon(
    *, canaries: int, guesses: int, correct: int, significance: float, delta: float, start: float = 0.0
) -> float:
    """The largest ε whose Gaussian trade-off the guesses refute (``start`` if none above it): the margin of
    :func:`refutation_margin` falls with ε; the crossing is bracketed by doubling and found by Brent's
    method. Kept per process for each set of its numbers (a pure function of them): an audited run asks
    for the same ceilings every round."""

    def margin(eps: float) -> float:
        return refutation_margin(
            canaries=canaries,
            guesses=guesses,
            correct=correct,
            significance=significance,
            epsilon=eps,
            delta=delta,
        )

    if margin(start) <= 0:
        return start
    low, high = start, max(1.0, 2 * start)
    while margin(high) > 0:
        low, high = high, 2 * high
    return float(optimize.brentq(margin, low, high, xtol=XTOL))


def _upper_rate(count: np.ndarray, trials: np.ndarray, significance: float) -> np.ndarray:
    """Clopper–Pearson's one-sided upper bound on a rate (1 where every trial succeeded)."""
    out = np.ones(count.shape)
    some = count < trials
    out[some] = stats.beta.ppf(1 - significance, count[some] + 1, trials[some] - count[some])
    return out


def _frontier(points: np.ndarray) -> np.ndarray:
    """The indices of ``points`` (sorted by their first coordinate) left after removing, pass after pass,
    every inner point on or below the segment joining its neighbours: the thresholds no mixture of two
    others beats."""
    keep = np.arange(points.shape[0])
    while keep.size > 2:
        step = np.diff(points[keep], axis=0)
        turn = step[:-1, 1] * step[1:, 0] - step[1:, 1] * step[:-1, 0]
        below = turn <= 0
        if not below.any():
            break
        keep = keep[np.r_[True, ~below, True]]
    return keep


def threshold_counts(scores: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The true and false positives of every threshold on the frontier (a canary scoring at or above a
    threshold is guessed in; the thresholds are the distinct scores and +∞)."""
    inside, outside = np.sort(scores[included]), np.sort(scores[~included])
    thresholds = np.r_[np.union1d(inside, outside), np.inf]
    missed = np.asarray(np.searchsorted(inside, thresholds, side="left"))  # inserted ones below the threshold
    rejected = np.asarray(np.searchsorted(outside, thresholds, side="left"))  # left-out ones below it
    kept = _frontier(np.stack([missed, rejected], axis=1))
    return inside.size - missed[kept], outside.size - rejected[kept]


def fdp_lower_bound(
    *, scores: np.ndarray, included: np.ndarray, delta: float, confidence: float = 0.95
) -> tuple[float, int, int]:
    """The largest ε whose Gaussian trade-off the canaries refute at ``confidence``, over every frontier
    threshold at β over their number; with the guesses and correct guesses of the threshold that gave it.

    The thresholds are tried from the surest (Clopper–Pearson's lower bound on their precision) down, and
    one whose precision is at most ``e^ε/(1 + e^ε)`` of the best ε so far is passed over: the order and the
    rule of ``jax_privacy``'s auditor, whose figures these equal.
    """
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    if not 0 < delta < 1 or not 0 < confidence < 1:
        raise ValueError(f"need delta and confidence in (0, 1), got {delta!r}, {confidence!r}")
    if not included.any() or included.all():
        raise ValueError("need at least one canary inserted and one left out")
    tp, fp = threshold_counts(scores, included)
    significance = (1 - confidence) / tp.size
    total = tp + fp
    surest = np.argsort(-(1.0 - _upper_rate(fp, total, significance)))
    best, best_guess, best_right = 0.0, 0, 0
    for i in surest.tolist():
        guesses, right = int(total[i]), int(tp[i])
        if guesses == 0 or right / guesses <= special.expit(best):
            continue
        got = refuted_epsilon(
            canaries=scores.size,
            guesses=guesses,
            correct=right,
            significance=significance,
            delta=delta,
            start=best,
        )
        if got > best:
            best, best_guess, best_right = got, guesses, right
    return best, best_guess, best_right


@lru_cache(maxsize=256)
def fdp_ceiling(*, k: int, delta: float, confidence: float = 0.95, inserted: int | None = None) -> float:
    """The largest f-DP bound k canaries can give, ``inserted`` of them in (default half): every inserted
    one scored above every left-out one (the same thresholds and union as :func:`fdp_lower_bound`). Its
    guesses are one-sided, so it grows with the number inserted: a run's ceiling takes its own count."""
    inserted = int(k) // 2 if inserted is None else int(inserted)
    if int(k) != k or k < 2 or not 1 <= inserted < k:
        raise ValueError(f"need k >= 2 canaries, at least one in and one out; got k={k!r}, {inserted} in")
    included = np.arange(int(k)) < inserted
    return fdp_lower_bound(
        scores=included.astype(np.float64), included=included, delta=delta, confidence=confidence
    )[0]
