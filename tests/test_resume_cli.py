"""``sifl run --resume`` as a user meets it: the folder of a scenario's runs resumes its latest run, Ray's
start says nothing a user need not read, and the event files of the resumed run hold each round once."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ctrl_c import default_ctrl_c

ROOT = Path(__file__).resolve().parent.parent


def interrupted(out: Path, *overrides: str, rounds: int = 8, after: int = 4) -> None:
    """A quickstart run of ``rounds`` rounds under ``out``, stopped by Ctrl-C after ``after`` rounds."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "run.py",
            f"train.rounds={rounds}",
            f"output.dir={out}",
            "output.plot=false",
            *overrides,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
    )
    for line in proc.stderr:
        if f"({after}/{rounds} done)" in line:
            proc.send_signal(signal.SIGINT)
            break
    proc.stderr.read()
    assert proc.wait(timeout=300) == 130


def resume(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "run.py", "--resume", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def accuracy_steps(tb: Path) -> collections.Counter:
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    steps: collections.Counter = collections.Counter()
    for path in sorted(tb.glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(raw)
            steps.update(event.step for v in event.summary.value if v.tag == "eval/test_accuracy")
    return steps


def test_the_scenario_folder_resumes_its_latest_run_and_each_round_is_logged_once(tmp_path):
    interrupted(tmp_path, "backend=local", rounds=4, after=2)  # two rounds before the interrupt, two after
    (run_dir,) = (p for p in (tmp_path / "quickstart").iterdir() if not p.name.startswith("."))
    done = resume(tmp_path / "quickstart")
    assert done.returncode == 0, done.stderr
    assert f"resuming the latest run in {tmp_path / 'quickstart'}: {run_dir}" in done.stderr
    assert done.stdout.splitlines()[-1].startswith("RESULT quickstart fl=")
    for arm in ("fl", "sifl_m2", "nbafl_eps1"):
        # the raw files, as tbparse or a notebook reads them, not only TensorBoard's view of them
        assert accuracy_steps(run_dir / "tb" / arm) == {t: 1 for t in range(4)}, arm


@pytest.mark.slow
def test_a_resumed_ray_run_prints_no_token_line(tmp_path):
    interrupted(tmp_path, "backend=ray", rounds=5, after=2)
    done = resume(tmp_path / "quickstart")
    assert done.returncode == 0, done.stderr
    assert "Ray: private local instance" in done.stdout
    assert "Token authentication" not in done.stdout + done.stderr
