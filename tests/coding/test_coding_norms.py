"""Norms for the accountant: exact for every backend (bounds only where ``exact`` says so, and then on the
conservative side), and the fast backend equals the dense matrices of itself."""

from __future__ import annotations

import math

import pytest
import torch
from coding_cases import CASES, make_key, rand
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_norms(key):
    P1, P1L, N1 = key.dense()
    return {
        "p1_row_l2": P1.norm(dim=1),
        "p1_row_l1": P1.abs().sum(1),
        "n1_row_l2": N1.norm(dim=1) if N1.numel() else torch.zeros(key.n_tilde, dtype=torch.float64),
        "n1_row_maxabs": N1.abs().amax(1) if N1.numel() else torch.zeros(key.n_tilde, dtype=torch.float64),
        "p1l_spectral": float(torch.linalg.matrix_norm(P1L, 2)),
    }


@settings(max_examples=30, deadline=None)
@given(
    case=st.sampled_from(CASES),
    n=st.integers(1, 40),
    m=st.integers(1, 10),
    seed=st.integers(0, 2**16),
)
def test_norms_are_exact(case, n, m, seed):
    key = make_key(*case, n=n, m=m, seed=seed)
    norms, ref = key.norms(), reference_norms(key)
    assert norms.exact and norms.note
    for name in ("p1_row_l2", "p1_row_l1", "n1_row_l2", "n1_row_maxabs"):
        got, want = getattr(norms, name), ref[name]
        assert got.shape == (key.n_tilde,)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-14 * float(want.abs().max() + 1)), name
    assert math.isclose(norms.p1l_spectral, ref["p1l_spectral"], rel_tol=1e-9)
    if case[0] != "identity":
        assert key.norms() is norms  # cached on the (frozen) key


@pytest.mark.parametrize("left_inverse", ["pinv", "oblique"])
def test_multi_round_norms_are_conservative_bounds(left_inverse):
    key = make_key("fast", left_inverse, n=50, m=9, seed=2, rounds=2)
    norms, ref = key.norms(), reference_norms(key)
    assert not norms.exact and "bound" in norms.note
    assert torch.allclose(norms.p1_row_l2, ref["p1_row_l2"], rtol=1e-9, atol=1e-15)
    assert bool((norms.p1_row_l1 >= ref["p1_row_l1"] * (1 - 1e-12)).all())  # upper bound for ε
    assert torch.allclose(norms.n1_row_l2, ref["n1_row_l2"], rtol=1e-9)


@pytest.mark.parametrize("left_inverse, expected", [("pinv", 1e2), ("oblique", math.sqrt(1e4 + 50.0**2))])
def test_fast_p1l_spectral_norm_formula(left_inverse, expected):
    """‖P1L‖₂ = 1/α (pinv) or √(1/α² + κ²) (oblique), exactly."""
    key = make_key("fast", left_inverse, n=60, m=13, seed=4, alpha=1e-2, kappa=50.0)
    assert math.isclose(key.norms().p1l_spectral, expected, rel_tol=1e-12)
    assert math.isclose(reference_norms(key)["p1l_spectral"], expected, rel_tol=1e-9)


@pytest.mark.parametrize("rounds", [1, 2])
@pytest.mark.parametrize("left_inverse", ["pinv", "oblique"])
def test_fast_equals_its_dense_matrices(rounds, left_inverse):
    """fast ≡ dense-of-itself: the structured maps are exactly the matrices they materialise, and those
    satisfy Proposition 1 to round-off."""
    key = make_key("fast", left_inverse, n=70, m=11, seed=rounds, rounds=rounds)
    P1, P1L, N1 = key.dense()
    eye = torch.eye(70, dtype=torch.float64)
    assert (P1L @ P1 - eye).abs().max() < 1e-12
    assert (P1L @ N1).abs().max() < 1e-12 * key.beta / key.alpha
    assert (P1.T @ P1 - key.alpha**2 * eye).abs().max() < 1e-16  # α·(orthonormal columns)
    if left_inverse == "pinv":
        # kernel ⟂ col(P1): the weak choice (docs/method.md "Noise removal")
        assert (P1.T @ N1).abs().max() < 1e-14
    else:
        assert (P1.T @ N1).abs().max() > 1e-3 * key.alpha * key.beta  # oblique: not orthogonal
    W, R = rand((70, 3), 0), rand((11, 3), 1)
    assert torch.allclose(key.encode(W, R), P1 @ W + N1 @ R, rtol=0, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(case=st.sampled_from(CASES), n=st.integers(1, 40), m=st.integers(1, 10), seed=st.integers(0, 2**16))
def test_p1p1l_row_norms_are_exact_or_lower_bounds(case, n, m, seed):
    """‖P1^j P1L‖₂ scales the aggregator's R2 noise in M2's W'; its conservative side is from below."""
    key = make_key(*case, n=n, m=m, seed=seed)
    norms = key.norms()
    P1, P1L, _ = key.dense()
    want = (P1 @ P1L).norm(dim=1)
    got = norms.p1p1l_row_l2
    assert got.shape == (key.n_tilde,)
    tol = 1e-9 * float(want.max()) + 1e-14
    assert bool((got <= want + tol).all())  # never above: a larger std would understate ε
    if norms.p1p1l_exact:
        assert torch.allclose(got, want, rtol=1e-9, atol=tol)
    else:  # fast oblique: ‖P1^j‖₂/‖P1‖₂ (P1L P1 = I), with ‖P1‖₂ = α
        assert case == ("fast", "oblique")
        assert torch.allclose(got, P1.norm(dim=1) / key.alpha, rtol=1e-9, atol=tol)
    assert norms.p1p1l_exact == (case != ("fast", "oblique"))


@pytest.mark.parametrize("rounds", [1, 2])
@pytest.mark.parametrize("left_inverse", ["pinv", "oblique"])
def test_a_large_keys_columns_one_at_a_time_give_the_batched_norms(monkeypatch, rounds, left_inverse):
    """From ñ = 4,096 on, norms() pushes its kernel columns one at a time; the batched form (what the small
    keys above check against their dense matrices) gives the same norms: the largest magnitudes to the
    bit, and the rest within what adding the m squares in another order can move them.

    The bound: two sums of the same m nonnegative terms differ by at most 2γ_m ≈ 2mu of the sum; the
    square root halves that and rounds once more (n1_row_l2: mu + 2u ≤ 2mu). Two rounds read P1's rows as
    α·√(1 − t), t the row's tail mass, so t's change is scaled by t/(1 − t) and halved, plus three roundings
    of the same operations on different inputs (6u); one round does not use the columns for P1 at all."""
    import sifl_ray.coding.fast as fast

    m, u = 9, 2.0**-53
    key = make_key("fast", left_inverse, n=4100, m=m, seed=5, rounds=rounds)
    assert key.n_tilde >= fast.COLUMN_BY_COLUMN
    one_at_a_time = key.norms()
    monkeypatch.setattr(fast, "COLUMN_BY_COLUMN", 1 << 40)
    batched = make_key("fast", left_inverse, n=4100, m=m, seed=5, rounds=rounds).norms()
    assert torch.equal(one_at_a_time.n1_row_maxabs, batched.n1_row_maxabs)
    assert float(batched.n1_row_l2.min()) > 0
    assert torch.allclose(one_at_a_time.n1_row_l2, batched.n1_row_l2, rtol=2 * m * u, atol=0)
    if rounds == 1:
        assert torch.equal(one_at_a_time.p1_row_l2, batched.p1_row_l2)
        assert torch.equal(one_at_a_time.p1_row_l1, batched.p1_row_l1)
        return
    tail = 1 - (batched.p1_row_l2 / key.alpha) ** 2
    rtol = m * u * float((tail / (1 - tail)).max()) + 8 * u  # + 2u: P1's 1-norms are √n times the 2-norms
    for name in ("p1_row_l2", "p1_row_l1"):
        got, want = getattr(one_at_a_time, name), getattr(batched, name)
        assert torch.allclose(got, want, rtol=rtol, atol=0), name
