"""The precision model (docs/method.md "Precision"): measured float64 errors fall inside the prediction, the
prediction is not absurdly loose, float32 at the paper's scales is refused, and the trade-off is exposed."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from coding_cases import make_key, rand

from sifl_ray.coding import NoiseSpec, make_aggregator_key
from sifl_ray.coding.precision import (
    PrecisionError,
    PrecisionWarning,
    check_precision,
    max_noise_scale,
    measure_round_trip_error,
    precision_tradeoff,
    predict_decode_error,
    transform_depth,
)

PAPER = dict(alpha=1e-3, beta=1e3)  # with σ = 1e3: noise of size 1e6 against a signal of size 1e-3·w


def measured_and_predicted(
    backend, left_inverse, *, n, m, sigma, scheme="M1", distribution="gaussian", seed=0
):
    key = make_key(backend, left_inverse, n=n, m=m, seed=seed, block_size=64, **PAPER)
    agg = make_aggregator_key(p=2, gamma=1e-3, eta=1.0, seed=seed + 1)
    gen = torch.Generator().manual_seed(seed)
    w = 0.05 * torch.randn(n, generator=gen, dtype=torch.float64)
    noise = NoiseSpec(distribution, sigma)
    measured = measure_round_trip_error(
        key, w, noise=noise, generator=gen, scheme=scheme, aggregator_key=agg, noise2=noise, clients=3
    )
    report = predict_decode_error(
        key=key, aggregator_key=agg, noise=noise, noise2=noise, scheme=scheme, w_max=float(w.abs().max()),
        clients=3,
    )  # fmt: skip
    return measured, report


@pytest.mark.parametrize("left_inverse", ["pinv", "oblique"])
def test_paper_scales_float64(left_inverse):
    """α = 1e-3, noise 1e6, w ≈ 0.05: docs/method.md "Precision" measured ≈ 1e-7..1e-6; inside the bound,
    within 100x of it."""
    measured, report = measured_and_predicted("fast", left_inverse, n=50_000, m=129, sigma=1e3)
    assert 1e-8 < measured < 1e-5
    assert measured <= report.predicted_max_error <= 100 * measured
    check_precision(report, tolerance=1e-4)  # well inside a sensible tolerance: no error


@pytest.mark.parametrize("scheme", ["M1", "M2"])
@pytest.mark.parametrize("distribution", ["gaussian", "laplace"])
@pytest.mark.parametrize(
    "backend, left_inverse, n, m",
    [("fast", "pinv", 3000, 64), ("fast", "oblique", 3000, 64), ("fast", "oblique", 20_000, 513),
     ("dense", "pinv", 400, 20), ("dense", "oblique", 400, 20), ("block", "oblique", 512, 16)],
)  # fmt: skip
def test_measured_error_inside_prediction(backend, left_inverse, n, m, distribution, scheme):
    measured, report = measured_and_predicted(
        backend, left_inverse, n=n, m=m, sigma=1e3, scheme=scheme, distribution=distribution, seed=n + m
    )
    assert measured <= report.predicted_max_error
    assert report.predicted_max_error <= 300 * measured  # a bound, not a wild guess
    assert math.isclose(sum(v for _, v in report.terms), report.predicted_max_error, rel_tol=1e-12)


def test_m2_costs_a_factor_one_over_gamma():
    m1 = predict_decode_error(n=10_000, n_tilde=10_129, alpha=1e-3, beta=1e3, sigma1=1e3, w_max=0.2)
    m2 = predict_decode_error(
        scheme="M2",
        n=10_000,
        n_tilde=10_129,
        alpha=1e-3,
        beta=1e3,
        sigma1=1e3,
        sigma2=1e3,
        gamma=1e-3,
        w_max=0.2,
    )
    assert 300 < m2.predicted_max_error / m1.predicted_max_error < 30_000


def test_float32_at_paper_scales_is_refused():
    report = predict_decode_error(
        dtype=torch.float32, n=1_199_882, n_tilde=1_200_011, alpha=1e-3, beta=1e3, sigma1=1e3, w_max=0.25
    )
    assert report.dtype == "float32" and report.predicted_max_error > 1.0
    with pytest.raises(PrecisionError) as info:
        check_precision(report, tolerance=1e-4)
    message = str(info.value)
    assert f"{report.predicted_max_error:.3g}" in message and "0.0001" in message
    assert "float64" in message and "lower the noise" in message and "raise α" in message
    same64 = predict_decode_error(
        n=1_199_882, n_tilde=1_200_011, alpha=1e-3, beta=1e3, sigma1=1e3, w_max=0.25
    )
    assert same64.predicted_max_error < 1e-4  # float64 passes the same check
    assert check_precision(same64, tolerance=1e-4) is same64


def test_warn_policy_warns_and_returns():
    report = predict_decode_error(n=1000, n_tilde=1064, alpha=1e-3, beta=1e3, sigma1=1e6, w_max=0.1)
    with pytest.warns(PrecisionWarning, match="exceeds the tolerance"):
        assert check_precision(report, tolerance=1e-12, policy="warn") is report
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_precision(report, tolerance=1.0, policy="warn")
    with pytest.raises(ValueError, match="policy"):
        check_precision(report, tolerance=1.0, policy="ignore")


def test_tradeoff_noise_against_precision():
    """A pure function of the parameters: error grows linearly with σ, and max_noise_scale inverts it."""
    config = dict(
        n=199_210, n_tilde=199_411, alpha=1e-3, beta=1e3, w_max=0.25, left_inverse="oblique", kappa=1e3
    )
    curve = precision_tradeoff([1.0, 10.0, 100.0, 1e3], **config)
    errors = [e for _, e in curve]
    assert errors == sorted(errors) and errors[-1] > 50 * errors[0]
    sigma_max = max_noise_scale(tolerance=1e-6, **config)
    at_max = predict_decode_error(sigma1=sigma_max, **config).predicted_max_error
    assert math.isclose(at_max, 1e-6, rel_tol=1e-9)
    assert predict_decode_error(sigma1=2 * sigma_max, **config).predicted_max_error > 1e-6
    assert max_noise_scale(tolerance=1e-30, **config) == 0.0  # even without noise round-off exceeds it


def test_key_and_explicit_parameters_agree():
    key = make_key("fast", "oblique", n=5000, m=129, seed=3, **PAPER)
    from_key = predict_decode_error(key=key, noise=NoiseSpec("laplace", 10.0), w_max=0.1)
    explicit = predict_decode_error(
        n=5000, n_tilde=5129, alpha=1e-3, beta=1e3, kappa=1e3, left_inverse="oblique", backend="fast",
        depth=transform_depth("fast", n_tilde=5129), distribution="laplace", sigma1=10.0, w_max=0.1,
    )  # fmt: skip
    assert math.isclose(float(from_key), explicit.predicted_max_error, rel_tol=1e-12)
    pinv = predict_decode_error(n=5000, n_tilde=5129, alpha=1e-3, beta=1e3, left_inverse="pinv", sigma1=10.0)
    assert pinv.predicted_max_error < explicit.predicted_max_error  # the oblique kernel costs precision


def test_zero_noise_error_is_round_off_of_w():
    key = make_key("fast", "pinv", n=4000, m=20, seed=5, **PAPER)
    w = rand(4000, 0, 0.05)
    err = float((key.decode(key.encode(w)) - w).abs().max())
    assert err <= predict_decode_error(key=key, w_max=float(w.abs().max())).predicted_max_error
    assert err < 1e-15


def test_max_noise_scale_keeps_sigma2_given_through_noise2():
    """σ2 given as ``noise2`` must not be tied to σ1 (a review found it silently was)."""
    from sifl_ray.coding.base import NoiseSpec
    from sifl_ray.coding.precision import max_noise_scale

    common = dict(
        tolerance=1e-5,
        scheme="M2",
        n=1000,
        n_tilde=1064,
        alpha=1e-3,
        beta=1.0,
        gamma=1e-2,
        eta=1.0,
        left_inverse="oblique",
        kappa=1e3,
        w_max=0.5,
    )
    tied = max_noise_scale(**common)
    explicit = max_noise_scale(**common, sigma2=1.0)
    via_noise2 = max_noise_scale(**common, noise2=NoiseSpec("gaussian", 1.0))
    assert via_noise2 == explicit
    assert via_noise2 > tied  # a small fixed σ2 leaves more room for σ1 than σ2 = σ1
