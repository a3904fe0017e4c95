"""(f) Empirical DP audit: how well can two neighbouring models be told apart from their encodings?

A differential-privacy claim bounds every test's power: for an (ε, δ)-DP mechanism and any rejection region,
``TPR ≤ e^ε·FPR + δ`` and ``1 − FPR ≤ e^ε·(1 − TPR) + δ``. Running a test many times and bounding its rates
with Clopper–Pearson intervals therefore gives a statistically valid lower bound on the ε that the release
really has (Jagielski et al. 2020; Nasr et al. 2021).

The audit is granted the keys (the strongest adversary the per-element theorems should still cover, and what
the attacks above obtain anyway: the colluding client's ``P1L`` or the recovered subspace). It runs two tests
on the release ``w~ = P1 w + N1 r`` of a client upload:

* whole vector: decode ``P1L w~`` (which removes ``N1 r`` exactly), project on the difference of the two
  models, threshold at the midpoint. The two hypotheses never overlap, so the bound is limited only by the
  number of trials: the vector release has no finite ε.
* one coordinate, the paper's view: threshold the single element ``w~_j`` with the largest
  signal-to-noise ratio. This is what the per-element ε covers, and the measured bound stays near 0.

Every threshold is fixed before the trials, so the Clopper–Pearson intervals are valid as stated. Where the
statistic's distribution under both hypotheses is known (a Gaussian mechanism: its own noise law, or a fit
to calibration trials kept apart from the test's), the threshold is the one whose expected counts at the
given number of trials give the largest bound (:func:`plan_threshold`): for a weak signal that is far in
the tail, where ``ln(TPR/FPR)`` is large, not at the midpoint, where it is about ``μ²/4``-small and stays
below most claims however many trials are run. Confidence: each ε lower bound uses one end of each of two
two-sided intervals at ``confidence`` (the upper end for the false positive rate, the lower end for the true
positive rate); each end alone fails with probability at most ``(1 − confidence)/2``, so the bound holds with
probability at least ``confidence`` (union bound).

What a bound can say. A test with n trials cannot show more than :func:`trials_ceiling` (0 false positives,
n true positives), and a threshold test on a known distribution not more than :func:`rates_bound` of its
rates, however many trials. A claim at or above the lower of the two is **untestable** by that test, never
"holds": a bound below the claim only says the claim is **not refuted** (:func:`verdict`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.stats import beta as beta_dist

from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec, ServerKey


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


def _test(
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


def audit_upload_release(
    key: ServerKey,
    *,
    w0: torch.Tensor,
    sensitivity: float,
    noise: NoiseSpec,
    trials: int,
    generator: torch.Generator,
    delta: float,
    confidence: float = 0.95,
    batch: int = 1000,
) -> tuple[AuditTest, AuditTest]:
    """Audit the M1 upload release ``w~ = P1 w + N1 r`` at neighbouring models ``w0`` and ``w0 + Δ``.

    ``Δ`` is a random direction of ℓ2 norm ``sensitivity`` (Remark 3's ``Δ^{w_i}``, the largest change the
    per-element theorems allow for), drawn from ``generator``.

    Args:
        key: the server key (the audit is granted it).
        w0: a plain model (n,).
        sensitivity: ‖Δ‖₂.
        noise: the server noise law of ``r``.
        trials: encodings per hypothesis.
        generator: the audit's random stream (direction, noise).
        delta: δ of the bound (the accountant's).
        confidence: level of each two-sided Clopper–Pearson interval, and (one tail of each used) the
            probability with which each test's ε lower bound holds.
        batch: encodings per vectorised call.

    Returns:
        ``(whole_vector, single_coordinate)`` tests.
    """
    if sensitivity <= 0:
        raise ValueError(f"sensitivity must be > 0 to have two distinct neighbours, got {sensitivity!r}")
    n, m = key.n, key.n_tilde - key.n
    w0 = w0.to(CODING_DTYPE).reshape(n)
    direction = torch.randn(n, generator=generator, dtype=CODING_DTYPE)
    delta_w = direction * (sensitivity / torch.linalg.vector_norm(direction))
    w1 = w0 + delta_w

    # The single coordinate with the largest shift-to-noise ratio |P1^j Δ| / ‖N1^j‖ (the paper's adversary at
    # its best). Gaussian noise: element j is N(P1^j w, (‖N1^j‖ σ)²) under either model, so the threshold is
    # planned in its tail (gaussian_shift_plan); otherwise (Laplace) at the midpoint of the two means.
    mean0 = key.apply_P1(w0)
    mean1 = key.apply_P1(w1)
    shift = (mean1 - mean0).abs()
    n1_rows = key.norms().n1_row_l2.to(CODING_DTYPE)
    snr = torch.where(n1_rows > 0, shift / n1_rows.clamp_min(1e-300), torch.full_like(shift, math.inf))
    j = int(torch.argmax(snr))
    sign = 1.0 if float(mean1[j] - mean0[j]) >= 0 else -1.0
    plan, how = None, "midpoint"
    cut_j = 0.5 * float(mean0[j] + mean1[j])
    std_j = float(n1_rows[j]) * noise.scale
    if noise.distribution == "gaussian" and std_j > 0 and float(shift[j]) > 0:
        plan = gaussian_shift_plan(float(shift[j]) / std_j, trials=trials, delta=delta, confidence=confidence)
        cut_j = float(mean0[j]) + sign * plan.threshold * std_j
        how = f"tail: {plan.threshold:.2f} noise std past the mean of w0, planned from the noise law"

    vec0, vec1, coord0, coord1 = [], [], [], []
    done = 0
    while done < trials:
        k = min(batch, trials - done)
        for hyp, w in ((0, w0), (1, w1)):
            r = noise.sample((m, k), generator)
            enc = key.encode(w[:, None].expand(n, k).contiguous(), r)
            # Whole vector: decode, project on Δ; "w1" when past the midpoint.
            proj = ((key.decode(enc) - w0[:, None]).T @ delta_w) / (sensitivity**2)
            (vec0 if hyp == 0 else vec1).append((proj > 0.5).numpy())
            (coord0 if hyp == 0 else coord1).append((sign * (enc[j] - cut_j) > 0).numpy())
        done += k
    whole = _test(
        "whole vector, keys known: decode, project on w1 - w0",
        np.concatenate(vec0),
        np.concatenate(vec1),
        delta=delta,
        confidence=confidence,
        threshold="midpoint (the decoded hypotheses are w0 and w1: no overlap, round-off aside)",
        threshold_ceiling=math.inf,
    )
    single = _test(
        "one coordinate (the best signal-to-noise), the paper's per-element view",
        np.concatenate(coord0),
        np.concatenate(coord1),
        delta=delta,
        confidence=confidence,
        plan=plan,
        threshold=how,
    )
    return whole, single


def audit_aggregator_step(
    step,
    *,
    clip: float,
    clients: int,
    shift: float,
    trials: int,
    delta: float,
    confidence: float = 0.95,
    arm: str = "audit",
    noise_std: float | None = None,
    sample_rate: float = 1.0,
    sample_seed: int = 0,
) -> AuditTest:
    """Audit one round of a central-noise aggregator step (DP-FedAvg's :class:`~sifl_ray.arms.dp_fedavg.
    CentralNoise`, the arm's own object) under add/remove: ``clients`` clients whose clipped updates sum to
    0 (nothing else moves the output: the test's best case), and the same plus a target client whose update
    is ``C·e_0``. Under Poisson sampling (``sample_rate`` q < 1) each round's clients, the target among
    them, come from the platform's own draw (:func:`sifl_ray.data.sampling.sample_clients`, stream
    ``sample_seed``): the target is in the round with probability q, and the step sees the realised count.

    Each trial is a round of its own (the step's noise stream is keyed by the round). The statistic is
    coordinate 0 of the released mean, ``shift`` being what the target moves it by without noise (C/m for
    DP-FedAvg's fixed denominator m); the other coordinates carry independent noise and no signal. With the
    step's noise std known (``noise_std``, or read from a step with ``noise_multiplier``, ``clip`` and
    ``expected_clients``: ``zC/m``) the threshold is planned in the tail of that Gaussian
    (:func:`gaussian_shift_plan`), so the test can reach the per-round ε it is compared with; otherwise it is
    the midpoint ``shift/2``. Fixed before the trials either way. Compare the result with the ε of ONE round
    at this sampling rate (the accountant's first ``epsilon_per_round``), never with the whole run's.
    """
    from sifl_ray.data.sampling import sample_clients

    if clients < 1:
        raise ValueError(f"clients must be ≥ 1, got {clients}")
    if noise_std is None and all(hasattr(step, a) for a in ("noise_multiplier", "clip", "expected_clients")):
        from sifl_ray.privacy.dp_fedavg import central_noise_std

        noise_std = central_noise_std(
            noise_multiplier=step.noise_multiplier, clip=step.clip, expected_clients=step.expected_clients
        )
    plan, cut, how = None, 0.5 * shift, "midpoint"
    if noise_std is not None and noise_std > 0:
        plan = gaussian_shift_plan(
            shift / noise_std, trials=trials, delta=delta, confidence=confidence, sample_rate=sample_rate
        )
        cut = plan.threshold * noise_std
        how = f"tail: {plan.threshold:.2f} noise std, planned from the step's noise law"
    sampling = "poisson" if sample_rate < 1 else "fixed"

    def says_x1(hyp: int, trial: int) -> bool:
        drawn = sample_clients(clients + hyp, sample_rate, trial, sample_seed, sampling)
        k = int(drawn.size)
        target = bool(hyp) and k > 0 and int(drawn[0]) == 0  # the target is client 0 of its population
        value = clip * target / k if k else 0.0  # k updates summing to C·e_0 (target in), or to 0
        average = torch.tensor([value], dtype=CODING_DTYPE)
        out, _ = step(average, arm=arm, t=trial, shard=0, bounds=(0, 1), weight=float(k))
        return float(out[0]) > cut

    q = "" if sample_rate >= 1 else f", target sampled with q = {sample_rate:g}"
    name = f"one round of the aggregator's central noise: coordinate 0 of the released mean{q}"
    return _test(
        name, *_run_trials(says_x1, trials), delta=delta, confidence=confidence, plan=plan, threshold=how
    )


def audit_release(
    release,
    *,
    x0: torch.Tensor,
    x1: torch.Tensor,
    trials: int,
    delta: float,
    confidence: float = 0.95,
    name: str = "whole vector: project the release on x1 - x0",
    noise_std: float | None = None,
    exact: bool = False,
) -> AuditTest:
    """Audit a randomised release ``release(x, trial)`` of neighbouring inputs ``x0`` and ``x1``: project
    each release (minus ``x0``) on the unit vector along ``x1 − x0`` and decide "x1" past a threshold fixed
    before the trials. Each trial must draw fresh randomness (the release's stream keyed by ``trial``); a
    release of ``None`` (a round that released nothing) is read as "x0".

    ``noise_std``: the release adds ``N(0, noise_std²)`` per coordinate (a Gaussian client step: NbAFL's
    σ), so the projection is Gaussian with that std and the threshold is planned in its tail
    (:func:`gaussian_shift_plan`). Otherwise the midpoint; ``exact``: the release is deterministic, so the
    two hypotheses never overlap (threshold ceiling ∞) and its lower bound is the most the trials can show.
    """
    diff = (x1 - x0).to(CODING_DTYPE)
    norm = float(torch.linalg.vector_norm(diff))
    if norm <= 0:
        raise ValueError("x0 and x1 must differ: neighbouring inputs")
    unit = diff / norm
    plan, cut, how = None, 0.5 * norm, "midpoint"
    if noise_std is not None and noise_std > 0:
        plan = gaussian_shift_plan(norm / noise_std, trials=trials, delta=delta, confidence=confidence)
        cut = plan.threshold * noise_std
        how = f"tail: {plan.threshold:.2f} noise std, planned from the step's noise law"

    def says_x1(hyp: int, trial: int) -> bool:
        out = release((x1 if hyp else x0).clone(), trial)
        if out is None:
            return False  # a round that released nothing is read as "x0"
        return float((out.to(CODING_DTYPE) - x0) @ unit) > cut

    return _test(
        name,
        *_run_trials(says_x1, trials),
        delta=delta,
        confidence=confidence,
        plan=plan,
        threshold=how if plan is not None or not exact else "midpoint (a deterministic release)",
        threshold_ceiling=math.inf if exact else None,
    )


def _run_trials(says_x1, trials: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The test's decisions under hypothesis 0 and 1, ``trials`` each; trial ``offset + 2i + hyp`` keys the
    release's randomness, so no two releases share a draw."""
    stats = {hyp: [says_x1(hyp, offset + 2 * i + hyp) for i in range(trials)] for hyp in (0, 1)}
    return np.array(stats[0]), np.array(stats[1])


@dataclass(frozen=True)
class GaussianFit:
    """A release modelled, under one hypothesis, as ``x0 + a·u + N(0, v I)`` (u the unit vector along
    ``x1 − x0``), fitted to calibration releases; ``refused``: the share of rounds that released nothing."""

    along: float
    variance: float
    refused: float

    @classmethod
    def fit(cls, rows: list[np.ndarray | None], unit: np.ndarray) -> GaussianFit:
        done = [r for r in rows if r is not None]
        if not done:
            return cls(0.0, 1.0, 1.0)
        Y = np.stack(done)
        p = Y @ unit
        a = float(p.mean())
        residual = float(((p - a) ** 2).sum() + ((Y**2).sum(axis=1) - p**2).sum())
        variance = max(residual / (Y.size - 1), 1e-300)  # an exact release: no noise at all
        return cls(a, variance, 1.0 - len(done) / len(rows))


def _llr(p: np.ndarray, r2: np.ndarray, d: int, f0: GaussianFit, f1: GaussianFit) -> np.ndarray:
    """log p1(y) − log p0(y) for releases with projection ``p`` on the unit shift and squared residual
    ``r2`` off it (the Neyman–Pearson statistic of the two fitted Gaussians)."""
    one = -((p - f1.along) ** 2 + r2) / (2 * f1.variance) - 0.5 * d * math.log(f1.variance)
    zero = -((p - f0.along) ** 2 + r2) / (2 * f0.variance) - 0.5 * d * math.log(f0.variance)
    return one - zero


def audit_gaussian_release(
    release,
    *,
    x0: torch.Tensor,
    x1: torch.Tensor,
    trials: int,
    calibration: int,
    delta: float,
    confidence: float = 0.95,
    name: str = "the release's likelihood ratio, Gaussians fitted to calibration rounds",
    seed: int = 0,
) -> AuditTest:
    """Audit a release whose output is Gaussian around the input but whose law under each hypothesis the
    auditor does not take on trust (distributed noise: how many shares a round carries depends on who takes
    part): ``release(x, trial)`` returns the released vector, or ``None`` for a round that released nothing.

    1. Calibration: ``calibration`` releases under each hypothesis, keyed by trials after the test's own,
       fit :class:`GaussianFit` (the mean along ``x1 − x0`` and one variance per coordinate): both the shift
       and a difference in variance (a noise share that comes and goes with its client) show.
    2. Plan: the statistic is the fitted models' log likelihood ratio; its law under each model, simulated
       from the fits (``seed``), gives the threshold of :func:`plan_threshold` and the test's threshold
       ceiling (a Monte Carlo estimate).
    3. Test: ``trials`` fresh releases under each hypothesis, counted against that threshold. The threshold
       depends on the calibration draws only, independent of the test's, so Clopper–Pearson stays valid.
    """
    diff = (x1 - x0).to(CODING_DTYPE)
    if float(torch.linalg.vector_norm(diff)) <= 0:
        raise ValueError("x0 and x1 must differ: neighbouring inputs")
    unit = (diff / torch.linalg.vector_norm(diff)).numpy()
    base = x0.to(CODING_DTYPE).numpy()
    d = unit.size

    def centred(hyp: int, trial: int) -> np.ndarray | None:
        out = release((x1 if hyp else x0).clone(), trial)
        return None if out is None else out.to(CODING_DTYPE).numpy() - base

    offset = 2 * trials
    fits = [
        GaussianFit.fit([centred(hyp, offset + 2 * i + hyp) for i in range(calibration)], unit)
        for hyp in (0, 1)
    ]
    rng = np.random.default_rng(seed)
    draws = 100_000
    sims = []
    for f in fits:
        p = rng.normal(f.along, math.sqrt(f.variance), draws)
        r2 = f.variance * rng.chisquare(d - 1, draws)
        sims.append(np.sort(_llr(p, r2, d, *fits)))

    def rate(h: int):
        return lambda tau: (1.0 - fits[h].refused) * (1.0 - np.searchsorted(sims[h], tau, "right") / draws)

    pooled = np.concatenate(sims)
    middle = 0.5 * (np.median(sims[0]) + np.median(sims[1]))
    candidates = [middle, *np.quantile(pooled, np.linspace(1e-3, 1 - 1e-3, 999))]
    plan = plan_threshold(rate(0), rate(1), candidates, trials=trials, delta=delta, confidence=confidence)

    def says_x1(hyp: int, trial: int) -> bool:
        y = centred(hyp, trial)
        if y is None:
            return False  # a round that released nothing is read as "x0"
        p = float(y @ unit)
        return float(_llr(np.array([p]), np.array([float(y @ y) - p * p]), d, *fits)[0]) > plan.threshold

    f0, f1 = fits
    how = (
        f"likelihood ratio > {plan.threshold:.3g} (fits: along {f0.along:.3g} / {f1.along:.3g}, variance "
        f"{f0.variance:.4g} / {f1.variance:.4g}, from {calibration} calibration rounds each)"
    )
    return _test(
        name, *_run_trials(says_x1, trials), delta=delta, confidence=confidence, plan=plan, threshold=how
    )
