"""How a run feeds the in-run audit (docs/method.md "Auditing inside the run"), each test through a run and
each failing on one wiring bug: which canaries the estimate counts, which δ it uses, what a left-out
canary uploads under a zero-out arm, whether a rollback to the start clears the record, which norm the
secure arm's canaries get, whether the auditor's secret is apart from the sampler's, which sampling rate the
accountants' cross-check uses, and whether the canaries add noise the deployed arm does not."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from sifl_ray.arms import register_arm, unregister_arm
from sifl_ray.arms.dp_fedavg import DpFedAvg
from sifl_ray.arms.secagg import DpFedAvgSecAgg
from sifl_ray.config import load_config
from sifl_ray.party_seeds import party_seed
from sifl_ray.privacy.estimate import epsilon_estimate
from sifl_ray.privacy.one_run import audit_bounds, inclusion_draws
from sifl_ray.runner import Simulation
from sifl_ray.runner.canaries import auditor_seeds

SMALL = [
    "backend=local",
    "clients.num_clients=6",
    "train.rounds=3",
    "dp_fedavg.epsilons=[5]",
    "audit.canaries=20",
    "audit.nulls=40",
    "coding.key_seed=5",
    "output.progress=false",
    "output.plot=false",
]


def _sim(tmp_path, overrides, name="run"):
    cfg = load_config([*SMALL, *overrides, f"output.dir={tmp_path}"])
    return Simulation(cfg, run_dir=tmp_path / name)


def _run(tmp_path, overrides, name="run"):
    sim = _sim(tmp_path, overrides, name)
    try:
        return sim, sim.run()
    finally:
        sim.close()


def test_the_figures_are_the_estimators_on_the_record_at_the_arms_delta(tmp_path):
    """Recomputed from the driver's record of the scores and the inclusion bits drawn from the key: the
    estimate counts the inserted canaries only (a left-out one has no shift to measure, and would dilute
    the shift), at the arm's δ (1e-3 here, not the run's 1e-5), its interval seeded by the last round, and
    both bounds at the configured confidence (the claim of T unsampled Gaussians is Gaussian)."""
    sim, result = _run(tmp_path, ["arms=[dp_fedavg,dp_fedavg_secagg]", "dp_fedavg.delta=1e-3"])
    inclusion = auditor_seeds(party_seed(5, "run", "auditor"))[1]  # coding.key_seed=5
    included = inclusion_draws(k=20, seed=inclusion)
    assert 0 < included.sum() < 20
    for arm in ("dp_fedavg_eps5", "dp_fedavg_secagg_eps5"):
        record = sim.driver.audits[arm]
        audit = result.summary["arms"][arm]["audit"]
        np.testing.assert_array_equal(record.included, included)
        assert audit["delta"] == 1e-3 and audit["inserted"] == int(included.sum())
        for model, scores in (("final_model", record.sums), ("all_iterates", record.cos_sums)):
            canary, null = scores[:20], scores[20:]
            est = epsilon_estimate(canary_cosines=canary[included], null_cosines=null, delta=1e-3, rng_seed=2)
            bounds = audit_bounds(scores=canary, included=included, delta=1e-3, confidence=0.95)
            row = audit[model]
            assert (row["estimate"], row["estimate_low"], row["estimate_high"]) == (
                est.estimate,
                est.low,
                est.high,
            )
            assert (row["steinke_bound"], row["fdp_bound"]) == (bounds.steinke, bounds.fdp)
            assert row["lower_bound"] == bounds.bound(gaussian=True)
            # T unsampled Gaussian rounds are one Gaussian mechanism: the f-DP bound speaks to the claim
            assert row["fdp_applies"] is True and row["ceiling"] == bounds.ceiling(gaussian=True)
        # the claim read against each view: the arm's ε, and the aggregator's view only where it is covered
        epsilon = result.summary["arms"][arm]["privacy"]["epsilon"]
        covered = arm == "dp_fedavg_secagg_eps5"  # DP-FedAvg's aggregator sees the updates in the clear
        assert audit["claimed_epsilon"] == epsilon
        assert [audit[m]["claimed_epsilon"] for m in ("final_model", "all_iterates", "uploads")] == [
            epsilon,
            epsilon,
            epsilon if covered else None,
        ]
        assert audit["uploads"]["verdict"] in (("not refuted", "untestable") if covered else ("no claim",))
        if not covered:  # the aggregator reads each clipped canary in the clear: every one told apart
            perfect = audit_bounds(scores=included.astype(float), included=included, delta=1e-3)
            assert audit["uploads"]["steinke_bound"] == pytest.approx(perfect.steinke)
    # TensorBoard: each round's figures, named for what they are
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(result.run_dir / "tb" / "dp_fedavg_eps5"))
    events.Reload()
    bounds = events.Scalars("audit/final_model/epsilon_lower_bound_if_stopped_here")
    assert [e.step for e in bounds] == [0, 1, 2]
    assert bounds[-1].value == pytest.approx(
        result.summary["arms"]["dp_fedavg_eps5"]["audit"]["final_model"]["lower_bound"]
    )
    # the bootstrap's interval (1000 refits) is drawn in the last round only, the estimate every round
    assert [e.step for e in events.Scalars("audit/final_model/epsilon_estimate")] == [0, 1, 2]
    assert [e.step for e in events.Scalars("audit/final_model/epsilon_estimate_low")] == [2]


class WeakDistributedDp(DpFedAvgSecAgg):
    """dp_fedavg_secagg whose clients add a tenth of the noise share its accountant assumes (a defect)."""

    kind = "dp_fedavg_secagg_weak"

    def steps(self, ctx):
        steps = super().steps(ctx)
        client = steps.client
        weak = [
            dataclasses.replace(s, noise_multiplier=s.noise_multiplier / 10)
            if getattr(s, "round_noise_share", False)
            else s
            for s in client.steps
        ]
        return dataclasses.replace(steps, client=dataclasses.replace(client, steps=tuple(weak)))


@pytest.fixture
def weak_zero_out():
    register_arm(WeakDistributedDp())
    yield
    unregister_arm("dp_fedavg_secagg_weak")


def test_a_weak_zero_out_arm_is_refuted_through_its_left_out_canaries(tmp_path, weak_zero_out):
    """Under zero-out a left-out canary takes part and uploads no change; only an inserted one moves the
    release in its direction. A tenth of the claimed noise: the lower bound passes the claimed ε = 1. Were
    a left-out canary to upload its direction too, every canary would move alike and nothing could be
    told apart."""
    _, result = _run(
        tmp_path,
        ["arms=[dp_fedavg_secagg_weak]", "dp_fedavg.epsilons=[1]", "audit.canaries=40", "train.rounds=2"],
    )
    audit = result.summary["arms"]["dp_fedavg_secagg_weak_eps1"]["audit"]
    for row in result.history["dp_fedavg_secagg_weak_eps1"]:
        assert row["clients/canaries"] == 40  # q = 1, zero-out: every canary, inserted or not
    assert audit["final_model"]["ceiling"] > 1.0
    assert audit["final_model"]["verdict"] == "refuted" and audit["final_model"]["lower_bound"] > 1.0


def test_a_rollback_to_the_start_clears_the_canary_record(tmp_path, monkeypatch):
    """The aggregator lost in round 1, before any checkpoint: every arm goes back to its first broadcast
    and the rounds are played again. The audit's record goes back with them, so the run ends with the
    figures of a run that never failed (were it kept, round 0 would count twice)."""
    from sifl_ray.parties.handle import PartyLost

    over = ["arms=[dp_fedavg]", "checkpoint.every=10"]
    _, clean = _run(tmp_path, over, "clean")
    sim = _sim(tmp_path, over, "faulted")
    play, failed = sim.play_round, []

    def fail_once(arm, t, *args, **kwargs):
        if t == 1 and not failed:
            failed.append(t)
            raise PartyLost("aggregator", 0, arm=arm, round=t, error=RuntimeError("killed by the test"))
        return play(arm, t, *args, **kwargs)

    monkeypatch.setattr(sim, "play_round", fail_once)
    try:
        faulted = sim.run()
    finally:
        sim.close()
    assert [r["from_checkpoint"] for r in faulted.summary["restored"]] == ["start"]
    assert (
        faulted.summary["arms"]["dp_fedavg_eps5"]["audit"] == clean.summary["arms"]["dp_fedavg_eps5"]["audit"]
    )


@pytest.mark.parametrize("arms", [["secagg", "fl"], ["fl", "secagg"]])
def test_secure_aggregation_audited_beside_fl_stays_paired_with_it(tmp_path, arms):
    """secagg's canaries are fl's (the norm audit.norm, weights |D_i|): its model stays fl's within the
    ring's quantisation, in either order of the arms (fl is played first whatever the order)."""
    _, result = _run(tmp_path, [f"arms=[{','.join(arms)}]", "train.rounds=2"])
    secagg = result.summary["arms"]["secagg"]
    assert secagg["max_deviation"] is not None and secagg["max_deviation"] < 1e-4
    assert (
        secagg["audit"]["final_model"]["lower_bound"]
        == result.summary["arms"]["fl"]["audit"]["final_model"]["lower_bound"]
    )


def test_the_auditors_secrets_are_apart_from_the_samplers(tmp_path):
    """coding.key_seed unset: the sampler's and the auditor's secrets are each drawn from the operating
    system and kept in their own key files; the canaries' inclusion derives from the auditor's, one way,
    and the scoring parties are handed only the seed of the directions."""
    from sifl_ray.checkpoint import load_party_key

    sim = _sim(tmp_path, ["arms=[dp_fedavg]", "coding.key_seed=null", "train.rounds=1"])
    try:
        keys = sim.checkpoints.key_dir
        sampler = bytes(load_party_key(keys / "sampler-run.key", party="sampler", arm="run")["state"]["seed"])
        auditor = bytes(load_party_key(keys / "auditor-run.key", party="auditor", arm="run")["state"]["seed"])
        directions, inclusion = auditor_seeds(auditor)
        assert len({sampler, auditor, directions, inclusion}) == 4
        assert sim.canaries.seed == inclusion
        assert sim.pool.audit["seed"] == directions != inclusion
        hosted = [bit for worker in sim.pool.audit["hosted"].values() for _, bit in worker.values()]
        assert sorted(hosted) == sorted(inclusion_draws(k=20, seed=inclusion).tolist())
    finally:
        sim.close()


def test_the_accountants_cross_check_is_run_at_the_arms_own_sampling_rate(tmp_path):
    """At q = 0.5: DP-FedAvg's accountant is told q (a secret sample), the distributed arm's 1 (zero-out,
    the roster public); the RDP/PLD cross-check recomputes each arm's own ε, so its RDP figure is the ε the
    arm reports. Each report says both rates."""
    sim = _sim(
        tmp_path,
        [
            "arms=[dp_fedavg,dp_fedavg_secagg]",
            "clients.sampling=poisson",
            "clients.fraction=0.5",
            "audit.canaries=0",
        ],
    )
    try:
        for arm, rate in (("dp_fedavg_eps5", 0.5), ("dp_fedavg_secagg_eps5", 1.0)):
            privacy = sim.privacy[arm]
            assert privacy["sampling_rate"] == 0.5 and privacy["accountant_sample_rate"] == rate
            assert privacy["accountant_cross_check"]["rdp"] == pytest.approx(privacy["epsilon"], rel=1e-9)
            assert "sample_rate" not in privacy  # no field that could be read as either
    finally:
        sim.close()


def test_the_canaries_add_no_noise_beyond_the_deployed_arms(tmp_path):
    """One round at q = 1, many nulls: a null direction's inner product with the release's change is the
    release's noise along it, so the nulls' spread is the noise's standard deviation per coordinate. It is
    the accountant's zC/m for DP-FedAvg, and the deployed distributed arm's √(n/t)·zC/m with n real clients
    each adding (zC)²/t: the canaries (20, all taking part under zero-out) add none of their own. (Were each
    to add a share, it would be √((n + 20)/t)·zC/m, twice that here.) 400 nulls measure it to ±15 % (3
    standard deviations of a sample's spread)."""
    sim, result = _run(
        tmp_path, ["arms=[dp_fedavg,dp_fedavg_secagg]", "train.rounds=1", "audit.nulls=400"], "noise"
    )
    for arm in ("dp_fedavg_eps5", "dp_fedavg_secagg_eps5"):
        privacy = result.summary["arms"][arm]["privacy"]
        accountant = privacy["noise_multiplier"] * privacy["clip"] / 6  # zC/m, m = qN = 6
        deployed = accountant * math.sqrt(6 / privacy.get("num_noisers", 6))  # 6 real clients' shares
        measured = float(np.std(sim.driver.audits[arm].sums[20:], ddof=1))
        assert measured == pytest.approx(deployed, rel=0.15), (arm, measured / accountant)


class WeakCentralDp(DpFedAvg):
    """DP-FedAvg whose aggregator adds a tenth of the noise it claims (a defect)."""

    kind = "dp_fedavg_weak_quick"

    def steps(self, ctx):
        steps = super().steps(ctx)
        weak = dataclasses.replace(steps.aggregator, noise_multiplier=steps.aggregator.noise_multiplier / 10)
        return dataclasses.replace(steps, aggregator=weak)


def test_a_weak_add_remove_arm_is_refuted_and_the_honest_one_is_not(tmp_path):
    """The quick subset's check of the in-run audit's power and validity under add/remove (the slow suite's
    is larger): 40 canaries, two rounds; the arm with a tenth of its noise is refuted at ε = 1, the honest
    arm is not."""
    register_arm(WeakCentralDp())
    try:
        _, result = _run(
            tmp_path,
            [
                "arms=[dp_fedavg,dp_fedavg_weak_quick]",
                "dp_fedavg.epsilons=[1]",
                "audit.canaries=40",
                "train.rounds=2",
            ],
        )
    finally:
        unregister_arm("dp_fedavg_weak_quick")
    weak = result.summary["arms"]["dp_fedavg_weak_quick_eps1"]["audit"]["final_model"]
    honest = result.summary["arms"]["dp_fedavg_eps1"]["audit"]["final_model"]
    assert weak["verdict"] == "refuted" and weak["lower_bound"] > 1.0
    assert honest["verdict"] == "not refuted" and honest["lower_bound"] <= 1.0


def _tensorboard_texts(folder) -> dict[str, str]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out = {}
    for f in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(f)).Load():
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name == "text":
                    out[v.tag] = b"".join(v.tensor.string_val).decode()
    return out


def test_a_key_seed_run_says_its_secrets_derive_from_config_yaml_where_its_epsilon_is(tmp_path):
    """Table, summary.json and TensorBoard say it; a run without a key seed says nothing of the kind."""
    import json

    from sifl_ray.runner.table import summary_table

    _, keyed = _run(tmp_path, ["arms=[dp_fedavg]", "train.rounds=1", "audit.canaries=0"], "keyed")
    privacy = json.loads((keyed.run_dir / "summary.json").read_text())["arms"]["dp_fedavg_eps5"]["privacy"]
    assert "derived from coding.key_seed, which config.yaml holds" in privacy["secrets"]
    assert "no ε of this report holds" in privacy["secrets"]
    assert "coding.key_seed is set: every secret of dp_fedavg_eps5" in " ".join(
        summary_table(keyed.summary).split()
    )
    texts = _tensorboard_texts(keyed.run_dir / "tb" / "dp_fedavg_eps5")
    assert any("config.yaml holds" in text for tag, text in texts.items() if tag.startswith("privacy")), texts
    _, secret = _run(
        tmp_path, ["arms=[dp_fedavg]", "train.rounds=1", "audit.canaries=0", "coding.key_seed=null"], "secret"
    )
    assert "secrets" not in secret.summary["arms"]["dp_fedavg_eps5"]["privacy"]
    assert "coding.key_seed is set" not in summary_table(secret.summary)


def test_the_audit_table_states_its_family_wise_level_and_bonferroni_holds_it(tmp_path):
    """Two arms, three threat models: six bounds. Without correction each holds at 95 % and the table says
    what all six hold together (at least 70 %); with audit.correction=bonferroni each is computed at
    1 − 0.05/6 and all six hold together at 95 %."""
    from sifl_ray.runner.table import summary_table

    over = ["arms=[fl,dp_fedavg]", "train.rounds=1"]
    _, plain = _run(tmp_path, over, "plain")
    table = " ".join(summary_table(plain.summary).split())  # the notes as read, not as wrapped
    assert "each of the table's 6 lower bounds holds with probability ≥ 95 %" in table
    assert "all of them together only with ≥ 70 %" in table
    _, corrected = _run(tmp_path, [*over, "audit.correction=bonferroni"], "bonferroni")
    for arm in ("fl", "dp_fedavg_eps5"):
        audit = corrected.summary["arms"][arm]["audit"]
        family = audit["family"]
        assert (family["correction"], family["tests"], family["each"]) == ("bonferroni", 6, 1 - 0.05 / 6)
        assert family["together"] == pytest.approx(0.95)
        assert audit["final_model"]["confidence"] == 1 - 0.05 / 6
    assert "each bound at 99.17 %, so that all 6 of the table hold together with probability ≥ 95 %" in (
        " ".join(summary_table(corrected.summary).split())
    )
    # the stricter level asks more of the same canaries: a lower ceiling
    assert (
        corrected.summary["arms"]["fl"]["audit"]["final_model"]["steinke_ceiling"]
        < plain.summary["arms"]["fl"]["audit"]["final_model"]["steinke_ceiling"]
    )


def test_the_canary_record_survives_a_checkpoint_exactly():
    """What a checkpoint keeps of an arm's record (JSON) gives back the record it was taken from: every
    statistic, the uploads' view unread (None) or read."""
    import json

    from sifl_ray.privacy.canaries import CanaryAudit

    seed = auditor_seeds(party_seed(5, "run", "auditor"))[1]
    record = CanaryAudit(k=4, m=3, seed=seed)
    fresh = CanaryAudit(k=4, m=3, seed=seed)
    fresh.load_state_dict(json.loads(json.dumps(record.state_dict())))
    assert fresh.upload_max is None and np.array_equal(fresh.sums, np.zeros(7))
    rng = np.random.default_rng(0)
    for _ in range(3):
        record.observe(rng.normal(size=7), norm=float(rng.random()) + 0.5)
        record.observe_uploads(rng.random(7))
    record.observe(rng.normal(size=7), norm=0.0)  # a round the model did not move: no cosine
    fresh.load_state_dict(json.loads(json.dumps(record.state_dict())))
    for name in ("sums", "cos_sums", "upload_max"):
        got, want = getattr(fresh, name), getattr(record, name)
        assert got.dtype == np.float64 and np.array_equal(got, want), name
    np.testing.assert_array_equal(fresh.included, record.included)
    with pytest.raises(ValueError, match="expected 7 inner products"):
        record.observe(np.zeros(6), norm=1.0)
    with pytest.raises(ValueError, match="expected 7 cosines"):
        record.observe_uploads(np.zeros(8))
    record.reset()
    assert record.upload_max is None and not record.sums.any() and not record.cos_sums.any()


def test_the_tables_family_counts_three_threat_models_per_audited_arm():
    from sifl_ray.runner.audit_record import audit_confidence, audit_family

    for arms, correction, each in [
        (1, "none", 0.95),
        (1, "bonferroni", 1 - 0.05 / 3),
        (4, "bonferroni", 1 - 0.05 / 12),
    ]:
        cfg = load_config([f"audit.correction={correction}"])
        assert audit_confidence(cfg, arms) == pytest.approx(each, rel=1e-12)
        family = audit_family(cfg, arms)
        assert (family["tests"], family["correction"]) == (3 * arms, correction)
        assert family["together"] == pytest.approx(max(0.0, 1 - 3 * arms * (1 - each)))


def test_the_driver_state_comes_back_whole_from_its_checkpoint_file():
    """The driver's file of a checkpoint (read back as JSON) says its round, arms, restores and checkpoint
    times, and loading it gives back every record, the canaries' included; a file of an older version
    without checkpoint times or canary records loads with none."""
    import json

    from sifl_ray.privacy.canaries import CanaryAudit
    from sifl_ray.runner.driver import DriverState

    seed = auditor_seeds(party_seed(5, "run", "auditor"))[1]
    cfg = load_config(SMALL)

    def made() -> DriverState:
        state = DriverState(["fl", "dp"])
        state.audits = {"dp": CanaryAudit(k=4, m=3, seed=seed)}
        return state

    state = made()
    assert (state.wall, state.history, state.next_round) == ({"fl": 0.0, "dp": 0.0}, {"fl": [], "dp": []}, 0)
    for arm in state.arms:
        state.history[arm] += [{"round": 0.0, "test/accuracy": 0.5}, {"round": 1.0, "test/accuracy": 0.75}]
        state.wall[arm] = 1.5
        state.dropped[arm].append({"round": 1, "dropped": [3]})
    state.incidents.append({"round": 1, "what": "worker 1 late"})
    state.restored.append({"round": 1, "from": 0})
    state.checkpoint_s += [0.25, 0.5]
    state.audits["dp"].observe(np.arange(7.0), norm=2.0)
    payload = json.loads(json.dumps(state.payload(1, cfg)))
    assert (payload["format"], payload["round"], payload["arms"]) == (1, 1, ["fl", "dp"])
    assert (payload["restored"], payload["checkpoint_s"]) == ([{"round": 1, "from": 0}], [0.25, 0.5])
    back = made()
    back.load(payload)
    assert (back.history, back.wall, back.dropped) == (state.history, state.wall, state.dropped)
    assert (back.incidents, back.checkpoint_s, back.next_round) == (state.incidents, [0.25, 0.5], 2)
    np.testing.assert_array_equal(back.audits["dp"].cos_sums, state.audits["dp"].cos_sums)
    back.load({key: value for key, value in payload.items() if key not in ("checkpoint_s", "audits")})
    assert back.checkpoint_s == [] and back.incidents == state.incidents
    assert not back.audits["dp"].cos_sums.any()  # no canary record in the file: the record starts anew
