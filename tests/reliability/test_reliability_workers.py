"""Client workers that die or straggle, on real Ray: real processes exit (``os._exit``), are killed
(``ray.kill``) or miss the deadline; ``retry`` restores the fault-free model exactly, ``drop`` averages
the survivors with renormalised weights and says who was dropped."""

from __future__ import annotations

from reliability_helpers import ARMS, BASE, max_deviation, paired_run, per_arm, run_sim


def test_retry_respawns_dead_and_late_workers_and_changes_nothing(reference, tmp_path):
    faults = [
        "{kind: worker_exit, worker: 1, round: 1, arm: sifl_m1, seconds: 0.2}",  # dies while worker 0 trains
        "{kind: worker_kill, worker: 0, round: 2, arm: fl}",  # ray.kill from the driver mid-round
        "{kind: straggle, worker: 1, round: 3, arm: sifl_m2, seconds: 120}",  # misses the deadline
    ]
    run = run_sim(
        [
            *BASE,
            "faults.worker_policy=retry",
            "faults.straggler_policy=retry",
            "faults.deadline_s=4",
            f"faults.inject=[{', '.join(faults)}]",
        ],
        tmp_path / "run",
    )
    assert max_deviation(run.models, reference.models) <= 1e-9
    incidents = run.summary["faults"]["incidents"]
    assert len(incidents) == 3 and all(i["action"] == "retried (attempt 1)" for i in incidents)
    exit_, kill, late = sorted(incidents, key=lambda i: (i["round"], "deadline" in i["what"]))
    # os._exit inside the task: seen in that very call
    assert (exit_["round"], exit_["arm"], exit_["what"]) == (1, "sifl_m1", "worker 1: died (ActorDiedError)")
    # ray.kill is asynchronous: the death shows at the worker's current or next call
    assert kill["round"] in (2, 3) and kill["what"] == "worker 0: died (ActorDiedError)"
    assert (late["round"], late["arm"], late["what"]) == (3, "sifl_m2", "worker 1: missed the 4 s deadline")
    for arm in ARMS:  # nothing lost: every sampled client is in every round's average
        assert [r["clients/accepted"] for r in run.history[arm]] == [6.0] * 5
        assert run.summary["arms"][arm]["clients_dropped"] == 0


def test_drop_averages_the_survivors_with_weights_renormalised(reference, tmp_path):
    # the same death in every arm (so the SIFL arms can be held to FedAvg); a straggler in fl only
    faults = (
        per_arm("worker_exit", 1, worker=0) + ", {kind: straggle, worker: 1, round: 3, arm: fl, seconds: 120}"
    )
    run = run_sim(
        [*BASE, "faults.worker_policy=drop", "faults.deadline_s=4", f"faults.inject=[{faults}]"],
        tmp_path / "run",
    )
    for arm in ARMS:
        rows = run.history[arm]
        straggled = arm == "fl"
        assert [r["clients/accepted"] for r in rows] == [6.0, 3.0, 6.0, 3.0 if straggled else 6.0, 6.0], arm
        assert [r["clients/dropped"] for r in rows] == [0.0, 3.0, 0.0, 3.0 if straggled else 0.0, 0.0], arm
        logged = {d["round"]: d["dropped"] for d in run.summary["arms"][arm]["dropped"]}
        assert [{k: v for k, v in d.items() if k != "replace_s"} for d in logged[1]] == [
            {"worker": 0, "clients": [0, 1, 2], "reason": "died (ActorDiedError)"}
        ]
        if straggled:
            assert [{k: v for k, v in d.items() if k != "replace_s"} for d in logged[3]] == [
                {"worker": 1, "clients": [3, 4, 5], "reason": "missed the 4 s deadline"}
            ]
        assert set(logged) == ({1, 3} if straggled else {1})
        assert all(r["finite"] == 1.0 for r in rows)
    # the drops did change the model (they are not silently retried)
    assert float((run.models["fl"] - reference.models["fl"]).abs().max()) > 1e-6
    assert float((run.models["sifl_m1"] - reference.models["sifl_m1"]).abs().max()) > 1e-6


def test_a_dropped_worker_round_codes_within_the_rigorous_bound(ray_session, tmp_path):
    """SIFL decodes exactly only if the weights of an average sum to 1 (else (1 − Σw)·w lands in the
    model): a round that drops a dead worker and renormalises, played beside FedAvg from the same start
    on real Ray, stays inside the float64 bound (any CPU)."""
    faults = f"faults.inject=[{per_arm('worker_exit', 1, worker=0)}]"
    overrides = [*BASE, "train.rounds=3", "faults.worker_policy=drop", faults]
    errors, bounds = paired_run(overrides, tmp_path / "run")
    for arm, rows in errors.items():
        assert [accepted for _, accepted in rows] == [6, 3, 6], arm
        assert all(0.0 < err <= bounds[arm] for err, _ in rows), (arm, rows, bounds[arm])
