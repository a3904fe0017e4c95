"""Golden values and properties of the per-element DP formulas (paper §5, docs/method.md "Differential
privacy")."""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sifl_ray.privacy import formulas as F


def approx(expected, **kw):
    """``pytest.approx`` without its default absolute tolerance of 1e-12, which would pass any ε < 1e-12."""
    kw.setdefault("rel", 1e-6)
    kw.setdefault("abs", 0.0)
    return pytest.approx(expected, **kw)


# The paper's §6 worked example (docs/method.md "Differential privacy").
P1_L2 = 1e-3  # ‖P1^j‖₂ (and ‖P1^j‖₁ for Laplace)
P2R_L2 = 1e3  # ‖P2R‖₂
N1_L2 = 1e3  # ‖N1^j‖₂
SIGMA = 1e3  # σ1 = σ2
D_LOCAL = 0.33  # Δ^{w_i} as the paper rounds 2·1000/6000
D_GLOBAL = 0.033  # Δ^w as the paper rounds 2·1000/60000
DELTA = 1e-5
# The global ≈ 1.4e-13 that docs/method.md quotes needs |P2^m| = 1e-3 (the paper's ‖Π2^m‖ from its Laplace
# example; the Gaussian paragraph omits it), no ‖P2R‖ in the global noise (Theorem 2's second inequality has
# none), and an R2 term ‖P1^j‖‖P1L‖‖N2‖σ2 much smaller than ‖N1^j‖σ1 = 1e6. With the scaled-orthogonal key
# ‖P1L‖ = 1/α = 1e3; ‖N2‖ = 1 makes the R2 term 1e3, a 0.1 % change on THIS example only, because its ‖N1^j‖ =
# 1e3 is huge. With the shipped β = 1, ‖N1^j‖ ≈ 0.02 and the R2 term dominates (see the quadrature test
# below). (With |P2^m| = 1 the figure would be 1.4e-10.)
P2_M = 1e-3
P1L_SPECTRAL = 1e3
N2_SPECTRAL = 1.0

pos = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)
moderate = st.floats(min_value=1e-3, max_value=1e3)
# Key entries: zero or of a size whose square does not underflow (an ℓ2 norm computed here must be right).
entry = st.floats(-1e3, 1e3, allow_nan=False).map(lambda x: 0.0 if abs(x) < 1e-6 else x)
deltas = st.floats(min_value=1e-12, max_value=0.4)


def test_q_inverse_matches_spec_definition():
    assert F.gaussian_tail_inverse(delta=1e-5) == approx(4.265, abs=1e-3)
    assert F.gaussian_tail_inverse(delta=1e-5) == approx(NormalDist().inv_cdf(1 - 1e-5), rel=1e-9)
    # The 1 − δ form loses everything at tiny δ; ours does not.
    assert F.gaussian_tail_inverse(delta=1e-20) == approx(9.262, abs=1e-3)


def test_remark3_sensitivities():
    assert F.local_sensitivity(clip=1000.0, local_size=6000) == approx(2000 / 6000)
    assert F.global_sensitivity(clip=1000.0, total_size=60000) == approx(2000 / 60000)
    sizes = np.array([100, 200, 400])
    np.testing.assert_allclose(F.local_sensitivity(clip=10.0, local_size=sizes), 20.0 / sizes)
    with pytest.raises(ValueError, match="local_size"):
        F.local_sensitivity(clip=1.0, local_size=0)


def test_golden_gaussian_local_from_paper_example():
    eps = F.gaussian_local_epsilon(
        p1_row_l2=P1_L2, n1_row_l2=N1_L2, sigma1=SIGMA, sensitivity=D_LOCAL, delta=DELTA, p2r_l2=P2R_L2
    )
    assert eps == approx(1.407e-12, rel=1e-2)
    assert eps == approx(1.4074139619945e-12, rel=1e-9)


def test_golden_gaussian_global_from_paper_example():
    paper = F.gaussian_global_epsilon(
        p1_row_l2=P1_L2,
        n1_row_l2=N1_L2,
        sigma1=SIGMA,
        sigma2=SIGMA,
        p1l_spectral=P1L_SPECTRAL,
        n2_spectral=N2_SPECTRAL,
        p2_m=P2_M,
        sensitivity=D_GLOBAL,
        delta=DELTA,
    )
    sound = F.gaussian_global_epsilon_sound(
        p1_row_l2=P1_L2, n1_row_l2=N1_L2, sigma1=SIGMA, p2_m=P2_M, sensitivity=D_GLOBAL, delta=DELTA
    )
    assert paper == approx(1.407e-13, rel=1e-2)
    assert paper == approx(1.40600795404e-13, rel=1e-9)
    assert sound == approx(1.40741396199e-13, rel=1e-9)
    assert sound >= paper  # dropping the R2 noise can only raise ε


def test_golden_gaussian_global_sound_adds_both_noises_in_quadrature():
    """Element (j, m) of W' carries N1^j R1[:, m] (std ‖N1^j‖σ1) and the independent (P1^j P1L) R2 N2[:, m]
    (std ‖P1^j P1L‖‖N2[:, m]‖σ2): s = √(3² + 4²) = 5 by hand. a = ‖P1^j‖Δ^w|P2^m| = 0.6·0.5·0.2 = 0.06."""
    q = 4.264890793922825  # Q⁻¹(1e-5)
    common = {"p1_row_l2": 0.6, "n1_row_l2": 1.5, "sigma1": 2.0, "p2_m": 0.2, "sensitivity": 0.5}
    sound = F.gaussian_global_epsilon_sound(
        **common, delta=DELTA, p1p1l_row_l2=2.0, n2_col_l2=0.5, sigma2=4.0
    )
    assert sound == approx(0.012 * q + 0.012**2 / 2, rel=1e-12)  # r = a/s = 0.06/5
    assert sound == approx(0.0512506895270739, rel=1e-12)
    # R1 alone (s = 3): sound but conservative.
    r1_only = F.gaussian_global_epsilon_sound(**common, delta=DELTA)
    assert r1_only == approx(0.02 * q + 0.02**2 / 2, rel=1e-12)
    # The paper's: s = 3 + ‖P1^j‖‖P1L‖‖N2‖σ2 = 3 + 0.6·5·1·4 = 15, an overestimate of the true std 5.
    paper = F.gaussian_global_epsilon(**common, delta=DELTA, sigma2=4.0, p1l_spectral=5.0, n2_spectral=1.0)
    assert paper == approx(0.004 * q + 0.004**2 / 2, rel=1e-12)
    assert paper < sound < r1_only
    # The (ñ, p) table: rows (ñ, 1), P2 entries and N2 column norms (1, p).
    table = F.gaussian_global_epsilon_sound(
        p1_row_l2=np.array([[0.6], [0.6]]),
        n1_row_l2=np.array([[1.5], [0.0]]),
        sigma1=2.0,
        p2_m=np.array([[0.2, -0.2]]),
        sensitivity=0.5,
        delta=DELTA,
        p1p1l_row_l2=np.array([[2.0], [2.0]]),
        n2_col_l2=np.array([[0.5, 0.0]]),
        sigma2=4.0,
    )
    assert table.shape == (2, 2)
    assert table[0, 0] == approx(sound, rel=1e-12)
    assert table[0, 1] == approx(r1_only, rel=1e-12)  # column m has ‖N2[:, m]‖ = 0: R1 alone
    assert table[1, 0] == approx(0.015 * q + 0.015**2 / 2, rel=1e-12)  # s = 4: R2 alone
    assert table[1, 1] == math.inf  # no noise at all on that element


def test_golden_gaussian_m1_broadcast():
    # w~ = P1 w + N1 r1: a = ‖P1^j‖Δ^w = 3.3e-5, s = ‖N1^j‖σ1 = 1e6.
    eps = F.gaussian_broadcast_epsilon(
        p1_row_l2=P1_L2, n1_row_l2=N1_L2, sigma1=SIGMA, sensitivity=D_GLOBAL, delta=DELTA
    )
    r = 3.3e-5 / 1e6
    assert eps == approx(r * 4.264890793922825 + r * r / 2, rel=1e-9)


def test_golden_laplace_paper_from_paper_example():
    local = F.laplace_local_epsilon_paper(
        p1_row_l1=P1_L2, n1_row_l2=N1_L2, scale1=SIGMA, sensitivity=D_LOCAL, p2r_l2=P2R_L2
    )
    glob = F.laplace_global_epsilon_paper(
        p1_row_l1=P1_L2,
        p1_row_l2=P1_L2,
        n1_row_l2=N1_L2,
        scale1=SIGMA,
        scale2=SIGMA,
        p1l_spectral=P1L_SPECTRAL,
        n2_spectral=N2_SPECTRAL,
        p2_m=P2_M,
        sensitivity=D_GLOBAL,
    )
    assert local == approx(3.3e-13, rel=1e-9)
    assert glob == approx(3.3e-14, rel=1e-2)
    assert glob == approx(3.3e-8 / 1.001e6, rel=1e-9)


def test_sound_laplace_equals_paper_for_a_single_entry_row():
    # One nonzero entry: the noise really is one Laplace variable, and the two bounds coincide.
    kw = {"p1_row_l1": 2e-3, "scale1": 5.0, "sensitivity": 0.1}
    assert F.laplace_local_epsilon_sound(n1_row_maxabs=7.0, **kw) == approx(
        F.laplace_local_epsilon_paper(n1_row_l2=7.0, **kw), rel=1e-12
    )


@settings(max_examples=200, deadline=None)
@given(
    row=st.lists(entry, min_size=1, max_size=40),
    p2r=st.lists(entry, min_size=1, max_size=4),
    p1_l1=pos,
    scale=pos,
    sens=pos,
    p2_m=pos,
)
def test_sound_laplace_never_below_paper(row, p2r, p1_l1, scale, sens, p2_m):
    n1 = np.array(row)
    p2r_vec = np.array(p2r)
    n1_l2, n1_max = float(np.linalg.norm(n1)), float(np.abs(n1).max())
    p2r_l2, p2r_max = float(np.linalg.norm(p2r_vec)), float(np.abs(p2r_vec).max())
    sound = F.laplace_local_epsilon_sound(
        p1_row_l1=p1_l1, n1_row_maxabs=n1_max, scale1=scale, sensitivity=sens, p2r_maxabs=p2r_max
    )
    paper = F.laplace_local_epsilon_paper(
        p1_row_l1=p1_l1, n1_row_l2=n1_l2, scale1=scale, sensitivity=sens, p2r_l2=p2r_l2
    )
    assert sound >= paper * (1 - 1e-12)
    # The accountant's fallback (‖P2R‖₂/√p as max|P2R_m|) keeps that order too.
    fallback = F.laplace_local_epsilon_sound(
        p1_row_l1=p1_l1,
        n1_row_maxabs=n1_max,
        scale1=scale,
        sensitivity=sens,
        p2r_maxabs=p2r_l2 / math.sqrt(len(p2r)),
    )
    assert fallback >= sound * (1 - 1e-12)
    g_sound = F.laplace_global_epsilon_sound(
        p1_row_l1=p1_l1, n1_row_maxabs=n1_max, scale1=scale, p2_m=p2_m, sensitivity=sens
    )
    g_paper = F.laplace_global_epsilon_paper(
        p1_row_l1=p1_l1,
        p1_row_l2=p1_l1,
        n1_row_l2=n1_l2,
        scale1=scale,
        scale2=scale,
        p1l_spectral=3.0,
        n2_spectral=2.0,
        p2_m=p2_m,
        sensitivity=sens,
    )
    assert g_sound >= g_paper * (1 - 1e-12)


def _two_laplace_sum_density(x: np.ndarray) -> np.ndarray:
    """Density of L1 + L2, with L1, L2 i.i.d. Laplace(0, 1): (1 + |x|)·e^{−|x|}/4."""
    return (1 + np.abs(x)) * np.exp(-np.abs(x)) / 4


def test_two_laplace_sum_density_is_right():
    # Check the closed form against a numerical convolution before trusting it below.
    h = 1e-3
    grid = np.arange(-40, 40 + h / 2, h)
    lap = np.exp(-np.abs(grid)) / 2
    conv = np.convolve(lap, lap, mode="same") * h
    for x in (0.0, 1.5, -3.0, 7.0):
        i = round((x + 40) / h)
        assert conv[i] == approx(_two_laplace_sum_density(np.array(x)), rel=1e-3)


def test_paper_laplace_bound_is_violated_and_sound_bound_holds():
    """N1^j = (1, 1), b = 1, shift a = 1: the paper claims ε = 1/√2; the true pure ε is 1."""
    a = 1.0
    paper = F.laplace_local_epsilon_paper(p1_row_l1=1.0, n1_row_l2=math.sqrt(2.0), scale1=1.0, sensitivity=a)
    sound = F.laplace_local_epsilon_sound(p1_row_l1=1.0, n1_row_maxabs=1.0, scale1=1.0, sensitivity=a)
    assert paper == approx(1 / math.sqrt(2))
    assert sound == approx(1.0)
    # Outputs y of M(D) = 0 + noise and M(D') = a + noise: the privacy loss is log f(y) − log f(y − a).
    y = np.linspace(-200, 200, 400_001)
    loss = np.log(_two_laplace_sum_density(y)) - np.log(_two_laplace_sum_density(y - a))
    assert loss.max() <= sound + 1e-12  # the sound bound holds everywhere
    assert loss.max() > paper + 0.25  # the paper's is broken on a set of positive probability


@settings(max_examples=200, deadline=None)
@given(a=pos, s=pos, delta=deltas)
def test_gaussian_epsilon_meets_theorem2_with_equality(a, s, delta):
    eps = F.gaussian_local_epsilon(p1_row_l2=1.0, n1_row_l2=s, sigma1=1.0, sensitivity=a, delta=delta)
    q = NormalDist().inv_cdf(1 - delta)

    def lhs(e):  # Theorem 2: s² − s·(a/ε)·Q⁻¹(δ) − a²/(2ε) ≥ 0, divided by s² to compare at any scale
        return 1 - (a / (e * s)) * q - a * a / (2 * e * s * s)

    assert lhs(eps) == approx(0.0, abs=1e-6)
    assert lhs(eps * (1 + 1e-4)) > 0 > lhs(eps * (1 - 1e-4))


@settings(max_examples=200, deadline=None)
@given(a=moderate, s=moderate, delta=deltas)
def test_gaussian_epsilon_is_really_eps_delta_dp(a, s, delta):
    # Independent check with the exact δ(ε) of the Gaussian mechanism (Balle and Wang 2018).
    eps = F.gaussian_local_epsilon(p1_row_l2=1.0, n1_row_l2=s, sigma1=1.0, sensitivity=a, delta=delta)
    exact = F.gaussian_mechanism_delta(epsilon=eps, sigma=s, sensitivity=a)
    assert exact <= delta * (1 + 1e-6)


def test_gaussian_mechanism_delta_at_zero_epsilon_is_total_variation():
    d, s = 1.0, 0.7
    tv = 2 * NormalDist().cdf(d / (2 * s)) - 1
    assert F.gaussian_mechanism_delta(epsilon=0.0, sigma=s, sensitivity=d) == approx(tv, rel=1e-12)
    assert F.gaussian_mechanism_delta(epsilon=1.0, sigma=0.0, sensitivity=d) == 1.0
    assert F.gaussian_mechanism_delta(epsilon=1.0, sigma=1.0, sensitivity=0.0) == 0.0


def test_larger_noise_gives_smaller_epsilon():
    sigmas = np.geomspace(1e-2, 1e6, 50)
    g = F.gaussian_local_epsilon(p1_row_l2=1e-3, n1_row_l2=10.0, sigma1=sigmas, sensitivity=0.3, delta=1e-5)
    gg = F.gaussian_global_epsilon(
        p1_row_l2=1e-3,
        n1_row_l2=10.0,
        sigma1=sigmas,
        sigma2=sigmas,
        p1l_spectral=1e3,
        n2_spectral=1.0,
        p2_m=0.5,
        sensitivity=0.03,
        delta=1e-5,
    )
    gs = F.gaussian_global_epsilon_sound(
        p1_row_l2=1e-3, n1_row_l2=10.0, sigma1=sigmas, p2_m=0.5, sensitivity=0.03, delta=1e-5
    )
    lp = F.laplace_local_epsilon_paper(p1_row_l1=1e-3, n1_row_l2=10.0, scale1=sigmas, sensitivity=0.3)
    ls = F.laplace_local_epsilon_sound(p1_row_l1=1e-3, n1_row_maxabs=3.0, scale1=sigmas, sensitivity=0.3)
    for eps in (g, gg, gs, lp, ls):
        assert np.all(np.diff(eps) < 0)
    # ...and a larger key row (stronger signal) a larger ε.
    p1 = np.geomspace(1e-6, 1.0, 20)
    g = F.gaussian_local_epsilon(p1_row_l2=p1, n1_row_l2=10.0, sigma1=1.0, sensitivity=0.3, delta=1e-5)
    assert np.all(np.diff(g) > 0)


def test_zero_inputs_never_crash_or_give_nan():
    z = np.zeros(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero or invalid-value warnings either
        # zero sensitivity → 0, even with zero noise
        assert (
            F.gaussian_local_epsilon(p1_row_l2=1.0, n1_row_l2=0.0, sigma1=0.0, sensitivity=0.0, delta=1e-5)
            == 0.0
        )
        assert (
            F.laplace_local_epsilon_sound(p1_row_l1=1.0, n1_row_maxabs=0.0, scale1=0.0, sensitivity=0.0) == 0
        )
        # zero noise with a signal → +inf
        assert F.gaussian_local_epsilon(
            p1_row_l2=1.0, n1_row_l2=1.0, sigma1=0.0, sensitivity=1.0, delta=0.6
        ) == (math.inf)
        for fn, kw in [
            (F.gaussian_local_epsilon, {"p1_row_l2": 1.0, "n1_row_l2": z, "sigma1": 1.0, "delta": 1e-5}),
            (F.laplace_local_epsilon_paper, {"p1_row_l1": 1.0, "n1_row_l2": z, "scale1": 1.0}),
            (F.laplace_local_epsilon_sound, {"p1_row_l1": 1.0, "n1_row_maxabs": z, "scale1": 1.0}),
        ]:
            assert np.all(fn(sensitivity=1.0, **kw) == np.inf)
        # zero key rows → 0 whatever the noise
        out = F.gaussian_global_epsilon(
            p1_row_l2=z,
            n1_row_l2=z,
            sigma1=0.0,
            sigma2=0.0,
            p1l_spectral=0.0,
            n2_spectral=0.0,
            p2_m=1.0,
            sensitivity=1.0,
            delta=1e-5,
        )
        assert np.array_equal(out, z)
        out = F.laplace_global_epsilon_paper(
            p1_row_l1=z,
            p1_row_l2=z,
            n1_row_l2=z,
            scale1=0.0,
            scale2=0.0,
            p1l_spectral=0.0,
            n2_spectral=0.0,
            p2_m=0.0,
            sensitivity=0.0,
        )
        assert np.array_equal(out, z)
        assert F.worst_element(np.array([0.0, np.inf, 1.0])) == math.inf
        assert F.worst_element_index(np.array([0.0, np.inf, 1.0])) == (1,)


def test_large_delta_floors_epsilon_at_zero():
    # δ ≥ 1/2 makes Q⁻¹(δ) negative; Theorem 2's condition then holds at ε = 0 for a weak signal, and ε must
    # not come out negative.
    eps = F.gaussian_local_epsilon(p1_row_l2=1.0, n1_row_l2=1e3, sigma1=1.0, sensitivity=1.0, delta=0.6)
    assert eps == 0.0


def test_invalid_inputs_raise_with_the_argument_named():
    with pytest.raises(ValueError, match="delta"):
        F.gaussian_local_epsilon(p1_row_l2=1.0, n1_row_l2=1.0, sigma1=1.0, sensitivity=1.0, delta=0.0)
    with pytest.raises(ValueError, match="n1_row_l2"):
        F.gaussian_local_epsilon(p1_row_l2=1.0, n1_row_l2=-1.0, sigma1=1.0, sensitivity=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="scale1"):
        F.laplace_local_epsilon_sound(p1_row_l1=1.0, n1_row_maxabs=1.0, scale1=math.nan, sensitivity=1.0)
    with pytest.raises(ValueError, match="no elements"):
        F.worst_element(np.array([]))


def test_vectorised_over_rows_in_the_callers_kind():
    rows = np.array([1e-3, 2e-3, 0.0])
    n1 = np.array([1e3, 1e3, 1e3])
    kw = {"sigma1": 1e3, "sensitivity": 0.33, "delta": 1e-5}
    as_np = F.gaussian_local_epsilon(p1_row_l2=rows, n1_row_l2=n1, **kw)
    as_torch = F.gaussian_local_epsilon(
        p1_row_l2=torch.from_numpy(rows), n1_row_l2=torch.from_numpy(n1), **kw
    )
    as_float = [F.gaussian_local_epsilon(p1_row_l2=float(r), n1_row_l2=1e3, **kw) for r in rows]
    assert isinstance(as_np, np.ndarray) and as_np.shape == (3,)
    assert isinstance(as_torch, torch.Tensor) and as_torch.dtype == torch.float64 and as_torch.shape == (3,)
    assert all(isinstance(x, float) for x in as_float)
    np.testing.assert_allclose(as_np, as_float, rtol=1e-15)
    np.testing.assert_allclose(as_torch.numpy(), as_float, rtol=1e-15)
    # (ñ, 1) rows against (1, p) code-2 entries give the (ñ, p) table of W'.
    table = F.gaussian_global_epsilon_sound(
        p1_row_l2=rows[:, None],
        n1_row_l2=n1[:, None],
        sigma1=1e3,
        p2_m=np.array([[1e-3, -2e-3]]),
        sensitivity=0.033,
        delta=1e-5,
    )
    assert table.shape == (3, 2)
    assert F.worst_element_index(table) == (1, 1)  # largest row, largest |P2^m| (sign ignored)
    assert F.worst_element(table) == table[1, 1]
