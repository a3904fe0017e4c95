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

The threshold is fixed before the trials (the midpoint of the two means), so the Clopper–Pearson intervals are
valid as stated. Confidence: each ε lower bound uses one end of each of two two-sided intervals at
``confidence`` (the upper end for the false positive rate, the lower end for the true positive rate); each end
alone fails with probability at most ``(1 − confidence)/2``, so the bound holds with probability at least
``confidence`` (union bound).
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


@dataclass(frozen=True)
class AuditTest:
    """One distinguishing test run ``trials`` times under each hypothesis."""

    name: str
    trials: int
    false_positives: int
    true_positives: int
    fpr_upper: float
    tpr_lower: float
    epsilon_lower_bound: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _test(name: str, stat0: np.ndarray, stat1: np.ndarray, *, delta: float, confidence: float) -> AuditTest:
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
    # its best). The midpoint threshold needs only the two means P1^j w0, P1^j w1.
    mean0 = key.apply_P1(w0)
    mean1 = key.apply_P1(w1)
    shift = (mean1 - mean0).abs()
    n1_rows = key.norms().n1_row_l2.to(CODING_DTYPE)
    snr = torch.where(n1_rows > 0, shift / n1_rows.clamp_min(1e-300), torch.full_like(shift, math.inf))
    j = int(torch.argmax(snr))
    sign = 1.0 if float(mean1[j] - mean0[j]) >= 0 else -1.0
    mid_j = 0.5 * float(mean0[j] + mean1[j])

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
            (coord0 if hyp == 0 else coord1).append((sign * (enc[j] - mid_j) > 0).numpy())
        done += k
    whole = _test(
        "whole vector, keys known: decode, project on w1 - w0",
        np.concatenate(vec0),
        np.concatenate(vec1),
        delta=delta,
        confidence=confidence,
    )
    single = _test(
        "one coordinate (the best signal-to-noise), the paper's per-element view",
        np.concatenate(coord0),
        np.concatenate(coord1),
        delta=delta,
        confidence=confidence,
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
) -> AuditTest:
    """Audit one round of a central-noise aggregator step (DP-FedAvg's :class:`~sifl_ray.arms.dp_fedavg.
    CentralNoise`, the arm's own object) on neighbouring populations: ``clients`` clients whose clipped
    updates sum to 0 (nothing else moves the output: the test's best case), and the same plus one client
    whose update is ``C·e_0``.

    Each trial is a round of its own (the step's noise stream is keyed by the round). The test thresholds
    coordinate 0 of the released mean at ``shift / 2``, ``shift`` being what the added client moves the
    mean by without noise (C/m for DP-FedAvg's fixed denominator m), fixed before the trials; the other
    coordinates carry independent noise and no signal. For a mechanism that is (ε, δ)-DP per round the
    returned lower bound stays below ε with probability at least ``confidence``: one above the accountant's
    ε refutes the accountant (or the step).
    """
    if clients < 1:
        raise ValueError(f"clients must be ≥ 1, got {clients}")

    def says_x1(hyp: int, trial: int) -> bool:
        k = clients + hyp
        average = torch.tensor([clip * hyp / k], dtype=CODING_DTYPE)  # k updates summing to C·e_0, or to 0
        out = step(average, arm=arm, t=trial, shard=0, bounds=(0, 1), weight=float(k))
        return float(out[0]) > 0.5 * shift

    name = "one round of the aggregator's central noise: coordinate 0 of the released mean, midpoint"
    return _test(name, *_run_trials(says_x1, trials), delta=delta, confidence=confidence)


def audit_release(
    release,
    *,
    x0: torch.Tensor,
    x1: torch.Tensor,
    trials: int,
    delta: float,
    confidence: float = 0.95,
    name: str = "whole vector: project the release on x1 - x0, midpoint threshold",
) -> AuditTest:
    """Audit a randomised release ``release(x, trial)`` of neighbouring inputs ``x0`` and ``x1``: project
    each release (minus ``x0``) on ``x1 − x0`` and decide "x1" past the midpoint (a threshold fixed before the
    trials). Each trial must draw fresh randomness (the release's stream keyed by ``trial``). A deterministic
    release is told apart every time: its lower bound is the largest the trials can show."""
    diff = (x1 - x0).to(CODING_DTYPE)
    scale = float(diff @ diff)
    if scale <= 0:
        raise ValueError("x0 and x1 must differ: neighbouring inputs")

    def says_x1(hyp: int, trial: int) -> bool:
        out = release((x1 if hyp else x0).clone(), trial).to(CODING_DTYPE)
        return float((out - x0) @ diff) / scale > 0.5

    return _test(name, *_run_trials(says_x1, trials), delta=delta, confidence=confidence)


def _run_trials(says_x1, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """The test's decisions under hypothesis 0 and 1, ``trials`` each; trial ``2i + hyp`` keys the release's
    randomness, so no two releases share a draw."""
    stats = {hyp: [says_x1(hyp, 2 * i + hyp) for i in range(trials)] for hyp in (0, 1)}
    return np.array(stats[0]), np.array(stats[1])
