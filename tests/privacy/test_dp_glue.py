"""The glue between the DP formulas and a run: what the arms' steps (``arm.steps(ctx)``, the objects the
parties run) and the runner's set-up do with the configuration. Each test here fails with one realistic
single bug that leaves every other test green: a denominator N instead of qN, the noise of
round 0 reused every round, a per-round NbAFL σ (L = 1 instead of T), the largest client's sensitivity
instead of the smallest, and a clip flag raised at ‖w‖ = C exactly.

Statistical checks have a stated false-failure probability (``ALPHA`` per check, from exact
distributions), never a tolerance read off this machine's output.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch
from scipy.stats import chi2

from sifl_ray.arms import ArmContext, arm_of
from sifl_ray.arms.steps import clip
from sifl_ray.config import load_config
from sifl_ray.privacy.clipping import clip_norm_
from sifl_ray.privacy.dp_fedavg import clip_update_
from sifl_ray.runner import Simulation

ALPHA = 1e-7  # false-failure probability of each statistical check below
N = 100_000  # coordinates of a noise draw

BASE = ["scenario=quickstart", "coding.key_seed=3", "output.progress=false", "output.plot=false"]


def assert_gaussian(noise: torch.Tensor, std: float) -> None:
    """``noise`` is i.i.d. N(0, std²): its mean is N(0, std²/n) and ``Σ x²/std²`` is χ²_n exactly, so each of
    the two-sided checks fails a correct draw with probability ``ALPHA``."""
    x = noise.double().flatten()
    n = x.numel()
    z = NormalDist().inv_cdf(1 - ALPHA / 2)
    assert abs(float(x.mean())) <= z * std / math.sqrt(n), "the noise is not centred"
    s = float((x / std).square().sum())
    lo, hi = chi2.ppf(ALPHA / 2, n), chi2.isf(ALPHA / 2, n)
    assert lo <= s <= hi, f"Σx²/σ² = {s:.1f} outside [{lo:.1f}, {hi:.1f}]: the std is not {std:.6g}"


def arm_context(overrides: list[str], arm: str, *, n: int = N, sizes=(100, 100)) -> tuple:
    cfg = load_config([*BASE, *overrides])
    ctx = ArmContext(
        cfg=cfg, arm=arm, n=n, local_size=min(sizes), total_size=sum(sizes), largest_size=max(sizes)
    )
    return arm_of(cfg, arm), ctx


# ----------------------------------------------------------------------------------------------------------
# DP-FedAvg's fixed denominator at q < 1: m = qN, not N


Q_HALF = ["clients.num_clients=10", "clients.fraction=0.5", "clients.sampling=poisson"]


def test_dp_fedavg_aggregator_divides_by_qN_and_adds_noise_of_std_zC_over_qN():
    """k = 3 clients arrive of an expected m = qN = 5: the aggregator turns their mean into ``Σ Δ_i / 5``
    and adds N(0, (zC/5)²) per coordinate (with N = 10 in the denominator both would be halved)."""
    arm, ctx = arm_context([*Q_HALF, "arms=[dp_fedavg]", "dp_fedavg.epsilons=[5]"], "dp_fedavg_eps5")
    step = arm.steps(ctx).aggregator
    z, clip, k, m = arm.privacy(ctx)["noise_multiplier"], float(ctx.cfg.dp_fedavg.clip), 3.0, 0.5 * 10
    assert z > 0
    mean = torch.full((N,), 0.7, dtype=torch.float64)  # Σ Δ_i / k
    out, metrics = step(mean, arm=ctx.arm, t=2, shard=0, bounds=(0, N), weight=k)
    assert_gaussian(out - 0.7 * k / m, z * clip / m)
    assert metrics == {"noise_std": pytest.approx(z * clip / m)}


def test_dp_fedavg_secagg_aggregator_divides_the_noisy_sum_by_qN():
    """Distributed DP: the noise is already in the sum; the aggregator only rescales k's mean to Σ / qN."""
    arm, ctx = arm_context(
        [*Q_HALF, "arms=[dp_fedavg_secagg]", "dp_fedavg.epsilons=[5]"], "dp_fedavg_secagg_eps5", n=16
    )
    step = arm.steps(ctx).aggregator
    mean = torch.linspace(-1.0, 1.0, 16, dtype=torch.float64)
    out, metrics = step(mean, arm=ctx.arm, t=1, shard=0, bounds=(0, 16), weight=4.0)
    torch.testing.assert_close(out, mean * (4.0 / 5.0), rtol=1e-15, atol=0.0)
    assert metrics == {}  # the noise is the clients': nothing of the aggregator's to report


def test_dp_fedavg_secagg_clients_add_a_share_zC_over_sqrt_t_fresh_every_round():
    """Each client's share of the distributed noise is N(0, (zC)²/t), and the share differs from round to
    round and from client to client (the noise of round 0 reused every round would be subtracted out by
    anyone who sees two rounds' sums)."""
    arm, ctx = arm_context(
        ["clients.num_clients=10", "arms=[dp_fedavg_secagg]", "dp_fedavg.epsilons=[5]"],
        "dp_fedavg_secagg_eps5",
    )
    step = arm.steps(ctx).client
    report = arm.privacy(ctx)
    z, t, clip = report["noise_multiplier"], report["num_noisers"], float(ctx.cfg.dp_fedavg.clip)
    start = torch.zeros(N, dtype=torch.float64)

    def share(client: int, r: int) -> torch.Tensor:
        upload, metrics = step(start.clone(), start=start, arm=ctx.arm, client=client, t=r)
        assert metrics == {"clipped": 0.0}  # a zero update: the upload is the noise share alone
        return upload

    draws = {(c, r): share(c, r) for c in (0, 1) for r in (0, 1, 2)}
    assert_gaussian(draws[(0, 1)], z * clip / math.sqrt(t))
    keys = list(draws)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert not torch.equal(draws[keys[a]], draws[keys[b]]), (keys[a], keys[b])


def test_nbafl_clients_draw_fresh_noise_every_round():
    arm, ctx = arm_context(["arms=[nbafl]", "nbafl.epsilons=[1]"], "nbafl_eps1", n=1000)
    step = arm.steps(ctx).client
    zero = torch.zeros(1000, dtype=torch.float64)
    draws = [step(zero.clone(), start=zero, arm=ctx.arm, client=4, t=r)[0] for r in (0, 1, 2)]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])


# ----------------------------------------------------------------------------------------------------------
# NbAFL: L = T uploads, and the smallest client's sensitivity


def nbafl_classical_sigma(*, eps: float, delta: float, clip: float, smallest: int, rounds: int) -> float:
    """NbAFL's Theorem 1 as docs/method.md "Baselines" has it: σ = c·L·Δs/ε, c = √(2 ln(1.25/δ)), Δs = 2C/m,
    L = T."""
    return math.sqrt(2 * math.log(1.25 / delta)) * rounds * (2 * clip / smallest) / eps


@pytest.mark.parametrize("rounds", [1, 4])
def test_nbafl_noise_covers_all_T_uploads(rounds):
    """The noise a client adds grows like L = T (classical calibration): with L = 1 the printed ε would
    hold for each upload alone, not for the run."""
    arm, ctx = arm_context(
        ["arms=[nbafl]", "nbafl.epsilons=[2]", f"train.rounds={rounds}"], "nbafl_eps2", sizes=(120, 80, 200)
    )
    nb = ctx.cfg.nbafl
    assert nb.exposures == "multi_round" and nb.calibration == "classical"  # the defaults this checks
    sigma = nbafl_classical_sigma(eps=2.0, delta=nb.delta, clip=nb.clip, smallest=80, rounds=rounds)
    assert arm.privacy(ctx)["sigma"] == pytest.approx(sigma, rel=1e-12)
    zero = torch.zeros(N, dtype=torch.float64)
    noise, metrics = arm.steps(ctx).client(zero.clone(), start=zero, arm=ctx.arm, client=0, t=0)
    assert metrics == {"clipped": 0.0}
    assert_gaussian(noise, sigma)


def test_the_run_calibrates_nbafl_to_its_smallest_client(tmp_path):
    """Through the runner: with unequal clients (Dirichlet split) the σ of the report and of the noise the
    client workers are handed use the smallest |D_i| (the largest sensitivity 2C/min|D_i|)."""
    cfg = load_config(
        [
            *BASE,
            "arms=[nbafl]",
            "nbafl.epsilons=[2]",
            "train.rounds=3",
            "data.partition=dirichlet",
            "dirichlet.alpha=0.3",
            "backend=local",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        sizes, step, report = sim.sizes, sim.setups["nbafl_eps2"].step, sim.privacy["nbafl_eps2"]
    finally:
        sim.close()
    assert sizes.min() < sizes.mean() < sizes.max()  # the split is unequal, so the choice matters
    nb = cfg.nbafl
    sigma = nbafl_classical_sigma(eps=2.0, delta=nb.delta, clip=nb.clip, smallest=int(sizes.min()), rounds=3)
    assert report["sigma"] == pytest.approx(sigma, rel=1e-12)
    zero = torch.zeros(N, dtype=torch.float64)
    noise, _ = step(zero.clone(), start=zero, arm="nbafl_eps2", client=0, t=0)
    assert_gaussian(noise, sigma)


# ----------------------------------------------------------------------------------------------------------
# Clipping's flag at the boundary


def test_a_model_of_norm_exactly_C_is_not_clipped():
    """‖w‖ = C is inside the ball: nothing is scaled and nothing is counted as clipped (the flag feeds
    ``clients/clipped``); one ulp above C is clipped."""
    w = torch.tensor([3.0, 4.0], dtype=torch.float64)  # norm 5 exactly in float64
    assert float(torch.linalg.vector_norm(w)) == 5.0
    assert not clip_norm_(w, 5.0) and torch.equal(w, torch.tensor([3.0, 4.0], dtype=torch.float64))
    assert clip_norm_(w, math.nextafter(5.0, 0.0))
    g = torch.Generator().manual_seed(7)
    for _ in range(20):
        v = torch.randn(257, generator=g, dtype=torch.float64)
        c = float(torch.linalg.vector_norm(v))
        before = v.clone()
        assert not clip_norm_(v, c) and torch.equal(v, before)
        assert not clip_update_(v, c) and torch.equal(v, before)
        out, metrics = clip(c)(v, arm="a", client=0, t=0)
        assert metrics == {"clipped": 0.0} and torch.equal(out, before)
