"""Client steps compose: ``chain(clip(C), top_k, gaussian(σ))`` is one step, its metrics reach the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from sifl_ray import simulate
from sifl_ray.arms import Arm, ArmContext, PartySteps, unregister_arm
from sifl_ray.arms.dp_fedavg import clipped_update
from sifl_ray.arms.steps import Chain, chain, client_metrics, clip, gaussian, noise_share, to_update
from sifl_ray.models import MODEL_PARAM_COUNTS
from sifl_ray.party_seeds import ClientNoiseSeeds
from sifl_ray.privacy.dp_fedavg import add_distributed_noise_, clip_update_
from sifl_ray.privacy.nbafl import privatize_upload


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
        seeds = ClientNoiseSeeds(key_seed=ctx.cfg.coding.key_seed, key_dir=ctx.key_dir)
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
        got = simulate("quickstart", overrides, arms=["fl", SparseNoisy()], backend="sequential")
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
