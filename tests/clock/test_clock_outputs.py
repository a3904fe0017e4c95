"""What a user sees of the clock: ``sifl config``'s section, a bad trace's exit code, TensorBoard's chart
against the simulated clock, and the run's figure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.logging import TIME_TO_ACCURACY

ROOT = Path(__file__).resolve().parents[2]


def test_sifl_config_shows_the_clock_and_the_profiles_sections(capsys):
    from sifl_ray.cli import main

    assert main(["config", "clock.profile=mobile", "clock.deadline_s=30"]) == 0
    out = capsys.readouterr().out
    for section in ("[clock]", "[mobile]", "[equal]"):
        assert section in out, section
    assert "  clock.deadline_s = 30.0   (default: None)" in out
    assert "clock.profile = 'mobile'" in out and "allowed: mobile, equal" in out
    assert "  mobile.down_mbps = 55.07" in out and "median downlink, Mbit/s (Ookla, 2021)" in out


@pytest.mark.slow  # a `python run.py` process
def test_a_bad_trace_exits_2_with_the_row_and_no_traceback(tmp_path):
    trace = tmp_path / "devices.csv"
    trace.write_text("flops,down_bps,up_bps\n1e9,fast,4e6\n")
    done = subprocess.run(
        [sys.executable, "run.py", "backend=local", f"clock.trace={trace}", f"output.dir={tmp_path}"],
        cwd=ROOT,
        env={**os.environ, "SIFL_PROGRESS": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert f"clock.trace: {trace} row 1: down_bps must be a number, got 'fast'" in done.stderr
    assert "Traceback" not in done.stderr


def test_tensorboard_draws_accuracy_against_the_simulated_clock(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sifl_ray.config import load_config
    from sifl_ray.runner import Simulation

    cfg = load_config(
        [
            "backend=local",
            "arms=[fl,sifl_m2]",
            "clients.num_clients=4",
            "train.rounds=3",
            "clock.profile=equal",
            "clock.target_accuracy=0.5",
            "checkpoint.every=0",
            "output.progress=false",
            f"output.dir={tmp_path}",
        ]
    )
    run = Simulation(cfg, run_dir=tmp_path / "run").run(close=True)
    for arm in ("fl", "sifl_m2"):
        events = EventAccumulator(str(run.run_dir / "tb" / arm))
        events.Reload()
        points = events.Scalars(TIME_TO_ACCURACY)
        rows = run.history[arm]
        assert [p.step for p in points] == [round(r["clock/elapsed_s"]) for r in rows]
        assert [p.wall_time for p in points] == [r["clock/elapsed_s"] for r in rows]
        assert all(abs(p.value - r["test_accuracy"]) < 1e-6 for p, r in zip(points, rows, strict=True))
    # M2 broadcasts ñ×p float64 numbers, fl n in the model's dtype: the same rounds take longer
    fl, m2 = run.summary["arms"]["fl"]["clock"], run.summary["arms"]["sifl_m2"]["clock"]
    assert m2["simulated_s"] > fl["simulated_s"]
    assert fl["target_accuracy"] == 0.5 and "time_to_target_s" in fl
    assert (run.run_dir / "accuracy_vs_time.png").stat().st_size > 0
    layout = (run.run_dir / "tb" / "fl").glob("events.*")
    assert any(b"test accuracy against the simulated clock" in p.read_bytes() for p in layout)
