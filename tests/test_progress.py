"""Progress and log noise, for real: :mod:`sifl_ray.progress` on a pipe and on a pseudo-terminal, and the
commands as a user runs them (subprocesses): ``sifl describe`` and ``sifl attack`` say one line per step on
stderr off a terminal and keep stdout parseable; a run's per-round line stays short and the clipping caveat
comes once; Ray's token-authentication warning and its OOM-killer guess after an injected fault are gone.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from sifl_ray.config import load_config
from sifl_ray.progress import Progress, progress
from sifl_ray.ray_output import WORKER_DIED, quiet_ray

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no RAY_DEDUP_LOGS=0 (conftest sets it for the tests' own Ray), no
    cluster to join, progress not silenced."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_DEDUP_LOGS", "RAY_ADDRESS", "SIFL_PROGRESS")}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **extra}


def _sifl(*args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sifl_ray.cli", *args],
        cwd=ROOT,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ------------------------------------------------------------------------------------- the module itself
def test_off_a_terminal_each_step_is_one_line_with_its_count():
    out = io.StringIO()
    with Progress("describe x", total=3, stream=out) as bar:
        for what in ("model", "M1", "M2"):
            bar.step(what)
    lines = out.getvalue().splitlines()
    assert [re.sub(r" \(\d+\.\d s\)$", "", line) for line in lines] == [
        "describe x: 1/3 model",
        "describe x: 2/3 M1",
        "describe x: 3/3 M2",
    ]


def test_silenced_by_the_argument_or_the_environment(monkeypatch):
    out = io.StringIO()
    assert list(progress(range(4), "quiet", enabled=False, stream=out)) == [0, 1, 2, 3]
    monkeypatch.setenv("SIFL_PROGRESS", "0")
    with Progress("quiet too", total=2, stream=out) as bar:
        bar.step("a")
        bar.note("a note")
    assert out.getvalue() == ""


def test_min_interval_keeps_thousands_of_steps_to_a_few_lines_and_the_last():
    out = io.StringIO()
    for _ in progress(range(5000), "trials", stream=out, min_interval=3600.0):
        pass
    (line,) = out.getvalue().splitlines()  # only the last step: the hour never passed
    assert line.startswith("trials: 5000/5000")


def test_on_a_terminal_it_is_a_bar_that_redraws_in_place():
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            assert tty.isatty()
            with Progress("describe x", total=3, stream=tty) as bar:
                for what in ("model", "M1", "M2"):
                    bar.step(what)
            tty.flush()
        shown = _drain(leader)
    finally:
        os.close(leader)
        os.close(follower)
    assert "describe x:" in shown and "%|" in shown and "\r" in shown  # tqdm's bar, redrawn in place
    assert "describe x: 1/3" not in shown  # not the log lines


def _drain(leader: int) -> str:
    """What was written to a pseudo-terminal, read from its other end until it stays quiet for a second."""
    chunks = []
    while select.select([leader], [], [], 1.0)[0]:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer has closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


# ------------------------------------------------------------------------------------------ the commands
@pytest.mark.slow  # two `sifl describe` processes
def test_describe_json_keeps_stdout_pure_json_and_says_each_step_on_stderr():
    proc = _sifl("describe", "scenario=quickstart", "coding.key_seed=0", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)  # nothing but the JSON document
    assert info["scenario"] == "quickstart"
    lines = proc.stderr.splitlines()
    # the model and the split, M1's key, M2's keys, every arm's figures
    assert [line.split(" ")[2] for line in lines] == ["1/4", "2/4", "3/4", "4/4"], proc.stderr
    assert all(line.startswith("describe quickstart: ") for line in lines)

    quiet = _sifl("describe", "scenario=quickstart", "coding.key_seed=0", "--json", SIFL_PROGRESS="0")
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(quiet.stdout) == info


@pytest.mark.slow  # a `sifl describe` process on a terminal
def test_describe_on_a_terminal_draws_a_bar_on_stderr():
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sifl_ray.cli", "describe", "scenario=quickstart", "--json"],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
        )
        shown = ""
        while proc.poll() is None:  # read while it writes: the terminal's buffer is small
            shown += _drain(leader)
        shown += _drain(leader)  # our end of the terminal stays open, so nothing written is lost
        stdout = proc.stdout.read()
        proc.stdout.close()
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 0
    json.loads(stdout)
    assert "%|" in shown and "\r" in shown, shown
    assert "describe quickstart: 1/3" not in shown


SMALL_ATTACK = [
    "model.features=23",
    "clients.num_clients=5",
    "data.samples_per_client=60",
    "train.batch_size=16",
    "train.rounds=10",
    "coding.n_extra=4",
    "coding.block_size=8",
    "designs=[fast-oblique,block-pinv]",
    "primary=fast-oblique",
    "m2.features=99",
    "m2.rounds=1",
    "m2.noise2_scales=[1.0]",
    "audit.trials=200",
    "contrast.designs=[]",
]


@pytest.mark.slow  # a `sifl attack` process
def test_attack_says_each_step_once_on_stderr_and_ends_stdout_with_its_result(tmp_path):
    from sifl_ray.attacks.config import load_attack_config
    from sifl_ray.attacks.suite import suite_steps

    args = ["scenario=attack_small", *SMALL_ATTACK, f"out_dir={tmp_path}"]
    total = suite_steps(load_attack_config(args))
    proc = _sifl("attack", *args)
    assert proc.returncode == 0, proc.stderr
    steps = [line for line in proc.stderr.splitlines() if line.startswith("attack attack_small: ")]
    assert [line.split(" ")[2] for line in steps] == [f"{k}/{total}" for k in range(1, total + 1)], (
        proc.stderr
    )
    assert any("the DP audit" in line for line in steps)
    assert not any("done in" in line for line in proc.stdout.splitlines())  # the steps left stdout
    assert proc.stdout.splitlines()[-1].startswith("RESULT attacks ")


@pytest.mark.slow  # a `python run.py` of 15 arms
def test_a_run_with_fifteen_arms_keeps_its_round_lines_short_and_the_clipping_caveat_once(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "run.py",
            "scenario=dp_compare_small",
            "train.rounds=2",
            "backend=local",
            "output.plot=false",
            "output.tensorboard=false",
            f"output.dir={tmp_path}",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    rounds = [line for line in proc.stderr.splitlines() if line.startswith("round ")]
    assert len(rounds) == 2, proc.stderr
    assert all(len(line) < 120 for line in rounds), rounds
    assert rounds[-1].startswith("round 1 (2/2 done)") and "fl " in rounds[-1] and "+" in rounds[-1]
    clipped = [line for line in proc.stderr.splitlines() if ": clipped " in line]
    assert len(clipped) >= 2, proc.stderr  # NbAFL's and DP-FedAvg's arms clip
    assert proc.stderr.count("hold for clipped uploads only") == 1, proc.stderr


@pytest.mark.slow  # a `python run.py` process that starts Ray and loses a worker
def test_a_run_with_an_injected_worker_exit_prints_no_ray_noise(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "run.py",
            "scenario=quickstart",
            "arms=[fl]",
            "train.rounds=2",
            "faults.inject=[{kind: worker_exit, round: 0, worker: 0}]",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert "Token authentication is enabled" not in both
    assert "OOM killer" not in both and "ray stop --force" not in both
    assert "round 0 fl: worker 0 died" in proc.stderr  # the platform still says what happened
    assert proc.stdout.splitlines()[-1].startswith("RESULT quickstart ")


def test_ray_is_quieted_only_where_nothing_real_is_hidden(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: Ray's colours stay
    private = load_config(["scenario=quickstart"])
    assert quiet_ray(private, env := {}) == {"RAY_AUTH_MODE": "token"} and env == {"RAY_AUTH_MODE": "token"}
    # a user's own choice stays; a joined cluster keeps its own mode (token auth without a token file
    # could not join one started without it); no injected worker_exit: a real crash keeps Ray's diagnosis
    assert quiet_ray(private, {"RAY_AUTH_MODE": "disabled"}) == {}
    assert quiet_ray(load_config(["scenario=quickstart", "ray.address=127.0.0.1:6379"]), {}) == {}
    drill = load_config(["scenario=quickstart", "faults.inject=[{kind: worker_exit, round: 0, worker: 0}]"])
    assert quiet_ray(drill, {})["RAY_DEDUP_LOGS_SKIP_REGEX"] == WORKER_DIED


def test_a_runs_configuration_loads_before_ray_is_imported():
    """The switches above are read when ``ray`` is imported: the CLI sets them after loading the run's
    configuration, so loading it (with a fault drill, the arms' registries, the data set's section) must not
    import Ray, or the drill's "worker died ... OOM killer" diagnosis reaches the user's terminal."""
    code = (
        "import sys\n"
        "from sifl_ray.config import load_config\n"
        "load_config(['scenario=quickstart', 'arms=[fl,sifl_m1,secagg,dp_fedavg]',\n"
        "             'faults.inject=[{kind: worker_exit, round: 0, worker: 0}]'])\n"
        "print('ray' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == ["False"], done.stderr


def test_rays_colour_codes_are_dropped_where_stderr_is_no_terminal(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a log file, a pipe, a notebook
    assert quiet_ray(load_config(["scenario=quickstart"]), {})["RAY_COLOR_PREFIX"] == "0"
    assert "RAY_COLOR_PREFIX" not in quiet_ray(
        load_config(["scenario=quickstart"]), {"RAY_COLOR_PREFIX": "1"}
    )


def test_a_runs_round_lines_follow_output_progress_and_sifl_progress(monkeypatch, capsys):
    """The run's round lines are progress too: ``output.progress=false`` or ``SIFL_PROGRESS=0`` silences
    them, and otherwise each round prints one line on stderr."""
    from sifl_ray.runner.recorder import RoundLines

    RoundLines(2, True).update(0, {"fl": 0.5})
    assert "round 0 (1/2 done)" in capsys.readouterr().err
    RoundLines(2, False).update(0, {"fl": 0.5})
    monkeypatch.setenv("SIFL_PROGRESS", "0")
    RoundLines(2, True).update(0, {"fl": 0.5})
    assert capsys.readouterr().err == ""
