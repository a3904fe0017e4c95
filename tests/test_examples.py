"""The examples run as the docs say: ``examples/own_arm.py`` as a script and as a plug-in of the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "SIFL_PROGRESS": "0", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_own_arm_runs_as_a_script_with_its_setting(tmp_path):
    done = _run([str(ROOT / "examples" / "own_arm.py"), "topk.fraction=0.05", "output.dir=runs"], tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if " round " in line]
    assert [(r[0], r[2]) for r in rows] == [("fl", "0:"), ("fl", "1:"), ("topk", "0:"), ("topk", "1:")]
    assert all(r[-1] == "0.950" for r in rows[2:])  # 95 % of each update's coordinates dropped
    assert (tmp_path / "runs" / "quickstart").is_dir()


@pytest.mark.slow  # `sifl run` processes
def test_own_arm_is_a_plugin_of_the_command_line(tmp_path):
    args = [
        str(ROOT / "run.py"),
        "arms=[fl,topk]",
        "topk.fraction=0.5",
        "backend=local",
        "train.rounds=1",
        "clients.num_clients=3",
        "output.plot=false",
        "output.dir=runs",
    ]
    plugin = {"PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), str(ROOT)]), "SIFL_PLUGINS": "own_arm"}
    done = _run(args, tmp_path, **plugin)
    assert done.returncode == 0, done.stderr
    assert " topk=" in done.stdout.splitlines()[-1]
    refused = _run([*args, "topk.clip=0"], tmp_path, **plugin)
    assert refused.returncode == 2 and "topk.clip: expected a number > 0, got 0.0" in refused.stderr
