"""The clock's study (docs/clock.md "The study"): every arm of ``sifl_ray/scenarios/clock_study.yaml`` in
time to accuracy, once on the mobile mix with its deadline and once with every device equal; one chart with
a panel each, and a Markdown table.

    python examples/clock_study.py [key=value ...] [--out docs/img/clock_study.png]

The overrides apply to both runs (``backend=ray``, ``train.rounds=10``); the second run adds
``clock.profile=equal``. The numbers are the runs' own summary.json figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from PIL import Image, PngImagePlugin

from sifl_ray import simulate
from sifl_ray.plots import accuracy_vs_time_panels, save_figure, summary_styles
from sifl_ray.runner.summary import arm_epsilons

CONDITIONS = {
    "phones (mobile mix), 2.5 s deadline": [],
    "every device equal (the mix's medians)": ["clock.profile=equal"],
}


def table(runs: dict[str, Any]) -> str:
    """Per arm and condition: the median round, the uploads a round kept, the time to the target accuracy
    and the final accuracy (Markdown)."""
    first = next(iter(runs.values()))
    target = first.summary["arms"][next(iter(first.summary["arms"]))]["clock"].get("target_accuracy")
    head = ["arm"]
    for name in runs:
        head += [f"{name}: round s", "uploads / round", f"time to {100 * (target or 0):g} % (s)", "final acc"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in first.summary["arms"]:
        cells = [arm]
        for run in runs.values():
            a = run.summary["arms"][arm]
            clock, rounds = a["clock"], len(a["rounds"])
            reached = clock.get("time_to_target_s")
            cells += [
                f"{clock['round_s_median']:.2f}",
                f"{clock['uploads_arrived'] / rounds:.1f}",
                "never" if reached is None else f"{reached:.1f}",
                f"{100 * a['final_accuracy']:.1f} %",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(runs: dict[str, Any], out: Path, commands: dict[str, list[str]]) -> Path:
    """One panel per condition, every arm in its run's style, the same accuracy axis."""
    panels = {}
    for name, run in runs.items():
        target = next(iter(run.summary["arms"].values()))["clock"].get("target_accuracy")
        panels[name] = (run.history, summary_styles(run.summary, arm_epsilons(run.summary)), target)
    title = "time to accuracy: each point is a round's end on the simulated clock (docs/clock.md)"
    path = save_figure(accuracy_vs_time_panels(panels, title), out)
    carry_runs(path, runs, commands)
    return path


def carry_runs(path: Path, runs: dict[str, Any], commands: dict[str, list[str]]) -> None:
    """Write into the PNG what it draws (its ``sifl-data`` text chunk, as docs/make_figures.py does): each
    condition's command, RESULT line and every arm's final accuracy and ε."""
    data = {"runs": []}
    for name, run in runs.items():
        eps = arm_epsilons(run.summary)
        arms = {
            arm: {
                "final_accuracy": a["final_accuracy"],
                "epsilon_whole_model": eps[arm]["whole"],
                "epsilon_per_element": eps[arm]["per_element"],
            }
            for arm, a in run.summary["arms"].items()
        }
        command = "python run.py scenario=clock_study " + " ".join(commands[name])
        data["runs"].append(
            {"condition": name, "command": command.strip(), "result": run.result_line, "arms": arms}
        )
    info = PngImagePlugin.PngInfo()
    info.add_text("sifl-data", json.dumps(data, sort_keys=True))
    with Image.open(path) as image:
        image.load()
        image.save(path, pnginfo=info)


def main(argv: list[str] | None = None) -> int:
    """Run both conditions, draw the chart, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="key=value, applied to both runs")
    parser.add_argument("--out", default="docs/img/clock_study.png")
    args = parser.parse_args(argv)
    commands = {name: [*args.overrides, *extra] for name, extra in CONDITIONS.items()}
    runs = {name: simulate("clock_study", commands[name]) for name in CONDITIONS}
    path = chart(runs, Path(args.out), commands)
    for name, run in runs.items():
        print(f"{name}: {run.run_dir}")
    print(table(runs))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
