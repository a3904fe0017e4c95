"""Steps compose: ``chain(clip(C), top_k, gaussian(σ))`` is one client step, ``chain(clip(S), add_update())``
one server step; each party's metrics reach the run (``client/``, ``aggregator/``, ``server/``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from sifl_ray import simulate
from sifl_ray.arms import Arm, ArmContext, PartySteps, unregister_arm
from sifl_ray.arms.dp_fedavg import CentralNoise, clipped_update
from sifl_ray.arms.steps import (
    Chain,
    add_update,
    chain,
    client_metrics,
    clip,
    fixed_denominator,
    gaussian,
    noise_share,
    party_metrics,
    to_update,
)
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.coding.identity import IdentityKey
from sifl_ray.config import load_config
from sifl_ray.models import MODEL_PARAM_COUNTS
from sifl_ray.parties.aggregator import Aggregator
from sifl_ray.parties.messages import Partial
from sifl_ray.parties.server import Server
from sifl_ray.party_seeds import ClientNoiseSeeds, party_seed
from sifl_ray.privacy.dp_fedavg import add_central_noise, add_distributed_noise_, clip_update_
from sifl_ray.privacy.nbafl import privatize_upload
from sifl_ray.seeding import secret_torch_generator
from sifl_ray.specs import Coding


@dataclass(frozen=True)
class TopK:
    """Keep the ``fraction`` largest coordinates of the update, zero the others (metric: ``sparsity``)."""

    fraction: float

    def __call__(self, w, *, start, arm, client, t):
        update = w - start
        k = max(1, int(self.fraction * update.numel()))
        small = update.abs().argsort(descending=True)[k:]
        update[small] = 0.0
        return start + update, {"sparsity": small.numel() / update.numel()}


def _vec(seed: int, n: int = 300, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_a_chain_runs_its_steps_in_order_and_sums_their_metrics():
    start, w = _vec(0), _vec(1)
    step = chain(clip(5.0), TopK(0.1), clip(1.0))
    out, metrics = step(w.clone(), start=start, arm="a", client=0, t=0)
    assert metrics == {"clipped": 2.0, "sparsity": 270 / 300}  # clipped by both clips
    assert float(torch.linalg.vector_norm(out)) <= 1.0
    by_hand = w.clone()
    clip(5.0)(by_hand, arm="a", client=0, t=0)
    by_hand, _ = TopK(0.1)(by_hand, start=start, arm="a", client=0, t=0)
    clip(1.0)(by_hand, arm="a", client=0, t=0)
    assert torch.equal(out, by_hand)
    assert chain(step, clip(2.0)) == Chain((*step.steps, clip(2.0)))  # a chain in a chain is flattened
    assert chain(clip(2.0)) == clip(2.0)


def test_the_built_in_chains_are_the_mechanisms_by_hand_bit_for_bit():
    start, w = _vec(2), _vec(3, scale=10.0)
    seeds = ClientNoiseSeeds(key_seed=4)
    # NbAFL: clip the model, add N(0, σ²) from the client's stream (privacy.nbafl's mechanism)
    nbafl, metrics = chain(clip(2.0), gaussian(0.3, seeds))(w.clone(), start=start, arm="nb", client=5, t=2)
    expected = privatize_upload(w, clip=2.0, sigma=0.3, generator=seeds.generator("nb", 5, 2))
    assert torch.equal(nbafl, expected) and metrics == {"clipped": 1.0}
    # distributed DP-FedAvg: clip the update, add this client's noise share
    share = chain(clipped_update(0.5), noise_share(1.1, 0.5, 3, seeds))
    got, metrics = share(w.clone(), start=start, arm="dp", client=1, t=0)
    update = w - start
    clip_update_(update, 0.5)
    add_distributed_noise_(
        update, noise_multiplier=1.1, clip=0.5, num_noisers=3, generator=seeds.generator("dp", 1, 0)
    )
    assert torch.equal(got, update) and metrics == {"clipped": 1.0}
    assert clipped_update(0.5) == Chain((to_update(), clip(0.5)))


def test_the_round_reports_each_metric_as_its_mean_over_the_clients():
    got = client_metrics([({"clipped": 2.0, "sparsity": 1.5}, 2), ({"clipped": 1.0, "sparsity": 0.75}, 1)])
    assert got == {"client/clipped": 1.0, "client/sparsity": 0.75}
    assert client_metrics([({}, 0)]) == {}


class SparseNoisy(Arm):
    """An arm made of steps only: clip, top-k, Gaussian noise."""

    kind: ClassVar[str] = "sparse_noisy_test"
    clip_key: ClassVar[str | None] = "privacy.clip"

    def steps(self, ctx: ArmContext) -> PartySteps:
        seeds = self.client_noise_seeds(ctx)
        return PartySteps(client=chain(clip(ctx.cfg.privacy.clip), TopK(0.25), gaussian(1e-3, seeds)))


def test_a_composed_arms_metrics_reach_its_history_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    overrides = {
        "train.rounds": 2,
        "clients.num_clients": 4,
        "coding.key_seed": 1,
        "privacy.clip": 3.0,
        "output.dir": str(tmp_path),
        "output.plot": False,
        "output.progress": False,
    }
    try:
        got = simulate("quickstart", overrides, arms=["fl", SparseNoisy()], backend="local")
    finally:
        unregister_arm(SparseNoisy.kind)
    for record in got.history["sparse_noisy_test"]:
        n = MODEL_PARAM_COUNTS["digits_mlp"]
        assert record["client/sparsity"] == (n - int(0.25 * n)) / n
        assert record["client/clipped"] == record["clients/clipped"] / 4
    assert "client/sparsity" not in got.history["fl"][0]
    assert got.history["fl"][0]["client/clipped"] == got.history["fl"][0]["clients/clipped"] / 4
    events = EventAccumulator(str(Path(got.run_dir) / "tb" / "sparse_noisy_test"))
    events.Reload()
    assert [e.step for e in events.Scalars("system/client/sparsity")] == [0, 1]


# The aggregator's and the server's steps: the same contract, the same chain.

AGG = {"arm": "a", "t": 3, "shard": 1, "bounds": (0, 300), "seed": None}


def test_aggregator_and_server_steps_chain_like_the_clients():
    average, previous = _vec(4), _vec(5)
    # the aggregator: the fixed-denominator mean, then a clip any party can run
    out, metrics = chain(fixed_denominator(4.0), clip(1.0))(average.clone(), weight=2.0, **AGG)
    by_hand = average * (2.0 / 4.0)
    clip(1.0)(by_hand)
    assert torch.equal(out, by_hand) and metrics == {"clipped": 1.0}
    # the server: clip the average update, then add it to the model the round started from
    new, metrics = chain(clip(0.5), add_update())(average.clone(), previous=previous, arm="a", t=3)
    assert metrics == {"clipped": 1.0}
    assert float(torch.linalg.vector_norm(new - previous)) == pytest.approx(0.5, rel=1e-12)
    # on a zero sum (a round nobody took part in) central noise still releases noise: what an arm whose
    # guarantee releases every round needs of its step (sifl_ray/arms/conformance.py)
    from sifl_ray.arms.conformance import TRIAL_SEED

    noise = CentralNoise(noise_multiplier=1.0, clip=1.0, expected_clients=4.0, key_seed=1)
    zero = torch.zeros(6, dtype=torch.float64)
    out, _ = chain(fixed_denominator(4.0), noise)(zero.clone(), weight=0.0, **{**AGG, "seed": TRIAL_SEED})
    assert torch.all(out != 0)
    out, _ = chain(fixed_denominator(4.0), clip(1.0))(zero.clone(), weight=0.0, **AGG)
    assert torch.equal(out, zero)


def test_the_built_in_aggregator_and_server_steps_are_the_old_mechanism_bit_for_bit():
    """dp_fedavg, dp_fedavg_secagg and secagg as their arms build them, against the formulas the steps
    replaced (CentralNoise returning the bare tensor, FixedDenominator and AddUpdate in the arms' modules),
    and through the roles that run them."""
    from sifl_ray.arms import arm_of
    from sifl_ray.arms.base import ArmContext

    common = [
        "clients.num_clients=10",
        "clients.fraction=0.5",
        "clients.sampling=poisson",
        "coding.key_seed=7",
    ]
    cfg = load_config([*common, "arms=[dp_fedavg,dp_fedavg_secagg,secagg]", "dp_fedavg.epsilons=[5]"])
    n, k, m = 300, 3.0, 5.0
    average, previous = _vec(6), _vec(7)
    # the aggregator's secret, as its key file holds it (sifl_ray.parties.aggregator.make_aggregator_state)
    seed = party_seed(7, "dp_fedavg_eps5", "aggregator-dp-noise")

    def built(arm: str):
        ctx = ArmContext(cfg=cfg, arm=arm, n=n, local_size=20, total_size=200, largest_size=20)
        return arm_of(cfg, arm).steps(ctx)

    central = built("dp_fedavg_eps5")
    z = central.aggregator.noise_multiplier
    out, metrics = central.aggregator(
        average, arm="dp_fedavg_eps5", t=3, shard=1, bounds=(0, n), weight=k, seed=seed
    )
    old = add_central_noise(
        average * (k / m),
        noise_multiplier=z,
        clip=1.0,
        expected_clients=m,
        generator=secret_torch_generator(seed, "noise", "dp_fedavg", 3, 1),
    )
    assert torch.equal(out, old) and metrics == {"noise_std": z * 1.0 / m}
    distributed = built("dp_fedavg_secagg_eps5")
    out, metrics = distributed.aggregator(average, weight=k, **AGG)
    assert torch.equal(out, average * (k / m)) and metrics == {}
    for steps in (central, distributed, built("secagg")):
        new, metrics = steps.server(average, previous=previous, arm="a", t=3)
        assert torch.equal(new, previous + average) and metrics == {}

    # through the aggregator role (one shard's sum of two partials) and the server role (plain coding)
    shard = Aggregator(
        coding=Coding.PLAIN,
        key=None,
        noise=NoiseSpec(),
        noise_seed=b"",
        bounds=(0, n),
        shard=1,
        step_seed=seed,
    )
    parts = [
        Partial(source=s, round=3, key_epoch=0, weighted_sum=_vec(8 + s), weight=1.5, accepted=1)
        for s in (0, 1)
    ]
    reduced, info = shard.reduce(3, 0, parts, step=central.aggregator, arm="dp_fedavg_eps5")
    mean = (parts[0].weighted_sum + parts[1].weighted_sum) / 3.0
    old = add_central_noise(
        mean * (3.0 / m),
        noise_multiplier=z,
        clip=1.0,
        expected_clients=m,
        generator=secret_torch_generator(seed, "noise", "dp_fedavg", 3, 1),
    )
    assert torch.equal(reduced, old) and info["step_metrics"] == {"noise_std": z / m}
    server = Server(coding=Coding.PLAIN, key=IdentityKey(n), noise=NoiseSpec(), noise_seed=b"")
    broadcast, info = server.finish_round(3, average, previous=previous, step=central.server, arm="a")
    assert torch.equal(broadcast, previous + average) and info["step_metrics"] == {}


def test_the_round_reports_a_partys_metrics_as_their_mean_over_its_calls():
    got = party_metrics(
        "aggregator", [{"noise_std": 0.25, "clipped": 1.0}, {"noise_std": 0.25, "clipped": 0.0}]
    )
    assert got == {"aggregator/noise_std": 0.25, "aggregator/clipped": 0.5}
    assert party_metrics("server", [{}]) == {} and party_metrics("aggregator", []) == {}


@dataclass(frozen=True)
class UpdateNorm:
    """A server step of a plug-in: reports how far the average update moves the model (``update_norm``)."""

    def __call__(self, average, *, previous, arm, t):
        return average, {"update_norm": float(torch.linalg.vector_norm(average))}


class ServerClipped(Arm):
    """The top-k example's pattern on the server: clipped updates from the clients; the server measures
    the average update, clips it to a tiny S and adds it (a composed server step)."""

    kind: ClassVar[str] = "server_clipped_test"
    clip_key: ClassVar[str | None] = "privacy.clip"
    uploads: ClassVar[str] = "update"

    def steps(self, ctx: ArmContext) -> PartySteps:
        server = chain(UpdateNorm(), clip(1e-3), add_update())
        return PartySteps(client=clipped_update(ctx.cfg.privacy.clip), server=server)


def test_a_composed_server_step_and_the_aggregators_noise_reach_the_history_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    overrides = {
        "train.rounds": 2,
        "clients.num_clients": 4,
        "coding.key_seed": 1,
        "dp_fedavg.epsilons": [5],
        "output.dir": str(tmp_path),
        "output.plot": False,
        "output.progress": False,
    }
    try:
        got = simulate("quickstart", overrides, arms=["dp_fedavg", ServerClipped()], backend="local")
    finally:
        unregister_arm(ServerClipped.kind)
    plug_in = got.history["server_clipped_test"]
    for record in plug_in:
        assert record["server/update_norm"] > 1e-3 and record["server/clipped"] == 1.0
    assert not any(name.startswith("aggregator/") for name in plug_in[0])  # it has no aggregator step
    noise_std = got.history["dp_fedavg_eps5"][0]["aggregator/noise_std"]
    privacy = got.summary["arms"]["dp_fedavg_eps5"]["privacy"]
    assert noise_std == pytest.approx(privacy["noise_multiplier"] * privacy["clip"] / 4)  # zC/(qN), q = 1
    tb = Path(got.run_dir) / "tb"
    events = EventAccumulator(str(tb / "server_clipped_test"))
    events.Reload()
    norms = events.Scalars("system/server/update_norm")
    assert [e.step for e in norms] == [0, 1]
    assert [e.value for e in norms] == pytest.approx([r["server/update_norm"] for r in plug_in], rel=1e-6)
    assert [e.value for e in events.Scalars("system/server/clipped")] == [1.0, 1.0]
    events = EventAccumulator(str(tb / "dp_fedavg_eps5"))
    events.Reload()
    assert [e.value for e in events.Scalars("system/aggregator/noise_std")] == pytest.approx([noise_std] * 2)
