"""Lower bounds on ε from a distinguishing test's counts, and what such a bound may say about a claim.

A differential-privacy claim bounds every test's power: for an (ε, δ)-DP mechanism and any rejection region,
``TPR ≤ e^ε·FPR + δ`` and ``1 − FPR ≤ e^ε·(1 − TPR) + δ``. Bounding a test's rates with Clopper–Pearson
intervals turns its counts into a statistically valid lower bound on ε (Jagielski et al. 2020; Nasr et al.
2021). This module is that arithmetic, the threshold planned before the trials (:func:`plan_threshold`), the
ceilings of a test and the verdicts; the tests themselves, on the platform's releases, are
:mod:`sifl_ray.attacks.audit`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta as beta_dist


def clopper_pearson(successes: int, trials: int, *, confidence: float) -> tuple[float, float]:
    """Two-sided Clopper–Pearson interval for a binomial proportion (exact, conservative)."""
    if trials <= 0:
        raise ValueError("trials must be > 0")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in [0, {trials}], got {successes}")
    alpha = 1.0 - confidence
    lo = 0.0 if successes == 0 else float(beta_dist.ppf(alpha / 2, successes, trials - successes + 1))
    hi = (
        1.0 if successes == trials else float(beta_dist.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return lo, hi


def epsilon_lower_bound(
    *, false_positives: int, true_positives: int, trials: int, delta: float, confidence: float
) -> float:
    """The ε that any (ε, δ)-DP mechanism would need to allow the observed test (0 if none is needed).

    Uses the upper end of the two-sided Clopper–Pearson interval at ``confidence`` for FPR and the lower end
    of the one for TPR. Only one tail of each interval is used, and each tail alone fails with probability
    at most ``(1 − confidence)/2`` (a one-sided bound at level ``(1 + confidence)/2``), so by the union bound
    both hold, and with them the returned ε lower bound, with probability at least ``confidence``.
    Zero-safe: Clopper–Pearson never returns 0 as an upper bound (nor 1 as a lower one) for finite trials.
    """
    fpr_hi = clopper_pearson(false_positives, trials, confidence=confidence)[1]
    tpr_lo = clopper_pearson(true_positives, trials, confidence=confidence)[0]
    candidates = [0.0]
    # TPR ≤ e^ε FPR + δ, with TPR bounded below and FPR above.
    if tpr_lo - delta > 0:
        candidates.append(math.log((tpr_lo - delta) / fpr_hi))
    # 1 − FPR ≤ e^ε (1 − TPR) + δ, with 1 − FPR bounded below and 1 − TPR above.
    if (1.0 - fpr_hi) - delta > 0 and tpr_lo < 1.0:
        candidates.append(math.log(((1.0 - fpr_hi) - delta) / (1.0 - tpr_lo)))
    return max(candidates)


def trials_ceiling(trials: int, *, delta: float, confidence: float) -> float:
    """The largest ε lower bound ``trials`` trials per hypothesis can show at ``confidence``: the bound of a
    perfect test (0 false positives, every trial a true positive). In closed form, with
    ``a = ((1 − confidence)/2)^(1/trials)`` (the Clopper–Pearson ends at 0 and at ``trials`` successes are
    ``1 − a`` and ``a``), it is ``ln((a − δ)/(1 − a))``: 7.21 at 5,000 trials (95 %, δ = 1e-5), 8.60 at
    20,000. A claim at or above it cannot be refuted by any test with that many trials."""
    if trials <= 0:
        raise ValueError("trials must be > 0")
    a = ((1.0 - confidence) / 2.0) ** (1.0 / trials)
    return math.log((a - delta) / (1.0 - a)) if a - delta > 0 else 0.0


def rates_bound(*, fpr: float, tpr: float, delta: float) -> float:
    """The ε lower bound a test with these exact rates shows with unlimited trials (0 if none): the largest
    of ``ln((TPR − δ)/FPR)`` and ``ln((1 − FPR − δ)/(1 − TPR))`` (∞ when the hypotheses do not overlap).
    For a threshold on a known distribution it is the test's ceiling however many trials are run."""
    out = 0.0
    for num, den in ((tpr - delta, fpr), (1.0 - fpr - delta, 1.0 - tpr)):
        if num > 0:
            out = max(out, math.inf if den <= 0 else math.log(num / den))
    return out


@dataclass(frozen=True)
class ThresholdPlan:
    """A threshold chosen before the trials from the statistic's known distributions: decide "x1" when the
    statistic exceeds ``threshold``. ``fpr`` and ``tpr`` are its rates under those distributions, ``planned``
    the bound their expected counts give at the planned trials, ``ceiling`` the bound with unlimited trials
    (:func:`rates_bound`)."""

    threshold: float
    fpr: float
    tpr: float
    planned: float
    ceiling: float


def plan_threshold(
    fpr_of, tpr_of, candidates, *, trials: int, delta: float, confidence: float
) -> ThresholdPlan:
    """The candidate threshold whose expected counts (``trials·FPR``, ``trials·TPR``, rounded) give the
    largest ε lower bound; the first candidate wins ties (put the midpoint first: a test with no power
    anywhere then stays at the midpoint). Only the known distributions are read, never a trial's outcome, so
    the Clopper–Pearson intervals of the trials that follow stay valid.

    Args:
        fpr_of, tpr_of: the threshold's rates, ``P(statistic > threshold)`` under hypothesis 0 and 1.
        candidates: thresholds to consider, in order of preference among equals.
    """
    best = None
    for threshold in candidates:
        fpr, tpr = float(fpr_of(threshold)), float(tpr_of(threshold))
        planned = epsilon_lower_bound(
            false_positives=round(trials * fpr),
            true_positives=round(trials * tpr),
            trials=trials,
            delta=delta,
            confidence=confidence,
        )
        if best is None or planned > best.planned:
            best = ThresholdPlan(
                float(threshold), fpr, tpr, planned, rates_bound(fpr=fpr, tpr=tpr, delta=delta)
            )
    if best is None:
        raise ValueError("no candidate threshold")
    return best


def gaussian_shift_plan(
    shift_over_std: float, *, trials: int, delta: float, confidence: float, sample_rate: float = 1.0
) -> ThresholdPlan:
    """:func:`plan_threshold` for a standardised statistic, ``N(0, 1)`` under hypothesis 0 and ``N(μ, 1)``
    (``μ = shift_over_std > 0``) under hypothesis 1, or under Poisson sampling the mixture ``q·N(μ, 1) +
    (1 − q)·N(0, 1)``: the Gaussian mechanism's own output seen along the shift. Thresholds from the
    midpoint ``μ/2`` to 10 standard deviations, in steps of 0.01."""
    from scipy.stats import norm

    mu, q = float(shift_over_std), float(sample_rate)
    if not mu > 0:
        raise ValueError(f"shift_over_std must be > 0, got {shift_over_std!r}")
    grid = np.arange(0.5 * mu, 10.0, 0.01)
    return plan_threshold(
        lambda x: norm.sf(x),
        lambda x: q * norm.sf(x - mu) + (1.0 - q) * norm.sf(x),
        grid,
        trials=trials,
        delta=delta,
        confidence=confidence,
    )


#: The four verdicts of an audit against a claimed ε.
REFUTED, NOT_REFUTED, UNTESTABLE, NO_CLAIM = "REFUTED", "not refuted", "untestable", "no claim"


def verdict(*, lower_bound: float, claim: float | None, ceiling: float) -> str:
    """What an audit may say about a claimed ε: ``REFUTED`` (the lower bound exceeds it), ``untestable`` (the
    claim is at or above the most this test could show, :attr:`AuditTest.ceiling`: a bound below it says
    nothing), ``not refuted`` (the test could have refuted it and did not: no proof that the claim holds),
    ``no claim`` (ε = ∞ or none stated)."""
    if claim is None or math.isnan(claim) or math.isinf(claim):
        return NO_CLAIM
    if lower_bound > claim:
        return REFUTED
    if claim >= ceiling:
        return UNTESTABLE
    return NOT_REFUTED


@dataclass(frozen=True)
class AuditTest:
    """One distinguishing test run ``trials`` times under each hypothesis.

    ``trials_ceiling``: the most ``trials`` trials can show (:func:`trials_ceiling`). ``threshold_ceiling``:
    for a threshold on a known distribution, the most it shows with unlimited trials (:func:`rates_bound`;
    ``None``: the distribution is not known, ∞: the hypotheses do not overlap). ``planned``: the bound the
    known distributions' expected counts give at ``trials`` (``None``: not planned). ``threshold``: how the
    threshold was set.
    """

    name: str
    trials: int
    false_positives: int
    true_positives: int
    fpr_upper: float
    tpr_lower: float
    epsilon_lower_bound: float
    trials_ceiling: float = math.inf
    threshold_ceiling: float | None = None
    planned: float | None = None
    threshold: str = "midpoint"

    @property
    def ceiling(self) -> float:
        """The most this test can show: the lower of its two ceilings."""
        tc = math.inf if self.threshold_ceiling is None else self.threshold_ceiling
        return min(self.trials_ceiling, tc)

    def verdict(self, claim: float | None) -> str:
        """:func:`verdict` of this test against ``claim``."""
        return verdict(lower_bound=self.epsilon_lower_bound, claim=claim, ceiling=self.ceiling)

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "ceiling": self.ceiling}


def make_test(
    name: str,
    stat0: np.ndarray,
    stat1: np.ndarray,
    *,
    delta: float,
    confidence: float,
    plan: ThresholdPlan | None = None,
    threshold: str = "midpoint",
    threshold_ceiling: float | None = None,
) -> AuditTest:
    """The :class:`AuditTest` of a test's decisions (``True``: "x1") under hypothesis 0 and 1: its counts,
    their Clopper–Pearson ends, its ε lower bound and its ceilings (from ``plan`` where the threshold was
    planned, else ``threshold_ceiling``)."""
    fp = int(np.count_nonzero(stat0))
    tp = int(np.count_nonzero(stat1))
    n = stat0.size
    return AuditTest(
        name=name,
        trials=n,
        false_positives=fp,
        true_positives=tp,
        fpr_upper=clopper_pearson(fp, n, confidence=confidence)[1],
        tpr_lower=clopper_pearson(tp, n, confidence=confidence)[0],
        epsilon_lower_bound=epsilon_lower_bound(
            false_positives=fp, true_positives=tp, trials=n, delta=delta, confidence=confidence
        ),
        trials_ceiling=trials_ceiling(n, delta=delta, confidence=confidence),
        threshold_ceiling=plan.ceiling if plan is not None else threshold_ceiling,
        planned=None if plan is None else plan.planned,
        threshold=threshold,
    )


def run_trials(says_x1, trials: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The test's decisions under hypothesis 0 and 1, ``trials`` each; trial ``offset + 2i + hyp`` keys the
    release's randomness, so no two releases share a draw."""
    stats = {hyp: [says_x1(hyp, offset + 2 * i + hyp) for i in range(trials)] for hyp in (0, 1)}
    return np.array(stats[0]), np.array(stats[1])
