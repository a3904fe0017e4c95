"""The runner samples clients as the configuration says (``clients.sampling``): the round's clients a
Simulation hands its workers (:meth:`Simulation.assignment`, what :meth:`run` plays) are a Poisson sample
when DP-FedAvg's accountant assumes one, and exactly ⌈qN⌉ clients when the run asks for a fixed size."""

from __future__ import annotations

import math

from sifl_ray.config import load_config
from sifl_ray.runner import Simulation

ROUNDS = 60


def round_sizes(tmp_path, sampling: str, arms: str) -> list[int]:
    cfg = load_config(
        [
            "scenario=quickstart",
            f"arms={arms}",
            "clients.num_clients=10",
            "clients.fraction=0.5",
            f"clients.sampling={sampling}",
            "backend=local",
            "ray.num_workers=3",
            "output.progress=false",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        rounds = [sim.assignment(t) for t in range(ROUNDS)]
    finally:
        sim.close()
    for workers in rounds:  # each sampled client once, on the worker that owns it
        clients = [c for w in workers for c in w]
        assert len(set(clients)) == len(clients) and all(0 <= c < 10 for c in clients)
        assert all(sim.owner[c] == k for k, w in enumerate(workers) for c in w)
    return [sum(len(w) for w in workers) for workers in rounds]


def test_a_poisson_run_samples_each_client_independently(tmp_path):
    """q = 0.5, N = 10: a round's size is Binomial(10, 0.5), which is 5 with probability 252/1024 < 0.25,
    so 60 rounds all of size 5 (a fixed-size sample where the printed ε assumes Poisson) has probability
    below 0.25^60 < 1e-36 under correct sampling, whatever the seed."""
    sizes = round_sizes(tmp_path, "poisson", "[dp_fedavg]")
    assert len(set(sizes)) > 1, sizes
    assert any(s != 5 for s in sizes)


def test_a_fixed_size_run_takes_exactly_ceil_qN_clients(tmp_path):
    sizes = round_sizes(tmp_path, "fixed", "[fl]")
    assert sizes == [math.ceil(0.5 * 10)] * ROUNDS
