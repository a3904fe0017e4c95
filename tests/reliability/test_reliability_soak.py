"""Soak: 1000 clients × 20 rounds on real Ray; no Ray process (driver, GCS, raylet, agents, every actor)
leaks.

A leak grows a process in every round; the allocator grows one in steps (a new arena, a raised mmap
threshold: about 9 MiB at a time here, 45 MiB once in CI) that come in a few rounds and then stop. So the
test reads the RSS of every process after each round from round 2 to round 20 and asserts, per process:

``bench.reliability.leak`` is the rule (the bench's soak reports by it too):

- the median of its 18 round-to-round changes is under 1 MiB: a worker that kept a fifth of one round's
  uploads (its 500 clients × 2,410 parameters × 8 bytes = 9.6 MB) would grow 1.9 MB in every round;
- its RSS after round 20 is at most 1.25 × its RSS after round 2: a backstop for a leak that comes in
  bursts. Round 2 against round 20 at 1.1 alone failed once in CI on a worker's allocator steps (1.114).
"""

from __future__ import annotations

from bench.reliability import leak, ray_processes
from sifl_ray.config import load_config
from sifl_ray.parties.process import Host
from sifl_ray.runner import Simulation


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
    snapshots: dict[int, dict[int, tuple[str, int]]] = {}
    actor_pids = {}

    def after(sim, t):
        if t >= 1:  # after round 2, 3, …, 20
            snapshots[t] = ray_processes()
            actor_pids[t] = {name: sim.backend.get(h.call(Host.pid)) for name, h in sim.actors().items()}

    try:
        result = sim.run(on_round_end=after)
    finally:
        sim.close()
    assert [len(rows) for rows in result.history.values()] == [20]
    assert all(r["clients/accepted"] == 1000 for rows in result.history.values() for r in rows)
    assert actor_pids[1] == actor_pids[19]  # the same actors throughout (nothing was restarted)
    early, late = snapshots[1], snapshots[19]
    assert set(actor_pids[19].values()) <= set(late)  # every actor is among the processes measured
    steady = [pid for pid in early if all(pid in snapshots[t] for t in range(1, 20))]
    assert set(actor_pids[19].values()) <= set(steady)
    grown = {
        f"{early[pid][0]} ({pid})": verdict
        for pid in steady
        if (verdict := leak([snapshots[t][pid][1] for t in range(1, 20)]))
    }
    assert not grown, grown


def test_the_leak_rule_passes_allocator_steps_and_catches_a_steady_leak():
    """The rule above on RSS series shaped like what was measured: flat, with steps, and with a leak."""
    mib = 2**20
    flat = [400 * mib + k * 50_000 for k in range(19)]  # the driver's history rows: 0.05 MB a round
    steps = [400 * mib + (9 * mib if k >= 6 else 0) + (45 * mib if k >= 13 else 0) for k in range(19)]
    assert leak(flat) is None
    assert leak(steps) is None  # 1.135×: the CI failure's shape, one arena step more
    tenth_of_a_round = [400 * mib + k * 96 * 10**4 for k in range(19)]  # 0.96 MB kept each round
    assert leak(tenth_of_a_round) is None  # below 1 MiB a round and 1.04× after 18 rounds: not seen
    a_fifth = [400 * mib + k * 2 * 96 * 10**4 for k in range(19)]
    assert leak(a_fifth) is not None and "a round" in leak(a_fifth)
    bursts = [400 * mib + (k // 6) * 40 * mib for k in range(19)]  # 40 MiB every sixth round
    assert leak(bursts) is not None and "×" in leak(bursts)
