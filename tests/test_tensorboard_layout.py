"""What TensorBoard shows of a real run, read back from its event files: results lead (TensorBoard sorts
groups by the tag's first word), bookkeeping under ``system/``, per-element and whole-model ε under
different tags, a Custom Scalars layout overlaying the arms on the figures a reader compares, HParams with
one session per arm and the settings a reader compares, the final figures side by side; and the table
printed at the end, labelled for what each ε is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sifl_ray.config import load_config
from sifl_ray.logging import tensorboard_runs, tensorboard_scalars, tensorboard_tag
from sifl_ray.runner import Simulation, summary_table

ARMS = ["fl", "sifl_m1", "sifl_m2", "nbafl", "dp_fedavg"]
RESULT_GROUPS = ("eval", "precision", "privacy")  # in TensorBoard's (alphabetical) order, before system


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tb_run")
    cfg = load_config(
        [
            "scenario=quickstart",
            "train.rounds=2",
            "clients.num_clients=4",
            "backend=local",
            "output.progress=false",
            "output.plot=false",
            f"arms=[{','.join(ARMS)}]",
            f"output.dir={out}",
        ]
    )
    sim = Simulation(cfg, run_dir=out / "run")
    try:
        result = sim.run()
    finally:
        sim.close()
    return result


def _events(folder: Path) -> list:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return [e for f in sorted(folder.glob("events.out.tfevents.*")) for e in EventFileLoader(str(f)).Load()]


def _scalar_tags(folder: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return set(acc.Tags()["scalars"])


def test_results_come_first_and_bookkeeping_sits_under_system(run):
    tb = Path(run.run_dir) / "tb"
    arms = [a for a in run.history]
    for arm in arms:
        tags = _scalar_tags(tb / arm)
        assert all("/" in t for t in tags), sorted(tags)  # no tag left ungrouped
        groups = sorted({t.split("/")[0] for t in tags})
        assert set(groups) <= {*RESULT_GROUPS, "system"}, (arm, groups)
        assert groups[0] == "eval" and groups[-1] == "system", (arm, groups)
        assert sorted(tags)[0] == "eval/test_accuracy", arm  # the first card on screen
        assert {"eval/test_loss", "eval/train_loss", "system/time/round", "system/bytes/object_store"} <= tags
        assert any(t.startswith("system/clients/") for t in tags), arm
    # the two kinds of ε never share a tag
    for arm in ("sifl_m1", "sifl_m2"):
        tags = _scalar_tags(tb / arm)
        assert "privacy/epsilon_per_element_local" in tags and "privacy/epsilon_whole_vector" not in tags
        assert "precision/max_deviation_from_fl" in tags
    whole = [a for a in arms if a.startswith(("nbafl", "dp_fedavg"))]
    assert len(whole) == 2
    for arm in whole:
        tags = {t for t in _scalar_tags(tb / arm) if t.startswith("privacy/")}
        assert tags == {"privacy/epsilon_whole_vector"}, (arm, tags)
    assert not any(t.startswith("privacy/") for t in _scalar_tags(tb / "fl"))
    # no one-dot final-accuracy cards: the final figures are one table in the run's text
    assert not any(t.startswith("final_accuracy") for a in arms for t in _scalar_tags(tb / a))
    # every run TensorBoard lists is an arm's: no empty one beside them for the text and the HParams
    assert sorted(p.name for p in tb.iterdir()) == sorted(arms)
    texts = {
        v.tag: v.tensor.string_val[0].decode()
        for e in _events(tb / arms[0])
        for v in e.summary.value
        if v.metadata.plugin_data.plugin_name == "text"
    }
    table = texts["eval/final_results/text_summary"]
    assert all(f"| {arm} |" in table for arm in arms) and "ε whole model" in table and "| δ |" in table


def test_custom_scalars_overlay_every_arm_on_the_results_charts(run):
    from tensorboard.plugins.custom_scalar import layout_pb2

    tb = Path(run.run_dir) / "tb"
    layouts = [
        layout_pb2.Layout.FromString(v.tensor.string_val[0])
        for folder in tb.iterdir()
        for e in _events(folder)
        for v in e.summary.value
        if v.tag == "custom_scalars__config__"
    ]
    assert layouts
    (results,) = [c for c in layouts[-1].category if c.title.startswith("results")]
    charts = {c.title: list(c.multiline.tag) for c in results.chart}
    every_tag = {t for arm in run.history for t in _scalar_tags(tb / arm)}

    def drawn(patterns: list[str]) -> set[str]:
        return {t for t in every_tag if any(re.search(p, t) for p in patterns)}

    titles = list(charts)
    assert titles[0] == "test accuracy" and drawn(charts["test accuracy"]) == {"eval/test_accuracy"}
    by_tag = {frozenset(drawn(p)): title for title, p in charts.items()}
    assert frozenset({"eval/test_loss"}) in by_tag
    assert frozenset({"precision/max_deviation_from_fl"}) in by_tag
    assert frozenset({"privacy/epsilon_whole_vector"}) in by_tag
    assert frozenset({"system/time/round"}) in by_tag
    per_element = next(
        title for title, p in charts.items() if "privacy/epsilon_per_element_local" in drawn(p)
    )
    assert all(t.startswith("privacy/epsilon_per_element_") for t in drawn(charts[per_element]))
    for title, patterns in charts.items():  # one chart, every arm: each pattern finds its tag in several runs
        arms_drawn = [a for a in run.history if drawn(patterns) & _scalar_tags(tb / a)]
        assert len(arms_drawn) >= 2 or "ε" in title, (title, arms_drawn)
    for title in ("max deviation", "ε per element", "ε of the whole model", "test loss"):
        # drawn linear (a layout cannot set the axis): the title says how to see it on a log axis
        assert "press log scale" in next(t for t in charts if t.startswith(title)), title
    assert not any("log axis" in t for t in charts)


def test_hparams_show_the_settings_a_reader_compares_one_session_per_arm(run):
    from tensorboard.plugins.hparams import plugin_data_pb2

    tb = Path(run.run_dir) / "tb"

    def hparams_data(folder: Path, tag: str) -> list:
        return [
            plugin_data_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)
            for e in _events(folder)
            for v in e.summary.value
            if v.tag == tag
        ]

    (experiment,) = [e for arm in run.history for e in hparams_data(tb / arm, "_hparams_/experiment")]
    names = [h.name for h in experiment.experiment.hparam_infos]
    # the plugin ticks the first five, sorted by name: exactly the five a reader compares, no bookkeeping
    assert sorted(names) == ["coding", "scenario", "train.lr", "train.model", "train.optimizer"]
    metrics = [m.name.tag for m in experiment.experiment.metric_infos]
    assert metrics[0] == "eval/test_accuracy" and len(metrics) <= 5
    assert {"eval/test_loss", "privacy/epsilon_whole_vector"} <= set(metrics)
    codings = {}
    for arm in run.history:
        (start,) = hparams_data(tb / arm, "_hparams_/session_start_info")
        values = start.session_start_info.hparams
        assert values["scenario"].string_value == "quickstart"
        assert values["train.lr"].number_value == pytest.approx(0.1)
        codings[arm] = values["coding"].string_value
        assert "eval/test_accuracy" in _scalar_tags(tb / arm)  # the metric the session reports
    assert codings["fl"] == "plain" and codings["sifl_m1"] == "m1" and codings["sifl_m2"] == "m2"


def test_the_table_labels_each_epsilon_for_what_it_is(run):
    summary = run.summary
    table = summary_table(summary, width=100)
    header = table.splitlines()[0]
    assert "ε upload" in header and "ε global" in header
    assert "ε model" in header and "δ" in header and "scope: summary.json" not in header
    assert max(len(line) for line in table.splitlines()) <= 100
    said = " ".join(table.split())  # the notes, unwrapped
    accountant = summary["accountant"]["arms"]
    rows = {line.split()[0]: line for line in table.splitlines()[2:] if line.split()}
    # each SIFL arm's own global release: M1's broadcast, M2's global model (not its round-0 broadcast)
    m1 = accountant["sifl_m1"]["broadcast"]["largest_per_round_epsilon"]
    m2 = accountant["sifl_m2"]["global"]["largest_per_round_epsilon"]
    m2_round0 = accountant["sifl_m2"]["broadcast"]["largest_per_round_epsilon"]
    assert f"{m1:.3g}" in rows["sifl_m1"] and f"{m2:.3g}" in rows["sifl_m2"]
    assert f"{m2_round0:.3g}" not in rows["sifl_m2"]
    assert f"sifl_m2: round 0 is an M1 round; its broadcast's ε per element is {m2_round0:.3g}" in said
    assert "1e-05" in rows["nbafl_eps1"] and "1e-05" in rows["sifl_m1"]  # δ beside every ε
    assert "ε model (NbAFL, DP-FedAvg): the usual (ε, δ) guarantee" in said
    assert "ε upload, ε global (SIFL, per element, worst round)" in said


def test_a_run_that_learns_nothing_says_so_and_a_scale_demo_says_it_expects_it():
    arms = {
        arm: {
            "final_accuracy": acc,
            "delta_vs_fl_pp": None,
            "max_deviation": None,
            "privacy": None,
            "wall_s": 1.0,
        }
        for arm, acc in (("fl", 0.099), ("sifl_m2", 0.101))
    }
    scale = {"scenario": "scale_1000", "arms": arms, "chance_accuracy": 0.1, "accountant": None}
    said = " ".join(summary_table(scale).split())
    assert "every arm ended at chance level (10 % = a guess): expected in a scale demo" in said
    arms["fl"]["final_accuracy"] = 0.95
    mixed = " ".join(summary_table(scale).split())
    assert "sifl_m2: final accuracy at chance level" in mixed and "scale demo" not in mixed
    arms["sifl_m2"]["final_accuracy"] = 0.95
    assert "chance" not in summary_table(scale)


def test_tags_map_each_metric_once_and_the_whole_model_epsilon_is_the_accountants_after_the_round():
    assert tensorboard_tag("test_accuracy") == "eval/test_accuracy"
    assert tensorboard_tag("time/round") == "system/time/round"
    assert tensorboard_tag("audit/final_model/epsilon_estimate") == "audit/final_model/epsilon_estimate"
    assert tensorboard_tag("privacy/epsilon_global", per_element=True) == "privacy/epsilon_per_element_global"
    dp = {"test_accuracy": 0.5, "train_loss": float("nan"), "privacy/epsilon_cumulative": 0.7}
    assert tensorboard_scalars(dp, per_element=False) == {
        "eval/test_accuracy": 0.5,  # the NaN train loss of a round without updates is left out
        "privacy/epsilon_whole_vector": 0.7,
    }
    nbafl = {"privacy/epsilon_local": 1.0}
    assert tensorboard_scalars(nbafl, per_element=False) == {"privacy/epsilon_whole_vector": 1.0}


def test_tensorboard_lists_a_family_of_arms_in_the_order_of_their_epsilon():
    arms = [
        "fl",
        "nbafl_eps1",
        "nbafl_eps5",
        "nbafl_eps10",
        "nbafl_eps20",
        "dp_fedavg_eps0p5",
        "dp_fedavg_eps1",
    ]
    folders = tensorboard_runs(arms)
    nbafl = [folders[a] for a in arms if a.startswith("nbafl")]
    assert sorted(nbafl) == nbafl == ["nbafl_eps01", "nbafl_eps05", "nbafl_eps10", "nbafl_eps20"]
    assert sorted([folders["dp_fedavg_eps1"], folders["dp_fedavg_eps0p5"]])[0] == "dp_fedavg_eps0p5"
    assert folders["fl"] == "fl" and tensorboard_runs(["nbafl_eps1"]) == {"nbafl_eps1": "nbafl_eps1"}


def test_writers_opened_again_in_the_same_second_are_read_after_the_rounds_they_continue(tmp_path):
    """A resume right after a crash: the crashed driver's event file (another process: a larger pid here)
    was made in this second (or the next, by a clock a little ahead). TensorBoard reads a folder's files in
    name order (second, host, pid), so the resumed writer's file must come after it, or round 0 would be
    read after rounds 1 and 2."""
    import os
    import time

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from sifl_ray.logging import RunLogger

    folder = tmp_path / "tb" / "fl"
    old = SummaryWriter(str(folder))
    old.add_scalar(tensorboard_tag("test_accuracy"), 0.5, 0)
    old.close()
    (path,) = folder.glob("events.out.tfevents.*")
    stamp, host, pid, rest = path.name.removeprefix("events.out.tfevents.").split(".", 3)
    assert int(stamp) >= int(time.time()) - 1 and int(pid) == os.getpid()
    # the crashed driver's name: this second or the next (a clock a little ahead), a pid sorting after ours
    path.rename(path.with_name(f"events.out.tfevents.{int(time.time()) + 1}.{host}.{'9' * 9}.{rest}"))
    logger = RunLogger(tmp_path, ["fl"], config_yaml="", hparams={"fl": {}}, purge_step=1)
    for t in (1, 2):
        logger.log_round("fl", t, {"test_accuracy": 0.5 + t / 10})
    logger.close()
    events = EventAccumulator(str(folder))
    events.Reload()
    assert [e.step for e in events.Scalars(tensorboard_tag("test_accuracy"))] == [0, 1, 2]
