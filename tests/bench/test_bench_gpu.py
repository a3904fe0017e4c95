"""``python -m bench gpu`` before any GPU is seen: its verdicts (pinning, agreement, targets, the
vectorised-clients slot) on made-up and real placements, its one line without CUDA (a real subprocess),
and a rehearsal of every section on the CPU with declared GPUs, through the real platform."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.__main__ import main as bench_main
from bench.gpu_checks import (
    Check,
    agreement_verdict,
    check_pinning,
    judge,
    parse_smi_csv,
)
from sifl_ray.config import ScenarioConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def _worker(gpu: str = "0", *, cuda: bool = True, **changes) -> dict:
    device = "cuda:0" if cuda else "cpu"
    placed = {
        "gpu_ids": [gpu],
        "cuda_visible_devices": gpu,
        "device": device,
        "current_device": 0 if cuda else None,
        "tensor_devices": [device],
        "fallback": None if cuda else "Ray assigned a GPU, but CUDA is not usable here",
    }
    return {**placed, **changes}


def _cpu_party(**changes) -> dict:
    return {"gpu_ids": [], "device": "cpu", "tensor_devices": ["cpu"], "fallback": None, **changes}


def _placements(cuda: bool = True, **workers) -> dict:
    out = {f"worker {k}": workers.get(f"w{k}", _worker(cuda=cuda)) for k in range(4)}
    out.update({"server": _cpu_party(), "aggregator 0": _cpu_party(), "evaluator": _cpu_party()})
    return out


def _pinning(placements, *, cuda=True, evaluator_gpus=0.0):
    return check_pinning(
        placements, workers=4, gpus_per_worker=0.25, evaluator_gpus=evaluator_gpus, cuda=cuda
    )


def test_four_quarter_workers_on_one_gpu_pass_and_every_misplacement_is_named():
    assert _pinning(_placements()) == []
    assert _pinning(_placements(cuda=False), cuda=False) == []  # a rehearsal: the CPU fallback said
    cases = {
        "CUDA_VISIBLE_DEVICES='1', expected '0'": {"w1": _worker(cuda_visible_devices="1")},
        "computes on cpu, expected cuda:0": {"w2": _worker(device="cpu", fallback="no CUDA")},
        "current_device() is 1": {"w0": _worker(current_device=1)},
        "holds tensors on ['cpu', 'cuda:0']": {"w3": _worker(tensor_devices=["cpu", "cuda:0"])},
        "the workers use 2 GPUs, expected at most 1": {"w3": _worker("1")},
        "expected exactly one": {"w0": _worker(gpu_ids=[])},
    }
    for expected, workers in cases.items():
        problems = _pinning(_placements(**workers))
        assert any(expected in p for p in problems), (expected, problems)
    rehearsal = _placements(cuda=False, w2=_worker(cuda=False, fallback=None))
    assert any("did not say" in p for p in _pinning(rehearsal, cuda=False))
    on_gpu = _placements()
    on_gpu["server"] = _cpu_party(gpu_ids=["0"])
    on_gpu["evaluator"] = _cpu_party(tensor_devices=["cpu", "cuda:0"])
    problems = _pinning(on_gpu)
    assert any(p.startswith("server: Ray assigned GPU ids") for p in problems)
    assert any(p.startswith("evaluator: holds tensors") for p in problems)
    on_gpu = _placements()
    on_gpu["evaluator"] = _worker()  # the configuration gives it a GPU: then it must be there
    assert _pinning(on_gpu, evaluator_gpus=0.2) == []
    assert any(p.startswith("evaluator:") for p in _pinning(on_gpu))
    missing = _placements()
    del missing["worker 3"]
    assert "3 workers placed, expected 4" in _pinning(missing)


def test_agreement_holds_within_the_bound_and_the_tolerance_and_fails_beyond():
    ok = agreement_verdict(
        paired={"sifl_m1": [1e-9, 3e-9], "sifl_m2": [2e-7]},
        bounds={"sifl_m1": 1e-6, "sifl_m2": 1e-4},
        relative_differences={"fl": [1e-7, 2e-7], "sifl_m1": [3e-7], "sifl_m2": [2e-7]},
    )
    assert ok["status"] == "pass" and ok["problems"] == []
    assert ok["worst_paired_over_bound"] == pytest.approx(3e-3) and ok["worst_relative_difference"] == 3e-7
    beyond = agreement_verdict(
        paired={"sifl_m1": [2e-6]},
        bounds={"sifl_m1": 1e-6},
        relative_differences={"fl": [1e-7], "sifl_m2": [0.5]},
    )
    assert beyond["status"] == "fail" and len(beyond["problems"]) == 2
    assert "beyond the bound 1.000e-06" in beyond["problems"][0] and "sifl_m2" in beyond["problems"][1]
    nan = agreement_verdict(
        paired={"sifl_m1": [math.nan]}, bounds={"sifl_m1": 1.0}, relative_differences={"fl": [0.0]}
    )
    assert nan["status"] == "fail"  # a NaN is never within a bound
    nothing = agreement_verdict(
        paired={"sifl_m1": []}, bounds={"sifl_m1": 1.0}, relative_differences={"fl": [0.0]}
    )
    assert nothing["status"] == "not_measured"


def test_targets_and_result_lines():
    assert (judge(1.1, "<=1.2"), judge(1.3, "<=1.2"), judge(12.0, ">=10"), judge(9.0, ">=10")) == (
        "pass",
        "miss",
        "pass",
        "miss",
    )
    assert judge(None, "<=1") == judge(math.nan, "<=1") == "not_measured"
    assert judge(0.5, "") == "info" and judge(5.0, "<=1", rehearsal=True) == "rehearsal"
    with pytest.raises(ValueError, match="'<=x' or '>=x'"):
        judge(1.0, "about 1")
    line = Check(
        "kernels_oblique_n1199882", 0.8123, "pass", target="<=1", unit="ms", note="35× a copy"
    ).line()
    assert line == "RESULT gpu_kernels_oblique_n1199882 value=0.8123ms target=<=1ms status=pass (35× a copy)"
    absent = Check("vectorised_n1000_speedup", None, "not_available", target=">=10", note="no switch").line()
    assert (
        absent == "RESULT gpu_vectorised_n1000_speedup value=nan target=>=10 status=not_available (no switch)"
    )
    with pytest.raises(ValueError, match="unknown status"):
        Check("x", 1.0, "great")


def test_the_vectorised_switch_the_bench_turns_is_a_key_of_the_schema():
    """Section 5 measures ``train.vectorise`` on and off: a key of the configuration, a bool."""
    from bench.gpu import VECTORISE_KEY

    cfg = load_config([f"{VECTORISE_KEY}=false"])
    section, key = VECTORISE_KEY.split(".")
    assert cfg[section][key] is False and isinstance(getattr(ScenarioConfig(), section).vectorise, bool)


def test_nvidia_smi_rows():
    text = "0, NVIDIA H100 80GB HBM3, 5120, 81559, 37\n1, broken\n"
    rows = parse_smi_csv(text, ("index", "name", "memory.used", "memory.total", "utilization.gpu"))
    assert rows == [
        {
            "index": "0",
            "name": "NVIDIA H100 80GB HBM3",
            "memory.used": "5120",
            "memory.total": "81559",
            "utilization.gpu": "37",
        }
    ]


@pytest.mark.slow  # a `python -m bench gpu` process
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_without_cuda_it_says_so_in_one_line_and_exits_0(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "gpu"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and "nothing was measured" in lines[0] and "python -m bench gpu" in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written


@pytest.mark.ray
@pytest.mark.slow
def test_a_rehearsal_runs_every_section_through_the_platform(ray_session, tmp_path, capsys):
    out = tmp_path / "gpu.json"
    code = bench_main(["gpu", "--rehearse", "--models", "mlp", "--out", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    data = json.loads(out.read_text())
    assert code == 0, data["errors"]
    assert (
        lines[-1].startswith("RESULT gpu figures=")
        and "rehearsal on the CPU: nothing measured on a GPU" in lines[-1]
    )
    figures = {f["name"]: f for f in data["figures"]}
    assert {f["line"] for f in figures.values()} <= set(lines)  # one RESULT line per figure, as printed
    assert figures["pinning"]["status"] == "pass", data["sections"]["pinning"]["problems"]
    placed = data["sections"]["pinning"]["placements"]
    assert len({tuple(p["gpu_ids"]) for k, p in placed.items() if k.startswith("worker")}) == 1
    assert figures["fallback"]["value"] == 4  # no CUDA here: the four workers say they use the CPU
    agreement = data["sections"]["agreement"]
    assert (
        figures["agreement_bound"]["status"] == "pass"
        and figures["agreement_cuda_vs_cpu"]["status"] == "pass"
    )
    # Ray workers on the CPU and the in-process run agree to the bit; SIFL stays within its bound.
    assert all(v == 0.0 for values in agreement["relative_differences"].values() for v in values)
    assert set(agreement["paired_errors"]) == {"sifl_m1", "sifl_m2"}
    assert 0 < figures["agreement_bound"]["value"] <= 1
    assert [n for n in figures if n.startswith("kernels_")] == [
        "kernels_oblique_n1000",
        "kernels_oblique_n20000",
    ]
    rounds = data["sections"]["rounds"]["mlp"]
    assert rounds["n"] == 199_210 and rounds["rounds_measured"] == 2
    assert rounds["max_difference_bare_vs_fl"] == 0.0  # the bare loop is the platform's arithmetic
    for key in ("rounds_mlp_fl_over_bare", "rounds_mlp_m2_over_fl"):
        assert figures[key]["status"] == "rehearsal" and figures[key]["value"] > 0
    assert figures["memory_rounds_mlp_worker_peak"]["value"] > 50  # MiB per worker (peak RSS here)
    vectorised = data["sections"]["vectorised"]
    assert vectorised["available"] and vectorised["switch"] == "train.vectorise=true (per-client: false)"
    started_again, _, parties = vectorised["hosts_started_again"].partition(" of ")
    assert started_again == parties  # both runs on the round section's hosts: no process started for them
    assert figures["vectorised_n1000_speedup"]["status"] == "rehearsal"
    assert figures["vectorised_n1000_speedup"]["value"] > 0
    assert set(data["sections"]["memory"]) == {"agreement", "rounds_mlp"}
