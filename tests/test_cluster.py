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


@pytest.fixture
def head_node(tmp_path):
    gcs_port, dash_port = _free_port(), _free_port()
    ray_tmp = tempfile.mkdtemp(prefix="sfr", dir="/tmp")  # Unix socket paths must stay under 107 bytes
    token = Path(ray_tmp) / "auth_token"
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
    ready = False
    while time.time() < deadline and proc.poll() is None:
        probe = subprocess.run(
            [*RAY, "job", "list", "--address", address], capture_output=True, text=True, env=env, timeout=60
        )
        if probe.returncode == 0:
            ready = True
            break
        time.sleep(2)
    try:
        if not ready:
            pytest.fail(f"ray head did not come up: {(tmp_path / 'head.log').read_text()[-2000:]}")
        yield address, env
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
        shutil.rmtree(ray_tmp, ignore_errors=True)


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
    address, env = head_node
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
    summaries = list((tmp_path / "runs").rglob("summary.json"))
    assert summaries, "the job wrote no summary.json"
    summary = json.loads(summaries[0].read_text())
    assert summary["backend"] == "ray" and set(summary["arms"]) == {"fl", "sifl_m2"}
