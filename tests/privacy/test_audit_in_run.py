"""The in-run audit (docs/method.md "Auditing inside the run"): canary clients go through a run's own steps,
and the figures it logs refute an arm whose noise is weaker than it claims, never the honest arm."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from sifl_ray.arms import register_arm, unregister_arm
from sifl_ray.arms.dp_fedavg import DpFedAvg
from sifl_ray.config import load_config
from sifl_ray.runner import Simulation

AUDITED = [
    "backend=local",
    "clients.num_clients=20",
    "train.rounds=10",
    "dp_fedavg.epsilons=[1]",
    "audit.canaries=100",
    "audit.nulls=200",
    "coding.key_seed=4",
    "output.progress=false",
    "output.plot=false",
]


class WeakDpFedAvg(DpFedAvg):
    """DP-FedAvg whose aggregator adds a tenth of the noise it claims (a test's defect)."""

    kind = "dp_fedavg_weak"

    def steps(self, ctx):
        steps = super().steps(ctx)
        weak = dataclasses.replace(steps.aggregator, noise_multiplier=steps.aggregator.noise_multiplier / 10)
        return dataclasses.replace(steps, aggregator=weak)


@pytest.fixture
def weak_arm():
    register_arm(WeakDpFedAvg())
    yield
    unregister_arm("dp_fedavg_weak")


def _run(tmp_path, overrides, name="run"):
    cfg = load_config([*AUDITED, *overrides, f"output.dir={tmp_path}"])
    sim = Simulation(cfg, run_dir=tmp_path / name)
    try:
        return sim.run()
    finally:
        sim.close()


def test_the_audit_refutes_weak_noise_and_not_the_honest_arm(tmp_path, weak_arm):
    """Both arms claim ε = 1 after 10 rounds; the weak one adds z/10. 100 canaries (about 50 inserted)
    give a lower bound whose ceiling is above 1, so the claim is testable; the weak arm's bound passes it,
    the honest arm's stays at or below it (the bound holds with probability 0.95, and this seed is fixed)."""
    result = _run(tmp_path, ["arms=[dp_fedavg,dp_fedavg_weak]"])
    honest = result.summary["arms"]["dp_fedavg_eps1"]["audit"]
    weak = result.summary["arms"]["dp_fedavg_weak_eps1"]["audit"]
    for audit in (honest, weak):
        assert audit["canaries"] == 100 and 0 < audit["inserted"] < 100
        assert audit["claimed_epsilon"] == pytest.approx(1.0, rel=1e-3)
        for model in ("final_model", "all_iterates"):
            assert audit[model]["ceiling"] > 1.0  # the claim is testable with these canaries
    assert weak["final_model"]["verdict"] == "refuted"
    assert weak["final_model"]["lower_bound"] > 1.0
    for model in ("final_model", "all_iterates"):
        assert honest[model]["verdict"] == "not refuted"
        assert honest[model]["lower_bound"] <= 1.0
    # the aggregator sees DP-FedAvg's clipped updates in the clear, which its ε does not cover: no claim,
    # and the canaries stand out as far as a lower bound of 100 canaries can show
    from sifl_ray.party_seeds import party_seed
    from sifl_ray.privacy.one_run import audit_bounds, inclusion_draws
    from sifl_ray.runner.canaries import auditor_seeds

    _, inclusion = auditor_seeds(party_seed(4, "run", "auditor"))  # coding.key_seed=4
    inserted = inclusion_draws(k=100, seed=inclusion)
    perfect = audit_bounds(scores=inserted.astype(float), included=inserted, delta=1e-5)
    for audit in (honest, weak):
        assert audit["uploads"]["verdict"] == "no claim"
        # every canary told apart: each bound what perfectly separated scores give, the f-DP one its ceiling
        assert audit["uploads"]["steinke_bound"] == pytest.approx(perfect.steinke)
        assert audit["uploads"]["fdp_bound"] == pytest.approx(perfect.fdp) == perfect.fdp_ceiling
    # the estimate sees the weak arm's canaries far more clearly than the honest arm's
    assert weak["final_model"]["estimate"] > 3 * max(honest["final_model"]["estimate"], 0.1)
    # summary.json carries the same figures
    on_disk = json.loads((result.run_dir / "summary.json").read_text())
    assert on_disk["arms"]["dp_fedavg_weak_eps1"]["audit"]["final_model"]["verdict"] == "refuted"

    # TensorBoard: the audit tags, per threat model, every round, beside the accountant's ε
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(result.run_dir / "tb" / "dp_fedavg_weak_eps1"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # (the uploads' estimate is infinite, and not drawn: the aggregator reads each inserted canary exactly)
    assert weak["uploads"]["estimate"] == math.inf
    drawn = [(m, "epsilon_estimate") for m in ("final_model", "all_iterates")]
    drawn += [(m, "epsilon_lower_bound_if_stopped_here") for m in ("final_model", "all_iterates", "uploads")]
    for model, figure in drawn:
        events = acc.Scalars(f"audit/{model}/{figure}")
        assert [e.step for e in events] == list(range(10))
        assert all(math.isfinite(e.value) for e in events)
    assert "privacy/epsilon_whole_vector" in tags  # the accountant's ε after each round: the claim
    last = acc.Scalars("audit/final_model/epsilon_lower_bound_if_stopped_here")[-1].value
    assert last == pytest.approx(weak["final_model"]["lower_bound"], rel=1e-6)
    # the Custom Scalars layout puts the claim and the two figures on one chart per threat model
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.custom_scalar import layout_pb2

    charts = []
    for f in (result.run_dir / "tb").glob("*/events.out.tfevents.*"):
        for event in EventFileLoader(str(f)).Load():
            for v in event.summary.value:
                if v.tag == "custom_scalars__config__":
                    layout = layout_pb2.Layout.FromString(v.tensor.string_val[0])
                    charts += [c for cat in layout.category if "audit" in cat.title for c in cat.chart]
    assert len(charts) == 3  # final model, all iterates, uploads
    for chart in charts:
        tags = list(chart.multiline.tag)
        assert "^privacy/epsilon_whole_vector$" in tags
        assert any("epsilon_lower_bound_if_stopped_here$" in t for t in tags)


def test_canaries_never_count_in_the_train_loss_and_are_counted_apart(tmp_path):
    result = _run(tmp_path, ["arms=[fl]", "train.rounds=2", "audit.canaries=10"])
    for row in result.history["fl"]:
        assert row["clients/canaries"] > 0
        assert row["clients/accepted"] == 20 + row["clients/canaries"]  # q = 1: every real client too
        assert math.isfinite(row["train_loss"])
    assert result.summary["arms"]["fl"]["audit"]["final_model"]["verdict"] == "no claim"


def test_a_resumed_run_audits_the_same_canaries_as_the_run_it_continues(tmp_path):
    """The record of the scores lives in the driver's checkpointed state: a run resumed from round 1 ends
    with the same audit figures as the run that went straight through (coding.key_seed unset: the
    auditor's seed is read back from its key file)."""
    over = [
        "arms=[dp_fedavg]",
        "train.rounds=4",
        "audit.canaries=20",
        "coding.key_seed=null",
        "checkpoint.keep=10",
    ]
    straight = _run(tmp_path, over, "straight")
    resumed_sim = Simulation.resume(straight.run_dir / "checkpoints" / "round-000001")
    try:
        resumed = resumed_sim.run()
    finally:
        resumed_sim.close()
    a = straight.summary["arms"]["dp_fedavg_eps1"]["audit"]
    b = resumed.summary["arms"]["dp_fedavg_eps1"]["audit"]
    assert set(a) == set(b) and set(a) >= {"final_model", "all_iterates", "uploads"}
    for model in ("final_model", "all_iterates", "uploads"):  # the uploads' view kept from before the resume
        for key, value in a[model].items():
            assert b[model][key] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), (
                key
            )


@pytest.mark.ray
def test_ray_and_in_process_runs_audit_alike(ray_session, tmp_path):
    """The canaries' directions, inclusion and sampling come from named secret streams, so a Ray run (the
    canaries hosted by the worker actors, scored by the evaluator actor, masked under secure aggregation)
    gives the in-process run's figures exactly."""
    over = [
        "arms=[fl,dp_fedavg_secagg]",
        "train.rounds=2",
        "audit.canaries=6",
        "audit.nulls=10",
        "clients.num_clients=6",
        "dp_fedavg.epsilons=[5]",
    ]
    local = _run(tmp_path, over, "local")
    on_ray = _run(tmp_path, [*over, "backend=ray", "ray.num_workers=2"], "ray")
    for arm in ("fl", "dp_fedavg_secagg_eps5"):
        assert on_ray.summary["arms"][arm]["audit"] == local.summary["arms"][arm]["audit"], arm
        assert on_ray.summary["arms"][arm]["final_accuracy"] == local.summary["arms"][arm]["final_accuracy"]


def test_a_zero_out_arm_keeps_its_left_out_canaries_in_the_round(tmp_path):
    """Under zero-out the neighbour of a client's update is the same client uploading 0 (its noise share
    included): every sampled canary takes part in dp_fedavg_secagg, the left-out ones with no change,
    while an add/remove arm (dp_fedavg) sees only the inserted ones."""
    result = _run(
        tmp_path,
        ["arms=[dp_fedavg,dp_fedavg_secagg]", "train.rounds=2", "audit.canaries=10", "clients.num_clients=6"],
    )
    inserted = result.summary["arms"]["dp_fedavg_eps1"]["audit"]["inserted"]
    assert 0 < inserted < 10
    for row in result.history["dp_fedavg_eps1"]:
        assert row["clients/canaries"] == inserted  # q = 1: every inserted canary, every round
    for row in result.history["dp_fedavg_secagg_eps1"]:
        assert row["clients/canaries"] == 10
    # the secure arm's aggregator reads masked inputs: no canary stands out, and its ε covers that view
    uploads = result.summary["arms"]["dp_fedavg_secagg_eps1"]["audit"]["uploads"]
    assert uploads["claimed_epsilon"] == pytest.approx(1.0, rel=1e-3) and uploads["verdict"] != "refuted"


def test_an_audit_too_large_for_memory_is_refused_with_the_fix(tmp_path):
    """The directions are held in the evaluator and every worker: (k + m)·n float64 beyond 1 GiB is refused
    before any party starts, naming both keys and a value that fits."""
    from sifl_ray.config import ConfigError

    cfg = load_config([*AUDITED, "audit.canaries=10", "audit.nulls=60000", f"output.dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"audit.canaries, audit.nulls: .* e\.g\. audit\.nulls=\d+"):
        Simulation(cfg, run_dir=tmp_path / "run")
