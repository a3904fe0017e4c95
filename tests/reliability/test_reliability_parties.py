"""A server, an aggregator shard and the evaluator killed for real (``ray.kill``) mid-run: each is respawned,
takes its key back from its own key file, the run continues from the last checkpoint and says so, and
the result is the fault-free one: same models, same TensorBoard curves, each step once."""

from __future__ import annotations

import json

import pytest
from reliability_helpers import ARMS, BASE, max_deviation, run_sim, scalars


@pytest.mark.parametrize(
    ("actors", "killed"),
    [(1, "aggregator0"), (2, "aggregator1")],
    ids=["one aggregator actor hosts both shards", "an actor per shard"],
)
def test_dead_parties_are_restored_from_the_last_checkpoint(reference, tmp_path, actors, killed):
    """The reference runs with the default (one aggregator actor for this small vector): with an actor per
    shard the numbers are the same, and the actor that hosts shard 1 is the one killed and restored."""
    faults = (
        "{kind: server_kill, round: 1, arm: sifl_m1}, "
        "{kind: aggregator_kill, round: 2, arm: sifl_m2, shard: 1}, "
        "{kind: evaluator_kill, round: 3, arm: fl}"
    )
    killing = [f"ray.aggregator_actors={actors}", f"faults.inject=[{faults}]", "ray.placement=separate"]
    run = run_sim([*BASE, *killing], tmp_path / "run")

    assert max_deviation(run.models, reference.models) <= 1e-12
    assert sorted(name for name in run.inventory if name.startswith("aggregator")) == [
        f"aggregator{j}" for j in range(actors)
    ]
    restored = run.summary["restored"]
    assert [r["party"] for r in restored] == ["server", killed, "evaluator"]
    for r, planned in zip(restored, (1, 2, 3), strict=True):
        # ray.kill is asynchronous: the death is noticed at the party's next call (this round or the next)
        assert planned <= r["died_in_round"] <= planned + 1
        assert r["from_checkpoint"] == f"round-{r['replayed_from_round'] - 1:06d}"
        assert r["replayed_from_round"] == r["died_in_round"]  # a checkpoint every round: one round replayed
    for arm in ARMS:
        assert scalars(run.run_dir, arm) == scalars(reference.run_dir, arm), arm
        assert [row["round"] for row in run.history[arm]] == list(range(5))
    journal = [json.loads(line) for line in (run.run_dir / "faults.jsonl").read_text().splitlines()]
    assert [j["kind"] for j in journal if j["event"] == "fired"] == [
        "server_kill",
        "aggregator_kill",
        "evaluator_kill",
    ]
    assert sum(j["event"] == "restored" for j in journal) == 3
    # the restored parties hold what they held before, and nothing of another party's key
    assert run.inventory["server"] == ["secret-seed", "server-key"]
    assert run.inventory["evaluator"] == ["aggregator-client-view", "server-client-view"]
    for name, kinds in run.inventory.items():
        if name.startswith("aggregator"):
            assert kinds == ["aggregator-key", "secret-seed"], name
        if name.startswith("worker"):
            assert kinds == ["aggregator-client-view", "server-client-view"], name
