"""The rigorous float64 constants hold against exact references (rational arithmetic on the stored
parameters) and against round trips, for every backend, on whatever CPU runs the tests."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from sifl_ray.coding import make_aggregator_key, make_server_key
from sifl_ray.coding.roundoff import U, gamma, noise_norm_bound, round_error_bound
from sifl_ray.coding.transform import Givens, Permutation, SignedHadamard

BACKENDS = [
    ("fast", "oblique"),
    ("fast", "pinv"),
    ("dense", "oblique"),
    ("dense", "pinv"),
    ("block", "oblique"),
]


def _exact_apply(layers, x: list[Fraction], transpose: bool) -> list[Fraction]:
    """The stored transform applied in exact rational arithmetic (the "exact operator" of the bounds)."""
    y = list(x)
    for layer in reversed(layers) if transpose else layers:
        if isinstance(layer, Permutation):
            assert layer.block == 1
            idx = (layer.inverse if transpose else layer.index).tolist()
            y = [y[i] for i in idx]
        elif isinstance(layer, Givens):
            for i, (c, s) in enumerate(zip(layer.cos.tolist(), layer.sin.tolist(), strict=True)):
                c, s = Fraction(c), Fraction(s)
                h, t = y[i], y[layer.tail + i]
                if transpose:
                    y[i], y[layer.tail + i] = c * h + s * t, c * t - s * h
                else:
                    y[i], y[layer.tail + i] = c * h - s * t, s * h + c * t
        elif isinstance(layer, SignedHadamard):
            signs = [Fraction(v) for v in layer.signs.tolist()]
            head = y[: len(signs)]
            if not transpose:
                head = [a * b for a, b in zip(head, signs, strict=True)]
            h = 1
            while h < len(head):
                for start in range(0, len(head), 2 * h):
                    for j in range(start, start + h):
                        a, b = head[j], head[j + h]
                        head[j], head[j + h] = a + b, a - b
                h *= 2
            if transpose:
                head = [a * b for a, b in zip(head, signs, strict=True)]
            y[: len(signs)] = head
    return y


def _norm(v) -> float:
    return math.sqrt(float(sum(Fraction(a) ** 2 for a in v)))


@pytest.mark.parametrize("size", [37, 64, 100])
def test_the_fast_transform_errs_within_its_constant_against_exact_arithmetic(size):
    key = make_server_key(n=size - 5, n_tilde=size, backend="fast", alpha=1e-3, beta=1.0, seed=b"q" * 32)
    Q = key.core.Q
    from sifl_ray.coding import transform
    from sifl_ray.coding.roundoff import _layer_constants

    rho, norm, defect = _layer_constants(Q.layers, transform)
    assert 0 < rho < 200 * U and abs(norm - 1) < 1e-12 and 0 <= defect < 100 * U
    g = torch.Generator().manual_seed(size)
    for scale in (1.0, 1e6):
        x = torch.randn(size, generator=g, dtype=torch.float64) * scale
        exact_in = [Fraction(v) for v in x.tolist()]
        for transpose in (False, True):
            got = (Q.apply_t if transpose else Q.apply)(x)
            exact = _exact_apply(Q.layers, exact_in, transpose)
            err = _norm([Fraction(a) - b for a, b in zip(got.tolist(), exact, strict=True)])
            assert err <= rho * float(torch.linalg.vector_norm(x)), (transpose, err)


def test_strip_and_key_2_defects_against_exact_arithmetic():
    key = make_aggregator_key(p=3, gamma=1e-2, eta=2.0, seed=b"a" * 32)
    ro = key.roundoff()
    p2, p2r = [Fraction(v) for v in key.P2.tolist()], [Fraction(v) for v in key.P2R.tolist()]
    assert ro.p2p2r_defect >= float(abs(sum(a * b for a, b in zip(p2, p2r, strict=True)) - 1))
    assert ro.p2p2r_defect < 100 * U and ro.n2p2r_defect < 1e-10
    W = torch.randn(50, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 1e5
    got = key.strip(W).tolist()
    exact = [sum(Fraction(w) * b for w, b in zip(row, p2r, strict=True)) for row in W.tolist()]
    err = _norm([Fraction(a) - b for a, b in zip(got, exact, strict=True)])
    assert err <= ro.strip * float(torch.linalg.matrix_norm(W))


@pytest.mark.parametrize(("backend", "left_inverse"), BACKENDS)
def test_round_trips_stay_within_the_constants(backend, left_inverse):
    """decode(encode(w, r)) − w and the M2 re-encoding, bounded by the key's own constants: each check
    adds exactly the terms the analysis says (encode error through P1L, decode error, P1L N1 ≠ 0,
    P1L P1 ≠ I), so an underestimated constant shows on some CPU, some size or some scale."""
    g = torch.Generator().manual_seed(7)
    for n, m, alpha, beta, sigma in [
        (300, 20, 1e-3, 1.0, 1e3),
        (1000, 64, 1.0, 1.0, 1.0),
        (257, 31, 1e-2, 10.0, 1e4),
    ]:
        key = make_server_key(
            n=n, n_tilde=n + m, backend=backend, left_inverse=left_inverse, alpha=alpha, beta=beta,
            block_size=50, seed=bytes([n % 256]) * 32,
        )  # fmt: skip
        ro = key.roundoff()
        w = torch.randn(n, generator=g, dtype=torch.float64) * 0.05
        r = torch.randn(m, generator=g, dtype=torch.float64) * sigma
        wn, rn = float(w.norm()), float(r.norm())
        x = key.encode(w, r)
        err = float((key.decode(x) - w).norm())
        bound = (
            ro.p1l_norm * (ro.encode_w * wn + ro.encode_r * rn)
            + ro.decode * float(x.norm())
            + ro.leak * rn
            + ro.pp_defect * wn
        )
        assert err <= bound, (n, err, bound)
        assert bound < 1e-3 * (wn + rn), "vacuous: the constants must be u-sized"
        # M2 server step: P1L reencode(X, R) = P1L X in exact arithmetic (up to the key's defects)
        X = torch.stack([x, key.encode(-w, torch.randn(m, generator=g, dtype=torch.float64) * sigma)], 1)
        R = torch.randn(m, 2, generator=g, dtype=torch.float64) * sigma
        out = key.reencode(X, R)
        for j in range(2):
            err = float((key.decode(out[:, j]) - key.decode(X[:, j])).norm())
            xn, rj = float(X[:, j].norm()), float(R[:, j].norm())
            bound = (
                ro.p1l_norm * (ro.reencode_x * xn + ro.reencode_r * rj)
                + ro.decode * (float(out[:, j].norm()) + xn)
                + ro.leak * rj
                + ro.pp_defect * ro.p1l_norm * xn
            )
            assert err <= bound, (n, j, err, bound)


def test_noise_norm_bounds_hold_for_draws_and_are_not_vacuous():
    g = torch.Generator().manual_seed(3)
    for count in (10, 1000, 100_000):
        gauss = noise_norm_bound(count, scale=2.0, distribution="gaussian", confidence=1e-9)
        lap = noise_norm_bound(count, scale=2.0, distribution="laplace", confidence=1e-9)
        for _ in range(5):
            assert float((torch.randn(count, generator=g, dtype=torch.float64) * 2.0).norm()) <= gauss
            e = torch.empty(count, dtype=torch.float64).exponential_(generator=g)
            signs = torch.randint(0, 2, (count,), generator=g) * 2 - 1
            assert float((e * signs * 2.0).norm()) <= lap
        assert gauss <= 2.0 * (math.sqrt(count) + 7.0)  # √k + √(2 ln 1e9) ≈ √k + 6.4
    assert noise_norm_bound(0, scale=1.0, distribution="gaussian", confidence=1e-9) == 0.0


def test_round_bound_grows_with_the_noise_and_refuses_nonsense():
    key = make_server_key(n=500, n_tilde=540, backend="fast", alpha=1e-3, beta=1.0, seed=b"r" * 32).roundoff()
    agg = make_aggregator_key(p=2, gamma=1e-2, eta=1.0, seed=b"s" * 32).roundoff()
    common = dict(n=500, n_tilde=540, model_norm=10.0, clients_per_worker=5, workers=2)
    small = round_error_bound(key, scheme="M1", noise_scale1=1.0, **common).bound
    large = round_error_bound(key, scheme="M1", noise_scale1=1e3, **common).bound
    assert 0 < small < large
    m2 = round_error_bound(key, scheme="M2", noise_scale1=1e3, noise_scale2=1e3, aggregator=agg, **common)
    assert m2.bound > large  # ‖P2R‖ = 100 multiplies the noise the clients strip
    assert m2.confidence == pytest.approx(3e-6)
    assert gamma(2) > 2 * U
    with pytest.raises(ValueError, match="M2 needs"):
        round_error_bound(key, scheme="M2", noise_scale1=1.0, **common)
    with pytest.raises(ValueError, match="scheme"):
        round_error_bound(key, scheme="M3", noise_scale1=1.0, **common)
