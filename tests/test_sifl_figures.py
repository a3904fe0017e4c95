"""SIFL's figures before training (``sifl_ray.arms.sifl_figures``): the precision prediction must bound the
measured decode error for every backend (the runner's guard relies on it), and the guard refuses or warns
with the fix."""

from __future__ import annotations

import warnings

import pytest
import torch

from sifl_ray.arms.sifl_figures import arm_precision, predict
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.coding.precision import PrecisionError, PrecisionWarning, measure_round_trip_error
from sifl_ray.config import load_config
from sifl_ray.parties.server import make_server
from sifl_ray.specs import Coding, CodingSpec


@pytest.mark.parametrize("backend", ["fast", "dense", "block"])
def test_prediction_with_the_key_bounds_the_measured_error(backend):
    cfg = load_config([f"coding.backend={backend}", "coding.n_extra=40", "coding.block_size=50"])
    n = 600
    role, _ = make_server(arm="t", coding=Coding.M1, n=n, spec=CodingSpec.from_config(cfg))
    gen = torch.Generator().manual_seed(1)
    w = 0.05 * torch.randn(n, generator=gen, dtype=torch.float64)
    measured = measure_round_trip_error(
        role.key,
        w,
        noise=NoiseSpec("gaussian", cfg.coding.noise.sigma1),
        generator=gen,
        clients=cfg.clients.num_clients,
    )
    with_key = predict(
        cfg, coding=Coding.M1, n=n, w_max=float(w.abs().max()), key=role.key
    ).predicted_max_error
    assert measured <= with_key, (backend, measured, with_key)
    if (
        backend != "fast"
    ):  # the key-less prediction assumes the fast design's conditioning: too optimistic here
        keyless = predict(cfg, coding=Coding.M1, n=n, w_max=float(w.abs().max())).predicted_max_error
        assert with_key > 5 * keyless


def test_arm_precision_refuses_or_warns_with_the_fix():
    cfg = load_config(["coding.gamma=1e-5"])
    with pytest.raises(PrecisionError, match="Fix:"):
        arm_precision(cfg, coding=Coding.M2, n=2410, w_max=0.5)
    cfg = load_config(["coding.gamma=1e-5", "coding.precision.policy=warn"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = arm_precision(cfg, coding=Coding.M2, n=2410, w_max=0.5)
    assert any(issubclass(w.category, PrecisionWarning) for w in caught)
    assert out["deviation_estimate"] == pytest.approx(
        out["estimate_per_round"] * cfg.train.rounds, rel=1e-12, abs=0
    )
    ok = arm_precision(load_config([]), coding=Coding.M1, n=2410, w_max=0.5)
    assert 0 < ok["estimate_per_round"] <= ok["tolerance"]
