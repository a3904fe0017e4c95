"""The end-of-run table fits a terminal: the terminal's width, 100 columns where there is none; short headers
said under the table, notes wrapped, optional columns left out (and said so) when the window is narrow."""

from __future__ import annotations

import pytest

from sifl_ray.runner import result_line, summary_table
from sifl_ray.runner.columns import DEFAULT_WIDTH, terminal_width

RELATIONS = {
    "nbafl": "one sample of one client's data set replaced (record level): D_i and D_i' differ",
    "dp_fedavg": "add/remove: one client's update present or not",
    "dp_fedavg_secagg": "zero-out: the client takes part, its update replaced by 0",
}


def study() -> dict:
    """A summary shaped like dp_compare_small's: thirteen arms, the longest names the platform makes."""
    arms = {"fl": {"final_accuracy": 0.9533, "delta_vs_fl_pp": None, "max_deviation": None, "privacy": None}}
    for family, relation in RELATIONS.items():
        for eps in (1, 5, 10, 20):
            arms[f"{family}_eps{eps}"] = {
                "final_accuracy": 0.1 + eps / 40,
                "delta_vs_fl_pp": -50.0 + eps,
                "max_deviation": None,
                "privacy": {"epsilon": float(eps), "delta": 1e-5, "neighbour_relation": relation},
            }
    for a in arms.values():
        a["wall_s"] = 12.25
    return {
        "scenario": "dp_compare_small",
        "arms": arms,
        "chance_accuracy": 0.1,
        "accountant": None,
        "deviation_estimate": None,
        "round_bound": None,
        "run_dir": "runs/x",
    }


@pytest.mark.parametrize("width", [100, 120, 200])
def test_every_line_fits_the_width_and_every_arm_keeps_its_row(width):
    table = summary_table(study(), width=width)
    assert max(len(line) for line in table.splitlines()) <= width
    rows = {line.split()[0] for line in table.splitlines()[2:15]}
    assert rows == set(study()["arms"])


def test_the_short_headers_are_said_under_the_table():
    table = summary_table(study(), width=100)
    header = table.splitlines()[0].split()
    assert header[:3] == ["arm", "acc", "Δ"] and "relation" in header
    said = " ".join(table.split())
    assert "acc: final test accuracy; Δ fl: against fl, in percentage points" in said
    assert "every figure in full: summary.json" in said
    assert "ε upload" not in header  # no arm has the figure: the column says nothing, and is left out


def test_a_narrow_terminal_loses_the_wall_time_first_and_says_so():
    table = summary_table(study(), width=65)
    header = table.splitlines()[0]
    assert "wall s" not in header and "acc" in header and "ε model" in header
    assert "wall s: left out to fit the terminal" in " ".join(table.split())


def test_the_result_line_is_the_same_whatever_the_width():
    summary = study()
    before = result_line(summary)
    summary_table(summary, width=60)
    assert result_line(summary) == before and before.startswith("RESULT dp_compare_small fl=0.9533 ")


def test_the_width_is_the_terminals_and_100_without_one(monkeypatch):
    monkeypatch.setenv("COLUMNS", "123")
    assert terminal_width() == 123
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(
        "shutil.get_terminal_size", lambda fallback=(80, 24): __import__("os").terminal_size(fallback)
    )
    assert terminal_width() == DEFAULT_WIDTH == 100


def test_a_column_left_out_for_having_nothing_to_say_is_not_said_to_be_cut():
    """fl alone has no relation: its column goes for being empty, and the notes must not blame the width."""
    summary = study()
    summary["arms"] = {"fl": summary["arms"]["fl"]}
    said = " ".join(summary_table(summary, width=100).split())
    assert "relation" not in said and "left out to fit" not in said
    narrow = " ".join(summary_table(summary, width=15).split())
    assert "wall s: left out to fit the terminal" in narrow and "relation" not in narrow
