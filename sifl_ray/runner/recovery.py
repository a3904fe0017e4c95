"""What the driver does when a party dies or the driver itself did: the lost party respawned and restored
from its own key file, every arm from the last checkpoint, the rounds since replayed (every stream is
deterministic, so nothing changes but the wall time), and the event recorded and said."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import torch
from omegaconf import DictConfig

from sifl_ray.backends import Backend
from sifl_ray.checkpoint import describe_error
from sifl_ray.faults import FaultJournal
from sifl_ray.parties.handle import PartyLost
from sifl_ray.round import ArmState, Parties
from sifl_ray.runner.parties import PartyPool, say
from sifl_ray.runner.recorder import Recorder
from sifl_ray.runner.state import Checkpoints, DriverState, ResumePoint


class Run(Protocol):
    """What recovery reads and restores of a :class:`~sifl_ray.runner.simulation.Simulation`."""

    cfg: DictConfig
    run_dir: Path
    backend: Backend
    pool: PartyPool
    checkpoints: Checkpoints
    journal: FaultJournal
    recorder: Recorder
    driver: DriverState
    states: dict[str, ArmState]
    w0: torch.Tensor
    n: int
    restores: int

    @property
    def parties(self) -> Parties: ...

    @property
    def next_round(self) -> int: ...


def record_resume(sim: Run, resume: ResumePoint, start: int) -> None:
    """Record and say that the run resumed from ``resume`` at round ``start`` (after its driver died)."""
    ckpt = resume.checkpoint
    record = {
        "party": "driver",
        "from_checkpoint": ckpt.dir.name if ckpt else "start",
        "replayed_from_round": start,
        "journal": [r for r in sim.journal.records() if r.get("kind") == "driver_kill"],
    }
    sim.recorder.restored(record, event="resumed", step=start)
    say(f"resumed {sim.run_dir} from {record['from_checkpoint']}: rounds {start}..{sim.cfg.train.rounds - 1}")


def recover(sim: Run, lost: PartyLost) -> int:
    """Respawn the lost party, restore it from its key file and every arm from the last checkpoint;
    return the round to continue from."""
    cfg = sim.cfg
    sim.restores += 1
    if not cfg.checkpoint.every:
        raise RuntimeError(
            f"{lost}; checkpointing is off (checkpoint.every=0), so its key is lost and the run cannot "
            "continue. Set checkpoint.every ≥ 1 to make a party restorable."
        ) from lost
    if sim.restores > cfg.faults.max_restores:
        raise RuntimeError(f"{lost}; gave up after {cfg.faults.max_restores} restores") from lost
    tic = time.perf_counter()
    sim.journal.append(
        {
            "event": "party_lost",
            "party": lost.party,
            "index": lost.index,
            "round": lost.round,
            "arm": lost.arm,
        }
    )
    try:
        which = sim.pool.respawn(lost.party, lost.index)
        if which:
            sim.checkpoints.restore_keys(sim.backend, sim.pool.server, sim.pool.aggregators, sim.n, which)
        ckpt = sim.checkpoints.store.latest()
        sim.checkpoints.load_broadcasts(sim.backend, sim.pool.server, sim.states, sim.w0, ckpt)
        sim.driver.load(sim.checkpoints.driver_state(ckpt))
    except PartyLost:
        raise
    except Exception as err:
        raise RuntimeError(f"{lost}; it could not be restored: {describe_error(err)}") from err
    resume_at = sim.next_round
    record = {
        "party": lost.party if lost.party != "aggregator" else sim.pool.aggregator_name(lost.index),
        "died_in_round": lost.round,
        "arm": lost.arm,
        "from_checkpoint": ckpt.dir.name if ckpt else "start",
        "replayed_from_round": resume_at,
        "restore_s": round(time.perf_counter() - tic, 3),
    }
    # a restore keeps the replayed rounds in the raw event files: a round released twice within one run is
    # on record (the audit's tests read it there); TensorBoard's view shows the replay only
    sim.recorder.open(purge_step=resume_at, keep_replayed=True)
    sim.recorder.restored(record, event="restored", step=resume_at)
    say(
        f"round {lost.round} {lost.arm}: {lost}; restored it from "
        f"{record['from_checkpoint']} and replaying from round {resume_at}"
    )
    return resume_at
