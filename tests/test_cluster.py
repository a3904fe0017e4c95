"""The cluster path for real: a two-node Ray cluster on loopback (``ray start --head``, then a second raylet
joined with ``ray start --address``), started once for the module. On it: a run that joins it and spreads its
client workers over both nodes (``ray.spread_workers``), and the same through ``ray job submit --working-dir
.``; each must land workers on both nodes and reproduce, figure for figure, the in-process run with the same
seeds. Beside it: ``python run.py`` starts a private instance, and a stale or absent cluster is one line.

Ray (≥ 2.59) enables token authentication on local clusters, so the test does what a user should: it
generates a token and gives both nodes and the client the same ``RAY_AUTH_TOKEN_PATH``. Each node runs in
its own process group with ``--block``, its own temp dir and its own ports, and is torn down by signalling
that group (by its process id), never by ``ray stop``, which would stop every Ray on the machine (the test
session's own, and other users').
"""

from __future__ import annotations

import contextlib
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Every tool through this interpreter, never PATH: under ``venv/bin/python -m pytest`` without an activated
# venv, a bare ``ray`` or ``python`` is another interpreter's (without this project's dependencies) or none,
# and a venv made with --system-site-packages has no ``ray`` console script of its own.
RAY = [sys.executable, "-m", "ray.scripts.scripts"]

# Every port of each node its own: the test session's local Ray (the ray_session fixture) is still up and
# holds the defaults, and so does the other node; a node whose dashboard agent finds 52365 taken runs without
# one, and every submission is then refused with "No available agent to submit job".
AGENT_PORTS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
)


# A head with room for both client workers: Ray's default policy fills the driver's node up to half of its
# CPUs before it uses another, so without ray.spread_workers both workers would run on the head, and the
# test would fail. (Declared CPUs: the machine has two.)
HEAD_CPUS, SECOND_CPUS = 4, 2
CLUSTER_SIZE = f"{HEAD_CPUS + SECOND_CPUS} CPUs, 0 GPUs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Cluster:
    """A running two-node cluster: its job API (``address``), its GCS address as ``ray start`` recorded it
    (``gcs``), the environment that reaches it, the node ids (``head_id``, ``second_id``), and ``tmpdir``,
    which as ``RAY_TMPDIR`` makes Ray read the head's record (``<tmpdir>/ray/ray_current_cluster``), as a
    user's shell after ``ray start --head`` reads ``/tmp/ray/ray_current_cluster``: never the machine's
    real one, which may belong to someone else."""

    address: str
    gcs: str
    env: dict[str, str]
    tmpdir: str
    head_id: str
    second_id: str


def _start_node(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """``ray start --block ARGS`` in a process group of its own (stopped by :func:`_stop_nodes`)."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [*RAY, "start", "--block", "--disable-usage-stats", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop_nodes(procs: list[subprocess.Popen]) -> None:
    """Stop the nodes, all at once: each one's process group, by the id of the ``ray start`` that leads
    it. SIGTERM first, SIGKILL for a group still there 10 s later: a head takes ~35 s to wind down on
    SIGTERM alone (its GCS and autoscaler monitor linger), and nothing of it is needed after the tests."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 60)):
        running = [p for p in procs if p.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.time() + grace
        while time.time() < deadline and any(p.poll() is None for p in running):
            time.sleep(0.2)
        if all(p.poll() is not None for p in running):
            # the leader is gone; make sure nothing of its group outlives it
            for proc in running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            return


def _alive_nodes(address: str, env: dict[str, str]) -> list[dict]:
    """The cluster's live nodes, from its state API (``ray list nodes``); ``[]`` while it does not answer."""
    proc = subprocess.run(
        [*RAY, "list", "nodes", "--address", address, "--format", "json", "--filter", "state=ALIVE"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if proc.returncode != 0:
        return []
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("cluster")
    gcs_port, dash_port = _free_port(), _free_port()
    tmpdir = tempfile.mkdtemp(prefix="sfr", dir="/tmp")  # Unix socket paths must stay under 107 bytes
    ray_tmp = os.path.join(tmpdir, "ray")
    token = Path(tmpdir) / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    common = ["--node-ip-address=127.0.0.1"]
    nodes = [
        _start_node(
            [
                "--head",
                f"--port={gcs_port}",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={dash_port}",
                f"--ray-client-server-port={_free_port()}",
                *(f"--{name}={_free_port()}" for name in AGENT_PORTS),
                "--include-dashboard=true",
                f"--temp-dir={ray_tmp}",
                f"--num-cpus={HEAD_CPUS}",
                *common,
            ],
            logs / "head.log",
            env,
        )
    ]
    address = f"http://127.0.0.1:{dash_port}"
    try:
        # ``ray start`` records its address (for 127.0.0.1, this host's address: e.g. 192.0.2.2:PORT) once
        # the node is up, a moment after the dashboard answers: ready means both.
        record = Path(ray_tmp) / "ray_current_cluster"
        deadline = time.time() + 90
        while time.time() < deadline and nodes[0].poll() is None:
            if record.exists() and _alive_nodes(address, env):
                break
            time.sleep(2)
        else:
            pytest.fail(f"the ray head did not come up: {(logs / 'head.log').read_text()[-2000:]}")
        gcs = record.read_text().strip()
        assert gcs.endswith(f":{gcs_port}"), gcs
        # The second node: a raylet of its own (own temp dir, own ports) that joins the head's GCS, as
        # `ray start --address` does on a second machine.
        nodes.append(
            _start_node(
                [
                    f"--address={gcs}",
                    *(f"--{name}={_free_port()}" for name in AGENT_PORTS),
                    f"--temp-dir={os.path.join(tmpdir, 'ray2')}",
                    f"--num-cpus={SECOND_CPUS}",
                    *common,
                ],
                logs / "second.log",
                env,
            )
        )
        deadline = time.time() + 90
        while time.time() < deadline and nodes[1].poll() is None:
            alive = _alive_nodes(address, env)
            if len(alive) == 2:
                break
            time.sleep(2)
        else:
            pytest.fail(f"the second node did not join: {(logs / 'second.log').read_text()[-2000:]}")
        head = next(n for n in alive if n["is_head_node"])
        second = next(n for n in alive if not n["is_head_node"])
        yield Cluster(
            address=address,
            gcs=gcs,
            env=env,
            tmpdir=tmpdir,
            head_id=head["node_id"],
            second_id=second["node_id"],
        )
    finally:
        # The nodes wind down while the suite goes on (SIGTERM, SIGKILL for a group still there 10 s later:
        # a head always is): nothing of them is needed after this module, and a test that waited out the
        # grace would check nothing. The interpreter waits for the thread before it exits.
        def stop() -> None:
            _stop_nodes(nodes)
            shutil.rmtree(tmpdir, ignore_errors=True)

        threading.Thread(target=stop, name="stop the two-node cluster").start()


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


# The scenario both cluster runs play: small (digits, 2 rounds), every kind of arm, fixed keys and noise
# (coding.key_seed), two client workers asked to spread over the nodes.
SPREAD = [
    "scenario=quickstart",
    "train.rounds=2",
    "clients.num_clients=4",
    "arms=[fl,sifl_m1,sifl_m2,nbafl]",
    "coding.key_seed=5",
    "ray.num_workers=2",
    "ray.spread_workers=true",
    "output.plot=false",
    "output.progress=false",
]


def _figures(summary: dict) -> dict:
    """Every number of a run's ``summary.json`` that must not depend on where it ran: each arm's per-round
    metrics without timings and byte counts, and its final figures."""
    out = {}
    for arm, a in summary["arms"].items():
        rounds = [{k: v for k, v in r.items() if not k.startswith(("time/", "bytes/"))} for r in a["rounds"]]
        final = ("final_accuracy", "final_test_loss", "max_deviation", "privacy", "clipped")
        out[arm] = {"rounds": rounds, **{k: a[k] for k in final}}
    return out


def _without_run_dir(line: str) -> str:
    return re.sub(r" run_dir=\S+", "", line)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: the same scenario in-process (backend=local), its RESULT line and figures."""
    from sifl_ray.config import load_config
    from sifl_ray.runner import run_scenario

    out = tmp_path_factory.mktemp("one_process")
    cfg = load_config([*SPREAD, "backend=local", f"output.dir={out}"])
    result = run_scenario(cfg)
    return _without_run_dir(result.result_line), _figures(result.summary)


def _check_spread_run(stdout: str, runs: Path, cluster: Cluster, one_process) -> None:
    """A run on the cluster: it joined, its client workers ran on both nodes, and every figure is the
    in-process run's."""
    assert f"Ray: joined cluster at {cluster.gcs} ({CLUSTER_SIZE})" in stdout, stdout[-4000:]
    (path,) = runs.rglob("summary.json")
    summary = json.loads(path.read_text())
    placement = summary["placement"]
    workers = {placement["parties"][f"worker{k}"] for k in range(2)}
    assert workers == {cluster.head_id, cluster.second_id}, placement
    assert set(placement["nodes"]) <= {cluster.head_id, cluster.second_id}, placement
    line, figures = one_process
    results = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert [_without_run_dir(r) for r in results] == [line], stdout[-4000:]
    assert _figures(summary) == figures


@pytest.mark.slow
def test_a_run_joined_to_two_nodes_spreads_its_workers_and_matches_one_process(
    cluster, one_process, tmp_path
):
    """``ray.address=auto`` joins the cluster ``ray start`` recorded; ``ray.spread_workers`` puts one client
    worker on each node; the numbers are the in-process run's."""
    proc = subprocess.run(
        [sys.executable, "run.py", *SPREAD, "ray.address=auto", f"output.dir={tmp_path}"],
        cwd=ROOT,
        env={**cluster.env, "RAY_TMPDIR": cluster.tmpdir},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert _first_line(proc) == f"Ray: joined cluster at {cluster.gcs} ({CLUSTER_SIZE})", proc.stdout
    _check_spread_run(proc.stdout, tmp_path, cluster, one_process)


@pytest.mark.slow
def test_job_submit_on_two_nodes_spreads_its_workers_and_matches_one_process(cluster, one_process, tmp_path):
    address, env = cluster.address, cluster.env
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
        *SPREAD,
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
    # Ray gives a job's driver RAY_ADDRESS: the run joins the cluster rather than starting its own
    _check_spread_run(proc.stdout, tmp_path / "runs", cluster, one_process)
    summary = json.loads(next((tmp_path / "runs").rglob("summary.json")).read_text())
    assert summary["backend"] == "ray" and set(summary["arms"]) == {"fl", "sifl_m1", "sifl_m2", "nbafl_eps1"}


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
def test_run_beside_a_running_cluster_starts_a_private_instance_and_says_how_to_join(cluster, tmp_path):
    """Ray's own default would join the recorded cluster and refuse the run's num_cpus (a ValueError)."""
    proc = _run([], {**cluster.env, "RAY_TMPDIR": cluster.tmpdir}, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert _first_line(proc) == (
        "Ray: private local instance (2 CPUs, 0 GPUs); "
        f"to join the cluster running at {cluster.gcs} instead, set ray.address=auto"
    ), proc.stdout
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
    # The run says what it joins the moment it starts (never silent), then the one-line error.
    progress, line = proc.stderr.strip().splitlines()
    assert progress.startswith("[sifl] joining the Ray cluster"), progress
    name = "RAY_ADDRESS" if how == "RAY_ADDRESS" else "ray.address"
    assert line.startswith(f"error: {name}=") and dead in line, line
    assert f"unset {name} to run on a private local Ray instance" in line, line
    assert not (tmp_path / "quickstart").exists()
