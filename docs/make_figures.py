"""Every figure in docs/img/, made again from real runs, with the data each one draws.

    python docs/make_figures.py                 # all of them (a few minutes on 2 cores)
    python docs/make_figures.py --skip-tensorboard   # the run figures only (no browser needed)

1. ``dp_compare_small`` (the guide's privacy study), played as a reader plays it, in-process and with fixed
   keys so that the figures are the ones the guide's table states: ``python run.py
   scenario=dp_compare_small coding.key_seed=1 backend=local``. Its ``accuracy.png`` and
   ``accuracy_vs_epsilon.png`` become ``img/dp_compare_small_accuracy.png`` and
   ``img/dp_compare_small_accuracy_vs_epsilon.png``.
2. A quickstart run photographed in TensorBoard (``python -m bench.tensorboard_screenshot``, headless
   Chromium): ``img/tensorboard.png``.

Each PNG carries the data it draws, as a text chunk ``sifl-data`` (JSON: every arm's final accuracy and ε,
the run's RESULT line, the command), so that a test (``tests/test_docs_figures.py``) can hold each figure
against the table that the guide prints beside it: a figure made from another run than the table's fails
CI. The wall time of each run is written beside the figures, in ``img/figures.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image, PngImagePlugin

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"

#: The privacy study the guide's table reports (docs/privacy.md), exactly as the guide says to run it.
STUDY = ["scenario=dp_compare_small", "coding.key_seed=1", "backend=local"]
#: The run TensorBoard photographs (docs/running.md).
QUICKSTART = ["scenario=quickstart", "coding.key_seed=1", "backend=local"]


def run(overrides: list[str], out: Path) -> tuple[Path, str, float]:
    """``python run.py`` with ``overrides``, its runs under ``out``: the run folder, the RESULT line and the
    wall time in seconds."""
    tic = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *overrides, f"output.dir={out}", "output.progress=false"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - tic
    result = done.stdout.strip().splitlines()[-1]
    run_dir = Path(result.rsplit("run_dir=", 1)[1])
    return run_dir, result.rsplit(" run_dir=", 1)[0], wall


def figure_data(run_dir: Path, result: str, command: list[str]) -> dict:
    """What a run's figures draw: every arm's final accuracy and its ε (the whole model's, or SIFL's per
    element), from the run's own summary."""
    summary = json.loads((run_dir / "summary.json").read_text())
    # deferred: the platform, imported only to read a summary as its plots do
    from sifl_ray.runner.summary import arm_epsilons

    eps = arm_epsilons(summary)
    arms = {
        arm: {
            "final_accuracy": a["final_accuracy"],
            "epsilon_whole_model": eps[arm]["whole"],
            "epsilon_per_element": eps[arm]["per_element"],
        }
        for arm, a in summary["arms"].items()
    }
    return {"command": "python run.py " + " ".join(command), "result": result, "arms": arms}


def save_with_data(source: Path, target: Path, data: dict) -> None:
    """``source`` copied to ``target`` with ``data`` in its ``sifl-data`` text chunk."""
    info = PngImagePlugin.PngInfo()
    info.add_text("sifl-data", json.dumps(data, sort_keys=True))
    with Image.open(source) as image:
        image.save(target, pnginfo=info)


def main(argv: list[str] | None = None) -> int:
    """Make every figure of docs/img/ again; print where each came from."""
    parser = argparse.ArgumentParser(prog="python docs/make_figures.py", description=__doc__)
    parser.add_argument("--skip-tensorboard", action="store_true", help="no TensorBoard screenshot")
    args = parser.parse_args(argv)
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sifl-figures-") as tmp:
        run_dir, result, timings["dp_compare_small"] = run(STUDY, Path(tmp))
        data = figure_data(run_dir, result, STUDY)
        for name in ("accuracy", "accuracy_vs_epsilon"):
            save_with_data(run_dir / f"{name}.png", IMG / f"dp_compare_small_{name}.png", data)
        print(f"img/dp_compare_small_*.png: {result}")
        quick_dir, quick, timings["quickstart"] = run(QUICKSTART, Path(tmp))
        if not args.skip_tensorboard:
            # deferred: the benchmark that drives TensorBoard and Chromium, from the checkout
            sys.path.insert(0, str(ROOT))
            from bench.tensorboard_screenshot import screenshot

            shot = Path(tmp) / "tensorboard.png"
            screenshot(quick_dir / "tb", shot, page="timeseries", chromium="chromium", settle_s=12.0)
            save_with_data(shot, IMG / "tensorboard.png", figure_data(quick_dir, quick, QUICKSTART))
            print(f"img/tensorboard.png: {quick}")
    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}"
    (IMG / "figures.json").write_text(
        json.dumps({"wall_s": {k: round(v, 1) for k, v in timings.items()}, "machine": machine}, indent=2)
        + "\n"
    )
    print(f"wall: {timings} on {machine}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
