"""``python -m bench startup``: where the fixed cost of ``python run.py`` goes, measured from outside.

Runs ``python run.py`` (the quickstart unless overrides say otherwise; ``output.progress=false``) as a
fresh process ``--runs`` times. For each run: its wall time (launch to exit), the start-up marks the run
writes into ``summary.json`` (``startup``, :meth:`sifl_ray.runner.Simulation.startup`: from the launch, the
driver's imports done, the parties ready, the first round; durations: Ray's start, which overlaps the
imports, and the rounds), the end of the run (exit minus the end of the last round: summary, TensorBoard,
plots, Ray's shutdown, the interpreter's exit), and the peak PSS of the run's whole process tree (the
driver, Ray's processes, every actor; :class:`bench.memory.MemorySampler`).

Beside the runs, the floor of that start on this machine (``--floor-runs``, in turn with the runs): a
script that starts Ray as the run does and then as many bare actors as the run had, each importing torch
and nothing else. It is what one actor per party costs before any of this platform's code runs: the first
round cannot come sooner than it.

Targets (on a 2-core machine): first round ≤ 5 s after the launch, ``python run.py`` ≤ 12 s.
The machine is shared and noisy: the load average before and after each run is printed and written.

The last line is ``RESULT startup ratio=<median wall ÷ 12 s> target=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import publish, result_line, table
from bench.memory import MIB, MemorySampler
from sifl_ray.progress import progress

ROOT = Path(__file__).resolve().parent.parent
FIRST_ROUND_TARGET_S = 5.0
WALL_TARGET_S = 12.0
PHASES = ("imports_s", "backend_s", "parties_s", "to_first_round_s", "rounds_s")

#: The floor: Ray started as ``sifl run`` starts it, then ACTORS bare actors that import torch. Prints a
#: line ``FLOOR <Ray up> <every actor ready>`` (seconds since the epoch) among Ray's own lines.
FLOOR_SCRIPT = """
import sys, time
import ray
ray.init(address="local", include_dashboard=False, configure_logging=False, log_to_driver=True)
up = time.time()

@ray.remote(num_cpus=0)
class Bare:
    def __init__(self):
        import torch  # noqa: F401

    def ready(self):
        return "torch" in sys.modules

actors = [Bare.remote() for _ in range(int(sys.argv[1]))]
import torch  # noqa: E402,F401  (the driver's own, as a run's driver has it, while the actors start)

assert all(ray.get([a.ready.remote() for a in actors]))
ready = time.time()
time.sleep(0.5)  # a few samples of the steady state for the caller's PSS sampler
print("FLOOR", up, ready, flush=True)
ray.shutdown()
"""


def run_sampled(argv: list[str], interval: float, what: str) -> tuple[str, MemorySampler]:
    """Run ``argv`` in the repository root while sampling its process tree's PSS; its output (stdout and
    stderr together) and the sampler.

    Raises:
        RuntimeError: it failed; the message ends with the tail of its output.
    """
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with MemorySampler(interval, root=proc.pid) as sampler:
        output, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{output[-4000:]}")
    return output, sampler


def run_once(overrides: list[str], interval: float) -> dict[str, Any]:
    """One ``python run.py`` in a fresh process; its wall time, start-up record and peak PSS."""
    with tempfile.TemporaryDirectory(prefix="sifl-startup-") as out:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        argv = [sys.executable, "run.py", "output.progress=false", f"output.dir={out}", *overrides]
        output, sampler = run_sampled(argv, interval, "python run.py")
        wall = time.perf_counter() - start
        (summary_path,) = Path(out).rglob("summary.json")
        summary = json.loads(summary_path.read_text())
        startup = summary["startup"]
    peak, by_kind = sampler.peak()
    first, rounds = startup["to_first_round_s"], startup["rounds_s"]
    return {
        "wall_s": wall,
        **startup,
        "end_s": wall - first - rounds if first is not None and rounds is not None else None,
        "peak_pss_bytes": peak,
        "peak_by_process": by_kind,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "actors": len((summary["placement"] or {}).get("parties", {})),  # none in-process (backend=local)
        "result_line": next((ln for ln in output.splitlines() if ln.startswith("RESULT ")), ""),
    }


def floor_once(actors: int, interval: float) -> dict[str, float]:
    """The floor script once (see the module docstring): seconds from its launch to Ray up and to the
    ``actors`` bare actors ready, and the peak PSS of its process tree (Ray, a driver and the actors with
    torch imported: what the run's processes hold before any data set or model)."""
    start = time.time()
    out, sampler = run_sampled(
        [sys.executable, "-c", FLOOR_SCRIPT, str(actors)], interval, "the floor script"
    )
    (line,) = [ln for ln in out.splitlines() if ln.startswith("FLOOR ")]  # Ray's own lines come around it
    up, ready = map(float, line.split()[1:])
    peak, _ = sampler.peak()
    return {"ray_up_s": up - start, "actors_ready_s": ready - start, "actors": actors, "peak_pss_bytes": peak}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``python run.py`` from launch to the first round, phase by phase, and the floor of bare Ray actors
    importing torch."""
    runs, floors = [], []
    for i in progress(range(max(args.runs, args.floor_runs)), "bench startup", name=lambda i: f"run {i}"):
        if i < args.runs:
            runs.append(run_once(args.overrides, args.interval))
        if i < args.floor_runs and runs and runs[-1]["actors"]:
            floors.append(floor_once(runs[-1]["actors"], args.interval))
    keys = ("wall_s", *PHASES, "end_s")
    median = {k: statistics.median(r[k] for r in runs) for k in keys if all(r[k] is not None for r in runs)}
    median["peak_pss_mib"] = statistics.median(r["peak_pss_bytes"] for r in runs) / MIB
    floor_keys = ("ray_up_s", "actors_ready_s", "peak_pss_bytes")
    floor = {k: statistics.median(f[k] for f in floors) for k in floor_keys} if floors else {}
    return {
        "name": "startup",
        "args": vars(args),
        "runs": runs,
        "median": median,
        "floors": floors,
        "floor": floor,
    }


def report(res: dict[str, Any]) -> str:
    """One row per run (each phase's seconds, peak memory, load) and the floor beside them."""
    header = ["run", "wall s", "imports", "Ray", "parties", "→ 1st round", "rounds", "end", "peak PSS MiB"]
    header.append("load")
    rows = []
    for i, r in enumerate(res["runs"]):
        rows.append(
            [
                str(i + 1),
                f"{r['wall_s']:.2f}",
                *(f"{r[k]:.2f}" if r[k] is not None else "—" for k in (*PHASES, "end_s")),
                f"{r['peak_pss_bytes'] / MIB:.0f}",
                f"{r['load_before']:.1f}→{r['load_after']:.1f}",
            ]
        )
    m = res["median"]
    rows.append(
        [
            "median",
            f"{m['wall_s']:.2f}",
            *(f"{m[k]:.2f}" if k in m else "—" for k in (*PHASES, "end_s")),
            f"{m['peak_pss_mib']:.0f}",
            "",
        ]
    )
    last = res["runs"][-1]
    where = sorted(last["peak_by_process"].items(), key=lambda kv: -kv[1])[:6]
    lines = [
        f"startup: python run.py {' '.join(res['args']['overrides'])} ({len(res['runs'])} runs); "
        "imports, parties, → 1st round: seconds from the launch (imports: interpreter, configuration, the "
        "driver's imports); Ray, rounds, end: durations (Ray starts while the driver imports; end: summary, "
        "TensorBoard, plots, Ray's shutdown, exit)",
        "",
        table(rows, header),
        "",
        "largest at the peak (MiB, last run): " + ", ".join(f"{k} {v / MIB:.0f}" for k, v in where),
        *floor_lines(res),
        f"CHECK first_round_s={m['to_first_round_s']:.2f} target={FIRST_ROUND_TARGET_S:g}",
        f"CHECK run_py_wall_s={m['wall_s']:.2f} target={WALL_TARGET_S:g}",
        result_line(res["name"], m["wall_s"] / WALL_TARGET_S, 1.0),
    ]
    return "\n".join(lines)


def floor_lines(res: dict[str, Any]) -> list[str]:
    """The floor, and how far above it the run's first round came."""
    floor = res["floor"]
    if not floor:
        return []
    actors = res["floors"][-1]["actors"]
    first = res["median"]["to_first_round_s"]
    return [
        f"floor ({len(res['floors'])} runs, medians): Ray up {floor['ray_up_s']:.2f} s, then {actors} bare "
        f"actors importing torch ready {floor['actors_ready_s']:.2f} s after the launch; the run's first "
        f"round came {first - floor['actors_ready_s']:.2f} s after that. Peak PSS of the floor "
        f"{floor['peak_pss_bytes'] / MIB:.0f} MiB (the run's data sets and models come on top)",
        f"CHECK floor_actors_ready_s={floor['actors_ready_s']:.2f} target={FIRST_ROUND_TARGET_S:g}",
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m bench startup``: measure, print the report, write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of python run.py (default 3)")
    parser.add_argument(
        "--floor-runs",
        type=int,
        default=3,
        help="runs of the floor script, in turn with the runs (default 3)",
    )
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between PSS samples")
    parser.add_argument("--out", default="bench_results/startup.json", help="JSON path")
    parser.add_argument("overrides", nargs="*", help="run.py overrides (key=value), e.g. scenario=quickstart")
    args = parser.parse_args(argv)
    res = measure(args)
    res["targets"] = {"first_round_s": FIRST_ROUND_TARGET_S, "wall_s": WALL_TARGET_S}
    return publish(args.out, res, report(res))


if __name__ == "__main__":
    raise SystemExit(main())
