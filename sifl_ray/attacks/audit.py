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
"holds": a bound below the claim only says the claim is **not refuted** (:func:`verdict`). That arithmetic
(the bounds, the planned thresholds, the ceilings and the verdicts) is :mod:`sifl_ray.attacks.audit_bounds`,
re-exported here; this module runs the tests on the releases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from sifl_ray.attacks.audit_bounds import (
    NO_CLAIM,
    NOT_REFUTED,
    REFUTED,
    UNTESTABLE,
    AuditTest,
    ThresholdPlan,
    clopper_pearson,
    epsilon_lower_bound,
    gaussian_shift_plan,
    make_test,
    plan_threshold,
    rates_bound,
    run_trials,
    trials_ceiling,
    verdict,
)
from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec, ServerKey
from sifl_ray.data.sampling import sample_clients

__all__ = [
    "NOT_REFUTED",
    "NO_CLAIM",
    "REFUTED",
    "UNTESTABLE",
    "AuditTest",
    "GaussianFit",
    "ThresholdPlan",
    "audit_aggregator_step",
    "audit_gaussian_release",
    "audit_release",
    "audit_upload_release",
    "clopper_pearson",
    "epsilon_lower_bound",
    "gaussian_shift_plan",
    "plan_threshold",
    "rates_bound",
    "trials_ceiling",
    "verdict",
]


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
    n = key.n
    w0 = w0.to(CODING_DTYPE).reshape(n)
    direction = torch.randn(n, generator=generator, dtype=CODING_DTYPE)
    delta_w = direction * (sensitivity / torch.linalg.vector_norm(direction))
    w1 = w0 + delta_w
    coordinate = _best_coordinate(key, w0, w1, noise, trials=trials, delta=delta, confidence=confidence)
    vec0, vec1, coord0, coord1 = _upload_decisions(
        key, w0, w1, delta_w, sensitivity, noise, coordinate, trials=trials, generator=generator, batch=batch
    )
    whole = make_test(
        "whole vector, keys known: decode, project on w1 - w0",
        vec0,
        vec1,
        delta=delta,
        confidence=confidence,
        threshold="midpoint (the decoded hypotheses are w0 and w1: no overlap, round-off aside)",
        threshold_ceiling=math.inf,
    )
    single = make_test(
        "one coordinate (the best signal-to-noise), the paper's per-element view",
        coord0,
        coord1,
        delta=delta,
        confidence=confidence,
        plan=coordinate.plan,
        threshold=coordinate.how,
    )
    return whole, single


@dataclass(frozen=True)
class _Coordinate:
    """The single element the per-element test thresholds, and how: decide "w1" when
    ``sign·(w~_j − cut) > 0``; ``plan`` when the threshold was planned from the noise law."""

    j: int
    sign: float
    cut: float
    plan: ThresholdPlan | None
    how: str


def _best_coordinate(
    key: ServerKey,
    w0: torch.Tensor,
    w1: torch.Tensor,
    noise: NoiseSpec,
    *,
    trials: int,
    delta: float,
    confidence: float,
) -> _Coordinate:
    """The single coordinate with the largest shift-to-noise ratio ``|P1^j Δ| / ‖N1^j‖`` (the paper's
    adversary at its best), and its threshold. Gaussian noise: element j is ``N(P1^j w, (‖N1^j‖ σ)²)`` under
    either model, so the threshold is planned in its tail (:func:`gaussian_shift_plan`); otherwise
    (Laplace) at the midpoint of the two means."""
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
    return _Coordinate(j, sign, cut_j, plan, how)


def _upload_decisions(
    key: ServerKey,
    w0: torch.Tensor,
    w1: torch.Tensor,
    delta_w: torch.Tensor,
    sensitivity: float,
    noise: NoiseSpec,
    coordinate: _Coordinate,
    *,
    trials: int,
    generator: torch.Generator,
    batch: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both tests' decisions on ``trials`` fresh encodings of each model, ``batch`` at a time, in the order
    the generator draws them (w0's noise, then w1's, batch by batch): the whole-vector test's under w0 and
    w1, then the single coordinate's."""
    n, m = key.n, key.n_tilde - key.n
    j, sign, cut_j = coordinate.j, coordinate.sign, coordinate.cut
    vec0: list[np.ndarray] = []
    vec1: list[np.ndarray] = []
    coord0: list[np.ndarray] = []
    coord1: list[np.ndarray] = []
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
    return np.concatenate(vec0), np.concatenate(vec1), np.concatenate(coord0), np.concatenate(coord1)


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
    if clients < 1:
        raise ValueError(f"clients must be ≥ 1, got {clients}")
    if noise_std is None and all(hasattr(step, a) for a in ("noise_multiplier", "clip", "expected_clients")):
        # deferred: dp_accounting, which this module does not load otherwise
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
    return make_test(
        name, *run_trials(says_x1, trials), delta=delta, confidence=confidence, plan=plan, threshold=how
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

    return make_test(
        name,
        *run_trials(says_x1, trials),
        delta=delta,
        confidence=confidence,
        plan=plan,
        threshold=how if plan is not None or not exact else "midpoint (a deterministic release)",
        threshold_ceiling=math.inf if exact else None,
    )


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
    return make_test(
        name, *run_trials(says_x1, trials), delta=delta, confidence=confidence, plan=plan, threshold=how
    )
