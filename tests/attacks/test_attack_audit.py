"""The DP audit: Clopper–Pearson bounds, the ε lower bound, and the audit of a real upload release."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sifl_ray.attacks.audit import audit_upload_release, clopper_pearson, epsilon_lower_bound
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.specs import Coding


def test_clopper_pearson_closed_forms():
    n, conf = 1000, 0.95
    lo, hi = clopper_pearson(0, n, confidence=conf)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9)
    lo, hi = clopper_pearson(n, n, confidence=conf)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / n), rel=1e-9)
    lo, hi = clopper_pearson(500, n, confidence=conf)
    assert lo < 0.5 < hi and hi - lo < 0.07
    with pytest.raises(ValueError):
        clopper_pearson(3, 2, confidence=conf)


def test_epsilon_lower_bound_perfect_separation_and_no_separation():
    n = 5000
    eps = epsilon_lower_bound(false_positives=0, true_positives=n, trials=n, delta=1e-5, confidence=0.95)
    fpr_hi = 1 - 0.025 ** (1 / n)
    tpr_lo = 0.025 ** (1 / n)
    assert eps == pytest.approx(math.log((tpr_lo - 1e-5) / fpr_hi), rel=1e-9)
    assert eps > 7  # limited by the trials only
    assert (
        epsilon_lower_bound(false_positives=2500, true_positives=2500, trials=n, delta=1e-5, confidence=0.95)
        == 0
    )


def test_audit_separates_the_vector_but_not_one_coordinate():
    from sifl_ray.coding import make_server_key
    from sifl_ray.privacy import release_epsilons

    n = 60
    key = make_server_key(
        n=n, n_tilde=n + 8, backend="fast", left_inverse="pinv", alpha=1e-3, beta=1e3, seed=b"\x01" * 32
    )
    noise = NoiseSpec("gaussian", 1e3)
    w0 = torch.full((n,), 0.05, dtype=torch.float64)
    sensitivity = 2 * 1.0 / 200
    whole, single = audit_upload_release(
        key,
        w0=w0,
        sensitivity=sensitivity,
        noise=noise,
        trials=3000,
        generator=torch.Generator().manual_seed(0),
        delta=1e-5,
    )
    assert whole.false_positives == 0 and whole.true_positives == 3000
    assert whole.epsilon_lower_bound > 6
    assert single.epsilon_lower_bound < 0.2  # the paper's one-coordinate view: nothing to see
    local = release_epsilons(
        key_norms=key.norms(),
        noise1=noise,
        clip=1.0,
        local_size=200,
        total_size=2000,
        delta=1e-5,
        coding=Coding.M1,
    )[0]
    assert whole.epsilon_lower_bound > 1e6 * local.epsilon_paper  # far above the per-element ε


def test_epsilon_lower_bound_holds_with_the_stated_confidence():
    """The bound uses one tail of each two-sided interval, so it must hold (not exceed the true ε) with
    probability at least ``confidence``, not only 1 - 2(1 - confidence). Randomized response has the tight
    trade-off TPR = e^ε FPR and 1 - FPR = e^ε (1 - TPR): any overshoot needs a tail of an interval to fail."""
    rng = np.random.default_rng(0)
    eps, n, confidence, experiments = 1.0, 200, 0.8, 2000
    fpr = 1.0 / (1.0 + math.exp(eps))
    fps = rng.binomial(n, fpr, size=experiments)
    tps = rng.binomial(n, 1.0 - fpr, size=experiments)
    over = sum(
        epsilon_lower_bound(
            false_positives=int(fp), true_positives=int(tp), trials=n, delta=0.0, confidence=confidence
        )
        > eps
        for fp, tp in zip(fps, tps, strict=True)
    )
    se = math.sqrt(confidence * (1 - confidence) / experiments)
    assert over / experiments <= (1 - confidence) + 3 * se
    # Each tail alone fails with probability at most (1 - confidence) / 2.
    upper_fails = sum(clopper_pearson(int(fp), n, confidence=confidence)[1] < fpr for fp in fps)
    assert upper_fails / experiments <= (1 - confidence) / 2 + 3 * se
