"""``sifl describe`` for every arm and for the split: DP-FedAvg's z and σ per ε, NbAFL's σ, secure
aggregation's threshold and sizes, SIFL's figures only for the SIFL modes the arms use; every client's size
and label histogram, in describe and in summary.json."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sifl_ray.arms import ArmContext, arm_of
from sifl_ray.cli import main
from sifl_ray.config import load_config
from sifl_ray.describe import describe_scenario
from sifl_ray.runner import Simulation


@pytest.fixture(scope="module")
def study() -> dict:
    return describe_scenario(load_config(["scenario=dp_compare_small"]), progress=False)


def test_every_arm_has_its_figures_and_sifl_only_its_own_modes(study):
    cfg = load_config(["scenario=dp_compare_small"])
    assert list(study["arm_figures"]) == [
        "fl", "secagg", "sifl_m2",
        *(f"{kind}_eps{e}" for kind in ("nbafl", "dp_fedavg", "dp_fedavg_secagg") for e in (1, 5, 10, 20)),
    ]  # fmt: skip
    assert list(study["modes"]) == ["m2"]  # no sifl_m1 among the arms: no M1 figures
    assert "m1_broadcast" not in study["epsilon"]
    assert study["arm_figures"]["fl"] == {"mechanism": "none"}
    for eps in (1, 5, 10, 20):
        arm = f"dp_fedavg_eps{eps}"
        report = arm_of(cfg, arm).privacy(
            ArmContext(cfg=cfg, arm=arm, n=study["n"], local_size=134, total_size=1347)
        )
        got = study["arm_figures"][arm]
        assert got["noise_multiplier"] == pytest.approx(report["noise_multiplier"]) and got["epsilon"] <= eps
        assert got["sigma_mean_update"] == pytest.approx(report["noise_multiplier"] * 1.0 / 10)  # zC/(qN)
        share = study["arm_figures"][f"dp_fedavg_secagg_eps{eps}"]
        assert share["sigma_client_share"] == pytest.approx(
            share["noise_multiplier"] / math.sqrt(share["num_noisers"])
        )
        assert study["arm_figures"][f"nbafl_eps{eps}"]["sigma"] > 0
    secagg = study["arm_figures"]["secagg"]
    assert secagg["threshold"] == 7 and secagg["graph_degree"] == 9
    assert secagg["upload_bytes"] == study["n"] * secagg["ring_bits"] // 8


def test_the_text_names_each_arm_and_no_absent_mode(capsys):
    assert main(["describe", "scenario=dp_compare_small"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "dp_fedavg_eps5: ε = 5, δ = 1e-05 (the whole model); noise multiplier z =" in out
    assert "nbafl_eps20: ε = 20, δ = 1e-05 (the whole model); σ =" in out
    assert "secagg: secure aggregation: threshold t = 7 of 10 per neighbourhood" in out
    assert "SIFL M2: estimated" in out and "SIFL M1" not in out


def test_a_scenario_without_sifl_arms_prints_no_sifl_figures(capsys):
    assert main(["describe", "arms=[fl,dp_fedavg]"]) == 0
    out = capsys.readouterr().out
    assert "SIFL" not in out and "ñ" not in out and "dp_fedavg_eps5: ε = 5" in out


@pytest.fixture(scope="module")
def natural(tmp_path_factory):
    """Own arrays with a natural split: four clients of 10, 20, 30 and 60 samples, each of its own labels."""
    folder = tmp_path_factory.mktemp("natural")
    ids = np.repeat(np.arange(4), [10, 20, 30, 60])
    labels = np.concatenate([np.zeros(10), np.arange(20) % 2, np.arange(30) % 3, np.arange(60) % 10]).astype(
        int
    )
    x = np.random.default_rng(0).normal(size=(120, 1, 8, 8)).astype(np.float32)
    test = np.random.default_rng(1).normal(size=(20, 1, 8, 8)).astype(np.float32)
    np.savez(
        folder / "d.npz", x_train=x, y_train=labels, client_train=ids, x_test=test, y_test=np.arange(20) % 10
    )
    return [
        "data.name=arrays",
        f"arrays.path={folder / 'd.npz'}",
        "data.partition=natural",
        "clients.num_clients=4",
        "arms=[fl,sifl_m1]",
    ]


def test_describe_shows_each_clients_size_and_labels(natural, capsys):
    info = describe_scenario(load_config(natural), progress=False)
    split = info["partition"]
    assert split["sizes"] == [10, 20, 30, 60] and (split["size_min"], split["size_max"]) == (10, 60)
    assert [sum(1 for c in row if c) for row in split["label_histogram"]] == [1, 2, 3, 10]
    assert info["local_size"] == 10  # the sensitivities' |D_i|: the smallest client
    assert main(["describe", *natural]) == 0
    out = capsys.readouterr().out
    assert "split (natural): |D_i| from 10 to 60 (median 25)" in out and "classes per client: 1 to 10" in out
    assert "     3     60" in out  # the fourth client's row


def test_summary_json_keeps_each_clients_size_and_labels(natural, tmp_path):
    cfg = load_config(
        [*natural, "backend=local", "train.rounds=1", f"output.dir={tmp_path}", "output.plot=false"]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        sim.run()
    finally:
        sim.close()
    split = json.loads((tmp_path / "run" / "summary.json").read_text())["partition"]
    assert split["scheme"] == "natural" and split["sizes"] == [10, 20, 30, 60]
    assert split["label_histogram"][0] == [10] + [0] * 9
