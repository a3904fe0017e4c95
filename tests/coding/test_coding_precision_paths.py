"""The precision model's two paths give the same numbers: with a key (each key answers D, ‖P1L‖₂ and cond
for its backend) and from a configuration (a backend name, before any key exists). Golden values were
recorded before the model stopped branching on backend names; they pin every backend's prediction."""

from __future__ import annotations

import math

import pytest
from coding_cases import make_key

from sifl_ray.coding import BACKENDS, NoiseSpec, make_aggregator_key, transform_depth
from sifl_ray.coding.precision import predict_decode_error

PAPER = dict(alpha=1e-3, beta=1e3)

# (backend, left inverse, n, m, extra) → (M1 Gaussian σ=10, M2 Laplace b=10/5, three clients, ‖w‖∞ = 0.1)
KEY_GOLDEN = [
    ("identity", "pinv", 300, 0, {}, 6.26707886758415e-16, 1.997173970243393e-12),
    ("dense", "pinv", 300, 20, {}, 1.6179604303434736e-06, 0.0003770372626166417),
    ("dense", "oblique", 300, 20, {}, 2.2882966941997658e-06, 0.0005331998996398778),
    ("fast", "pinv", 3000, 64, {}, 6.30366233117492e-08, 1.5665259371927243e-05),
    ("fast", "oblique", 3000, 64, {}, 1.260732449100985e-07, 3.132573804333755e-05),
    ("fast", "oblique", 3000, 64, {"rounds": 2}, 1.4477758503251768e-07, 3.428835824310488e-05),
    ("block", "oblique", 600, 40, {"block_size": 50}, 2.438154222030326e-06, 0.000621822780368037),
    ("block", "pinv", 610, 37, {"block_size": 64}, 1.9076324055631387e-06, 0.0004883202400853176),
]
# backend name only (n = 3000, ñ = 3064, oblique, σ = 10, ‖w‖∞ = 0.1) → (prediction, D)
CONFIG_GOLDEN = {
    "identity": (5.440781705056605e-10, 1.0),
    "dense": (1.5843683322706784e-07, 47.875),
    "fast": (1.2292035874736408e-07, 15.0),
    "block": (1.5843683322706784e-07, 47.875),
}


def golden_key(backend, left_inverse, n, m, extra):
    return make_key(backend, left_inverse, n=n, m=m, seed=3, **PAPER, **extra)


def case_id(case) -> str:
    return "-".join([case[0], case[1], *(f"{k}{v}" for k, v in case[4].items())])


@pytest.mark.parametrize("case", KEY_GOLDEN, ids=case_id)
def test_key_path_predictions_are_unchanged(case):
    *spec, m1_golden, m2_golden = case
    key = golden_key(*spec)
    agg = make_aggregator_key(p=2, gamma=1e-2, eta=1.0, seed=7)
    m1 = predict_decode_error(key=key, noise=NoiseSpec("gaussian", 10.0), w_max=0.1, clients=3)
    m2 = predict_decode_error(
        key=key, aggregator_key=agg, scheme="M2", noise=NoiseSpec("laplace", 10.0),
        noise2=NoiseSpec("laplace", 5.0), w_max=0.1, clients=3,
    )  # fmt: skip
    assert math.isclose(m1.predicted_max_error, m1_golden, rel_tol=1e-12)
    assert math.isclose(m2.predicted_max_error, m2_golden, rel_tol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_config_path_predictions_are_unchanged(backend):
    n_tilde = 3000 if backend == "identity" else 3064
    report = predict_decode_error(
        n=3000, n_tilde=n_tilde, alpha=1e-3, beta=1e3, left_inverse="oblique", backend=backend, sigma1=10.0,
        w_max=0.1,
    )  # fmt: skip
    golden, depth = CONFIG_GOLDEN[backend]
    assert report.config["depth"] == depth == transform_depth(backend, n_tilde=n_tilde)
    assert math.isclose(report.predicted_max_error, golden, rel_tol=1e-12)


@pytest.mark.parametrize("case", KEY_GOLDEN, ids=case_id)
def test_key_and_config_paths_agree(case):
    """The key path is the configuration path fed with what the key says about itself: D from the name
    table for the key's sizes, and the key's ‖P1L‖₂ and cond (the fast design's values for fast)."""
    key = golden_key(*case[:5])
    rows = getattr(key, "tallest_block_rows", None)
    depth = transform_depth(
        key.backend, n_tilde=key.n_tilde, rounds=getattr(key, "rounds", 1), block_rows=rows
    )
    assert key.transform_depth() == depth
    config = dict(
        n=key.n, n_tilde=key.n_tilde, alpha=getattr(key, "alpha", 1.0), beta=getattr(key, "beta", 0.0),
        kappa=getattr(key, "kappa", 0.0), left_inverse=key.left_inverse, backend=key.backend, depth=depth,
        distribution="gaussian", sigma1=10.0, w_max=0.1, clients=3,
    )  # fmt: skip
    p1l = key.p1l_spectral()
    cond = key.conditioning(p1l_norm=p1l, alpha=config["alpha"])
    from_key = predict_decode_error(key=key, noise=NoiseSpec("gaussian", 10.0), w_max=0.1, clients=3)
    from_config = predict_decode_error(**config, p1l_norm=p1l, cond=cond)
    assert from_key.predicted_max_error == from_config.predicted_max_error
    if key.backend in ("identity", "fast"):  # orthogonal: the configuration alone knows ‖P1L‖₂ and cond
        assert cond == 1.0
        assert predict_decode_error(**config).predicted_max_error == from_key.predicted_max_error
    else:  # Gaussian keys are worse conditioned than the configuration alone can know
        assert (
            cond > 1.0 and predict_decode_error(**config).predicted_max_error < from_key.predicted_max_error
        )


def test_an_unknown_backend_name_is_refused():
    with pytest.raises(ValueError, match="backend must be one of"):
        transform_depth("fats", n_tilde=100)
