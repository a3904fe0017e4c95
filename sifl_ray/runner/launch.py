"""Running a scenario to its end, as ``sifl run`` and :func:`sifl_ray.simulate` do: the run folder said
first, SIGTERM handled as Ctrl-C, an interrupted run's message (what was saved, how to resume), and the
optional run again without canaries (``audit.compare``)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from pathlib import Path

from omegaconf import DictConfig

from sifl_ray.backends import Backend
from sifl_ray.checkpoint import CheckpointError, CheckpointStore
from sifl_ray.logging import write_summary
from sifl_ray.runner.hosts import WarmHosts
from sifl_ray.runner.parties import say
from sifl_ray.runner.simulation import Simulation, new_run_dir
from sifl_ray.runner.state import default_key_dir
from sifl_ray.runner.summary import RunResult


def run_scenario(
    cfg: DictConfig,
    *,
    backend: Backend | None = None,
    hosts: WarmHosts | None = None,
    run_dir: Path | None = None,
    startup_marks: dict[str, float] | None = None,
    draw_later: bool = False,
) -> RunResult:
    """Build a :class:`Simulation` of ``cfg`` and run it to the end (``sifl run``, ``python run.py``).

    Says the run folder first. An interrupt (Ctrl-C, or SIGTERM from a scheduler) becomes
    :class:`Interrupted`, whose message names the last complete checkpoint and the exact resume command;
    an interrupt before any checkpoint leaves no key folder behind.

    ``hosts``: a session's warm hosts (:class:`sifl_ray.api.Session`), whose backend the run uses.
    ``draw_later``: the figures in a background thread (:class:`sifl_ray.canvas.Drawing`).

    Raises:
        Interrupted: the run was interrupted.
    """
    run_dir = Path(run_dir) if run_dir else new_run_dir(cfg)
    try:
        say(f"run folder: {run_dir}")  # first, so that a user knows where it is before anything fails
        sim = Simulation(
            cfg,
            backend=backend,
            hosts=hosts,
            run_dir=run_dir,
            startup_marks=startup_marks,
            draw_later=draw_later,
        )
    except KeyboardInterrupt:
        raise Interrupted(interrupted_message(cfg, run_dir, default_key_dir(cfg, run_dir))) from None
    result = run_to_end(sim, announce=False)
    if cfg.audit.canaries and cfg.audit.compare:
        compare_without_canaries(cfg, result)
    return result


def run_to_end(sim: Simulation, *, announce: bool = True) -> RunResult:
    """``sim.run(close=True)``, with SIGTERM handled as Ctrl-C and an interrupt turned into
    :class:`Interrupted` (what was saved, how to resume); the simulation is closed either way."""
    try:
        if announce:  # a resumed run's folder (a new run says it before its set-up)
            say(f"run folder: {sim.run_dir}")
        with sigterm_interrupts():
            return sim.run(close=True)
    except KeyboardInterrupt:
        sim.close()
        raise Interrupted(interrupted_message(sim.cfg, sim.run_dir, sim.checkpoints.key_dir)) from None
    finally:
        sim.close()


class Interrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM; its message says what was saved and how to resume."""


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM (a scheduler's, ``ray job stop``'s, ``kill``'s) is handled as Ctrl-C while the rounds run,
    so that the driver says where the run stands instead of vanishing; the previous handler afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_message(cfg: DictConfig, run_dir: Path, key_dir: Path) -> str:
    """What an interrupted run tells its user: the last complete round and its checkpoint, and the resume
    command; or, with no checkpoint yet, that nothing can be resumed (and its key folder is removed: the
    keys of a run that cannot be resumed are of no use to anyone)."""
    latest = None
    with contextlib.suppress(CheckpointError):
        latest = CheckpointStore(run_dir).latest()
    if latest is not None:
        return (
            f"interrupted: rounds 0-{latest.round} of {cfg.train.rounds} are saved in {latest.dir}\n"
            f"resume with: sifl run --resume {run_dir}"
        )
    key_dir = Path(key_dir)
    if key_dir.exists():
        shutil.rmtree(key_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            key_dir.parent.rmdir()  # the scenario's .keys folder, if this run was its last
    return f"interrupted before any round was saved: nothing to resume (run folder {run_dir})"


def compare_without_canaries(cfg: DictConfig, result: RunResult) -> None:
    """How much the canaries moved the model: the same run without them (in-process, which gives a Ray
    run's numbers; ``coding.key_seed`` makes every secret the same), its final accuracy beside each arm's
    in ``summary.json`` (``audit.accuracy_without_canaries``) and the audit table. The run folder of the
    comparison is ``without_canaries/`` inside the run's."""
    from omegaconf import OmegaConf

    plain = OmegaConf.merge(
        cfg,
        {
            "audit": {"canaries": 0, "compare": False},
            "backend": "local",
            "output": {"plot": False, "progress": False},
            "checkpoint": {"every": 0},
        },
    )
    say("audit.compare: the run again without canaries, in-process, to measure what they moved")
    shadow = Simulation(plain, run_dir=result.run_dir / "without_canaries")
    try:
        without = shadow.run()
    finally:
        shadow.close()
    for arm, a in result.summary["arms"].items():
        if a.get("audit"):
            a["audit"]["accuracy_with_canaries"] = a["final_accuracy"]
            a["audit"]["accuracy_without_canaries"] = without.summary["arms"][arm]["final_accuracy"]
    write_summary(result.run_dir, result.summary)
