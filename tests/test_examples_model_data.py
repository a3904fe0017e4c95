"""The examples the docs walk through (docs/models.md, docs/data.md) run as scripts, as a reader runs them:
a few clients, two rounds, the in-process backend. Each must finish, print its RESULT line with every arm,
and have really used the user's model or data (its size, its split)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["train.rounds=2", "backend=local", "output.plot=false", "output.tensorboard=false"]


def _run(script: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *QUICK, *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _result(out: str) -> dict[str, float]:
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.eE+-]+)(?=\s|$)", line)}


@pytest.mark.slow  # the example as a process
def test_own_model_example_trains_the_registered_model_under_every_arm(tmp_path):
    done = _run("own_model.py", "clients.num_clients=4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = _result(done.stdout)
    assert {"fl", "sifl_m1", "sifl_m2", "dp_fedavg_eps5"} <= set(result)
    assert abs(result["sifl_m1"] - result["fl"]) <= 0.01 and abs(result["sifl_m2"] - result["fl"]) <= 0.01
    assert result["fl"] > 0.3  # two rounds of a small CNN on digits: well above chance (0.1)
    assert "one at a time: " in done.stderr  # GroupNorm is not stacked: said once, trained one by one


@pytest.mark.slow  # the example as a process
def test_own_data_example_splits_by_writer(tmp_path):
    done = _run("own_data.py", "clients.num_clients=6", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = _result(done.stdout)
    assert {"fl", "sifl_m1", "sifl_m2"} <= set(result) and result["fl"] > 0.1
    too_many = _run("own_data.py", "clients.num_clients=31", cwd=tmp_path)  # 30 writers
    assert too_many.returncode == 2
    assert "clients.num_clients: 31 clients but the data has 30 users" in too_many.stderr


@pytest.mark.parametrize("script", ["own_model.py", "own_data.py"])
def test_each_example_says_how_to_run_it(script):
    text = (ROOT / "examples" / script).read_text()
    assert f"python examples/{script}" in text and "docs/" in text


@pytest.mark.slow
def test_an_example_on_ray_prints_its_workers_lines_without_colour_codes(tmp_path):
    """On Ray a worker's message comes with Ray's ``(WorkerHost pid=…)`` prefix; in a log (here a pipe) it
    must not carry raw ANSI escapes."""
    done = _run("own_model.py", "clients.num_clients=4", "backend=ray", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(WorkerHost pid=" in done.stderr  # the worker's message, prefixed by Ray
    assert "\x1b[" not in done.stdout + done.stderr
