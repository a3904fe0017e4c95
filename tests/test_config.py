"""Configuration: every problem at once, each naming its key and fix; exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.config import ConfigError, arm_names, load_config, scenario_names

ROOT = Path(__file__).resolve().parent.parent


def test_every_bundled_scenario_loads():
    names = scenario_names()
    assert {"quickstart", "dp_compare", "scale_1000", "paper_mnist_mlp_sgd", "paper_fmnist_cnn2_adam"} <= set(
        names
    )
    for name in names:
        if name.startswith("attack_"):
            continue  # attack scenarios have their own schema (sifl attack)
        cfg = load_config([f"scenario={name}"])
        assert cfg.scenario == name


def test_overrides_apply_and_config_is_frozen():
    cfg = load_config(["train.rounds=3", "coding.noise.sigma1=5", "nbafl.epsilons=[1,5]"])
    assert cfg.train.rounds == 3 and cfg.coding.noise.sigma1 == 5.0
    assert arm_names(cfg) == ["fl", "sifl_m1", "sifl_m2", "nbafl_eps1", "nbafl_eps5"]
    with pytest.raises(Exception):  # noqa: B017 - OmegaConf's ReadonlyConfigError
        cfg.train.rounds = 4


def test_all_problems_reported_at_once():
    bad = [
        "train.lr=0",
        "coding.n_extra=0",
        "coding.p=1",
        "data.dirichlet_alpha=-1",
        "trian.rounds=3",
        "train.rounds=abc",
        "clients.num_clients=5000",
        "coding.dtype=float32",
        "data.partition=zipf",
    ]
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    text = str(info.value)
    for needle in [
        "train.lr",
        "coding.n_extra",
        "coding.p",
        "data.dirichlet_alpha",
        "did you mean train",
        "train.rounds: expected int",
        "data.partition: expected one of",
    ]:
        assert needle in text, needle
    assert len(info.value.problems) >= 7


def test_missing_data_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.root"):
        load_config(["data.name=mnist", f"data.root={tmp_path / 'nope'}", "data.download=false"])
    with pytest.raises(ConfigError, match=r"samples"):
        load_config(["clients.num_clients=2000"])


def test_cli_config_error_exit_code_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "run.py", "train.lr=-1", "coding.p=1", "bogus=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "3 configuration problems" in proc.stderr
    assert "train.lr" in proc.stderr and "coding.p" in proc.stderr and "bogus" in proc.stderr


def test_nbafl_exposures_and_calibration_keys():
    """Two independent choices: how many uploads (ε, δ) covers, and the Gaussian formula; each validated
    with its key, what it expects (and means) and the fix."""
    assert load_config([]).nbafl.exposures == "multi_round"  # the guarantee NbAFL's Theorem 1 states
    dp = load_config(["scenario=dp_compare"]).nbafl
    assert (dp.exposures, dp.calibration) == ("multi_round", "classical")
    cfg = load_config(["nbafl.exposures=per_round", "nbafl.calibration=analytic"])
    assert (cfg.nbafl.exposures, cfg.nbafl.calibration) == ("per_round", "analytic")
    with pytest.raises(ConfigError) as info:
        load_config(["nbafl.exposures=all_rounds", "nbafl.calibration=per_round"])
    text = str(info.value)
    assert "2 configuration problems" in text
    assert "nbafl.exposures: expected one of multi_round, per_round" in text
    assert "(ε, δ) for all T uploads of a client" in text and "set nbafl.exposures=multi_round" in text
    assert "nbafl.calibration: expected one of classical, analytic" in text
    assert (
        "How many uploads it covers is nbafl.exposures" in text and "set nbafl.calibration=classical" in text
    )


def test_partition_choices_are_read_from_the_partitioner_registry(monkeypatch):
    from sifl_ray.data.partition import PARTITIONERS

    with pytest.raises(
        ConfigError, match=r"data\.partition: expected one of iid, dirichlet, shards, got 'toy'"
    ):
        load_config(["data.partition=toy"])
    monkeypatch.setitem(PARTITIONERS, "toy", PARTITIONERS["iid"])  # undone after the test
    assert load_config(["data.partition=toy"]).data.partition == "toy"


def test_validation_stays_free_of_torch():
    """``sifl run`` validates before the heavy imports so that a typo answers at once; reading the
    partitioner registry must not pull torch in."""
    code = (
        "import sys; from sifl_ray.config import load_config; "
        "load_config(['data.partition=shards']); print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
