"""Checkpoint and resume for real: the driver is SIGKILLed in a subprocess and the run is resumed; a
resume restores the parties' secret keys from their own files; corrupted or truncated checkpoints are
refused with a clear message and nothing is written."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from reliability_helpers import ARMS, BASE, finish, max_deviation, run_sim, scalars, tree_digest

from sifl_ray.checkpoint import CheckpointError, read_checkpoint_file
from sifl_ray.runner import Simulation

ROOT = Path(__file__).resolve().parents[2]


def _sigkill_run(out: Path) -> Path:
    """Start the reference scenario as its own driver process; SIGKILL it in the middle of round 2."""
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "run.py", *BASE, "output.progress=true", f"output.dir={out}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the Ray processes it started can be reaped
    )
    try:
        for line in proc.stderr:
            if "(2/5 done)" in line:  # round 1 trained; the driver is checkpointing it or in round 2
                os.kill(proc.pid, signal.SIGKILL)
                break
        assert proc.wait(timeout=120) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # Ray's agents outlive a SIGKILLed driver otherwise
        proc.stderr.close()
    (run_dir,) = (p for p in (out / "quickstart").iterdir() if not p.name.startswith("."))
    return run_dir


def test_sigkilled_driver_resumes_to_the_same_model_and_curves(reference, tmp_path):
    run_dir = _sigkill_run(tmp_path)
    assert not (run_dir / "summary.json").exists()  # it really died before the end
    latest = (run_dir / "checkpoints" / "LATEST").read_text().strip()
    assert latest in ("round-000000", "round-000001", "round-000002")  # wherever the SIGKILL landed

    run = finish(Simulation.resume(run_dir))

    assert max_deviation(run.models, reference.models) <= 1e-12
    for arm in ARMS:  # every step once (purge_step dropped what the killed driver had logged past it)
        curves = scalars(run_dir, arm)
        assert curves == scalars(reference.run_dir, arm), arm
        assert [s for s, _ in curves["test_accuracy"]] == list(range(5))
        assert [row["round"] for row in run.history[arm]] == list(range(5))
    (resumed,) = run.summary["restored"]
    assert resumed["party"] == "driver" and resumed["from_checkpoint"] == latest


@pytest.fixture(scope="module")
def secure_run(ray_session, tmp_path_factory):
    """A run with secret keys (``coding.key_seed`` unset) that keeps every round's checkpoint."""
    overrides = [o for o in BASE if not o.startswith("coding.key_seed")] + ["checkpoint.keep=10"]
    return run_sim(overrides, tmp_path_factory.mktemp("secure") / "run")


def test_resume_takes_the_secret_keys_back_from_the_parties_files(secure_run):
    key_dir = secure_run.run_dir.parent / ".keys" / secure_run.run_dir.name
    files = sorted(p.name for p in key_dir.iterdir())
    # key 1 and key 2, the aggregator's step seed in every arm, and the sampler's seed
    assert files == [
        "aggregator-fl.key",
        "aggregator-sifl_m1.key",
        "aggregator-sifl_m2.key",
        "sampler-run.key",
        "server-sifl_m1.key",
        "server-sifl_m2.key",
    ]
    assert stat.S_IMODE(key_dir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE((key_dir / f).stat().st_mode) == 0o600 for f in files)
    # the run folder (shared: TensorBoard, summary, encoded checkpoints) holds no key material
    seeds = []
    for f in files:
        state = read_checkpoint_file(key_dir / f)["state"]
        seeds += [state["key"]["seed"], state["noise_seed"]] if "key" in state else []
        seeds += [state[k] for k in ("seed", "step_seed") if k in state]
    assert all(isinstance(s, bytes) and len(s) == 32 for s in seeds)
    blobs = [p.read_bytes() for p in secure_run.run_dir.rglob("*") if p.is_file()]
    assert not any(seed in blob or seed.hex().encode() in blob for seed in seeds for blob in blobs)

    # resume from round 1's checkpoint: rounds 2–4 are replayed with the keys restored from the files
    resumed = finish(Simulation.resume(secure_run.run_dir / "checkpoints" / "round-000001"))
    assert max_deviation(resumed.models, secure_run.models) <= 1e-12
    for arm in ARMS:
        assert [row["round"] for row in resumed.history[arm]] == list(range(5))


@pytest.fixture(scope="module")
def short_template(ray_session, tmp_path_factory):
    return run_sim([*BASE, "train.rounds=2"], tmp_path_factory.mktemp("short") / "run").run_dir


@pytest.fixture
def short_run(short_template, tmp_path) -> Path:
    """A fresh copy of a finished 2-round run (its run folder and its key folder) to damage."""
    root = short_template.parent
    shutil.copytree(root, tmp_path / "out", symlinks=False)
    return tmp_path / "out" / short_template.name


def _flip_byte(path: Path, at: int = -5) -> None:
    blob = bytearray(path.read_bytes())
    blob[at] ^= 0xFF
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate driver", "truncated"),
        ("flip server", "checksum mismatch"),
        ("flip key", "checksum mismatch"),
        ("empty manifest", "truncated"),
        ("bad latest", "does not name a checkpoint"),
    ],
)
def test_corrupted_checkpoint_is_refused_and_nothing_is_written(short_run, damage, message):
    run_dir = short_run
    ckpt = run_dir / "checkpoints" / "round-000001"
    key_dir = run_dir.parent / ".keys" / run_dir.name
    if damage == "truncate driver":
        path = ckpt / "driver.ckpt"
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "flip server":
        _flip_byte(ckpt / "server.ckpt")  # read and checked by the server actor, not the driver
    elif damage == "flip key":
        _flip_byte(key_dir / "server-sifl_m2.key")  # read and checked by the server actor only
    elif damage == "empty manifest":
        (ckpt / "MANIFEST.ckpt").write_bytes(b"")
    else:
        (run_dir / "checkpoints" / "LATEST").write_text("../../etc\n")
    before = tree_digest(run_dir.parent)
    with pytest.raises(CheckpointError, match=message):
        Simulation.resume(run_dir)
    assert tree_digest(run_dir.parent) == before


def test_cli_resume_of_a_broken_run_exits_2_without_traceback(short_run):
    run_dir = short_run
    path = run_dir / "checkpoints" / "round-000001" / "driver.ckpt"
    path.write_bytes(path.read_bytes()[:40])
    before = tree_digest(run_dir.parent)
    proc = subprocess.run(
        [sys.executable, "run.py", "--resume", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cannot resume" in proc.stderr and "driver.ckpt: truncated" in proc.stderr
    assert "Nothing was written" in proc.stderr
    assert tree_digest(run_dir.parent) == before
    missing = subprocess.run(
        [sys.executable, "run.py", "--resume", str(run_dir / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        missing.returncode == 2 and "Traceback" not in missing.stderr and "not a run folder" in missing.stderr
    )


def test_checkpoints_are_written_atomically_with_a_checksum(short_run):
    ckpt_root = short_run / "checkpoints"
    assert (ckpt_root / "LATEST").read_text().strip() == "round-000001"
    assert sorted(p.name for p in ckpt_root.iterdir()) == ["LATEST", "round-000000", "round-000001"]
    for f in (ckpt_root / "round-000001").iterdir():
        blob = f.read_bytes()
        assert blob.startswith(b"SIFLCKPT\x01\n"), f
    state = read_checkpoint_file(ckpt_root / "round-000001" / "driver.ckpt")
    assert state["round"] == 1 and set(state["history"]) == set(ARMS)
    assert not any(isinstance(v, torch.Tensor) for v in state.values())  # the driver holds no vector
