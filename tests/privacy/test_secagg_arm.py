"""The ``secagg`` and ``dp_fedavg_secagg`` arms on the platform's parties.

Each secagg round is played beside FedAvg from the same start (``Simulation.set_start``), with the same
clients and the same faults, so the two next models differ by the fixed-point ring alone: the difference must
stay within the quantisation bound the round reports (plus the float64 rounding of FedAvg's own weighted
sum), on any CPU. A wrong mask plan, a dropped client's masks left in the sum, or a wrong weight would miss it
by orders of magnitude. Faults are the platform's own: corrupted uploads and partials in-process, a worker
that exits (before masking, or after, when the aggregator asks for shares) and a straggler on real Ray.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sifl_ray.config import ConfigError, load_config
from sifl_ray.runner import Simulation

U = 2.0**-53  # float64 unit round-off

BASE = [
    "scenario=quickstart",
    "clients.num_clients=10",
    "coding.key_seed=3",
    "output.progress=false",
    "output.plot=false",
]


def same_start_rounds(sim: Simulation, rounds: int, arm: str = "secagg") -> list[dict]:
    """Play ``rounds`` rounds of fl and ``arm`` from ``arm``'s start each time; per round, the secure
    round's metrics and the largest coordinate difference of the two next models."""
    out = []
    for t in range(rounds):
        assignment = sim.assignment(t)
        clients = sum(len(c) for c in assignment)
        sim.set_start("fl", sim.global_model(arm))
        fl = sim.play_round("fl", t, assignment)
        got = sim.play_round(arm, t, assignment)
        w_fl, w = sim.global_model("fl"), sim.global_model(arm)
        out.append(
            {
                **got.metrics,
                "accepted": got.accepted,
                "fl_accepted": fl.accepted,
                "skipped": got.skipped,
                "skip_reason": got.skip_reason,
                "dropped": got.dropped,
                "deviation": float((w - w_fl).abs().max()),
                # FedAvg's float64 weighted sum of ≤ N models, and the secure arm's addition: a few ulps each
                "float_slack": 4 * (clients + 2) * U * float(max(w.abs().max(), w_fl.abs().max())),
            }
        )
    return out


def within_bound(row: dict) -> bool:
    return row["deviation"] <= row["secagg/quantisation_bound"] + row["float_slack"]


def test_secagg_equals_fedavg_within_the_ring_quantisation_bound_in_process(tmp_path):
    cfg = load_config(
        [*BASE, "arms=[fl,secagg]", "backend=local", "train.rounds=3", f"output.dir={tmp_path}"]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        rows = same_start_rounds(sim, 3)
    finally:
        sim.close()
    for t, row in enumerate(rows):
        assert row["accepted"] == row["fl_accepted"] == 10, t
        assert row["deviation"] > 0 and within_bound(row), (t, row)
        # the evaluator's measurement of the decoded sum, in the mean's units, is what the bound bounds
        assert 0 < row["secagg/quantisation_error"] <= row["secagg/quantisation_bound"] * (1 + 1e-9), t
        assert row["secagg/survivors"] == 10 and row["secagg/recovered"] == row["secagg/unanswered"] == 0
        # keys (2 × 32 bytes out, 9 × (4 + 64) in), shares, a 32-bit masked vector and the unmask answer
        n = int(sim.w0.numel())
        assert row["secagg/bytes_per_client"] > 4 * n + 2 * 32 + 9 * 68
        assert row["secagg/messages"] == 4 * 10 + 3 * 10  # each client 4 steps, the server 3 routings
        assert row["secagg/sent_per_client/keys"] == 64 and row["secagg/sent_per_client/masked"] == 4 * n
        # 9 shares out, each 2 × 66 bytes + 16 of tag + two ids; the answer: 9 neighbours' + its own share
        assert row["secagg/sent_per_client/shares"] == 9 * (2 * 66 + 16 + 8)
        assert row["secagg/sent_per_client/unmask"] == 10 * (4 + 66)


def test_rejected_uploads_and_refused_partials_are_recovered_or_skipped(tmp_path):
    """A client whose upload is non-finite never masks (its neighbours' masks toward it are rebuilt from
    shares); a worker whose masked partial is malformed is refused before unmasking; too few survivors and
    the round is skipped, revealing nothing, with the model unchanged."""
    faults = (
        "faults.inject=[{kind: corrupt_upload, client: 3, round: 0, arm: fl, corruption: nan},"
        " {kind: corrupt_upload, client: 3, round: 0, arm: secagg, corruption: nan},"
        " {kind: corrupt_partial, worker: 1, round: 1, arm: fl, corruption: shape},"
        " {kind: corrupt_partial, worker: 1, round: 1, arm: secagg, corruption: nan}]"
    )
    cfg = load_config(
        [
            *BASE,
            "arms=[fl,secagg]",
            "backend=local",
            "ray.num_workers=5",
            "train.rounds=2",
            faults,
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        rows = same_start_rounds(sim, 2)
        # round 2 (of a fresh pair): 4 clients, one worker refused, 2 survivors < t = 3
        small = load_config(
            [
                *BASE,
                "clients.num_clients=4",
                "arms=[secagg]",
                "backend=local",
                "ray.num_workers=2",
                "train.rounds=1",
                "faults.inject=[{kind: corrupt_partial, worker: 0, round: 0, arm: secagg,"
                " corruption: round}]",
                f"output.dir={tmp_path}",
            ]
        )
        tiny = Simulation(small, run_dir=tmp_path / "tiny")
        before = tiny.global_model("secagg")
        skipped = tiny.play_round("secagg", 0)
        after = tiny.global_model("secagg")
        tiny.close()
    finally:
        sim.close()
    r0, r1 = rows
    assert r0["accepted"] == r0["fl_accepted"] == 9 and r0["secagg/recovered"] == 1 and within_bound(r0)
    assert r1["accepted"] == r1["fl_accepted"] == 8 and within_bound(r1), r1  # worker 1's two refused
    assert r1["secagg/survivors"] == 8 and r1["secagg/recovered"] == 2
    assert skipped.skipped and "fewer than the threshold t = 3" in skipped.skip_reason
    assert torch.equal(before, after)


def test_distributed_noise_reaches_the_sum_through_the_masks(tmp_path):
    """``dp_fedavg_secagg`` with clients that do not train (updates 0): the new model minus the old is the
    noise alone, Σ_i N(0, (zC)²/t) / m per coordinate over N clients, so its standard deviation is
    zC·√(N/t)/m (more than the central zC/m: every survivor beyond t adds its share). Checked within 6/√(2n)
    of it (the sample standard deviation's spread, six sigmas)."""
    cfg = load_config(
        [
            *BASE,
            "arms=[dp_fedavg_secagg]",
            "backend=local",
            "train.rounds=1",
            "train.skip_training=true",
            "dp_fedavg.epsilons=[2]",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        before = sim.global_model("dp_fedavg_secagg_eps2")
        result = sim.play_round("dp_fedavg_secagg_eps2", 0)
        noise = sim.global_model("dp_fedavg_secagg_eps2") - before
        privacy = sim.privacy["dp_fedavg_secagg_eps2"]
    finally:
        sim.close()
    z, clip, t = privacy["noise_multiplier"], float(cfg.dp_fedavg.clip), privacy["num_noisers"]
    assert t == 7 and result.accepted == 10
    expected = z * clip * math.sqrt(10 / t) / 10
    n = noise.numel()
    assert abs(float(noise.std()) / expected - 1) <= 6 / math.sqrt(2 * n)
    assert result.metrics["secagg/clipped_coordinates"] == 0  # the ring's clip C + 8σ was not reached


def test_configuration_problems_of_secure_aggregation_are_named():
    with pytest.raises(ConfigError) as err:
        load_config(
            [
                *BASE,
                "arms=[fl,secagg]",
                "secagg.threshold=3",
                "secagg.ring_bits=6",
                "faults.inject=[{kind: worker_exit, worker: 0, round: 0, arm: fl, phase: unmask}]",
            ]
        )
    text = str(err.value)
    assert "secagg.threshold: expected an integer in [6, 10]" in text
    assert "secagg.ring_bits: a sum of 10 encodings" in text
    assert "faults.inject[0].phase: unmask is a step of secure aggregation, but arm 'fl'" in text


@pytest.mark.ray
def test_secagg_survives_workers_that_die_before_and_after_masking_and_a_straggler_on_ray(
    ray_session, tmp_path
):
    """Five workers of two clients each (t = 7 of 10): worker 0 exits while training in round 1 (its two
    clients shared keys, never masked: the survivors' masks towards them are rebuilt from their key
    shares), worker 1 exits in round 2 when asked for shares (its clients' inputs are in the sum: their
    self masks are rebuilt from the others' shares), worker 2 straggles past the deadline in round 3. fl
    meets the same faults where it can (the exit and the straggler)."""
    faults = ", ".join(
        [
            "{kind: worker_exit, worker: 0, round: 1, arm: fl}",
            "{kind: worker_exit, worker: 0, round: 1, arm: secagg}",
            "{kind: worker_exit, worker: 1, round: 2, arm: secagg, phase: unmask}",
            "{kind: straggle, worker: 2, round: 3, arm: fl, seconds: 120}",
            "{kind: straggle, worker: 2, round: 3, arm: secagg, seconds: 120}",
        ]
    )
    cfg = load_config(
        [
            *BASE,
            "arms=[fl,secagg]",
            "ray.num_workers=5",
            "ray.cpus_per_worker=0.25",
            "train.rounds=4",
            "faults.worker_policy=retry",
            "faults.straggler_policy=drop",
            "faults.deadline_s=4",  # a healthy round trains in under a second, the straggler sleeps 120 s
            f"faults.inject=[{faults}]",
            f"output.dir={tmp_path}",
        ]
    )
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        rows = same_start_rounds(sim, 4)
    finally:
        sim.close()
    accepted = [r["accepted"] for r in rows]
    assert accepted == [10, 8, 10, 8], accepted
    # fl retried its dead worker (retry policy); secure aggregation cannot: its clients dropped
    assert [r["fl_accepted"] for r in rows] == [10, 10, 10, 8]
    r1, r2, r3 = rows[1:]
    assert r1["secagg/recovered"] == 2 and "cannot rejoin the round" in r1["dropped"][0]["reason"]
    assert r2["secagg/unanswered"] == 2 and r2["secagg/survivors"] == 10
    assert r3["secagg/recovered"] == 2 and "deadline" in r3["dropped"][0]["reason"]
    for t in (0, 2, 3):  # the rounds where both arms averaged the same clients
        assert rows[t]["deviation"] > 0 and within_bound(rows[t]), (t, rows[t])
    assert all(np.isfinite(r["secagg/quantisation_error"]) for r in rows)
