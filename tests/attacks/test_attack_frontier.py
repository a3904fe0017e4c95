"""The precision–privacy frontier: smaller ε costs decode error, and the precision model predicts it."""

from __future__ import annotations

import json

import pytest
import torch

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
        # The precision model is a bound: every measurement lies under its prediction, for each noise law ...
        assert p.measured_error <= p.predicted_error
        assert p.laplace_measured_error <= p.laplace_predicted_error
        # ... and not a vacuous one.
        assert p.predicted_error <= 1e4 * max(p.measured_error, 1e-17)
        assert p.laplace_predicted_error <= 1e4 * max(p.laplace_measured_error, 1e-17)
        assert p.laplace_predicted_error > p.predicted_error  # Laplace(b) has std b·√2 and heavier tails


def test_the_bound_check_is_not_vacuous():
    """``measured <= predicted`` above must fail when the prediction stops covering the measurement: here
    the measurement uses 1e4 times the noise the prediction assumes."""
    from sifl_ray.attacks.frontier import _predicted_error, measure_decode_error
    from sifl_ray.coding import make_server_key
    from sifl_ray.coding.base import NoiseSpec

    key = make_server_key(
        n=64, n_tilde=72, backend="fast", left_inverse="pinv", alpha=1e-3, beta=1e3, seed=b"\x02" * 32
    )
    for law in ("gaussian", "laplace"):
        predicted = _predicted_error(key, noise=NoiseSpec(law, 1.0), w_scale=0.05)
        measured, _ = measure_decode_error(
            key,
            noise=NoiseSpec(law, 1e4),
            w_scale=0.05,
            samples=3,
            generator=torch.Generator().manual_seed(0),
        )
        assert measured > predicted


def test_laplace_panel_is_measured_with_laplace_noise(monkeypatch):
    """Each ε is set against the decode error of its own noise law: Gaussian std σ and Laplace scale b."""
    import sifl_ray.attacks.frontier as fr

    seen, real = [], fr.measure_decode_error

    def spy(key, *, noise, **kw):
        seen.append((noise.distribution, noise.scale))
        return real(key, noise=noise, **kw)

    monkeypatch.setattr(fr, "measure_decode_error", spy)
    fr.frontier(n=16, n_extra=4, alphas=[1e-2], noise_scales=[1.0, 100.0], samples=2)
    assert sorted(seen) == [("gaussian", 1.0), ("gaussian", 100.0), ("laplace", 1.0), ("laplace", 100.0)]


def test_dense_limit_is_the_coding_backends():
    from sifl_ray.attacks import frontier as fr
    from sifl_ray.coding import dense

    assert fr.DENSE_MAX_N is dense.DENSE_MAX_N
    with pytest.raises(ValueError, match="dense backend"):
        frontier(n=dense.DENSE_MAX_N + 1, n_extra=1, alphas=[1.0], noise_scales=[1.0], backend="dense")


def test_frontier_main_writes_table_and_png(tmp_path, capsys):
    code = frontier_main(
        ["n=32", "coding.n_extra=4", "alphas=[1e-2]", "noise_scales=[1,100]", f"out_dir={tmp_path}"]
    )
    assert code == 0
    assert (tmp_path / "frontier.png").stat().st_size > 1000
    data = json.loads((tmp_path / "frontier.json").read_text())
    assert len(data["points"]) == 2
    assert "seed" not in data["config"]  # it reproduces the sweep's keys and noise
    assert "coding.key_seed" not in data["config"] and data["config"]["coding.n_extra"] == 4
    assert {"laplace_measured_error", "laplace_predicted_error"} <= set(data["points"][0])
    out = capsys.readouterr().out
    assert "| alpha | noise scale |" in out and "not a guarantee on the whole vector" in out


def test_frontier_config_errors():
    with pytest.raises(ConfigError, match="alphas"):
        load_frontier_config(["alphas=[0]"])
    assert frontier_main(["n=zero"]) == 2
    with pytest.raises(ConfigError) as err:  # every problem at once, the choices the coding registry's
        load_frontier_config(
            ["n=zero", "coding.backend=identity", "coding.left_inverse=obliqe", "noise_scales=[]", "x"]
        )
    assert [p.split(":")[0] for p in err.value.problems] == [
        "argument 'x'",
        "n",
        "coding.backend",
        "coding.left_inverse",
        "noise_scales",
    ]
    assert "coding.left_inverse: expected one of pinv, oblique, got 'obliqe'; did you mean oblique?" in str(
        err.value
    )


def test_the_frontier_reads_the_runs_keys_with_the_runs_defaults():
    """One schema: the key and privacy inputs are a run's keys (its defaults, its rules); the frontier's old
    names are refused with the run's, and a run's key the sweep does not read is refused by name."""
    from sifl_ray.attacks.frontier import RENAMED
    from sifl_ray.config import load_config

    run = load_config([])
    cfg = load_frontier_config([])
    assert (cfg.coding.n_extra, cfg.coding.left_inverse, cfg.coding.beta, cfg.privacy.clip) == (
        run.coding.n_extra,
        run.coding.left_inverse,
        run.coding.beta,
        run.privacy.clip,
    )
    with pytest.raises(ConfigError) as err:
        load_frontier_config([f"{old}=1" for old in RENAMED] + ["coding.p=3"])
    problems = err.value.problems
    assert len(problems) == len(RENAMED) + 1
    for old, new in RENAMED.items():
        assert f"{old}: renamed {new} (the run's name, as in sifl run); write {new}=1 instead" in problems
    assert problems[-1].startswith("coding.p: a key of sifl run that sifl describe --frontier does not read")


def test_frontier_takes_a_platform_scenario(tmp_path):
    """``sifl describe scenario=NAME --frontier``: n, key and privacy settings come from the scenario."""
    out = tmp_path / "q"
    assert frontier_main(["scenario=quickstart", "alphas=[1e-2]", "noise_scales=[10]", f"out_dir={out}"]) == 0
    data = json.loads((out / "frontier.json").read_text())
    assert data["config"]["n"] > 1000 and data["config"]["scenario"] == "quickstart"
    assert len(data["points"]) >= 2  # the scenario's own (alpha, sigma1) is added to the sweep
