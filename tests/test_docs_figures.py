"""Every figure in docs/img/ was made by docs/make_figures.py from a real run, and what it draws agrees with
the table the guide prints beside it: each PNG carries its data (``sifl-data``), read back here and held
against the page's table, to the digit the table shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image

DOCS = Path(__file__).resolve().parent.parent / "docs"

#: The privacy study's table (docs/privacy.md): its rows, by the arm kind each reports.
ROWS = {
    "DP-FedAvg, central": "dp_fedavg",
    "DP-FedAvg, distributed": "dp_fedavg_secagg",
    "NbAFL": "nbafl",
}


def figure_data(name: str) -> dict:
    with Image.open(DOCS / "img" / name) as image:
        return json.loads(image.text["sifl-data"])


def test_every_figure_in_the_guide_carries_the_run_it_was_made_from():
    for path in sorted((DOCS / "img").glob("*.png")):
        data = figure_data(path.name)
        for run in data.get("runs", [data]):  # a figure of several runs carries each
            assert run["command"].startswith("python run.py scenario=") and run["result"].startswith(
                "RESULT "
            )
            assert run["arms"], path.name


def privacy_table() -> dict[str, dict[float, float]]:
    """docs/privacy.md's accuracy-against-ε table: arm kind → ε → accuracy (%)."""
    text = (DOCS / "privacy.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| ε (whole run) |"))
    epsilons = [float(c) for c in head.strip("|").split("|")[1:]]
    lines = text.splitlines()
    rows = {}
    for line in lines[lines.index(head) + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        kind = next(k for label, k in ROWS.items() if cells[0].startswith(label))
        rows[kind] = {e: float(c.rstrip(" %")) for e, c in zip(epsilons, cells[1:], strict=True)}
    return rows


@pytest.mark.parametrize(
    "figure", ["dp_compare_small_accuracy_vs_epsilon.png", "dp_compare_small_accuracy.png"]
)
def test_the_privacy_figures_draw_the_tables_accuracies(figure):
    arms = figure_data(figure)["arms"]
    table = privacy_table()
    assert set(table) == set(ROWS.values())
    for kind, row in table.items():
        for eps, percent in row.items():
            arm = arms[f"{kind}_eps{eps:g}"]
            assert arm["epsilon_whole_model"] == pytest.approx(eps, rel=1e-3)
            assert round(100 * arm["final_accuracy"], 1) == percent, (figure, kind, eps)


def test_the_privacy_page_states_the_ideal_arms_accuracy_the_figure_draws():
    arms = figure_data("dp_compare_small_accuracy_vs_epsilon.png")["arms"]
    text = " ".join((DOCS / "privacy.md").read_text().split())
    said = re.search(r"fl, secagg and sifl_m2 reach ([0-9.]+) %", text)
    assert said is not None
    for arm in ("fl", "secagg", "sifl_m2"):
        assert round(100 * arms[arm]["final_accuracy"], 1) == float(said.group(1)), arm
