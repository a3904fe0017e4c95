"""The dp_fedavg arm (DP-FedAvg, central noise): its steps do what Algorithm 1 says, its ε comes from the
accountant and is logged round by round, and it runs through the platform like every arm."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from sifl_ray.arms.dp_fedavg import CentralNoise, clipped_update
from sifl_ray.arms.steps import add_update
from sifl_ray.config import ConfigError, load_config
from sifl_ray.privacy.dp_fedavg import central_noise_std, epsilon
from sifl_ray.runner import Simulation


def _vec(n: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_client_step_uploads_the_clipped_update():
    start, w = _vec(50, 0), _vec(50, 1)
    update, metrics = clipped_update(0.5)(w.clone(), start=start, arm="a", client=3, t=0)
    assert metrics == {"clipped": 1.0} and float(torch.linalg.vector_norm(update)) <= 0.5
    assert torch.allclose(
        update / torch.linalg.vector_norm(update), (w - start) / torch.linalg.vector_norm(w - start)
    )
    small = start + 1e-3 * _vec(50, 2)
    update, metrics = clipped_update(0.5)(small, start=start, arm="a", client=3, t=0)
    assert metrics == {"clipped": 0.0} and torch.equal(update, small - start)


def test_aggregator_step_is_the_fixed_denominator_mean_plus_noise_of_std_zC_over_m():
    """k accepted clients of an expected m: Σ Δ_i / k becomes Σ Δ_i / m, plus N(0, (zC/m)²) per element."""
    average, k, m = _vec(200_000, 3), 7.0, 10.0
    exact = CentralNoise(noise_multiplier=0.0, clip=1.0, expected_clients=m, key_seed=1)
    out, metrics = exact(average, arm="a", t=0, shard=0, bounds=(0, 200_000), weight=k)
    assert torch.equal(out, average * (k / m)) and metrics == {"noise_std": 0.0}
    step = CentralNoise(noise_multiplier=1.3, clip=2.0, expected_clients=m, key_seed=1)
    out, metrics = step(average, arm="a", t=4, shard=0, bounds=(0, 200_000), weight=k)
    noise = out - average * (k / m)
    std = central_noise_std(noise_multiplier=1.3, clip=2.0, expected_clients=m)
    assert std == pytest.approx(1.3 * 2.0 / m) and metrics == {"noise_std": std}
    # the sample std of N draws is within 6/sqrt(2N) of σ (relative) with overwhelming probability
    assert abs(float(noise.std()) / std - 1) <= 6 / math.sqrt(2 * noise.numel())
    assert abs(float(noise.mean())) <= 6 * std / math.sqrt(noise.numel())
    # reproducible with a key seed (the same draw on Ray and in-process), fresh per round and shard
    again = CentralNoise(noise_multiplier=1.3, clip=2.0, expected_clients=m, key_seed=1)
    kw = {"arm": "a", "shard": 0, "bounds": (0, 10), "weight": k}
    assert torch.equal(again(average[:10], t=4, **kw)[0], step(average[:10], t=4, **kw)[0])
    assert not torch.equal(step(average[:10], t=5, **kw)[0], step(average[:10], t=4, **kw)[0])


def test_aggregator_noise_seed_is_secret_and_never_pickled():
    """Without a key seed the noise seed is secure random, made where the step runs, and not pickled."""
    a = CentralNoise(noise_multiplier=1.0, clip=1.0, expected_clients=4.0)
    b = CentralNoise(noise_multiplier=1.0, clip=1.0, expected_clients=4.0)
    kw = {"arm": "a", "t": 0, "shard": 0, "bounds": (0, 100), "weight": 4.0}
    zero = torch.zeros(100, dtype=torch.float64)
    assert not torch.equal(a(zero, **kw)[0], b(zero, **kw)[0])
    assert a._seeds and pickle.loads(pickle.dumps(a))._seeds == {}


def test_server_step_adds_the_noisy_mean_update():
    prev, avg = _vec(20, 4), _vec(20, 5, 1e-2)
    new, metrics = add_update()(avg, previous=prev, arm="a", t=0)
    assert torch.equal(new, prev + avg) and metrics == {}


def test_dp_fedavg_needs_poisson_sampling_below_full_participation():
    with pytest.raises(ConfigError, match=r"set clients\.sampling=poisson"):
        load_config(["arms=[dp_fedavg]", "clients.fraction=0.5"])
    with pytest.raises(ConfigError, match=r"dp_fedavg\.epsilons: expected every ε > 0"):
        load_config(["arms=[dp_fedavg]", "dp_fedavg.epsilons=[0]"])
    with pytest.raises(ConfigError, match=r"dp_fedavg\.accountant"):
        load_config(["arms=[dp_fedavg]", "dp_fedavg.accountant=moments"])
    load_config(["arms=[dp_fedavg]", "clients.fraction=0.5", "clients.sampling=poisson"])


def test_dp_fedavg_run_reports_the_accountants_epsilon_round_by_round(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = load_config(
        [
            "arms=[fl,dp_fedavg]",
            "dp_fedavg.epsilons=[5]",
            "clients.sampling=poisson",
            "clients.fraction=0.5",
            "train.rounds=3",
            "backend=local",
            "coding.key_seed=2",
            "output.progress=false",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    result = sim.run()
    models = {arm: sim.global_model(arm) for arm in sim.arms}
    sim.close()
    priv = result.summary["arms"]["dp_fedavg_eps5"]["privacy"]
    history = priv["epsilon_per_round"]
    assert len(history) == 3 and history[0] < history[1] < history[2]
    # calibrated: the accountant's ε after T rounds meets the target, and is this z's ε recomputed
    z = priv["noise_multiplier"]
    again = epsilon(noise_multiplier=z, sample_rate=0.5, steps=3, delta=cfg.dp_fedavg.delta)
    assert history[-1] <= 5.0 * (1 + 1e-9) and history[-1] == pytest.approx(again, rel=1e-9)
    assert priv["epsilon"] == history[-1] and priv["sampling"] == "poisson"
    acc = EventAccumulator(str(tmp_path / "run" / "tb" / "dp_fedavg_eps5"))
    acc.Reload()
    logged = [(e.step, e.value) for e in acc.Scalars("privacy/epsilon_whole_vector")]
    assert [s for s, _ in logged] == [0, 1, 2]
    assert [v for _, v in logged] == pytest.approx(history, rel=1e-6)  # TensorBoard stores float32
    # the noise is there: the model is not FedAvg's
    assert float((models["dp_fedavg_eps5"] - models["fl"]).abs().max()) > 1e-3


def test_the_audit_of_the_arms_own_noise_stays_below_the_accountants_epsilon():
    """An empirical check of the accountant: one round of the arm's aggregator step (as the arm builds it,
    z calibrated for ε = 5 over 3 rounds) on neighbouring populations; the Clopper–Pearson lower bound on ε
    must not exceed the accountant's ε for that round. The same audit refutes a step whose noise is 10×
    weaker than its claim: it has the power to catch a wrong accountant."""
    from sifl_ray.arms import ArmContext, get_arm
    from sifl_ray.attacks.audit import audit_aggregator_step

    cfg = load_config(["arms=[dp_fedavg]", "dp_fedavg.epsilons=[5]", "train.rounds=3", "coding.key_seed=4"])
    arm = get_arm("dp_fedavg")
    ctx = ArmContext(cfg=cfg, arm="dp_fedavg_eps5", n=10, local_size=100, total_size=1000)
    step = arm.steps(ctx).aggregator
    priv = arm.privacy(ctx)
    m, clip, delta = step.expected_clients, float(cfg.dp_fedavg.clip), float(cfg.dp_fedavg.delta)
    one_round = epsilon(noise_multiplier=step.noise_multiplier, sample_rate=1.0, steps=1, delta=delta)
    assert one_round == pytest.approx(priv["epsilon_per_round"][0], rel=1e-9)
    kw = {"clip": clip, "clients": int(m) - 1, "shift": clip / m, "trials": 5000, "delta": delta}
    audited = audit_aggregator_step(step, **kw)
    assert 0 < audited.epsilon_lower_bound <= one_round
    weak = CentralNoise(
        noise_multiplier=step.noise_multiplier / 10, clip=clip, expected_clients=m, key_seed=4
    )
    assert audit_aggregator_step(weak, **kw).epsilon_lower_bound > one_round


def test_the_quick_audit_of_the_arms_step_refutes_a_tenth_of_its_noise():
    """The slow audit above, at 1500 trials (the quick subset's): the arm's own step is not refuted, a step
    with a tenth of its noise is."""
    from sifl_ray.arms import ArmContext, get_arm
    from sifl_ray.attacks.audit import audit_aggregator_step

    cfg = load_config(["arms=[dp_fedavg]", "dp_fedavg.epsilons=[5]", "train.rounds=3", "coding.key_seed=4"])
    ctx = ArmContext(cfg=cfg, arm="dp_fedavg_eps5", n=10, local_size=100, total_size=1000)
    step = get_arm("dp_fedavg").steps(ctx).aggregator
    m, clip, delta = step.expected_clients, float(cfg.dp_fedavg.clip), float(cfg.dp_fedavg.delta)
    one_round = epsilon(noise_multiplier=step.noise_multiplier, sample_rate=1.0, steps=1, delta=delta)
    kw = {"clip": clip, "clients": int(m) - 1, "shift": clip / m, "trials": 1500, "delta": delta}
    assert audit_aggregator_step(step, **kw).epsilon_lower_bound <= one_round
    weak = CentralNoise(
        noise_multiplier=step.noise_multiplier / 10, clip=clip, expected_clients=m, key_seed=4
    )
    assert audit_aggregator_step(weak, **kw).epsilon_lower_bound > one_round
