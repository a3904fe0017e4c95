"""Key 2 (π2) and the M2 chain: aggregator encode → server re-encode → client strip is a valid M1 encoding
of the same model (docs/method.md "SIFL M2", Proposition 2)."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from coding_cases import CASES, bound, case_id, make_key, rand
from hypothesis import given, settings
from hypothesis import strategies as st

from sifl_ray.coding import MissingKeyMaterial, aggregator_key_from_state_dict, make_aggregator_key


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(2, 6),
    gamma=st.floats(1e-4, 1.0),
    eta=st.floats(1e-2, 1e3),
    seed=st.integers(0, 2**16),
)
def test_right_inverse_and_null_space(p, gamma, eta, seed):
    agg = make_aggregator_key(p=p, gamma=gamma, eta=eta, seed=seed)
    assert math.isclose(float(agg.P2 @ agg.P2R), 1.0, rel_tol=1e-13)  # P2 · P2R = 1
    assert float((agg.N2 @ agg.P2R).abs().max()) < 16 * p * 2**-53 * eta / gamma  # N2 · P2R = 0
    assert agg.N2.shape == (p - 1, p)
    norms = agg.norms()
    assert math.isclose(norms.p2r_l2, 1 / gamma, rel_tol=1e-12)
    assert math.isclose(norms.n2_spectral, eta, rel_tol=1e-12)
    assert torch.allclose(norms.p2_abs.norm(), torch.tensor(gamma, dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(norms.n2_col_l2, agg.N2.norm(dim=0))
    w = rand(17, seed, 1e3)
    R2 = rand((17, p - 1), seed + 1, 1e3)
    W = agg.encode(w, R2)
    assert W.shape == (17, p)
    assert (agg.strip(W) - w).abs().max() <= 64 * 2**-53 * (1e3 * eta / gamma + float(w.abs().max()))
    assert torch.allclose(agg.client_view().strip(W), agg.strip(W), rtol=0, atol=0)


def test_client_view_holds_only_the_right_inverse():
    agg = make_aggregator_key(p=3, gamma=1e-3, eta=1.0, seed=b"\x05" * 32)
    view = agg.client_view()
    assert view.is_client_view and not agg.is_client_view
    assert not hasattr(view, "P2") and not hasattr(view, "N2") and not hasattr(view, "seed")
    with pytest.raises(MissingKeyMaterial, match="P2R"):
        view.encode(torch.zeros(4, dtype=torch.float64))
    with pytest.raises(MissingKeyMaterial):
        view.norms()
    assert b"\x05" * 32 not in pickle.dumps(view)
    again = aggregator_key_from_state_dict(agg.state_dict())
    assert torch.equal(again.P2, agg.P2) and torch.equal(again.N2, agg.N2)
    assert "P2" not in repr(agg).replace("P2R", "") and "tensor" not in repr(agg)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("p", [2, 3])
def test_m2_chain_is_a_valid_m1_encoding(case, p):
    """w~ = W' P2R = P1 w + N1 (R1 P2R): decodes to w, and the residual lies in col(N1)."""
    n, m = 40, 9
    key = make_key(*case, n=n, m=m, seed=11)
    agg = make_aggregator_key(p=p, gamma=1e-2, eta=10.0, seed=12)
    sigma1, sigma2 = 100.0, 100.0
    w = rand(n, 0, 0.05)
    x_a = key.encode(w, rand(key.n_tilde - n, 1, sigma1))  # an aggregated M1 encoding of w
    R2 = rand((key.n_tilde, p - 1), 2, sigma2)
    R1 = rand((key.n_tilde - n, p), 3, sigma1)
    W_a = agg.encode(x_a, R2)  # aggregator: W'_a = w~_a P2 + R2 N2
    W = key.reencode(W_a, R1)  # server: P1 (P1L W'_a) + N1 R1, code 2 still on
    w_tilde = agg.client_view().strip(W)  # client: W' P2R
    tol = bound(key, sigma=sigma1, w_max=0.05, scheme="M2", aggregator_key=agg, noise2=None, sigma2=sigma2)
    assert (key.decode(w_tilde) - w).abs().max() <= tol
    # The stripped model is exactly Proposition 2's form: P1 w + N1 (R1 P2R) ...
    expected = key.apply_P1(w) + key.apply_N1(R1 @ agg.P2R)
    scale = float(expected.abs().max())
    assert (w_tilde - expected).abs().max() <= 1e-9 * scale
    # ... so its residual lies in col(N1): least squares on N1 leaves nothing.
    P1, _, N1 = key.dense()
    residual = w_tilde - P1 @ w
    if N1.shape[1]:
        coef = torch.linalg.lstsq(N1, residual.unsqueeze(1)).solution
        assert (N1 @ coef).squeeze(1).sub(residual).abs().max() <= 1e-9 * scale
    else:
        assert residual.abs().max() <= 1e-9 * max(scale, 1.0)


def test_m2_chain_with_a_wrong_right_inverse_is_not_a_valid_encoding():
    """The chain test can fail: stripping with another key's P2R leaves code-2 noise the decode keeps."""
    key = make_key("fast", "oblique", n=40, m=9, seed=11)
    agg = make_aggregator_key(p=2, gamma=1e-2, eta=10.0, seed=12)
    other = make_aggregator_key(p=2, gamma=1e-2, eta=10.0, seed=13)
    w = rand(40, 0, 0.05)
    W = key.reencode(
        agg.encode(key.encode(w, rand(9, 1, 100.0)), rand((49, 1), 2, 100.0)), rand((9, 2), 3, 100.0)
    )
    assert (key.decode(other.client_view().strip(W)) - w).abs().max() > 1.0
