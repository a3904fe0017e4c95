"""The study's script runs as docs/clock.md says, both conditions, at a tiny size: the chart and the table
(every arm, both conditions; nobody misses a deadline on equal devices)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two runs of five arms
def test_the_study_draws_its_chart_and_prints_its_table(tmp_path):
    out = tmp_path / "study.png"
    args = [
        "backend=local",
        "train.rounds=2",
        "clients.num_clients=4",
        f"output.dir={tmp_path}",
        "--out",
        str(out),
    ]
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "clock_study.py"), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "SIFL_PROGRESS": "0"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| arm | phones (mobile mix), 2.5 s deadline: round s |")
    arms = [row.split(" | ")[0].removeprefix("| ") for row in rows[1:]]
    assert arms == ["fl", "secagg", "sifl_m1", "sifl_m2", "dp_fedavg_secagg_eps5"]
    for row in rows[1:]:
        equal_uploads = row.split(" | ")[6]
        assert equal_uploads == "4.0" or row.startswith("| dp_fedavg"), row  # equal devices: all arrive
