"""The platform benchmarks run end to end at tiny sizes on the shared Ray session: each prints its table,
writes its JSON and ends with the RESULT line; the overhead bench's bare loop does the platform's
arithmetic to the bit; ``--device cuda`` without a GPU says so instead of measuring."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from bench.__main__ import main as bench_main

TINY = ["--n-train", "480", "--n-test", "100", "--rounds", "2", "--warmup", "1"]
RESULT = re.compile(r"RESULT (\S+) ratio=(\S+) target=(\S+)")

pytestmark = pytest.mark.ray


def _result(capsys) -> tuple[list[str], str, float, float]:
    lines = capsys.readouterr().out.strip().splitlines()
    match = RESULT.fullmatch(lines[-1])
    assert match, lines[-1]
    return lines, match.group(1), float(match.group(2)), float(match.group(3))


def test_overhead_bench(ray_session, tmp_path, capsys):
    out = tmp_path / "overhead.json"
    argv = ["overhead", "--clients", "6", "--noop-rounds", "2", "--threads", "1", *TINY, "--out", str(out)]
    assert bench_main(argv) == 0
    lines, name, ratio, target = _result(capsys)
    assert (name, target) == ("overhead_n6", 1.1)
    data = json.loads(out.read_text())
    assert data["fl_over_bare"]["ratio"] == pytest.approx(ratio, abs=5e-4) and ratio > 0
    assert (
        set(data["round_s"]) == {"fl", "fl stacked", "fl loop", "bare 1t"} and data["round_s"]["fl"]["n"] == 2
    )
    # The floor does the loop's arithmetic: same initial model, batches, sums and evaluation; the
    # vectorised clients differ from the loop by round-off (float32 training, from the same start).
    deviation = data["max_model_difference_vs_loop"]
    assert deviation["bare 1t"] == 0.0 and 0.0 <= deviation["fl"] < 1e-5
    assert data["test_accuracy_last"]["fl loop"] == data["test_accuracy_last"]["bare 1t"]
    assert data["train_loss_last"]["fl loop"] == data["train_loss_last"]["bare 1t"]
    assert data["vectorised_over_loop"]["ratio"] > 0
    assert data["noop"]["ms_per_client"] > 0 and data["startup"]["total_s"] > 0
    assert any(line.startswith("CHECK noop_ms_per_client=") for line in lines)
    assert any(line.startswith("CHECK vectorised_over_loop=") for line in lines)
    assert any(line.startswith("fl ") and " yes " in line for line in lines)
    assert any(line.startswith("fl loop ") and " no " in line for line in lines)
    assert any(line.startswith("fl stacked ") and " models " in line for line in lines)
    assert data["stacked_over_loop"]["ratio"] > 0 and 0.0 <= deviation["fl stacked"] < 1e-5


def test_coding_overhead_bench(ray_session, tmp_path, capsys):
    out = tmp_path / "coding.json"
    argv = ["coding-overhead", "--model", "mlp", "--clients", "4", *TINY, "--out", str(out)]
    assert bench_main(argv) == 0
    _, name, ratio, target = _result(capsys)
    assert (name, target) == ("coding_overhead_mlp", 1.05)
    data = json.loads(out.read_text())
    assert data["m2_over_fl"]["ratio"] == pytest.approx(ratio, abs=5e-4) and ratio > 0
    assert data["workload"]["n_params"] == 199_210 and data["workload"]["n_tilde"] == 199_411
    assert data["round_s"]["sifl_m2"]["n"] == data["round_s"]["fl"]["n"] == 2
    assert 0 < data["max_deviation_m2_vs_fl"] < 1e-3  # M2 trains the same model as FedAvg
    parts = data["components_median_s"]
    assert parts["sifl_m2"]["encode"] > 10 * parts["fl"]["encode"]  # fl's "encoding" is the identity


def test_memory_bench(ray_session, tmp_path, capsys):
    out = tmp_path / "memory.json"
    argv = ["memory", "--clients", "8", "--baseline-clients", "2", "--reps", "1", *TINY, "--out", str(out)]
    assert bench_main(argv) == 0
    _, name, ratio, target = _result(capsys)
    assert (name, target) == ("memory_n8", 2.0)
    data = json.loads(out.read_text())
    assert data["ratio"] == pytest.approx(ratio, abs=5e-4)
    for n in ("2", "8"):
        run = data["runs"][n][0]
        # The sampled processes are the driver and the Ray session's processes, workers among them.
        assert run["peak_bytes"] >= run["peak_rounds_bytes"] > 100 * 2**20
        assert "driver" in run["peak_by_process"] and "WorkerHost" in run["peak_by_process"]


def test_startup_bench(tmp_path, capsys):
    """Every measurement for real (tiny in-process runs): ``python run.py`` launched unobserved for its
    phases and again for the peak PSS of its process tree, a session's second run, the sweep through the
    API, and the floor with Ray's defaults and with a run's Ray settings (the floor script's own figures
    checked here: torch imported, then a private Ray started beside the tests' own, which a start in a
    test of its own would only pay again)."""
    out = tmp_path / "startup.json"
    run = ["train.rounds=1", "clients.num_clients=2", "arms=[fl]", "backend=local"]
    run.append("output.plot=false")
    assert bench_main(["startup", "--runs", "1", "--out", str(out), *run]) == 0
    lines, name, ratio, target = _result(capsys)
    assert (name, target) == ("startup", 1.0)
    data = json.loads(out.read_text())
    (r,) = data["runs"]
    assert r["result_line"].startswith("RESULT quickstart fl=")
    assert 0 < r["imports_s"] < r["to_first_round_s"] < r["wall_s"] and r["rounds_s"] > 0
    assert r["end_s"] == pytest.approx(r["wall_s"] - r["to_first_round_s"] - r["rounds_s"]) and r["end_s"] > 0
    assert r["peak_pss_bytes"] > 50 * 2**20 and "driver" in r["peak_by_process"]  # run.py's process
    assert r["sampled_wall_s"] > 0  # the PSS from a run of its own, the times from the unobserved one
    (floor,), (tuned,) = data["floors"], data["floors_tuned"]
    assert 0.2 < floor < 120 and data["median"]["floor_s"] == floor
    assert 0.2 < tuned < 120 and data["median"]["floor_tuned_s"] == tuned
    said = f"floor, Ray's defaults (the target's): {floor:.2f} s; with a run's Ray settings"
    assert any(line.startswith(said) for line in lines), lines
    m = data["median"]
    assert ratio == pytest.approx(m["first_fixed_s"] / m["floor_s"] / 1.5, abs=5e-4)
    assert m["first_fixed_s"] == pytest.approx(r["wall_s"] - r["rounds_s"])
    (session,) = data["sessions"]
    assert len(session["runs"]) == 2 and len(session["sweep"]) == 10 and m["sweep_ratio"] > 1
    assert 0 < m["second_fixed_s"] < m["first_fixed_s"]  # warm: no process, no import to pay again
    second = session["runs"][1]
    assert second["drawn_s"] >= second["wall_s"]  # to its figures, then (none here: output.plot=false)
    assert m["second_drawn_s"] == pytest.approx(second["drawn_s"] - second["rounds_s"])
    assert m["sweep_rounds_s"] == pytest.approx(sum(r["rounds_s"] for r in session["sweep"]))
    assert f"CHECK second_fixed_s={m['second_drawn_s']:.3f} target=1" in lines  # the target: to the figures


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize(
    ("command", "name", "target"),
    [("overhead", "overhead_n10", 1.1), ("coding-overhead", "coding_overhead_mlp", 1.05),
     ("memory", "memory_n1000", 2.0)],
)  # fmt: skip
def test_cuda_without_gpu_is_reported_not_measured(command, name, target, tmp_path, capsys):
    out = tmp_path / "x.json"
    assert bench_main([command, "--device", "cuda", "--out", str(out)]) == 0
    lines, got_name, ratio, got_target = _result(capsys)
    assert lines[0] == "not measured: no GPU"
    assert (got_name, got_target) == (name, target) and math.isnan(ratio)
    assert json.loads(out.read_text())["status"] == "not measured"
