"""The cluster path for real: ``ray start --head`` on loopback, then ``ray job submit --working-dir .`` of a
tiny scenario, which must end SUCCEEDED and print its RESULT line.

Ray (≥ 2.59) enables token authentication on local clusters, so the test does what a user should: it
generates a token and gives the head and the client the same ``RAY_AUTH_TOKEN_PATH``. The head runs in its
own process group with ``--block`` and is torn down by signalling that group, not by
``ray stop`` (which would also stop the test session's own local Ray).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Every tool through this interpreter, never PATH: under ``venv/bin/python -m pytest`` without an activated
# venv, a bare ``ray`` or ``python`` is another interpreter's (without this project's dependencies) or none,
# and a venv made with --system-site-packages has no ``ray`` console script of its own.
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


AGENT_PORTS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
    "ray-client-server-port",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Head:
    """A running head: its job API (``address``), its GCS address as ``ray start`` recorded it (``gcs``), the
    environment that reaches it, and ``tmpdir``, which as ``RAY_TMPDIR`` makes Ray read that record
    (``<tmpdir>/ray/ray_current_cluster``), as a user's shell after ``ray start --head`` reads
    ``/tmp/ray/ray_current_cluster``: never the machine's real one, which may belong to someone else."""

    address: str
    gcs: str
    env: dict[str, str]
    tmpdir: str


@pytest.fixture(scope="module")
def head_node(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("head")
    gcs_port, dash_port = _free_port(), _free_port()
    tmpdir = tempfile.mkdtemp(prefix="sfr", dir="/tmp")  # Unix socket paths must stay under 107 bytes
    ray_tmp = os.path.join(tmpdir, "ray")
    token = Path(tmpdir) / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    log = open(tmp_path / "head.log", "w")  # noqa: SIM115 - closed in teardown
    proc = subprocess.Popen(
        [
            *RAY,
            "start",
            "--head",
            "--block",
            f"--port={gcs_port}",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash_port}",
            # Every port of its own: the test session's local Ray (the ray_session fixture) is still up
            # and holds the defaults; a head whose dashboard agent finds 52365 taken runs without one,
            # and every submission is then refused with "No available agent to submit job".
            *(f"--{name}={_free_port()}" for name in AGENT_PORTS),
            "--num-cpus=2",
            "--include-dashboard=true",
            f"--temp-dir={ray_tmp}",
            "--disable-usage-stats",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{dash_port}"
    deadline = time.time() + 90
    # ``ray start`` records its address (for 127.0.0.1, this host's address: e.g. 192.0.2.2:PORT) once
    # the node is up, a moment after the dashboard answers: ready means both.
    record = Path(ray_tmp) / "ray_current_cluster"
    ready = False
    while time.time() < deadline and proc.poll() is None:
        probe = subprocess.run(
            [*RAY, "job", "list", "--address", address], capture_output=True, text=True, env=env, timeout=60
        )
        if probe.returncode == 0 and record.exists():
            ready = True
            break
        time.sleep(2)
    try:
        if not ready:
            pytest.fail(f"ray head did not come up: {(tmp_path / 'head.log').read_text()[-2000:]}")
        gcs = record.read_text().strip()
        assert gcs.endswith(f":{gcs_port}"), gcs
        yield Head(address=address, gcs=gcs, env=env, tmpdir=tmpdir)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=60)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()
        shutil.rmtree(tmpdir, ignore_errors=True)


# Even with its own ports, the dashboard answers (``ray job list`` succeeds) a moment before the head's
# dashboard agent has registered; a submission in that window is refused with HTTP 500 "No available agent
# to submit job, please try again later" before any job is created, so resubmitting is safe and is what
# Ray's message asks for.
AGENT_NOT_READY = "No available agent to submit job"


def _submit(cmd: list[str], env: dict[str, str], wait_s: float = 60.0) -> subprocess.CompletedProcess:
    deadline = time.time() + wait_s
    while True:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode == 0 or AGENT_NOT_READY not in proc.stderr + proc.stdout:
            return proc
        if time.time() > deadline:
            return proc
        time.sleep(3)


@pytest.mark.slow
def test_job_submit_on_a_loopback_cluster_succeeds(head_node, tmp_path):
    address, env = head_node.address, head_node.env
    runtime_env = json.dumps({"excludes": [".git", "runs", "data_cache", "bench_results", "*.pyc"]})
    cmd = [
        *RAY,
        "job",
        "submit",
        "--address",
        address,
        "--working-dir",
        str(ROOT),
        "--runtime-env-json",
        runtime_env,
        "--",
        # The head's job manager runs the entrypoint through /bin/sh with the head's PATH: the interpreter
        # is named by its absolute path, the one running these tests (whose packages the job needs).
        sys.executable,
        "run.py",
        "scenario=quickstart",
        "train.rounds=2",
        "clients.num_clients=4",
        "arms=[fl,sifl_m2]",
        "output.progress=false",
        f"output.dir={tmp_path / 'runs'}",
    ]
    proc = _submit(cmd, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    match = re.search(r"raysubmit_\w+", out)
    assert match, out[-4000:]
    # The SDK's JobStatus is the authoritative answer; asked from a fresh process, because Ray reads
    # RAY_AUTH_MODE at import.
    query = (
        "import sys; from ray.job_submission import JobSubmissionClient as C; "
        "print(C(sys.argv[1]).get_job_status(sys.argv[2]).value)"
    )
    status = subprocess.run(
        [sys.executable, "-c", query, address, match.group(0)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert status.stdout.strip().splitlines()[-1:] == ["SUCCEEDED"], status.stdout + status.stderr
    assert "RESULT quickstart fl=" in out
    # Ray gives a job's driver RAY_ADDRESS: the run joins the cluster rather than starting its own
    assert f"Ray: joined cluster at {head_node.gcs} (2 CPUs, 0 GPUs)" in out, out[-4000:]
    summaries = list((tmp_path / "runs").rglob("summary.json"))
    assert summaries, "the job wrote no summary.json"
    summary = json.loads(summaries[0].read_text())
    assert summary["backend"] == "ray" and set(summary["arms"]) == {"fl", "sifl_m2"}


# ``python run.py`` beside a cluster: private unless told to join. One round, two clients, one arm.
TINY = [
    "scenario=quickstart",
    "train.rounds=1",
    "clients.num_clients=2",
    "arms=[fl]",
    "output.plot=false",
    "output.tensorboard=false",
    "output.progress=false",
]


def _run(
    args: list[str], env: dict[str, str], out: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "run.py", *TINY, f"output.dir={out}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _first_line(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout.splitlines() or [""])[0]


@pytest.mark.slow
def test_run_beside_a_running_cluster_starts_a_private_instance_and_says_how_to_join(head_node, tmp_path):
    """Ray's own default would join the recorded cluster and refuse the run's num_cpus (a ValueError)."""
    proc = _run([], {**head_node.env, "RAY_TMPDIR": head_node.tmpdir}, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert _first_line(proc) == (
        "Ray: private local instance (2 CPUs, 0 GPUs); "
        f"to join the cluster running at {head_node.gcs} instead, set ray.address=auto"
    ), proc.stdout
    assert "RESULT quickstart fl=" in proc.stdout


@pytest.mark.slow
def test_run_with_ray_address_auto_joins_the_running_cluster(head_node, tmp_path):
    proc = _run(["ray.address=auto"], {**head_node.env, "RAY_TMPDIR": head_node.tmpdir}, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert _first_line(proc) == f"Ray: joined cluster at {head_node.gcs} (2 CPUs, 0 GPUs)", proc.stdout
    assert "RESULT quickstart fl=" in proc.stdout


@pytest.fixture
def stale_record():
    """An isolated ``RAY_TMPDIR`` whose ``ray/ray_current_cluster`` names a port nothing listens on: what
    ``ray start --head`` leaves behind once its cluster is gone (``ray stop`` skipped, a reboot)."""
    tmpdir = tempfile.mkdtemp(prefix="sfr", dir="/tmp")
    dead = f"127.0.0.1:{_free_port()}"
    (Path(tmpdir) / "ray").mkdir()
    (Path(tmpdir) / "ray" / "ray_current_cluster").write_text(dead)
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_TMPDIR": tmpdir}
    try:
        yield env, dead
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.mark.slow
def test_run_with_a_stale_cluster_record_starts_a_private_instance(stale_record, tmp_path):
    env, dead = stale_record
    proc = _run([], env, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert _first_line(proc) == "Ray: private local instance (2 CPUs, 0 GPUs)", proc.stdout
    assert dead not in proc.stdout + proc.stderr


@pytest.mark.parametrize("how", ["auto", "address", "RAY_ADDRESS"])
def test_a_cluster_that_does_not_answer_is_one_line_and_exit_code_2(stale_record, tmp_path, how):
    """Asked to join a cluster that is gone, Ray retries for minutes; the run says so at once, with the
    fix, and starts nothing."""
    env, dead = stale_record
    args = {"auto": ["ray.address=auto"], "address": [f"ray.address={dead}"], "RAY_ADDRESS": []}[how]
    if how == "RAY_ADDRESS":
        env = {**env, "RAY_ADDRESS": dead}
    proc = _run(args, env, tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    name = "RAY_ADDRESS" if how == "RAY_ADDRESS" else "ray.address"
    assert line.startswith(f"error: {name}=") and dead in line, line
    assert f"unset {name} to run on a private local Ray instance" in line, line
    assert not (tmp_path / "quickstart").exists()
