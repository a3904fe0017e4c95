"""The arm interface: an arm defined here, in the test file, runs end to end on Ray and in-process with
identical numbers, and its steps do what they say (docs/extending.md, "To add an arm").

The toy arms are FedAvg with a server learning rate η (the server step: ``w ← w + η (avg − w)``) whose
clients add their own Gaussian noise (the client step), plain and under SIFL M1 coding.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest
import torch

from sifl_ray.arms import (
    ARMS,
    Arm,
    ArmContext,
    PartySteps,
    arm_names,
    get_arm,
    plain_releases,
    register_arm,
    unregister_arm,
)
from sifl_ray.arms.steps import clip
from sifl_ray.config import ConfigError, load_config
from sifl_ray.runner import Simulation
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding


@dataclass(frozen=True)
class ClientNoise:
    """Client step: clip like fl, then add N(0, σ² I) from a stream named by the run seed, client and round
    (a toy: a real mechanism's noise seed must be the client's secret, see ``ClientNoiseSeeds``)."""

    clip: float
    sigma: float
    seed: int

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        w, metrics = clip(self.clip)(w, start=start, arm=arm, client=client, t=t)
        if self.sigma:
            gen = torch_generator(self.seed, "toy-noise", client, t)
            noise = torch.randn(w.shape, generator=gen, dtype=torch.float64)
            w = w + self.sigma * noise.to(w.device)
        return w, metrics


@dataclass(frozen=True)
class ServerLearningRate:
    """Server step: move the global model a fraction η of the way to the clients' average."""

    eta: float

    def __call__(
        self, average: torch.Tensor, *, previous: torch.Tensor, arm: str, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return previous + self.eta * (average - previous), {}


class ToyArm(Arm):
    clip_key = "privacy.clip"

    def __init__(self, kind: str, *, coding: Coding = Coding.PLAIN, eta: float = 0.5, sigma: float = 0.01):
        self.kind, self.coding, self.eta, self.sigma = kind, coding, eta, sigma  # type: ignore[misc]

    def steps(self, ctx: ArmContext) -> PartySteps:
        client = ClientNoise(float(ctx.cfg.privacy.clip), self.sigma, int(ctx.cfg.seed))
        return PartySteps(client=client, server=ServerLearningRate(self.eta))

    def releases(self):
        return plain_releases("w_i + N(0, sigma^2 I)")


TOYS = {
    "toy_arm_plain": ToyArm("toy_arm_plain"),
    "toy_arm_m1": ToyArm("toy_arm_m1", coding=Coding.M1),
    "toy_arm_fedavg": ToyArm("toy_arm_fedavg", eta=1.0, sigma=0.0),  # must be fl exactly
    "toy_arm_half": ToyArm("toy_arm_half", sigma=0.0),
    "toy_arm_m1_half": ToyArm("toy_arm_m1_half", coding=Coding.M1, sigma=0.0),
}
TINY = [
    "scenario=quickstart",
    "clients.num_clients=6",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "output.progress=false",
    "output.plot=false",
]


@pytest.fixture(scope="module", autouse=True)
def toys():
    """Register the toy arms for this module (and let Ray's workers unpickle their steps by value: this
    file is not a package module they could import)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for arm in TOYS.values():
        register_arm(arm)
    yield TOYS
    for kind in TOYS:
        unregister_arm(kind)
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _run(tmp_path, *overrides: str, name: str = "run"):
    cfg = load_config([*TINY, f"output.dir={tmp_path}", *overrides])
    sim = Simulation(cfg, run_dir=tmp_path / name)
    result = sim.run()
    models = {arm: sim.global_model(arm) for arm in sim.arms}
    sim.close()
    return result, models


def test_toy_arm_runs_on_ray_and_in_process_with_identical_numbers(ray_session, tmp_path):
    # and built-in arms with all three steps, and with the uploads under secure aggregation
    arms = "arms=[fl,toy_arm_plain,toy_arm_m1,dp_fedavg,secagg,dp_fedavg_secagg]"
    ray_result, ray_models = _run(tmp_path, arms, "train.rounds=2", name="ray")
    seq_result, seq_models = _run(tmp_path, arms, "train.rounds=2", "backend=local", name="seq")
    for arm in ("fl", "toy_arm_plain", "toy_arm_m1", "dp_fedavg_eps5", "secagg", "dp_fedavg_secagg_eps5"):
        assert torch.equal(ray_models[arm], seq_models[arm]), arm
        assert [r["test_accuracy"] for r in ray_result.history[arm]] == [
            r["test_accuracy"] for r in seq_result.history[arm]
        ]
    # the toy really is another mechanism: noise and the server step move it away from FedAvg
    assert float((ray_models["toy_arm_plain"] - ray_models["fl"]).abs().max()) > 1e-3
    summary = ray_result.summary["arms"]["toy_arm_plain"]
    assert summary["clip_key"] == "privacy.clip" and summary["final_accuracy"] > 0.1


def _initial_model(tmp_path) -> torch.Tensor:
    cfg = load_config([*TINY, f"output.dir={tmp_path}", "arms=[fl]", "backend=local"])
    sim = Simulation(cfg, run_dir=tmp_path / "w0")
    w0 = sim.w0.to(torch.float64)
    sim.close()
    return w0


def test_toy_arm_steps_do_what_they_say(tmp_path):
    """η = 1 and σ = 0 is FedAvg to the bit; η = 1/2 moves half-way from w^0 to FedAvg's first average, and
    under M1 coding the server runs the same step on the models it decodes."""
    result, models = _run(
        tmp_path,
        "arms=[fl,toy_arm_fedavg,toy_arm_half,toy_arm_m1_half]",
        "train.rounds=1",
        "backend=local",
    )
    # w + 1·(avg − w) rounds twice (a subtraction, an addition): |error| ≤ 2u (|avg| + |w|) element by element
    u = torch.finfo(torch.float64).eps / 2
    w0 = _initial_model(tmp_path)
    slack = 2 * u * (models["fl"].abs() + w0.abs())
    assert bool(((models["toy_arm_fedavg"] - models["fl"]).abs() <= slack).all())
    expected = w0 + 0.5 * (models["fl"] - w0)
    assert torch.equal(models["toy_arm_half"], expected)
    # M1: round_bound bounds one round's coding error (client decode → uploads → sums → server decode →
    # encode → the evaluator's decode); the server step adds one decode of the previous broadcast, no larger
    # than the round's own decode terms, so twice the bound covers it.
    bound = result.summary["arms"]["toy_arm_m1_half"]["round_bound"]
    assert float(torch.linalg.vector_norm(models["toy_arm_m1_half"] - expected)) <= 2 * bound
    assert float(torch.linalg.vector_norm(models["toy_arm_m1_half"] - models["fl"])) > 100 * bound
    # not paired with fl (it is not meant to equal it): no deviation reported, no false alarm
    assert result.summary["arms"]["toy_arm_m1_half"]["max_deviation"] is None


def test_a_new_arm_is_validated_and_listed_like_a_built_in_one(tmp_path):
    assert {"fl", "sifl_m1", "sifl_m2", "nbafl", *TOYS} <= set(ARMS)
    cfg = load_config([*TINY, "arms=[toy_arm_plain,nbafl]", "nbafl.epsilons=[1,0.5]"])
    assert arm_names(cfg) == ["toy_arm_plain", "nbafl_eps1", "nbafl_eps0p5"]
    with pytest.raises(ConfigError, match="did you mean toy_arm_plain"):
        load_config([*TINY, "arms=[toy_arm_plian]"])
    with pytest.raises(ValueError, match="already registered"):
        register_arm(ToyArm("toy_arm_plain"))
    with pytest.raises(ValueError, match=r"coding must be a sifl_ray\.specs\.Coding"):
        register_arm(ToyArm("toy_arm_bad", coding="m1"))  # type: ignore[arg-type]  # a name, not a Coding
    assert get_arm("toy_arm_m1").coding is Coding.M1


def test_an_m2_arm_cannot_ask_its_server_for_a_plain_model(tmp_path):
    """An M2 server never holds a plain model: an arm whose server step needs one is refused when it is set
    up, before any round, not run on an encoded matrix."""
    register_arm(ToyArm("toy_arm_m2", coding=Coding.M2))
    try:
        cfg = load_config([*TINY, f"output.dir={tmp_path}", "arms=[toy_arm_m2]", "backend=local"])
        with pytest.raises(ValueError, match="an M2 server never holds one"):
            Simulation(cfg, run_dir=tmp_path / "m2")
    finally:
        unregister_arm("toy_arm_m2")
