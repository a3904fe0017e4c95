"""The estimate's solver (sifl_ray.privacy.estimate.gaussians_epsilon) stops its bisection early: its
answers must be, bit for bit, those of the whole 80-step bisection, on every kind of element at once."""

from __future__ import annotations

import numpy as np

from sifl_ray.privacy import estimate as E

DELTA = 1e-5


def eighty_steps(params: list[np.ndarray], delta: float) -> np.ndarray:
    """The bisection with all of its 80 steps (the bracket doubled first), as before the early stop."""

    def above(eps: np.ndarray) -> np.ndarray:
        m0, s0, m1, s1 = params
        got = E.gaussians_delta(epsilon=eps, mean_null=m0, sd_null=s0, mean_canary=m1, sd_canary=s1)
        return got > delta

    low, high = np.zeros(params[0].shape), np.ones(params[0].shape)
    todo = above(low)
    while True:
        grow = todo & above(high) & (high < 2.0**20)
        if not grow.any():
            break
        low, high = np.where(grow, high, low), np.where(grow, 2 * high, high)
    for _ in range(80):
        mid = 0.5 * (low + high)
        up = above(mid)
        low, high = np.where(up, mid, low), np.where(up, high, mid)
    out = np.where(todo, high, 0.0)
    return np.where(todo & above(high), np.inf, out)


def test_the_early_stop_gives_the_whole_bisections_answers_bit_for_bit():
    """1,000 pairs as the bootstrap hands them over (one call), mixed with pairs whose ε is 0 (no shift,
    equal spreads: their brackets never settle), beyond 2^20 (inf), tiny and large: every answer equal."""
    rng = np.random.default_rng(2026)
    n = 1000
    mean_null, sd_null = rng.normal(0, 1, n), rng.uniform(0.05, 3, n)
    shift = rng.choice([0.0, 1e-6, 1e-2, 0.5, 3.0, 30.0], n) * rng.choice([-1.0, 1.0], n)
    mean_canary = mean_null + shift * sd_null
    sd_canary = sd_null * rng.choice([1.0, 1.0, 1.0001, 0.8, 1.3, 4.0], n)
    mean_canary[:3], sd_canary[:3] = mean_null[:3], sd_null[:3]  # identical pairs: ε = 0
    mean_canary[3] = mean_null[3] + 1e9 * sd_null[3]  # told apart always: inf
    params = [mean_null, sd_null, mean_canary, sd_canary]
    for delta in (DELTA, 0.2):
        got = E.gaussians_epsilon(*params, delta=delta)
        want = eighty_steps(params, delta)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]
    assert np.all(got[:3] == 0) and got[3] == np.inf and np.all(got[4:] < np.inf)
    # one pair alone (a scalar call) takes the same path
    one = E.gaussians_epsilon(0.0, 1.0, 2.0, 1.2, delta=DELTA)
    assert one.shape == () and one == eighty_steps([np.asarray(v) for v in (0.0, 1.0, 2.0, 1.2)], DELTA)
