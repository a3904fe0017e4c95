"""What the secure arms say of themselves (sifl_ray/arms/secagg.py): their privacy reports (what summary.json,
TensorBoard and the table print, word for word where a reader reads words), their noise split and ring, and
their channels, for one configuration whose numbers are recomputed here from their definitions."""

from __future__ import annotations

import math

import pytest

from sifl_ray.arms import ArmContext, get_arm
from sifl_ray.arms.secagg import arm_codec
from sifl_ray.config import load_config
from sifl_ray.privacy.dp_fedavg import distributed_noise_std
from sifl_ray.privacy.secagg import default_threshold

_OVER = [
    "arms=[secagg,dp_fedavg_secagg]",
    "clients.num_clients=20",
    "clients.sampling=poisson",
    "clients.fraction=0.5",
    "dp_fedavg.epsilons=[5]",
    "train.rounds=10",
]
CFG = load_config(_OVER)


def _report(kind: str, name: str) -> dict:
    ctx = ArmContext(cfg=CFG, arm=name, n=100, local_size=10, total_size=200, largest_size=12)
    return get_arm(kind).privacy(ctx)


def test_secure_aggregation_claims_no_differential_privacy_and_says_what_it_hides():
    report = _report("secagg", "secagg")
    codec = arm_codec(CFG, 10.0)
    assert report == {
        "mechanism": "secure-aggregation",
        "guarantee": "the aggregator learns the sum of the surviving clients' updates and nothing else "
        "(semi-honest parties, Bonawitz et al. 2017); no differential privacy: the sum is exact",
        "scope": "each upload is hidden from the aggregator and the server; the aggregate is not",
        "ring_bits": 32,
        "frac_bits": codec.frac_bits,
        "coordinate_clip": 10.0,
        "graph_degree": 19,
        "sum_error_bound_per_client": codec.sum_error_bound(1),
    }


def test_distributed_dp_states_its_relation_threat_model_and_noise_split():
    report = _report("dp_fedavg_secagg", "dp_fedavg_secagg_eps5")
    t = default_threshold(10)  # qN = 10 expected clients, every pair a neighbour: closed neighbourhoods of 10
    assert report["num_noisers"] == t == 7
    assert report["mechanism"] == "dp-fedavg-distributed-gaussian"
    assert report["amplified_by_sampling"] is False and report["aggregator_covered"] is True
    assert (report["sampling_rate"], report["accountant_sample_rate"], report["tradeoff"]) == (
        0.5,
        1.0,
        "gaussian",
    )
    assert report["epsilon_roster_known"] == report["epsilon"] == pytest.approx(5.0, rel=1e-6)
    assert report["neighbour_relation"] == (
        "zero-out: the client takes part and adds its noise share, its update replaced by 0; who takes part "
        "is public"
    )
    assert report["threat_model"] == (
        "the aggregator (which sees the roster and only the noisy sum), the server and anyone downstream, "
        "all rounds; at least s = 7 honest clients add their share in every round"
    )
    assert (
        report["roster_known"] == "the ε already assumes the roster is known: it is not amplified by sampling"
    )
    assert report["guarantee"] == (
        "client-level (ε, δ) of everything the aggregator and the server receive over all rounds, zero-out "
        "relation (the noise in the sum grows with the clients in it, so it gives no add/remove guarantee), "
        "unsampled Gaussian composed over every round, from dp_accounting; the noise is added by the "
        "clients, 1/s of the variance each, s = 7: it holds when at least s honest clients add their share "
        "in every round (a round with fewer survivors than the threshold is not unmasked: it tells only who "
        "took part, public here; one unmasked with fewer than s carries less noise, and the run reports the "
        "ε of the noise that arrived, privacy/epsilon_realised), for the continuous mechanism (the ring's "
        "rounding of each noised update is not accounted; Kairouz et al. 2021 discretise it)"
    )
    assert report["scope"] == (
        "every global model released, all rounds together; the aggregator sees only the noisy sum"
    )
    # the ring holds the clip plus the noise margin of one client's share
    sigma = distributed_noise_std(noise_multiplier=report["noise_multiplier"], clip=1.0, num_noisers=t)
    assert sigma == pytest.approx(report["noise_multiplier"] / math.sqrt(t))
    codec = arm_codec(CFG, 1.0 + 8.0 * sigma)
    assert report["coordinate_clip"] == pytest.approx(1.0 + 8.0 * sigma)
    assert (report["ring_bits"], report["frac_bits"], report["graph_degree"]) == (32, codec.frac_bits, 19)
    assert report["sum_error_bound_per_client"] == codec.sum_error_bound(1)


@pytest.mark.parametrize(
    ("clients", "fraction", "degree", "threshold"),
    [
        (20, 0.5, None, None),
        (20, 0.5, 4, None),
        (20, 1.0, None, 12),
        (3, 0.2, None, None),
        (40, 0.25, 6, None),
        (20, 0.25, 8, None),  # a degree above the expected round's: capped by it
        (40, 0.25, 9, None),  # a degree exactly the expected round's others
        (10, 0.2, None, None),  # two clients expected: the fewest a round can have
    ],
)
def test_the_noise_split_counts_the_fewest_clients_a_round_can_unmask(clients, fraction, degree, threshold):
    """t: the configured threshold, else the default of a closed neighbourhood of the expected round
    (qN clients, at least 2), each client's neighbours capped by ``secagg.degree``."""
    over = [
        "arms=[dp_fedavg_secagg]",
        f"clients.num_clients={clients}",
        "clients.sampling=poisson",
        f"clients.fraction={fraction}",
        f"secagg.degree={'null' if degree is None else degree}",
        f"secagg.threshold={'null' if threshold is None else threshold}",
    ]
    cfg = load_config(over)
    expected = max(2, math.floor(fraction * clients))
    closed = min(expected - 1, degree if degree is not None else expected - 1) + 1
    want = threshold if threshold is not None else default_threshold(closed)
    assert get_arm("dp_fedavg_secagg").num_noisers(cfg) == want


def test_the_secure_arms_channels_say_what_travels():
    channels = {
        kind: [(r.sender, r.receiver, r.name, r.content) for r in get_arm(kind).releases()]
        for kind in ("secagg", "dp_fedavg_secagg")
    }
    assert channels["secagg"] == [
        ("client", "aggregator", "upload", "clip_C(w_i - w^t), fixed-point, masked: uniform in Z_(2^k)"),
        (
            "aggregator",
            "server",
            "aggregate",
            "the FedAvg mean of the clipped updates (unmasked sum of the survivors only)",
        ),
        ("server", "clients", "broadcast", "w^t + the mean update"),
    ]
    assert channels["dp_fedavg_secagg"] == [
        (
            "client",
            "aggregator",
            "upload",
            "clip_C(w_i - w^t) + N(0, (zC)^2/t) (the client's share of the noise), fixed-point, masked: "
            "uniform in Z_(2^k)",
        ),
        (
            "aggregator",
            "server",
            "aggregate",
            "sum_i (clipped update + noise share)/(qN): DP-FedAvg's noisy mean (unmasked sum of the "
            "survivors only)",
        ),
        ("server", "clients", "broadcast", "w^t + the mean update"),
    ]


def test_the_secure_arms_hand_their_parties_the_ring_they_report():
    """The public parameters every party of a secure arm agrees on: the configured precision and threshold
    when set, the FedAvg weights' reference (the largest |D_i|) for secagg, and for the distributed arm a
    ring that holds the clip plus the noise margin of one share, equal weights and t survivors at least."""
    from sifl_ray.arms.secagg import secagg_spec

    cfg = load_config(
        ["arms=[secagg]", "clients.num_clients=20", "secagg.frac_bits=12", "secagg.threshold=15"]
    )
    spec = secagg_spec(cfg, n=50, clip=10.0, weight_ref=3.0, min_survivors=4)
    assert (spec.codec.frac_bits, spec.threshold, spec.degree, spec.vector_len) == (12, 15, None, 50)
    assert (spec.weight_ref, spec.min_survivors, spec.key_seed) == (3.0, 4, cfg.coding.key_seed)
    ctx = ArmContext(cfg=CFG, arm="secagg", n=100, local_size=10, total_size=200, largest_size=12)
    plain = get_arm("secagg").steps(ctx).secagg
    assert (plain.weight_ref, plain.codec.clip, plain.min_survivors) == (12.0, 10.0, 0)
    ctx = ArmContext(
        cfg=CFG, arm="dp_fedavg_secagg_eps5", n=100, local_size=10, total_size=200, largest_size=12
    )
    report = _report("dp_fedavg_secagg", "dp_fedavg_secagg_eps5")
    noisy = get_arm("dp_fedavg_secagg").steps(ctx).secagg
    assert (noisy.weight_ref, noisy.min_survivors) == (1.0, report["num_noisers"])
    assert noisy.codec.clip == pytest.approx(report["coordinate_clip"])


@pytest.mark.parametrize(
    ("over", "said"),
    [
        (
            ["secagg.threshold=21"],
            "secagg.threshold: expected an integer in [11, 20] for closed neighbourhoods of 20 clients "
            "(degree 19), got 21; a majority stops the aggregator from rebuilding both secrets of one "
            "client. Set it, or null for 14",
        ),
        (
            ["secagg.degree=5", "secagg.threshold=3"],
            "secagg.threshold: expected an integer in [4, 6] for closed neighbourhoods of 6 clients "
            "(degree 5), got 3",
        ),
        (
            ["secagg.degree=30", "secagg.threshold=21"],  # a degree beyond the other clients: all of them
            "secagg.threshold: expected an integer in [11, 20] for closed neighbourhoods of 20 clients",
        ),
        (
            ["clients.num_clients=1"],
            "clients.num_clients: secure aggregation needs at least 2 clients a round, got 1",
        ),
    ],
)
def test_a_threshold_the_graph_cannot_hold_is_refused_with_the_range(over, said):
    from sifl_ray.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(["arms=[secagg]", "clients.num_clients=20", *over])
    assert any(problem.startswith(said) for problem in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    "over",
    [
        ["secagg.degree=5", "secagg.threshold=4"],
        ["secagg.degree=4", "secagg.threshold=3"],  # closed 5: a majority is 3
        ["secagg.threshold=20"],  # every client of the closed neighbourhood
        ["secagg.degree=30", "secagg.threshold=20"],
        ["clients.num_clients=2"],  # two clients can aggregate securely
    ],
)
def test_a_threshold_the_graph_holds_is_accepted(over):
    cfg = load_config(["arms=[secagg]", "clients.num_clients=20", *over])
    assert cfg.arms == ["secagg"]


@pytest.mark.parametrize(("degree", "graph"), [(None, 19), (4, 4), (30, 19)])
def test_the_ring_report_names_the_graph_and_the_noise_margin_at_the_arms_clip(degree, graph):
    """The report's graph degree is secagg.degree, capped by the other clients (all of them when unset);
    the distributed arm's ring holds its clip C plus the margin of one share, σ = zC/√t, here at C = 2."""
    cfg = load_config(
        [
            "arms=[dp_fedavg_secagg]",
            "clients.num_clients=20",
            "dp_fedavg.clip=2.0",
            "dp_fedavg.epsilons=[5]",
            f"secagg.degree={'null' if degree is None else degree}",
        ]
    )
    ctx = ArmContext(
        cfg=cfg, arm="dp_fedavg_secagg_eps5", n=100, local_size=10, total_size=200, largest_size=12
    )
    report = get_arm("dp_fedavg_secagg").privacy(ctx)
    sigma = report["noise_multiplier"] * 2.0 / math.sqrt(report["num_noisers"])
    assert report["graph_degree"] == graph
    assert report["coordinate_clip"] == pytest.approx(2.0 + 8.0 * sigma)


def test_the_report_names_the_threshold_apart_from_the_noise_shares():
    """s (the shares the noise is split into) and t (the fewest a round can unmask) are two fields: with
    ``secagg.noise_shares`` they differ, and each says its own."""
    cfg = load_config([*_OVER, "secagg.noise_shares=4"])
    ctx = ArmContext(
        cfg=cfg, arm="dp_fedavg_secagg_eps5", n=100, local_size=10, total_size=200, largest_size=12
    )
    report = get_arm("dp_fedavg_secagg").privacy(ctx)
    assert (report["num_noisers"], report["threshold"]) == (4, default_threshold(10)) == (4, 7)


def test_the_realised_epsilon_is_that_of_the_shares_that_arrived():
    """A round unmasked with k < s shares carries noise of multiplier z·√(k/s); a round that released
    nothing (k = 0) costs nothing; with every round at s or more the planned ε holds (nothing reported)."""
    from sifl_ray.privacy.dp_fedavg import epsilon_of_rounds

    arm = get_arm("dp_fedavg_secagg")
    report = _report("dp_fedavg_secagg", "dp_fedavg_secagg_eps5")
    z, s, delta = report["noise_multiplier"], report["num_noisers"], report["delta"]

    def rounds(*accepted):
        return [{"clients/accepted": float(k)} for k in accepted]

    assert arm.realised_privacy(report, rounds(s, s + 3, 0, s)) == {}
    got = arm.realised_privacy(report, rounds(s, s - 2, 0, s - 1, s + 1))
    want = epsilon_of_rounds(
        noise_multipliers=[z * math.sqrt(k / s) for k in (s, s - 2, s - 1, s + 1)],
        delta=delta,
        accountant=report["accountant"],
    )
    assert got == {"privacy/epsilon_realised": want, "privacy/shares_missing": 2.0}
    one = epsilon_of_rounds(
        noise_multipliers=[z * math.sqrt(1 / s)], delta=delta, accountant=report["accountant"]
    )
    assert arm.realised_privacy(report, rounds(1, 0)) == {  # a round of one upload still released its sum
        "privacy/epsilon_realised": one,
        "privacy/shares_missing": float(s - 1),
    }
    planned = epsilon_of_rounds(noise_multipliers=[z] * 4, delta=delta, accountant=report["accountant"])
    assert want > planned  # less noise arrived than those four rounds planned
    # the accountant the report names is the one used
    other = {**report, "accountant": "pld" if report["accountant"] == "rdp" else "rdp"}
    assert arm.realised_privacy(other, rounds(s - 2))["privacy/epsilon_realised"] != pytest.approx(
        arm.realised_privacy(report, rounds(s - 2))["privacy/epsilon_realised"], rel=1e-6
    )
