"""Garbage from clients and workers, on real Ray: non-finite, mis-shaped, replayed and wrong-epoch uploads
and a corrupted partial sum are refused and logged, the round proceeds without them, and nothing bad is
ever averaged in."""

from __future__ import annotations

from reliability_helpers import ARMS, BASE, per_arm, run_sim

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
    # nothing bad was averaged in: a NaN or a mis-weighted sum would wreck the SIFL decoding
    bound = run.summary["predicted_bound"]
    for arm in ("sifl_m1", "sifl_m2"):
        assert float((run.models[arm] - run.models["fl"]).abs().max()) <= bound
    assert all(bool(m.isfinite().all()) for m in run.models.values())
