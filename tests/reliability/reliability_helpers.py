"""Helpers of the reliability tests (a small scenario, running it, reading its TensorBoard files)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sifl_ray.config import load_config
from sifl_ray.parties.process import Host
from sifl_ray.runner import Simulation

# 6 clients on 2 workers, 5 rounds, every arm SIFL has; fixed keys so that runs can be compared exactly.
BASE = [
    "scenario=quickstart",
    "train.rounds=5",
    "clients.num_clients=6",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "arms=[fl,sifl_m1,sifl_m2]",
    "output.progress=false",
    "output.plot=false",
]
ARMS = ("fl", "sifl_m1", "sifl_m2")
CURVES = ("test_accuracy", "test_loss", "train_loss", "max_deviation")  # deterministic metrics (not time/*)


@dataclass
class Run:
    run_dir: Path
    summary: dict[str, Any]
    history: dict[str, list[dict]]
    models: dict[str, torch.Tensor]
    inventory: dict[str, list[str]]


def finish(sim: Simulation) -> Run:
    """Run ``sim`` to the end; keep its final models (decoded by the evaluator) and key inventory."""
    try:
        result = sim.run()
        models = {arm: sim.global_model(arm) for arm in sim.arms}
        inventory = {name: sim.backend.get(h.call(Host.key_inventory)) for name, h in sim.actors().items()}
    finally:
        sim.close()
    return Run(result.run_dir, result.summary, result.history, models, inventory)


def run_sim(overrides: list[str], run_dir: Path) -> Run:
    cfg = load_config([*overrides, f"output.dir={run_dir.parent}"])
    return finish(Simulation(cfg, run_dir=run_dir))


def per_arm(kind: str, round: int, **fields: Any) -> str:
    """``faults.inject`` entries: the same fault in every arm (so the arms stay comparable)."""
    extra = "".join(f", {k}: {v}" for k, v in fields.items())
    return ", ".join(f"{{kind: {kind}, round: {round}, arm: {arm}{extra}}}" for arm in ARMS)


def max_deviation(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[arm] - b[arm]).abs().max()) for arm in a)


def scalars(run_dir: Path, arm: str) -> dict[str, list[tuple[int, float]]]:
    """Every deterministic curve of ``arm`` as TensorBoard shows it (purged steps already dropped), by
    metric name; at least the accuracy's (a renamed tag would otherwise leave nothing to compare)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sifl_ray.logging import tensorboard_tag

    acc = EventAccumulator(str(Path(run_dir) / "tb" / arm))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    curves = {m: tensorboard_tag(m) for m in CURVES if tensorboard_tag(m) in tags}
    assert "test_accuracy" in curves, (arm, sorted(tags))
    return {m: [(e.step, e.value) for e in acc.Scalars(tag)] for m, tag in curves.items()}


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (to prove that nothing was written)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file()
    }


def paired_run(overrides: list[str], run_dir: Path) -> tuple[dict[str, list[tuple[float, int]]], dict]:
    """Build a run, play all its rounds with :func:`paired_round_errors`, close it; return the errors and
    each SIFL arm's rigorous ``round_bound``."""
    cfg = load_config([*overrides, f"output.dir={run_dir.parent}"])
    sim = Simulation(cfg, run_dir=run_dir)
    try:
        errors = paired_round_errors(sim, cfg.train.rounds)
        return errors, {arm: sim.precision[arm]["round_bound"] for arm in errors}
    finally:
        sim.close()


def paired_round_errors(sim: Simulation, rounds: int) -> dict[str, list[tuple[float, int]]]:
    """Each SIFL round against FedAvg from the same start: the rigorous claim of ``round_bound``.

    Before round t of a SIFL arm, the fl arm is handed the SIFL clients' own decoded start ``w0``; both
    arms then play round t with the same clients (and the same injected faults) and the evaluator decodes
    both next models. Training is the same computation in both, so their difference is the coding alone:
    ``‖w_sifl − w_fl‖₂`` per round, which :mod:`sifl_ray.coding.roundoff` bounds on any CPU. (A trajectory
    comparison over many rounds is not bounded: training can amplify a perturbation.)

    Returns:
        Per SIFL arm, per round: (the error, the clients whose uploads were averaged).
    """
    arms = [a for a in sim.arms if a in ("sifl_m1", "sifl_m2")]
    errors: dict[str, list[tuple[float, int]]] = {arm: [] for arm in arms}
    for t in range(rounds):
        assignment = sim.assignment(t)
        for arm in arms:
            sim.set_start("fl", sim.global_model(arm))
            accepted = [sim.play_round(played, t, assignment).accepted for played in ("fl", arm)]
            assert accepted[0] == accepted[1], (arm, t, accepted)  # the same clients in both arms
            errors[arm].append(
                (float(torch.linalg.vector_norm(sim.global_model(arm) - sim.global_model("fl"))), accepted[1])
            )
    return errors
