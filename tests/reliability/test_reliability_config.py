"""Bad input of the first kind: configuration. Every problem in one message, each naming its key and its
fix; exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]

# one bad override → the key it must name → words of the message (expectation and fix)
CASES = [
    ("bogus=3", "bogus", "unknown key"),
    ("trian.rounds=3", "trian", "did you mean train"),
    ("train.rounds=abc", "train.rounds", "expected int"),
    ("train.lr=0", "train.lr", "expected a number > 0"),
    ("train.lr=-0.5", "train.lr", "expected a number > 0"),
    ("coding.n_extra=0", "coding.n_extra", "ñ − n ≥ 1"),
    ("coding.p=1", "coding.p", "an integer ≥ 2"),
    ("clients.num_clients=5000", "clients.num_clients", "training samples (data.name=digits)"),
    ("dirichlet.alpha=0", "dirichlet.alpha", "a number > 0"),
    ("data.dirichlet_alpha=0", "data.dirichlet_alpha", "renamed dirichlet.alpha"),
    ("faults.worker_policy=restart", "faults.worker_policy", "expected one of retry, drop"),
    ("faults.deadline_s=0", "faults.deadline_s", "seconds > 0"),
    ("checkpoint.every=-1", "checkpoint.every", "0 turns checkpoints off"),
    ("faults.inject=[{kind: worker_exit, worker: 7, round: 1}]", "faults.inject[0].worker", "worker index"),
    ("faults.inject=[{kind: explode, round: 1}]", "faults.inject[0].kind", "expected one of worker_exit"),
    (
        "faults.inject=[{kind: worker_kill, worker: 0, round: 99}]",
        "faults.inject[0].round",
        "round in [0, 25)",
    ),
    (
        "faults.inject=[{kind: corrupt_upload, client: 1, corruption: zeros}]",
        "faults.inject[0].corruption",
        "nan",
    ),
    (
        "faults.inject=[{kind: straggle, worker: 0, round: 1}]",
        "faults.deadline_s",
        "needs a per-round deadline",
    ),
    ("faults.inject=[{kind: server_kill, round: 1}]", "ray.placement", "set ray.placement=separate"),
]


@pytest.mark.parametrize(("override", "key", "words"), CASES, ids=[c[0][:40] for c in CASES])
def test_each_problem_names_its_key_and_fix(override, key, words):
    with pytest.raises(ConfigError) as info:
        load_config(["ray.num_workers=2", override])
    (problem,) = info.value.problems
    assert problem.startswith(f"{key}:"), problem
    assert words in problem, problem
    fixes = ("change", "set ", "remove", "lower", "did you mean", "write ")
    assert any(fix in problem for fix in fixes), problem


def test_more_clients_than_samples_and_a_missing_data_folder(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(
            [
                "data.name=mnist",
                f"data.root={tmp_path / 'nope'}",
                "data.download=false",
                "clients.num_clients=70000",
            ]
        )
    text = str(info.value)
    assert "data.root: expected an existing folder" in text and "set data.download=true" in text
    assert "clients.num_clients: 70000 clients but only 60000 training samples" in text
    with pytest.raises(ConfigError, match=r"data\.root: no mnist folder"):
        load_config(["data.name=mnist", f"data.root={tmp_path}", "data.download=false"])
    with pytest.raises(ConfigError, match=r"only 50 training samples \(data\.limit_train=50\)"):
        load_config(["data.limit_train=50", "clients.num_clients=60"])


def test_cli_lists_every_problem_at_once_with_exit_code_2(tmp_path):
    bad = [
        "bogus=3",
        "train.rounds=abc",
        "train.lr=0",
        "coding.n_extra=0",
        "coding.p=1",
        "dirichlet.alpha=0",
        "data.name=mnist",
        "data.download=false",
        f"data.root={tmp_path / 'missing'}",
        "clients.num_clients=70000",
        "faults.inject=[{kind: worker_exit, round: 1}]",
    ]
    proc = subprocess.run(
        [sys.executable, "run.py", *bad], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert proc.stderr.splitlines()[0] == f"{len(lines)} configuration problems:"
    for key in (
        "bogus",
        "train.rounds",
        "train.lr",
        "coding.n_extra",
        "coding.p",
        "dirichlet.alpha",
        "data.root",
        "clients.num_clients",
        "faults.inject[0].worker",
    ):
        assert sum(line.startswith(f"  - {key}:") for line in lines) == 1, (key, proc.stderr)
    assert len(lines) == 9
