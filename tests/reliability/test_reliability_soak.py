"""Soak: 1000 clients × 20 rounds on real Ray; no Ray process (driver, GCS, raylet, agents, every actor)
grows: the RSS of each after round 20 is at most 1.1 × its RSS after round 2."""

from __future__ import annotations

import psutil

from sifl_ray.config import load_config
from sifl_ray.runner import Simulation


def ray_processes() -> dict[int, tuple[str, int]]:
    """pid → (name, RSS) of this driver and every process it started (Ray's and the actors')."""
    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            out[p.pid] = (p.name(), p.memory_info().rss)
        except psutil.Error:
            continue
    return out


def test_thousand_clients_twenty_rounds_without_memory_growth(ray_session, tmp_path):
    cfg = load_config(
        [
            "scenario=quickstart",
            "clients.num_clients=1000",
            "train.rounds=20",
            "arms=[sifl_m2]",  # the heaviest path; bench reliability soaks fl and sifl_m2
            "ray.num_workers=2",
            "output.progress=false",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    snapshots = {}
    actor_pids = {}

    def after(sim, t):
        if t in (1, 19):  # after round 2 and after round 20
            snapshots[t] = ray_processes()
            actor_pids[t] = {name: ray_session.get(h.pid.remote()) for name, h in sim.actors().items()}

    try:
        result = sim.run(on_round_end=after)
    finally:
        sim.close()
    assert [len(rows) for rows in result.history.values()] == [20]
    assert all(r["clients/accepted"] == 1000 for rows in result.history.values() for r in rows)
    assert actor_pids[1] == actor_pids[19]  # the same actors throughout (nothing was restarted)
    early, late = snapshots[1], snapshots[19]
    assert set(actor_pids[19].values()) <= set(late)  # every actor is among the processes measured
    grown = {
        f"{name} ({pid})": round(late[pid][1] / rss, 3)
        for pid, (name, rss) in early.items()
        if pid in late and late[pid][1] > 1.1 * rss
    }
    assert not grown, grown
