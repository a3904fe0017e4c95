"""Garbage from clients and workers, on real Ray: non-finite, mis-shaped, replayed and wrong-epoch uploads
and a corrupted partial sum are refused and logged, the round proceeds without them, and nothing bad is
ever averaged in."""

from __future__ import annotations

from reliability_helpers import ARMS, BASE, paired_run, per_arm, run_sim

from sifl_ray.config import load_config
from sifl_ray.runner import Simulation

# clients 0–2 live on worker 0, clients 3–5 on worker 1
FAULTS = [
    per_arm("corrupt_upload", 1, client=0, corruption="nan"),
    per_arm("corrupt_upload", 1, client=4, corruption="inf"),
    per_arm("corrupt_upload", 2, client=1, corruption="shape"),
    per_arm("corrupt_partial", 2, worker=1, corruption="nan"),
    per_arm("corrupt_upload", 3, client=5, corruption="round"),
    per_arm("corrupt_upload", 4, client=2, corruption="epoch"),
]
REJECTED = {
    1: {"0": "non-finite values", "4": "non-finite values"},
    2: {"1": "wrong shape"},
    3: {"5": "stamped with round 2, expected 3"},
    4: {"2": "stamped with key epoch 1, expected 0"},
}


def test_bad_updates_are_rejected_logged_and_the_round_proceeds(tmp_path):
    run = run_sim([*BASE, f"faults.inject=[{', '.join(FAULTS)}]"], tmp_path / "run")
    for arm in ARMS:
        rows = run.history[arm]
        # round 2: client 1 rejected, and worker 1's partial (clients 3, 4, 5) refused by the aggregator
        assert [r["clients/accepted"] for r in rows] == [6.0, 4.0, 2.0, 5.0, 5.0], arm
        logged = {d["round"]: d for d in run.summary["arms"][arm]["dropped"]}
        for t, expected in REJECTED.items():
            assert set(logged[t]["rejected"]) == set(expected), (arm, t)
            for client, why in expected.items():
                assert why in logged[t]["rejected"][client], (arm, t, client)
        refused = logged[2]["dropped"][0]
        assert refused["worker"] == 1 and "partial refused: non-finite values" in refused["reason"]
        assert run.summary["arms"][arm]["clients_rejected"] == 5
        assert all(r["finite"] == 1.0 for r in rows) and all(r["train_loss"] == r["train_loss"] for r in rows)
    # what happened is in TensorBoard too, as text at the round it happened
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for arm in ARMS:
        acc = EventAccumulator(str(run.run_dir / "tb" / arm))
        acc.Reload()
        texts = {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors("faults/text_summary")}
        assert sorted(texts) == [1, 2, 3, 4], arm
        assert "non-finite values" in texts[1] and "partial refused" in texts[2]
    # nothing non-finite was averaged in (the arithmetic of these rounds: the next test)
    assert all(bool(m.isfinite().all()) for m in run.models.values())


def test_rounds_with_bad_updates_code_within_the_rigorous_bound(tmp_path):
    """The same faults, each SIFL round played beside FedAvg from the same start (in-process): rejected
    uploads, a refused partial reduced again and renormalised weights stay inside the float64 bound on any
    CPU. A mis-weighted sum would miss it by orders of magnitude: it moves the model by (Σa − 1)·‖w‖."""
    faults = f"faults.inject=[{', '.join(FAULTS)}]"
    errors, bounds = paired_run([*BASE, faults, "backend=local"], tmp_path / "run")
    for arm, rows in errors.items():
        assert [accepted for _, accepted in rows] == [6, 4, 2, 5, 5], arm
        assert all(0.0 <= err <= bounds[arm] for err, _ in rows), (arm, rows, bounds[arm])
        assert max(err for err, _ in rows) > 0.0, arm  # the coding does perturb: the check sees it


def test_a_round_that_accepts_nothing_is_skipped_and_the_summary_is_still_written(tmp_path):
    """Every upload of round 0 is garbage: the round is skipped (the model stays, the M1 broadcast is
    reused, so M2's next round is still accounted as an M1 round), its NaN train loss is null in
    summary.json, and the run goes on."""
    import json

    bad = ", ".join(per_arm("corrupt_upload", 0, client=c, corruption="nan") for c in range(6))
    overrides = ["train.rounds=3", f"faults.inject=[{bad}]", "backend=local"]
    cfg = load_config([*BASE, *overrides, f"output.dir={tmp_path}"])
    sim = Simulation(cfg, run_dir=tmp_path / "run")
    try:
        result = sim.run()
    finally:
        sim.close()
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    for arm in ARMS:
        rows = written["arms"][arm]["rounds"]
        assert [r["clients/accepted"] for r in rows] == [0.0, 6.0, 6.0], arm
        assert rows[0]["train_loss"] is None and rows[1]["train_loss"] > 0, arm
        assert written["arms"][arm]["dropped"][0]["skipped"].startswith("no update was accepted")
    m2 = written["arms"]["sifl_m2"]["rounds"]
    # rounds 0 and 1 both start from the server's M1 encoding: M1 figures, 1/γ = 100 × round 2's
    assert "privacy/epsilon_broadcast" in m2[1] and "privacy/epsilon_global" in m2[2]
    assert m2[1]["privacy/epsilon_local"] / m2[2]["privacy/epsilon_local"] > 50
    assert result.summary["arms"]["sifl_m2"]["final_accuracy"] > 0.1
