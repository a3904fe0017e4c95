"""Vectorised clients in whole runs: Ray ≡ in-process to the bit with clients of unequal sizes, the vectorised
path really taken (``train.vectorise=false`` gives other bits), and a fallback said once per run.

60 clients on two workers: each worker's largest group of one minibatch count (19 and 14 clients) trains
together, its smaller groups (from 1 to 10 clients, below ``MIN_TOGETHER``) one client at a time."""

from __future__ import annotations

import pytest
import torch

from sifl_ray.config import load_config
from sifl_ray.optim import vectorised
from sifl_ray.parties.upload import PlainSum
from sifl_ray.runner import Simulation

RUN = [
    "scenario=quickstart",
    "train.rounds=2",
    "clients.num_clients=60",
    "data.partition=dirichlet",  # unequal client sizes: several minibatch counts, ragged minibatches
    "train.optimizer=momentum",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "output.progress=false",
    "output.tensorboard=false",
    "output.plot=false",
    "arms=[fl,sifl_m1,nbafl,dp_fedavg]",
    "dp_fedavg.clip=10",  # dp_fedavg: 60 clients and its default ε: a noise the models survive
]


def _models(tmp_path, *extra: str) -> dict[str, torch.Tensor]:
    cfg = load_config([*RUN, f"output.dir={tmp_path}", *extra])
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    sim.run()
    models = {arm: sim.global_model(arm) for arm in sim.arms}
    sim.close()
    return models


@pytest.mark.ray
def test_ray_and_in_process_runs_agree_with_vectorised_clients(ray_session, tmp_path):
    ray_models = _models(tmp_path / "ray")
    seq_models = _models(tmp_path / "seq", "backend=local")
    loop_models = _models(tmp_path / "loop", "backend=local", "train.vectorise=false")
    for arm in ray_models:
        assert torch.equal(ray_models[arm], seq_models[arm]), arm
    # the clients were trained together: another summation order, other last bits
    assert not torch.equal(seq_models["fl"], loop_models["fl"])


@pytest.mark.ray
def test_one_step_clients_summed_agree_across_backends(ray_session, tmp_path, monkeypatch):
    """One local step (``train.local_steps=1``): fl's and SIFL M1's workers add each chunk as one sum of
    gradients (:meth:`~sifl_ray.optim.vectorised.ClientRound.summed`; counted in the in-process run),
    NbAFL's and DP-FedAvg's clip every client's model; Ray ≡ in-process to the bit all the same."""
    ray_models = _models(tmp_path / "ray", "train.local_steps=1")
    sums: list[bool] = []
    add = PlainSum.add_summed
    monkeypatch.setattr(PlainSum, "add_summed", lambda self, *a: sums.append(add(self, *a)) or sums[-1])
    seq_models = _models(tmp_path / "seq", "backend=local", "train.local_steps=1")
    # two arms, two rounds, two workers, at least one chunk of MIN_TOGETHER clients each, all finite
    assert len(sums) >= 8 and all(sums)
    for arm in ray_models:
        assert torch.equal(ray_models[arm], seq_models[arm]), arm


def test_a_fallback_is_said_once_per_run(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(vectorised, "_SAID", set())
    _models(tmp_path, "backend=local", "train.optimizer=RMSprop", "arms=[fl,sifl_m1]")
    lines = [line for line in capfd.readouterr().err.splitlines() if "one at a time" in line]
    assert lines == [
        "[sifl] client workers train their clients one at a time: optimizer RMSprop has no vectorised form "
        "(sgd, momentum and adam have)"
    ]
