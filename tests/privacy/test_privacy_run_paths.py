"""Every privacy figure holds on the path a run takes (docs/method.md "What a DP guarantee must say"), tested
through the run's own code: empty Poisson rounds still release noise, the sample is the sampling party's
secret, a replayed round draws the noise it drew the first time, and the distributed arm is attacked through
its own client step under the relation it states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sifl_ray.arms import arm_of
from sifl_ray.arms.dp_fedavg import CentralNoise
from sifl_ray.config import load_config
from sifl_ray.data import sample_clients
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.messages import Partial
from sifl_ray.party_seeds import ClientNoiseSeeds, party_seed
from sifl_ray.runner import Simulation
from sifl_ray.runner.state import Checkpoints
from sifl_ray.specs import Coding, CodingSpec

SMALL = [
    "backend=local",
    "clients.num_clients=10",
    "output.progress=false",
    "output.plot=false",
]


def _sim(tmp_path: Path, overrides: list[str], name: str = "run") -> Simulation:
    cfg = load_config([*SMALL, *overrides, f"output.dir={tmp_path}"])
    return Simulation(cfg, run_dir=tmp_path / name)


def test_a_poisson_round_with_nobody_sampled_still_releases_the_central_noise(tmp_path):
    """N = 10, q = 0.1: some rounds sample nobody. fl keeps its model there (the control: the check can
    see an unchanged release); dp_fedavg's aggregator releases its noise on a zero sum, so no released
    model equals the one before it bit for bit."""
    rounds = 12
    sim = _sim(
        tmp_path,
        [
            "arms=[fl,dp_fedavg]",
            "clients.sampling=poisson",
            "clients.fraction=0.1",
            f"train.rounds={rounds}",
            "coding.key_seed=3",
        ],
    )
    try:
        dp = next(a for a in sim.arms if a.startswith("dp_fedavg"))
        previous = {arm: sim.global_model(arm) for arm in ("fl", dp)}
        empty, fl_unchanged = 0, 0
        for t in range(rounds):
            sampled = sum(len(c) for c in sim.assignment(t))
            empty += sampled == 0
            for arm in ("fl", dp):
                result = sim.play_round(arm, t)
                model = sim.global_model(arm)
                same = torch.equal(model, previous[arm])
                if arm == dp:
                    assert not result.skipped, t
                    assert not same, f"round {t} of {dp} released its previous model ({sampled} sampled)"
                else:
                    fl_unchanged += same
                    assert same == (sampled == 0), t
                previous[arm] = model
        # P(a round is empty) = 0.9^10 ≈ 0.35: the seed was chosen so that this run has such rounds
        assert empty >= 2 and fl_unchanged == empty
    finally:
        sim.close()


def test_a_skipped_round_is_reported_as_released_unchanged(tmp_path):
    """The summary says what an unchanged model reveals, never "nothing revealed"."""
    sim = _sim(
        tmp_path,
        [
            "arms=[fl]",
            "clients.sampling=poisson",
            "clients.fraction=0.1",
            "train.rounds=4",
            "coding.key_seed=3",
        ],
    )
    try:
        assert any(not any(sim.assignment(t)) for t in range(4))
        summary = sim.run().summary
    finally:
        sim.close()
    text = str(summary)
    assert "released unchanged" in text
    assert "nothing revealed" not in text


def test_the_sample_comes_from_the_samplers_secret_seed_not_the_run_seed(tmp_path):
    """The run seed is printed in config.yaml: a sample drawn from it is public. With coding.key_seed set,
    the sample is the sampler's derived seed (reproducible); unset, a secure random one, kept in the key
    folder so that a resume draws the same samples."""
    over = ["arms=[fl]", "clients.sampling=poisson", "clients.fraction=0.5", "train.rounds=10"]
    sim = _sim(tmp_path, [*over, "coding.key_seed=5"], "derived")
    try:
        drawn = [sorted(c for w in sim.assignment(t) for c in w) for t in range(10)]
    finally:
        sim.close()
    public = [list(sample_clients(10, 0.5, t, 0, "poisson")) for t in range(10)]  # the run seed (0)
    secret = [list(sample_clients(10, 0.5, t, party_seed(5, "run", "sampler"), "poisson")) for t in range(10)]
    assert drawn == secret and drawn != public

    cfg = load_config([*SMALL, *over, f"output.dir={tmp_path}"])  # key_seed unset
    first = Checkpoints(cfg, run_dir=tmp_path / "a", key_dir=tmp_path / "keys", arms=["fl"])
    first.make_key_dir()
    seed = first.sampler_seed()
    again = Checkpoints(cfg, run_dir=tmp_path / "a", key_dir=tmp_path / "keys", arms=["fl"])
    other = Checkpoints(cfg, run_dir=tmp_path / "b", key_dir=tmp_path / "other", arms=["fl"])
    other.make_key_dir()
    assert len(seed) == 32 and again.sampler_seed() == seed  # what a resume reads back
    assert other.sampler_seed() != seed  # another run: another secret (collision 2^-256)
    assert (tmp_path / "keys" / "sampler-run.key").stat().st_mode & 0o077 == 0


def _partial(x: torch.Tensor, t: int) -> Partial:
    return Partial(source=0, round=t, key_epoch=0, weighted_sum=x.clone(), weight=2.0, accepted=2)


def test_a_respawned_aggregator_replays_the_central_noise_it_drew_before(tmp_path):
    """With coding.key_seed unset the aggregator's noise seed is secure random: it must live in the
    aggregator's key file, so that a respawned aggregator replaying a round releases the same model
    (two independent draws on one sum average the noise down)."""
    coding = CodingSpec.from_config(load_config(["coding.key_seed=null"]))
    path = str(tmp_path / "aggregator-dp.key")
    step = CentralNoise(noise_multiplier=1.0, clip=1.0, expected_clients=2.0)
    x = torch.linspace(-1, 1, 50, dtype=torch.float64)

    def release(actor: AggregatorHost) -> torch.Tensor:
        actor.set_step("dp", step)
        out, _ = actor.reduce("dp", 4, 0, _partial(x, 4))
        return out

    first = AggregatorHost(0)
    first.create_key("dp", coding=Coding.PLAIN, spec=coding, key_path=path)
    first.setup_arm("dp", coding=Coding.PLAIN, spec=coding, state=None, bounds=(0, 50))
    # set up from the state it made (what the runner hands every shard): read it back from the file
    first.restore_arm("dp", coding=Coding.PLAIN, spec=coding, key_path=path, bounds=(0, 50))
    before = release(first)
    respawned = AggregatorHost(0)
    respawned.restore_arm("dp", coding=Coding.PLAIN, spec=coding, key_path=path, bounds=(0, 50))
    assert torch.equal(release(respawned), before)
    stranger = AggregatorHost(0)  # another aggregator's secret: other noise (the check can fail)
    stranger.create_key("dp", coding=Coding.PLAIN, spec=coding, key_path=str(tmp_path / "x.key"))
    stranger.restore_arm(
        "dp", coding=Coding.PLAIN, spec=coding, key_path=str(tmp_path / "x.key"), bounds=(0, 50)
    )
    assert not torch.equal(release(stranger), before)


def test_a_replaced_worker_draws_its_clients_noise_again_from_their_key_files(tmp_path):
    """A client's noise seed outlives its worker: a fresh ClientNoiseSeeds on the same key folder (a
    replaced worker, or every worker after a resume) gives the same stream; another folder does not."""
    a = ClientNoiseSeeds(key_seed=None, key_dir=str(tmp_path))
    draw = torch.randn(8, generator=a.generator("nbafl_eps1", 3, 7), dtype=torch.float64)
    b = ClientNoiseSeeds(key_seed=None, key_dir=str(tmp_path))
    assert torch.equal(torch.randn(8, generator=b.generator("nbafl_eps1", 3, 7), dtype=torch.float64), draw)
    c = ClientNoiseSeeds(key_seed=None, key_dir=str(tmp_path / "elsewhere"))
    assert not torch.equal(
        torch.randn(8, generator=c.generator("nbafl_eps1", 3, 7), dtype=torch.float64), draw
    )
    assert (tmp_path / "client-3-nbafl_eps1.key").exists()


@pytest.mark.ray
def test_an_aggregator_killed_mid_run_replays_the_releases_it_made(ray_session, tmp_path):
    """Checkpoints every 3 rounds, the aggregator killed in round 4: rounds from 3 are replayed from the
    checkpoint of round 2. Round 3's model was released before the fault; with key_seed unset its replay
    must release the same model, so every step of the arm's curves has one value, however often written."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    sim = _sim(
        tmp_path,
        [
            "backend=ray",
            "ray.num_workers=2",
            "arms=[dp_fedavg]",
            "dp_fedavg.epsilons=[5]",
            "train.rounds=6",
            "checkpoint.every=3",
            "faults.inject=[{kind: aggregator_kill, round: 4, arm: dp_fedavg_eps5}]",
            "ray.placement=separate",  # a party killed alone: its own process
        ],
    )
    try:
        result = sim.run()
    finally:
        sim.close()
    # ray.kill is asynchronous: noticed in round 4 or 5; either way round 3 had been released before
    assert [r["replayed_from_round"] for r in result.summary["restored"]] == [3]
    values: dict[int, set[float]] = {}
    writes = 0
    for f in sorted((result.run_dir / "tb" / "dp_fedavg_eps5").glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(f)).Load():
            for v in event.summary.value:
                if v.tag == "eval/test_loss":
                    values.setdefault(event.step, set()).add(float(v.tensor.float_val[0]))
                    writes += 1
    assert writes > 6  # round 3 was released twice: before the fault and in the replay
    assert all(len(v) == 1 for v in values.values()), values


def test_distributed_dp_states_zero_out_and_counts_every_round(tmp_path):
    """The distributed arm's noise counts the clients in the sum (each adds (zC)²/t), so its report states
    the zero-out relation and an unamplified ε; attacked through its own client step, the variance of a
    round's noise does grow with the clients in it, as the zero-out statement assumes (and add/remove
    would not survive)."""
    cfg = load_config([*SMALL, "arms=[dp_fedavg_secagg]", "clients.sampling=poisson", "clients.fraction=0.5"])
    arm = arm_of(cfg, "dp_fedavg_secagg_eps5")
    from sifl_ray.arms.base import ArmContext
    from sifl_ray.privacy.dp_fedavg import epsilon

    ctx = ArmContext(cfg=cfg, arm="dp_fedavg_secagg_eps5", n=400, local_size=10, total_size=100)
    report = arm.privacy(ctx)
    assert report["neighbour_relation"].startswith("zero-out")
    assert report["amplified_by_sampling"] is False
    z = report["noise_multiplier"]
    rounds, delta = int(cfg.train.rounds), float(cfg.dp_fedavg.delta)
    unamplified = epsilon(noise_multiplier=z, sample_rate=1.0, steps=rounds, delta=delta)
    assert report["epsilon"] == pytest.approx(unamplified, rel=1e-9) and report["epsilon"] <= 5.0 * (1 + 1e-9)
    assert report["epsilon_roster_known"] == report["epsilon"]
    # the central arm keeps add/remove with amplification, and names the ε against the sampler
    central_cfg = load_config(
        [*SMALL, "arms=[dp_fedavg]", "clients.sampling=poisson", "clients.fraction=0.5"]
    )
    central_ctx = ArmContext(cfg=central_cfg, arm="dp_fedavg_eps5", n=400, local_size=10, total_size=100)
    c_report = arm_of(central_cfg, "dp_fedavg_eps5").privacy(central_ctx)
    assert c_report["neighbour_relation"].startswith("add/remove") and c_report["amplified_by_sampling"]
    assert c_report["epsilon_roster_known"] > c_report["epsilon"]

    # the client step itself: k clients' noise shares, all updates zero; the variance of the sum is k·σ²/t
    steps = arm.steps(ctx)
    t = arm.num_noisers(cfg)
    start = torch.zeros(4000, dtype=torch.float64)

    def noise_sum(k: int) -> torch.Tensor:
        return sum(steps.client(start.clone(), start=start, arm="x", client=c, t=0)[0] for c in range(k))

    sigma2 = (z * float(cfg.dp_fedavg.clip)) ** 2 / t
    for k in (t, t + 2):
        var = float(noise_sum(k).var())
        # the sample variance of 4000 Gaussians: relative sd sqrt(2/3999) ≈ 0.022; 8 sd is a 1e-15 miss
        assert var == pytest.approx(k * sigma2, rel=8 * np.sqrt(2 / 3999))
