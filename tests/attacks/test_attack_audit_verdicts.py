"""What an audit may say: its ceilings, its verdicts, a tail threshold with the power to reach the claim, one
round compared with one round, and the secure aggregate audited through the shipped steps.

The claims come from the dp_compare_small instance at ε = 1 (20 rounds, q = 1, δ = 1e-5, C = 1, 10 clients):
z ≈ 18.09, one round's ε ≈ 0.199.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import norm

from sifl_ray.attacks.audit import (
    NO_CLAIM,
    NOT_REFUTED,
    REFUTED,
    UNTESTABLE,
    audit_aggregator_step,
    clopper_pearson,
    epsilon_lower_bound,
    gaussian_shift_plan,
    rates_bound,
    trials_ceiling,
    verdict,
)

DELTA, CONF = 1e-5, 0.95


def test_trials_ceiling_is_the_bound_of_a_perfect_test_in_closed_form():
    """With 0 false positives and n true positives the two-sided Clopper–Pearson ends are 1 − a and a,
    a = (α/2)^(1/n) (the Beta quantiles at the ends have closed forms), so the ceiling is ln((a − δ)/(1 − a));
    no outcome of n trials gives more (checked over every outcome of a small n)."""
    for n in (5000, 20000):
        a = ((1 - CONF) / 2) ** (1 / n)
        assert clopper_pearson(0, n, confidence=CONF)[1] == pytest.approx(1 - a, rel=1e-9)
        expected = math.log((a - DELTA) / (1 - a))
        assert trials_ceiling(n, delta=DELTA, confidence=CONF) == pytest.approx(expected, rel=1e-12)
        perfect = epsilon_lower_bound(
            false_positives=0, true_positives=n, trials=n, delta=DELTA, confidence=CONF
        )
        assert perfect == pytest.approx(expected, rel=1e-9)
    n = 25
    best = max(
        epsilon_lower_bound(false_positives=fp, true_positives=tp, trials=n, delta=DELTA, confidence=CONF)
        for fp in range(n + 1)
        for tp in range(n + 1)
    )
    assert best == pytest.approx(trials_ceiling(n, delta=DELTA, confidence=CONF), rel=1e-9)


def test_verdicts_never_say_holds():
    assert verdict(lower_bound=2.0, claim=1.0, ceiling=7.0) == REFUTED
    assert verdict(lower_bound=0.5, claim=1.0, ceiling=7.0) == NOT_REFUTED
    assert verdict(lower_bound=0.5, claim=10.0, ceiling=7.21) == UNTESTABLE  # ε = 10 at 5,000 trials
    assert verdict(lower_bound=0.5, claim=7.0, ceiling=7.0) == UNTESTABLE  # a bound cannot exceed it
    assert verdict(lower_bound=9.0, claim=math.inf, ceiling=9.0) == NO_CLAIM
    assert verdict(lower_bound=9.0, claim=math.nan, ceiling=9.0) == NO_CLAIM
    assert {REFUTED, NOT_REFUTED, UNTESTABLE, NO_CLAIM} == {
        "REFUTED",
        "not refuted",
        "untestable",
        "no claim",
    }


def test_the_report_prints_ceilings_and_verdicts_not_holds():
    from sifl_ray.attacks.arm_audit import ArmAudit
    from sifl_ray.attacks.audit import AuditTest
    from sifl_ray.attacks.report import _audits
    from sifl_ray.attacks.report_console import _audit_table
    from sifl_ray.attacks.suite import SuiteResult

    def test(lb, n):
        return AuditTest("t", n, 0, 0, 1.0, 0.0, lb, trials_ceiling(n, delta=DELTA, confidence=CONF), 0.3)

    audits = [
        ArmAudit("a", 0.199, "one round", "r", test(0.37, 20000)),  # refuted
        ArmAudit("b", 0.1, "one round", "r", test(0.05, 20000)),  # not refuted: below both ceilings
        ArmAudit("c", 10.0, "one round", "r", test(0.2, 5000)),  # untestable: above the ceilings
        ArmAudit("d", math.inf, "none", "r", test(7.0, 5000)),
    ]
    result = SuiteResult({}, [], [], None, None, "", 0.0, "", 0.0, audits=audits)
    text = "\n".join(_audits(result) + _audit_table(result))
    assert [a.verdict for a in audits] == [REFUTED, NOT_REFUTED, UNTESTABLE, NO_CLAIM]
    assert "holds" not in text
    assert f"{trials_ceiling(5000, delta=DELTA, confidence=CONF):.3g} / 0.3" in text  # 7.21 / 0.3


def _dp_compare_small_eps1():
    """One round's ε and z of dp_fedavg at the dp_compare_small ε = 1 instance, as the arm reports them."""
    from sifl_ray.arms import ArmContext, get_arm
    from sifl_ray.config import load_config

    cfg = load_config(
        ["arms=[dp_fedavg]", "dp_fedavg.epsilons=[1]", "train.rounds=20", "clients.num_clients=10"]
    )
    ctx = ArmContext(cfg=cfg, arm="dp_fedavg_eps1", n=10, local_size=100, total_size=1000)
    return get_arm("dp_fedavg").privacy(ctx)


def test_the_midpoint_cannot_reach_one_rounds_epsilon_and_the_tail_threshold_can():
    """Along the shift the released mean is N(0, s²) or N(C/m, s²), s = zC/m, so μ = 1/z. At the midpoint
    the rates are Q(μ/2) and 1 − Q(μ/2): with unlimited trials ln((1 − Q(μ/2) − δ)/Q(μ/2)) ≈ 0.044 at
    z = 18.09, and ≈ 0.18 even for noise 4× weaker, both below one round's 0.199: the midpoint cannot
    refute it. The threshold planned in the tail reaches it at 20,000 trials when the noise is 4× weaker."""
    priv = _dp_compare_small_eps1()
    z, claim = priv["noise_multiplier"], priv["epsilon_per_round"][0]
    assert 18.0 < z < 18.2 and 0.19 < claim < 0.21
    for mu in (1 / z, 4 / z):
        f = norm.sf(mu / 2)
        assert rates_bound(fpr=f, tpr=1 - f, delta=DELTA) < claim
    assert rates_bound(fpr=norm.sf(0.5 / z), tpr=norm.cdf(0.5 / z), delta=DELTA) < 0.045
    plan = gaussian_shift_plan(4 / z, trials=20000, delta=DELTA, confidence=CONF)
    assert plan.planned > claim and plan.ceiling > claim and plan.threshold > 1.5  # in the tail
    assert plan.fpr == pytest.approx(norm.sf(plan.threshold)) and plan.tpr == pytest.approx(
        norm.sf(plan.threshold - 4 / z)
    )


def test_noise_four_times_weaker_than_claimed_is_refuted_and_the_claimed_noise_is_not():
    """The arm's own aggregator step at z/4 against the claim of z, one round against one round's ε. The
    planned bound is 0.34 (FPR 2.3 %, TPR 3.8 % at 2.0 noise std); ln(TP/FP) has a standard deviation of
    about sqrt(1/455 + 1/753) ≈ 0.06, so a fresh stream falls under 0.199 with probability ~1 %; this seed's
    stream is fixed. At the claimed z the same test cannot exceed one round's ε (the true ε of the step is
    below it) with probability 95 %."""
    from sifl_ray.arms.dp_fedavg import CentralNoise

    priv = _dp_compare_small_eps1()
    z, claim = priv["noise_multiplier"], priv["epsilon_per_round"][0]
    kw = {"clip": 1.0, "clients": 9, "shift": 0.1, "trials": 20000, "delta": DELTA}
    weak = CentralNoise(noise_multiplier=z / 4, clip=1.0, expected_clients=10.0, key_seed=4)
    refuted = audit_aggregator_step(weak, **kw)
    assert refuted.verdict(claim) == REFUTED and refuted.threshold.startswith("tail")
    assert refuted.trials_ceiling == pytest.approx(trials_ceiling(20000, delta=DELTA, confidence=CONF))
    honest = CentralNoise(noise_multiplier=z, clip=1.0, expected_clients=10.0, key_seed=4)
    kept = audit_aggregator_step(honest, **{**kw, "trials": 5000})
    assert kept.epsilon_lower_bound <= claim and kept.verdict(claim) in (NOT_REFUTED, UNTESTABLE)


def test_a_one_round_audit_is_compared_with_one_rounds_epsilon():
    """The suite's DP-FedAvg line reports the accountant's ε after one round, not the whole run's, and its
    scope says so."""
    from sifl_ray.attacks.arm_audit import audit_arm
    from sifl_ray.attacks.config import load_attack_config
    from sifl_ray.attacks.record import make_task

    cfg = load_attack_config(
        [
            "arms=[dp_fedavg]",
            "arm_config.dp_fedavg.epsilons=[1]",
            "train.rounds=20",
            "clients.num_clients=10",
            "model.features=9",
            "data.samples_per_client=20",
            "train.batch_size=8",
            "audit.trials=500",
        ]
    )
    task = make_task(features=9, hidden=0, clients=10, samples_per_client=20, teacher_scale=3.0, seed=0)
    (got,) = audit_arm(task, cfg, "dp_fedavg_eps1", m1_whole=None, paper_eps=None)
    priv = _dp_compare_small_eps1()
    assert got.reported_epsilon == pytest.approx(priv["epsilon_per_round"][0], rel=1e-9)
    assert got.reported_epsilon < priv["epsilon"] / 4  # not the whole run's 1.0
    assert "ONE round" in got.reported_scope and "not audited here" in got.reported_scope
    assert got.verdict in (NOT_REFUTED, UNTESTABLE)


def _secagg_eps1(features: int):
    from sifl_ray.arms import arm_of
    from sifl_ray.attacks.config import load_attack_config
    from sifl_ray.attacks.record import make_task, platform_config, task_context

    cfg = load_attack_config(
        [
            "arms=[dp_fedavg_secagg]",
            "arm_config.dp_fedavg.epsilons=[1]",
            "train.rounds=20",
            "clients.num_clients=10",
            f"model.features={features}",
            "data.samples_per_client=20",
            "train.batch_size=8",
        ]
    )
    task = make_task(
        features=features, hidden=0, clients=10, samples_per_client=20, teacher_scale=3.0, seed=0
    )
    platform = platform_config(cfg, clients=10, rounds=20)
    arm = "dp_fedavg_secagg_eps1"
    protocol = arm_of(platform, arm)
    ctx = task_context(task, platform, arm)
    direction = torch.randn(task.n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return arm, protocol.steps(ctx), protocol.privacy(ctx), direction / direction.norm()


def test_the_secure_aggregate_under_add_remove_refutes_todays_dp_fedavg_secagg():
    """Through the shipped client step, masking and aggregator step, a round without the target carries 9
    noise shares and a round with it 10: per coordinate the variance is 9 or 10 (zC)²/(7·m²). Over n = 1000
    coordinates the log of the sample variance has a standard deviation of about sqrt(2/1000) ≈ 0.045
    against a gap of ln(10/9) ≈ 0.105: the likelihood ratio tells the rounds apart far beyond one round's
    ε ≈ 0.199 (a bound of about 2.3 at 200 trials, whose ceiling is 4.0). An audit that kept the target's
    noise share in both rounds would see only the shift C/m, μ ≈ 0.046, and could not refute it (0 at 200
    trials)."""
    from sifl_ray.attacks.secure_audit import ADD_REMOVE, audit_secure_round

    arm, steps, priv, direction = _secagg_eps1(999)
    claim = priv["epsilon_per_round"][0]
    assert 0.19 < claim < 0.21 and priv["num_noisers"] == 7
    got = audit_secure_round(
        steps,
        arm=arm,
        direction=direction,
        clip=1.0,
        num_clients=10,
        relation=ADD_REMOVE,
        trials=200,
        delta=DELTA,
    )
    assert got.verdict(claim) == REFUTED and got.epsilon_lower_bound > 1.0


def test_the_secure_aggregate_under_zero_out_is_not_refuted():
    """Under zero-out the target adds its share either way: only the shift μ ≈ 0.046 is left, and the
    bound stays below one round's ε (probability ≥ 95 %)."""
    from sifl_ray.attacks.secure_audit import ZERO_OUT, audit_secure_round, neighbour_relation

    arm, steps, priv, direction = _secagg_eps1(99)
    assert neighbour_relation({}) == "add/remove" and neighbour_relation({"neighbour_relation": ZERO_OUT})
    claim = priv["epsilon_per_round"][0]
    got = audit_secure_round(
        steps,
        arm=arm,
        direction=direction,
        clip=1.0,
        num_clients=10,
        relation=ZERO_OUT,
        trials=150,
        delta=DELTA,
    )
    assert got.epsilon_lower_bound <= claim and got.verdict(claim) in (NOT_REFUTED, UNTESTABLE)


def test_the_secure_round_follows_the_sampling_path():
    """At q < 1 the round's clients are the platform's Poisson draw: the target is in about q of the rounds
    (and a round below the threshold t = 7 is refused: ``None``)."""
    from sifl_ray.attacks.secure_audit import ADD_REMOVE, secure_round_release
    from sifl_ray.data.sampling import sample_clients

    arm, steps, _, direction = _secagg_eps1(9)
    release = secure_round_release(steps, arm=arm, num_clients=10, relation=ADD_REMOVE, sample_rate=0.9)
    rounds = range(12)
    outs = [release(direction.clone(), t) for t in rounds]
    sizes = [sample_clients(10, 0.9, t, 0, "poisson").size for t in rounds]
    assert [o is None for o in outs] == [k < 7 for k in sizes]
    assert any(o is not None for o in outs)
