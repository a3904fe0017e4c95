"""The runner's public round API (in-process): ``play_round`` is the round ``run`` plays, ``set_start`` takes
plain arms only, and the summary module is a function of data."""

from __future__ import annotations

import pytest

from sifl_ray.config import load_config
from sifl_ray.runner import Simulation, result_line, summary_table

TINY = [
    "scenario=quickstart",
    "train.rounds=2",
    "clients.num_clients=4",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "backend=local",
    "arms=[fl,sifl_m1]",
    "output.progress=false",
    "output.plot=false",
]


def _sim(tmp_path, name: str) -> Simulation:
    return Simulation(load_config([*TINY, f"output.dir={tmp_path}"]), run_dir=tmp_path / name)


def test_play_round_is_the_round_run_plays(tmp_path):
    sim = _sim(tmp_path, "run")
    try:
        history = sim.run().history
    finally:
        sim.close()
    sim = _sim(tmp_path, "rounds")
    try:
        for t in range(2):
            for arm in sim.arms:
                got = sim.play_round(arm, t).metrics
                assert got["test_accuracy"] == history[arm][t]["test_accuracy"], (arm, t)
                assert got["train_loss"] == history[arm][t]["train_loss"], (arm, t)
    finally:
        sim.close()


def _run(tmp_path, name: str, *overrides: str):
    sim = Simulation(load_config([*TINY, f"output.dir={tmp_path}", *overrides]), run_dir=tmp_path / name)
    try:
        return sim.run()
    finally:
        sim.close()


def test_the_paired_deviation_does_not_depend_on_the_order_of_the_arms(tmp_path):
    # The evaluator keeps fl's model of a round as its reference: a run that listed sifl_m1 before fl used
    # to play it first and report no deviation at all ("—"), the precision check silently gone.
    first = _run(tmp_path, "fl_first", "arms=[fl,sifl_m1]")
    last = _run(tmp_path, "fl_last", "arms=[sifl_m1,fl]")
    for got in (first, last):
        dev = got.summary["arms"]["sifl_m1"]["max_deviation"]
        assert dev is not None and 0 < dev < 1e-6, dev
        assert all("max_deviation" in r for r in got.history["sifl_m1"])
        assert f"max_dev_sifl_m1={dev:.3e}" in got.result_line
        assert got.summary["arms"]["fl"]["max_deviation"] is None
    # the same rounds, keys and deviations whatever the order; the records keep the scenario's order
    assert [r["max_deviation"] for r in first.history["sifl_m1"]] == [
        r["max_deviation"] for r in last.history["sifl_m1"]
    ]
    assert list(first.summary["arms"]) == ["fl", "sifl_m1"]
    assert list(last.summary["arms"]) == ["sifl_m1", "fl"]
    assert [w.split("=")[0] for w in last.result_line.split()[2:4]] == ["sifl_m1", "fl"]


def test_a_paired_arm_without_fl_says_why_it_has_no_deviation(tmp_path, capsys):
    got = _run(tmp_path, "alone", "arms=[sifl_m1]")
    assert got.summary["arms"]["sifl_m1"]["max_deviation"] is None
    assert "max_dev_" not in got.result_line
    assert "sifl_m1: no max deviation will be reported" in capsys.readouterr().err


def test_set_start_takes_plain_arms_only(tmp_path):
    sim = _sim(tmp_path, "run")
    try:
        w = sim.global_model("sifl_m1")
        sim.set_start("fl", w)
        assert float((sim.global_model("fl") - w).abs().max()) == 0.0
        with pytest.raises(ValueError, match="sifl_m1 is a coded"):
            sim.set_start("sifl_m1", w)
    finally:
        sim.close()


def test_the_result_line_and_table_need_only_the_summary_dict():
    arm = {
        "final_accuracy": 0.5,
        "delta_vs_fl_pp": None,
        "max_deviation": None,
        "privacy": {},
        "wall_s": 1.0,
    }
    summary = {
        "scenario": "s",
        "arms": {"fl": arm},
        "deviation_estimate": None,
        "round_bound": None,
        "run_dir": "d",
    }
    assert result_line(summary) == "RESULT s fl=0.5000 dev_estimate=none round_bound=none run_dir=d"
    assert "50.00%" in summary_table(summary)


def test_the_table_names_the_relation_each_epsilon_is_stated_under():
    def arm(relation: str | None) -> dict:
        privacy = {"epsilon": 1.0} | ({"neighbour_relation": relation} if relation else {})
        return {
            "final_accuracy": 0.5,
            "delta_vs_fl_pp": None,
            "max_deviation": None,
            "privacy": privacy,
            "wall_s": 1,
        }

    summary = {
        "scenario": "s",
        "arms": {
            "dp": arm("zero-out: the client takes part, its update replaced by 0"),
            "fl": arm(None),
            "nb": arm("one sample of one client's data set replaced (record level): D_i and D_i' differ"),
        },
        "deviation_estimate": None,
        "round_bound": None,
        "run_dir": "d",
    }
    rows = summary_table(summary).splitlines()
    assert "relation" in rows[0]
    dp, fl = rows[2], rows[3]
    assert "zero-out" in dp and "update replaced" not in dp  # the relation's name; its words in summary.json
    assert "zero-out" not in fl
    assert "record level" in rows[4] and "one sample" not in rows[4]


def test_a_checkpoint_gives_each_broadcast_its_coding_back_old_ones_from_their_history():
    """The driver's file records each broadcast's coding; a file written before it did implies it from the
    history: an M2 arm broadcasts in M1 until a round accepted an update (round 0 skipped: still M1)."""
    from sifl_ray.round import ArmState
    from sifl_ray.runner.state import broadcast_codings
    from sifl_ray.specs import Coding

    states = {
        "fl": ArmState("fl", Coding.PLAIN, 10, [(0, 10)]),
        "m1": ArmState("m1", Coding.M1, 12, [(0, 12)]),
        "m2": ArmState("m2", Coding.M2, 12, [(0, 12)]),
    }
    assert {a: s.broadcast_coding for a, s in states.items()} == {
        "fl": Coding.PLAIN,
        "m1": Coding.M1,
        "m2": Coding.M1,
    }
    recorded = {"broadcast_codings": {"fl": "plain", "m1": "m1", "m2": "m2"}, "history": {}}
    assert broadcast_codings(recorded, states)["m2"] is Coding.M2
    skipped = [{"round": 0, "clients/accepted": 0.0}]
    old = {"history": {"fl": skipped, "m1": skipped, "m2": skipped}}
    assert broadcast_codings(old, states) == {"fl": Coding.PLAIN, "m1": Coding.M1, "m2": Coding.M1}
    old["history"]["m2"] = [*skipped, {"round": 1, "clients/accepted": 6.0}]
    assert broadcast_codings(old, states)["m2"] is Coding.M2
