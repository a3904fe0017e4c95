"""``sifl attack``: configuration, outputs, the RESULT line, and what must not leak into them."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from sifl_ray.attacks.cli import attack_main
from sifl_ray.attacks.config import Design, load_attack_config
from sifl_ray.config import ConfigError

RESULT = re.compile(
    r"^RESULT attacks full_rank_round=(\d+|none) projection_error=(\S+) m2_server_corr=(\S+) "
    r"audit_eps_lb=(\S+) paper_eps=(\S+)$"
)


def test_default_scenario_loads_and_is_read_only():
    cfg = load_attack_config([])
    assert cfg.scenario == "attack_small" and cfg.primary in cfg.designs
    assert cfg.model.features + 1 == 200
    with pytest.raises(Exception):  # noqa: B017 - OmegaConf's read-only error type is an implementation detail
        cfg.seed = 3


def test_config_problems_are_reported_together():
    with pytest.raises(ConfigError) as err:
        load_attack_config(["training.rounds=zero", "key.noise=cauchy", "trainig.lr=1", "audit.delta=2"])
    text = str(err.value)
    assert "4 configuration problems" in text
    assert "training.rounds: expected int" in text
    assert "key.noise: expected one of gaussian, laplace" in text
    assert "did you mean training?" in text
    assert "audit.delta: expected a number in (0, 1)" in text


def test_design_names_are_validated():
    assert Design.parse("fast-oblique-rekey10") == Design("fast-oblique-rekey10", "fast", "oblique", 10)
    with pytest.raises(ConfigError, match="designs: design 'fast-pinvv'"):
        load_attack_config(["designs=[fast-pinvv]", "primary=fast-pinvv"])
    with pytest.raises(ConfigError, match="primary: 'dense-pinv' is not among designs"):
        load_attack_config(["designs=[fast-pinv]", "primary=dense-pinv"])


def test_attack_main_reports_config_errors_with_exit_code_2(capsys):
    assert attack_main(["scenario=no_such_attack"]) == 2
    assert "no file" in capsys.readouterr().err


def test_attack_main_writes_outputs_and_ends_with_result_line(tmp_path, capsys):
    out = tmp_path / "run"
    code = attack_main(
        [
            "model.features=23",
            "data.clients=5",
            "data.samples_per_client=60",
            "training.batch_size=16",
            "training.rounds=10",
            "key.n_extra=4",
            "key.block_size=8",
            "designs=[fast-oblique,block-pinv]",
            "primary=fast-oblique",
            "m2.features=499",
            "m2.rounds=1",
            "m2.noise2_scales=[1.0]",
            "audit.trials=500",
            "contrast.designs=[]",
            f"out_dir={out}",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    m = RESULT.match(lines[-1])
    assert m, lines[-1]
    assert m.group(1) == "6"  # ceil(24 / 4)
    assert float(m.group(4)) > 4 and float(m.group(5)) < 1e-6  # 500 trials: the bound is about ln(500/3.7)

    data = json.loads((out / "result.json").read_text())
    assert data["headline"]["full_rank_round"] == 6
    assert {d["design"] for d in data["designs"]} == {"fast-oblique", "block-pinv"}
    report = (out / "report.md").read_text()
    assert report.rstrip().splitlines()[-1] == lines[-1]
    assert "not a guarantee on the vector" in report and "granted the server key" in report
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    assert "attack/report/text_summary" in acc.Tags()["tensors"]
    tb_result = acc.Tensors("attack/result/text_summary")[0].tensor_proto.string_val[0].decode()
    assert tb_result == lines[-1]
    assert "attack/fast-oblique/difference_rank" in acc.Tags()["scalars"]

    # Only the parties' views leave the process: no key matrices, no plain models.
    for path in (out / "transcripts").glob("*.npz"):
        with np.load(path, allow_pickle=False) as z:
            assert {k.split("/")[0] for k in z.files} <= {"meta", "upload", "broadcast", "server_input"}
    text = (out / "result.json").read_text() + report
    for secret in ('P1L": [', "state_dict", 'N1": ['):
        assert secret not in text
