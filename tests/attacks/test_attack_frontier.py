"""The precision–privacy frontier: smaller ε costs decode error, and the precision model predicts it."""

from __future__ import annotations

import json

import pytest

from sifl_ray.attacks.frontier import frontier, frontier_main, load_frontier_config
from sifl_ray.config import ConfigError


def test_frontier_trade_off():
    pts = frontier(n=64, n_extra=8, alphas=[1e-3, 1e-1], noise_scales=[1.0, 1e3], samples=3)
    by = {(p.alpha, p.noise_scale): p for p in pts}
    for alpha in (1e-3, 1e-1):
        lo, hi = by[(alpha, 1.0)], by[(alpha, 1e3)]
        assert hi.eps_gaussian < lo.eps_gaussian  # more noise, smaller per-element ε ...
        assert hi.measured_error > lo.measured_error  # ... and a larger decode error
    assert by[(1e-3, 1e3)].measured_error > by[(1e-1, 1e3)].measured_error  # smaller alpha costs precision
    for p in pts:
        assert p.eps_laplace_sound >= p.eps_laplace_paper  # the paper's Laplace bound is too small
        assert p.measured_error <= 10 * p.predicted_error  # the precision model does not under-predict
        assert p.predicted_error <= 1e4 * max(p.measured_error, 1e-17)  # ... nor wildly over-predict


def test_frontier_main_writes_table_and_png(tmp_path, capsys):
    code = frontier_main(
        ["n=32", "n_extra=4", "alphas=[1e-2]", "noise_scales=[1,100]", f"out_dir={tmp_path}"]
    )
    assert code == 0
    assert (tmp_path / "frontier.png").stat().st_size > 1000
    data = json.loads((tmp_path / "frontier.json").read_text())
    assert len(data["points"]) == 2
    out = capsys.readouterr().out
    assert "| alpha | noise scale |" in out and "not a guarantee on the whole vector" in out


def test_frontier_config_errors():
    with pytest.raises(ConfigError, match="alphas"):
        load_frontier_config(["alphas=[0]"])
    assert frontier_main(["n=zero"]) == 2


def test_frontier_takes_a_platform_scenario(tmp_path):
    """``sifl describe scenario=NAME --frontier``: n, key and privacy settings come from the scenario."""
    out = tmp_path / "q"
    assert frontier_main(["scenario=quickstart", "alphas=[1e-2]", "noise_scales=[10]", f"out_dir={out}"]) == 0
    data = json.loads((out / "frontier.json").read_text())
    assert data["config"]["n"] > 1000 and data["config"]["scenario"] == "quickstart"
    assert len(data["points"]) >= 2  # the scenario's own (alpha, sigma1) is added to the sweep
