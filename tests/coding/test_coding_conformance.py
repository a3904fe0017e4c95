"""One conformance suite for every key-1 backend × left inverse, so a new backend meets the same
invariants as the others with no test of its own: Proposition 1's
identities, the round trip within the precision model's bound, shapes, views, persistence."""

from __future__ import annotations

import pickle

import pytest
import torch
from coding_cases import CASES, CODED, bound, case_id, make_key, rand
from hypothesis import given, settings
from hypothesis import strategies as st

from sifl_ray.coding import ClientKeyView, server_key_from_state_dict

SIGMA = 100.0
sizes = dict(n=st.integers(1, 120), m=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))


@settings(max_examples=80, deadline=None)
@given(case=st.sampled_from(CASES), p=st.sampled_from([None, 1, 3]), **sizes)
def test_left_inverse_and_kernel_identities(case, n, m, seed, p):
    """P1L·P1 = I and P1L·N1 = 0, checked through the products on random columns."""
    key = make_key(*case, n=n, m=m, seed=seed)
    shape = (n,) if p is None else (n, p)
    v = rand(shape, seed)
    assert (key.decode(key.apply_P1(v)) - v).abs().max() <= bound(key, sigma=0.0, w_max=1.0) * 10
    r = rand((key.n_tilde - key.n, *shape[1:]), seed + 1, SIGMA)
    kernel_image = key.decode(key.apply_N1(r))
    assert kernel_image.shape == shape
    assert kernel_image.abs().max() <= bound(key, sigma=SIGMA, w_max=0.0)


@settings(max_examples=80, deadline=None)
@given(case=st.sampled_from(CASES), **sizes)
def test_round_trip_within_predicted_bound(case, n, m, seed):
    key = make_key(*case, n=n, m=m, seed=seed)
    w = rand(n, seed, 0.05)
    r = rand(key.n_tilde - key.n, seed + 1, SIGMA)
    x = key.encode(w, r)
    assert x.shape == (key.n_tilde,) and x.dtype == torch.float64
    err = (key.decode(x) - w).abs().max()
    assert err <= bound(key, sigma=SIGMA, w_max=float(w.abs().max()))
    # encode is P1 w + N1 r (the fast backend computes it in one transform, not two)
    assert torch.allclose(x, key.apply_P1(w) + key.apply_N1(r), rtol=0, atol=1e-12 * float(x.abs().max() + 1))


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from(CASES), p=st.integers(2, 4), **sizes)
def test_columns_are_independent(case, n, m, seed, p):
    """An (ñ, p) input is p independent columns (M2 sends p columns through the same maps)."""
    key = make_key(*case, n=n, m=m, seed=seed)
    X = rand((key.n_tilde, p), seed, 3.0)
    batched = key.decode(X)
    columns = torch.stack([key.decode(X[:, j].clone()) for j in range(p)], dim=1)
    assert torch.allclose(batched, columns, rtol=0, atol=1e-12 * float(columns.abs().max() + 1))
    R = rand((key.n_tilde - key.n, p), seed + 2, SIGMA)
    W = rand((n, p), seed + 3)
    enc = key.reencode(key.encode(W, R), R)
    assert enc.shape == (key.n_tilde, p)
    assert (key.decode(enc) - W).abs().max() <= 2 * bound(key, sigma=SIGMA, w_max=float(W.abs().max()))


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(CASES), p=st.sampled_from([None, 1, 2, 3]), noise=st.booleans(), **sizes)
def test_reencode_is_encode_of_decode(case, n, m, seed, p, noise):
    """A backend's own (fused) reencode is Algorithm 2's ``P1 (P1L x) + N1 r``, column by column."""
    key = make_key(*case, n=n, m=m, seed=seed)
    cols = () if p is None else (p,)
    x = rand((key.n_tilde, *cols), seed, SIGMA)
    r = rand((key.n_tilde - n, *cols), seed + 1, SIGMA) if noise else None
    expected = key.encode(key.decode(x), r)
    got = key.reencode(x, r)
    assert got.shape == expected.shape and got.dtype == torch.float64
    # Round-off only: both paths push vectors of norm ~‖x‖ through the same orthogonal or dense maps.
    assert (got - expected).abs().max() <= 1e-11 * (float(x.norm()) + float(expected.norm()))
    # ... and the test can fail: the same step without the fresh noise is far from it (the identity
    # code has no kernel: nothing to add).
    if noise and key.n_tilde > key.n:
        assert (key.reencode(x, None) - expected).abs().max() > 1e-6 * float(expected.abs().max())


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(CASES), **sizes)
def test_dense_matrices_match_the_maps(case, n, m, seed):
    key = make_key(*case, n=n, m=m, seed=seed)
    P1, P1L, N1 = key.dense()
    assert (
        P1.shape == (key.n_tilde, n)
        and P1L.shape == (n, key.n_tilde)
        and N1.shape == (key.n_tilde, key.n_tilde - n)
    )
    v, r = rand(n, seed), rand(key.n_tilde - n, seed + 1)
    x = rand(key.n_tilde, seed + 2)
    scale = 1e-12 * max(1.0, float(P1L.abs().max()))
    assert torch.allclose(P1 @ v, key.apply_P1(v), rtol=0, atol=scale)
    assert torch.allclose(P1L @ x, key.decode(x), rtol=0, atol=scale * 10)
    n1_max = float(N1.abs().max()) if N1.numel() else 1.0
    assert torch.allclose(N1 @ r, key.apply_N1(r), rtol=0, atol=scale * max(1.0, n1_max))
    cond_tol = 1e-9 * float(torch.linalg.matrix_norm(P1L, 2) * torch.linalg.matrix_norm(P1, 2))
    assert (P1L @ P1 - torch.eye(n, dtype=torch.float64)).abs().max() <= cond_tol
    if N1.numel():
        assert (P1L @ N1).abs().max() <= cond_tol * n1_max / float(P1.abs().max())


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_client_view_has_no_noise_power(case):
    key = make_key(*case, n=20, m=5, seed=1)
    view = key.client_view()
    assert isinstance(view, ClientKeyView)
    assert not hasattr(view, "apply_N1") and not hasattr(view, "encode") and not hasattr(view, "norms")
    assert not hasattr(view, "seed") and not hasattr(view, "beta")
    w, x = rand(20, 0), rand(key.n_tilde, 1)
    assert torch.equal(view.apply_P1(w), key.apply_P1(w))
    assert torch.equal(view.decode(x), key.decode(x))
    assert (view.n, view.n_tilde, view.epoch) == (key.n, key.n_tilde, key.epoch)
    clone = pickle.loads(pickle.dumps(view))  # Ray ships views to clients
    assert torch.equal(clone.decode(x), key.decode(x))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_state_dict_rebuilds_the_same_key(case):
    key = make_key(*case, n=30, m=7, seed=b"\x07" * 32, epoch=3)
    again = server_key_from_state_dict(pickle.loads(pickle.dumps(key.state_dict())))
    assert type(again) is type(key) and again.epoch == 3
    w, r = rand(30, 0), rand(key.n_tilde - 30, 1, SIGMA)
    assert torch.equal(again.encode(w, r), key.encode(w, r))
    other_epoch = make_key(*case, n=30, m=7, seed=b"\x07" * 32, epoch=4)
    if case[0] != "identity":  # re-keying: same seed, next epoch, a different key
        assert not torch.allclose(other_epoch.encode(w, r), key.encode(w, r))


@pytest.mark.parametrize("case", CODED, ids=case_id)
def test_wrong_shapes_are_refused(case):
    key = make_key(*case, n=10, m=3, seed=0)
    with pytest.raises(ValueError, match=r"expected shape \(10,\)"):
        key.apply_P1(torch.zeros(11, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"expected shape \(13,\)"):
        key.decode(torch.zeros(10, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"expected shape \(3,\)"):
        key.apply_N1(torch.zeros(4, dtype=torch.float64))


def test_identity_key_is_plain_fl():
    key = make_key("identity", "pinv", n=9, m=0)
    w = rand(9, 0)
    assert torch.equal(key.encode(w), w) and torch.equal(key.decode(w), w)
    assert key.encode(w).data_ptr() != w.data_ptr()  # a copy: no aliasing between parties
    assert torch.equal(key.apply_N1(torch.zeros(0, dtype=torch.float64)), torch.zeros(9, dtype=torch.float64))
    assert torch.equal(
        key.apply_N1(torch.zeros(0, 2, dtype=torch.float64)), torch.zeros(9, 2, dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="no kernel"):
        key.encode(w, torch.ones(1, dtype=torch.float64))
    norms = key.norms()
    assert norms.exact and float(norms.n1_row_l2.abs().max()) == 0.0 and norms.p1l_spectral == 1.0


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_keys_work_on_the_device_they_were_moved_to(case, device):
    key = make_key(*case, n=33, m=6, seed=9)
    moved = key.to(device)
    assert moved.device.type == device
    assert moved.client_view().decode(torch.zeros(moved.n_tilde)).shape == (33,)
    w, r = rand(33, 0), rand(key.n_tilde - 33, 1, SIGMA)
    x = moved.encode(w.to(device), r.to(device))
    assert x.device.type == device  # the result comes back on the input's device
    assert torch.allclose(x.cpu(), key.encode(w, r), rtol=0, atol=1e-9 * float(x.abs().max() + 1))
    assert (moved.decode(x).cpu() - w).abs().max() <= bound(key, sigma=SIGMA, w_max=1.0)
    assert moved.encode(w, r).device.type == "cpu"  # a CPU input is answered on the CPU
