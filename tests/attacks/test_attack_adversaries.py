"""The adversaries' math on plain dense matrices built here (no coding backend involved).

Each test pins what the attack must achieve, so an attack that stops working fails here, and the negative
cases (one pair short, an oblique kernel) show the figure is not trivially good.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sifl_ray.attacks.adversaries import (
    BlockLayout,
    DifferenceAttack,
    abs_correlation,
    apply_decoder,
    encoded_updates,
    fit_decoder,
    fit_noise_regression,
    fit_telescoped_regression,
    m2_server_estimate,
    project_onto_signal,
    remove_fitted_noise,
    update_geometry,
)


def _orthogonal_key(rng, n, n_tilde, alpha=1e-3, beta=1e3, K=None):
    """The scaled-orthogonal key of docs/method.md "Choosing the matrices"; K != None gives the oblique left
    inverse of the same P1."""
    Q, _ = np.linalg.qr(rng.standard_normal((n_tilde, n_tilde)))
    P1 = alpha * Q[:, :n]
    if K is None:
        return P1, Q[:, :n].T / alpha, beta * Q[:, n:]
    P1L = Q[:, :n].T / alpha + K @ Q[:, n:].T
    N1 = beta * Q @ np.vstack([-alpha * K, np.eye(n_tilde - n)])
    return P1, P1L, N1


def _protocol(rng, P1, N1, *, rounds, clients, sigma, step=0.05):
    """Rounds of uploads P1 w_i + N1 r^t (shared noise per round) around a drifting global model."""
    n = P1.shape[1]
    w = rng.standard_normal(n)
    ups, models, bcasts, aggs = [], [], [], []
    for _ in range(rounds):
        r = sigma * rng.standard_normal(N1.shape[1])
        b = P1 @ w + N1 @ r
        W = w[:, None] + step * rng.standard_normal((n, clients))
        U = b[:, None] + P1 @ (W - w[:, None])
        ups.append(U)
        models.append(W)
        bcasts.append(b)
        aggs.append(U.mean(axis=1))
        w = W.mean(axis=1)
    return ups, models, bcasts, aggs


def _errors(layout, bases, P1, coords, truth):
    w_hat = np.zeros_like(truth)
    for rows, params, (U, _), c in zip(layout.rows, layout.params, bases, coords, strict=True):
        w_hat[params] = np.linalg.solve(U.T @ P1[np.ix_(rows, params)], c)
    return np.linalg.norm(w_hat - truth, axis=0) / np.linalg.norm(truth, axis=0)


def test_rank_grows_by_clients_minus_one_and_stops_at_n():
    rng = np.random.default_rng(0)
    n, n_tilde, clients = 40, 46, 6
    P1, _, N1 = _orthogonal_key(rng, n, n_tilde)
    ups, *_ = _protocol(rng, P1, N1, rounds=12, clients=clients, sigma=1e3)
    attack = DifferenceAttack(BlockLayout.whole(n=n, n_tilde=n_tilde))
    ranks = [attack.observe(U) for U in ups]
    assert ranks[:7] == [5, 10, 15, 20, 25, 30, 35]
    assert ranks[7] == n and attack.full_rank  # ceil(40 / 5) = 8 rounds
    assert max(ranks) == n  # round-off of the 1e6 noise is never counted as signal


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    n=st.integers(3, 30),
    extra=st.integers(1, 8),
    clients=st.integers(2, 6),
    log_sigma=st.floats(-3, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_rank_is_exact_whatever_the_noise(n, extra, clients, log_sigma, seed):
    """The tolerance separates signal from round-off at every noise scale: the rank is exactly
    min(n, (N_c - 1) t), never more (round-off counted) and never less (signal missed)."""
    rng = np.random.default_rng(seed)
    P1, _, N1 = _orthogonal_key(rng, n, n + extra)
    rounds = math.ceil(n / (clients - 1)) + 1
    ups, *_ = _protocol(rng, P1, N1, rounds=rounds, clients=clients, sigma=10.0**log_sigma)
    attack = DifferenceAttack(BlockLayout.whole(n=n, n_tilde=n + extra))
    for t, U in enumerate(ups, start=1):
        assert attack.observe(U) == min(n, (clients - 1) * t)
    assert attack.full_rank


def test_reset_forgets_the_subspace():
    rng = np.random.default_rng(1)
    P1, _, N1 = _orthogonal_key(rng, 10, 12)
    ups, *_ = _protocol(rng, P1, N1, rounds=3, clients=6, sigma=1.0)
    attack = DifferenceAttack(BlockLayout.whole(n=10, n_tilde=12))
    for U in ups:
        attack.observe(U)
    assert attack.full_rank
    attack.reset()
    assert attack.rank == 0 and not attack.full_rank


def test_block_layout_found_from_the_nonzero_pattern_even_when_permuted():
    rng = np.random.default_rng(2)
    blocks = [(4, 5), (4, 6), (3, 4)]  # (params, rows)
    n, n_tilde = sum(b[0] for b in blocks), sum(b[1] for b in blocks)
    P1 = np.zeros((n_tilde, n))
    N1 = np.zeros((n_tilde, n_tilde - n))
    r0 = p0 = e0 = 0
    for s, r in blocks:
        P1[r0 : r0 + r, p0 : p0 + s] = rng.standard_normal((r, s))
        N1[r0 : r0 + r, e0 : e0 + r - s] = rng.standard_normal((r, r - s))
        r0, p0, e0 = r0 + r, p0 + s, e0 + r - s
    perm = rng.permutation(n_tilde)
    layout = BlockLayout.from_dense(P1[perm], N1[perm])
    assert layout.num_blocks == 3
    assert sorted((p.size, r.size) for p, r in zip(layout.params, layout.rows, strict=True)) == sorted(blocks)
    assert layout.n == n and layout.n_tilde == n_tilde
    dense = BlockLayout.from_dense(rng.standard_normal((8, 6)), rng.standard_normal((8, 2)))
    assert dense.num_blocks == 1


def test_block_key_is_broken_after_s_over_clients_minus_one_rounds():
    rng = np.random.default_rng(3)
    s, extra, nb, clients = 9, 2, 4, 4
    n, n_tilde = s * nb, (s + extra) * nb
    P1 = np.zeros((n_tilde, n))
    N1 = np.zeros((n_tilde, extra * nb))
    for b in range(nb):
        Pb, _, Nb = _orthogonal_key(rng, s, s + extra)
        P1[b * (s + extra) : (b + 1) * (s + extra), b * s : (b + 1) * s] = Pb
        N1[b * (s + extra) : (b + 1) * (s + extra), b * extra : (b + 1) * extra] = Nb
    ups, *_ = _protocol(rng, P1, N1, rounds=12, clients=clients, sigma=1e3)
    block = DifferenceAttack(BlockLayout.from_dense(P1, N1))
    whole = DifferenceAttack(BlockLayout.whole(n=n, n_tilde=n_tilde))
    first_block = first_whole = None
    for t, U in enumerate(ups, start=1):
        block.observe(U)
        whole.observe(U)
        first_block = first_block or (t if block.full_rank else None)
        first_whole = first_whole or (t if whole.full_rank else None)
    assert first_block == math.ceil(s / (clients - 1))  # 3 rounds
    assert first_whole == math.ceil(n / (clients - 1))  # 12 rounds
    assert first_block < first_whole


def test_projection_removes_pinv_noise_but_not_oblique_noise():
    rng = np.random.default_rng(4)
    n, n_tilde = 30, 36
    P1, _, N1 = _orthogonal_key(rng, n, n_tilde, beta=1.0)
    ups, models, *_ = _protocol(rng, P1, N1, rounds=8, clients=6, sigma=1.0)
    layout = BlockLayout.whole(n=n, n_tilde=n_tilde)
    attack = DifferenceAttack(layout)
    for U in ups:
        attack.observe(U)
    assert attack.full_rank
    bases = attack.bases()
    err = _errors(layout, bases, P1, project_onto_signal(layout, bases, ups[-1]), models[-1])
    assert err.max() < 1e-9

    K = rng.standard_normal((n, n_tilde - n))
    P1, _, N1 = _orthogonal_key(rng, n, n_tilde, beta=1.0, K=K)
    ups, models, *_ = _protocol(rng, P1, N1, rounds=8, clients=6, sigma=1.0)
    attack = DifferenceAttack(layout)
    for U in ups:
        attack.observe(U)
    bases = attack.bases()
    err = _errors(layout, bases, P1, project_onto_signal(layout, bases, ups[-1]), models[-1])
    assert err.max() > 1e-3  # the kernel is not orthogonal to col(P1): projection leaves noise


def test_regressions_remove_oblique_noise():
    rng = np.random.default_rng(5)
    n, n_tilde, clients, rounds = 20, 24, 6, 80
    K = rng.standard_normal((n, n_tilde - n))
    P1, _, N1 = _orthogonal_key(rng, n, n_tilde, K=K)
    ups, models, bcasts, aggs = _protocol(rng, P1, N1, rounds=rounds, clients=clients, sigma=1e3, step=0.02)
    layout = BlockLayout.whole(n=n, n_tilde=n_tilde)
    attack = DifferenceAttack(layout)
    for U in ups:
        attack.observe(U)
    bases = attack.bases()

    def regression_error(T):
        G = fit_noise_regression(layout, bases, ups[:T])
        return _errors(
            layout, bases, P1, remove_fitted_noise(layout, bases, G, ups[T - 1]), models[T - 1]
        ).max()

    early, late = regression_error(8), regression_error(rounds)
    assert late < 0.5 * early  # falls with rounds

    G = fit_telescoped_regression(layout, bases, bcasts[:10], aggs[:9])
    tele = _errors(layout, bases, P1, remove_fitted_noise(layout, bases, G, ups[9]), models[9]).max()
    assert tele < 1e-3 and tele < 1e-2 * regression_error(10)  # exact once rounds > ñ − n


def test_geometry_exact_for_scaled_orthogonal_distorted_for_generic():
    rng = np.random.default_rng(6)
    n, n_tilde = 25, 30
    P1, _, N1 = _orthogonal_key(rng, n, n_tilde, beta=1.0)
    ups, models, *_ = _protocol(rng, P1, N1, rounds=1, clients=5, sigma=1.0)
    est = encoded_updates(ups[0], None, np.full(5, 0.2))  # deviations from the mean upload: noise-free
    true = models[0] - models[0].mean(axis=1, keepdims=True)
    _, r_est, c_est = update_geometry(est)
    _, r_true, c_true = update_geometry(true)
    assert np.nanmax(np.abs(r_est / r_true - 1)) < 1e-9
    assert np.nanmax(np.abs(c_est - c_true)) < 1e-9
    G = rng.standard_normal((n_tilde, n))  # a generic P1 distorts angles
    _, _, c_g = update_geometry(G @ true)
    assert np.nanmax(np.abs(c_g - c_true)) > 1e-2


def test_geometry_is_zero_safe():
    v = np.zeros((4, 3))
    v[:, 1] = 1.0
    norms, ratios, cos = update_geometry(v)
    assert (
        norms[0] == 0 and np.isnan(ratios[0, 1]) and np.isnan(cos[0, 0]) and cos[1, 1] == pytest.approx(1.0)
    )


def test_decoder_exact_with_n_tilde_pairs_not_one_fewer():
    rng = np.random.default_rng(7)
    n, n_tilde = 15, 19
    P1, _, N1 = _orthogonal_key(rng, n, n_tilde, K=rng.standard_normal((15, 4)))
    W = 0.1 * rng.standard_normal((n, n_tilde + 1))
    Wt = P1 @ W + N1 @ (1e3 * rng.standard_normal((n_tilde - n, n_tilde + 1)))
    layout = BlockLayout.whole(n=n, n_tilde=n_tilde)

    def err(k):
        w_hat = apply_decoder(layout, fit_decoder(layout, Wt[:, :k], W[:, :k]), Wt[:, -1])
        return np.linalg.norm(w_hat - W[:, -1]) / np.linalg.norm(W[:, -1])

    assert err(n_tilde) < 1e-4  # round-off: the pairs are dominated by noise 1e6 times larger than P1 w
    assert err(n_tilde - 1) > 1e-2


def test_m2_server_recovers_the_model_up_to_a_scalar():
    rng = np.random.default_rng(8)
    n, alpha = 5000, 1e-3
    w = 0.05 * rng.standard_normal(n) + 0.01
    for scale in (1e-3, 1.0, 1e3):
        P2 = 1e-3 * rng.standard_normal((1, 2))
        P2R = np.linalg.pinv(P2)
        N2 = np.array([[-P2R[1, 0], P2R[0, 0]]])  # N2 P2R = 0
        e = rng.standard_normal(n) * scale / alpha  # P1L R2: the server's decode amplifies R2 by 1/alpha
        W_bar = np.outer(w, P2) + e[:, None] @ N2
        assert abs_correlation(m2_server_estimate(W_bar), w) > 0.999


def test_abs_correlation_zero_safe():
    assert abs_correlation(np.ones(5), np.arange(5.0)) == 0.0
    assert abs_correlation(-np.arange(5.0), np.arange(5.0)) == pytest.approx(1.0)
