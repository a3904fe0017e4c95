"""``python -m bench startup``: what a run costs before and after its rounds, measured from outside.

Side by side, in one bench run (the same machine, the same minutes):

* **first run**: ``python run.py`` (the quickstart unless overrides say otherwise) as a fresh process, its
  wall time and its rounds' (``summary.json``'s ``startup``); its *fixed cost* is wall − rounds: the
  interpreter, the imports, Ray, the parties, and the end (summary, plots, Ray's shutdown). Its peak PSS
  is sampled over the whole process tree (the driver, Ray's processes, every party's) in a second run of
  its own: reading every process's ``smaps_rollup`` costs ~27 ms of CPU a sample, which on 2 cores the
  timed run would pay (0.2–0.4 s at 10 samples a second).
* **second run**: the same scenario as the second run of a :class:`sifl_ray.Session` (one process: Ray and
  the parties' hosts warm), its fixed cost the same way, until its figures are written (a session draws
  them behind the run; its return is printed beside);
* **sweep**: a 10-point learning-rate sweep through the Python API (``simulate`` ten times in one
  process), its wall time until the last run's figures are written, against the sum of its runs' rounds
  (printed: a run's rounds play while the run before's figures are drawn);
* **floor**: ``python -c "import torch"`` then ``ray.init()`` in one fresh process, the least a run of this
  platform can cost before its first round: with Ray's defaults (the issue's floor, and the target's), and
  with the settings a run's private instance starts with
  (:data:`sifl_ray.backends.cluster.PRIVATE_SYSTEM_CONFIG`; Ray's defaults leave one start in four or so
  waiting a whole second on a socket retry).

Targets (ratios, so that a shared and noisy machine still gives a fair reading): first run's fixed cost
≤ 1.5 × the floor; the second run's fixed cost ≤ 1 s; the sweep ≤ 1.3 × its rounds; peak PSS ≤ 1.5 GiB.
The load average before and after each measurement is printed and written.

The last line is ``RESULT startup ratio=<first run's fixed cost ÷ (1.5 × floor)> target=1``.
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
FIXED_TARGET = 1.5  # first run's fixed cost ÷ the floor
SECOND_TARGET_S = 1.0  # a session's second run's fixed cost
SWEEP_TARGET = 1.3  # the sweep's wall ÷ its rounds
PSS_TARGET_MIB = 1536.0
PHASES = ("imports_s", "backend_s", "parties_s", "to_first_round_s", "rounds_s")
LRS = (0.02, 0.035, 0.05, 0.065, 0.08, 0.1, 0.12, 0.14, 0.17, 0.2)

#: The floor: torch imported, then Ray started, in one fresh process, with the system config given as
#: JSON in argv[1] (``{}``: Ray's defaults); prints ``FLOOR <seconds>``.
FLOOR_SCRIPT = """
import json, sys, time
start = time.perf_counter()
import torch  # noqa: F401
import ray
system = json.loads(sys.argv[1]) or None
ray.init(
    address="local", include_dashboard=False, configure_logging=False, log_to_driver=False,
    _system_config=system,
)
print("FLOOR", time.perf_counter() - start, flush=True)
ray.shutdown()
"""

#: A session's runs: the scenario twice, then the sweep through ``simulate``; prints ``SESSION <json>``.
SESSION_SCRIPT = """
import json, sys, tempfile, time
from sifl_ray import Session, simulate
overrides = dict(a.split("=", 1) for a in json.loads(sys.argv[1]))
lrs = json.loads(sys.argv[2])
out = {"runs": [], "sweep": []}
with tempfile.TemporaryDirectory(prefix="sifl-session-") as folder:
    settings = {**overrides, "output.progress": "false", "output.dir": folder}
    texts = [f"{k}={v}" for k, v in settings.items()]
    def timed(run, drawn=False):
        tic = time.perf_counter()
        got = run()
        wall = time.perf_counter() - tic
        if drawn:  # and its figures written (drawn behind it; no next run here to hide them)
            getattr(got, "plots", None)
        rounds = got.summary["startup"]["rounds_s"]
        return {"wall_s": wall, "drawn_s": time.perf_counter() - tic, "rounds_s": rounds}
    with Session(overrides.get("backend", "ray")) as session:
        for i in range(2):
            out["runs"].append(timed(lambda: session.simulate("quickstart", texts), drawn=i == 1))
    tic = time.perf_counter()
    for i, lr in enumerate(lrs):
        last = i == len(lrs) - 1
        out["sweep"].append(timed(lambda: simulate("quickstart", [*texts, f"train.lr={lr}"]), drawn=last))
    out["sweep_wall_s"] = time.perf_counter() - tic
print("SESSION", json.dumps(out), flush=True)
"""


def run_sampled(
    argv: list[str], interval: float | None, what: str, cwd: Path = ROOT
) -> tuple[str, MemorySampler | None]:
    """Run ``argv`` in ``cwd`` while sampling its process tree's PSS every ``interval`` seconds (``None``:
    unobserved, for a timed run); its output (stdout and stderr together) and the sampler.

    Raises:
        RuntimeError: it failed; the message ends with the tail of its output.
    """
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = None
    if interval is None:
        output, _ = proc.communicate()
    else:
        with MemorySampler(interval, root=proc.pid) as sampler:
            output, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{output[-4000:]}")
    return output, sampler


def run_once(overrides: list[str], interval: float | None, checkout: Path = ROOT) -> dict[str, Any]:
    """One ``python run.py`` of ``checkout`` in a fresh process; its wall time, start-up record and (with
    an ``interval``) peak PSS."""
    with tempfile.TemporaryDirectory(prefix="sifl-startup-") as out:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        argv = [sys.executable, "run.py", "output.progress=false", f"output.dir={out}", *overrides]
        output, sampler = run_sampled(argv, interval, f"python run.py in {checkout}", checkout)
        wall = time.perf_counter() - start
        (summary_path,) = Path(out).rglob("summary.json")
        summary = json.loads(summary_path.read_text())
        startup = summary["startup"]
    peak, by_kind = sampler.peak() if sampler is not None else (None, {})
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


def timed_and_sampled(overrides: list[str], interval: float, checkout: Path = ROOT) -> dict[str, Any]:
    """:func:`run_once` unobserved, for its times, then again under the PSS sampler, for its peak (the
    sampler's CPU would slow the timed run); the timed run's record with the sampled run's peak."""
    timed = run_once(overrides, None, checkout)
    sampled = run_once(overrides, interval, checkout)
    keep = ("peak_pss_bytes", "peak_by_process")
    return {**timed, **{k: sampled[k] for k in keep}, "sampled_wall_s": sampled["wall_s"]}


def floor_once(system_config: dict[str, Any] | None = None) -> float:
    """The floor script once, with Ray's defaults or ``system_config``: seconds from its start to torch
    imported and Ray up."""
    argv = [sys.executable, "-c", FLOOR_SCRIPT, json.dumps(system_config or {})]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (line,) = [ln for ln in out.splitlines() if ln.startswith("FLOOR ")]
    return float(line.split()[1])


def session_once(overrides: list[str]) -> dict[str, Any]:
    """The session script once: a session's two runs and the sweep, each run's wall and rounds."""
    argv = [sys.executable, "-c", SESSION_SCRIPT, json.dumps(overrides), json.dumps(list(LRS))]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the session script failed ({out.returncode}):\n{out.stderr[-4000:]}")
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("SESSION ")]
    return json.loads(line.split(" ", 1)[1])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Each measurement in turn, ``--runs`` times (the first run, the floor, the session and its sweep)."""
    from sifl_ray.backends.cluster import PRIVATE_SYSTEM_CONFIG

    runs, floors, floors_tuned, sessions, before = [], [], [], [], []
    for _ in progress(range(args.runs), "bench startup", name=lambda i: f"round {i}"):
        if args.before:
            theirs = args.before_overrides.split(",") if args.before_overrides else args.overrides
            before.append(timed_and_sampled(theirs, args.interval, Path(args.before).resolve()))
        runs.append(timed_and_sampled(args.overrides, args.interval))
        floors.append(floor_once())
        floors_tuned.append(floor_once(PRIVATE_SYSTEM_CONFIG))
        sessions.append(session_once(args.overrides))
    first = [r["wall_s"] - r["rounds_s"] for r in runs]
    second = [s["runs"][1]["wall_s"] - s["runs"][1]["rounds_s"] for s in sessions]
    second_drawn = [s["runs"][1]["drawn_s"] - s["runs"][1]["rounds_s"] for s in sessions]
    sweep_rounds = [sum(r["rounds_s"] for r in s["sweep"]) for s in sessions]
    sweep = [s["sweep_wall_s"] / rounds for s, rounds in zip(sessions, sweep_rounds, strict=True)]
    median = {
        "first_fixed_s": statistics.median(first),
        "floor_s": statistics.median(floors),
        "floor_tuned_s": statistics.median(floors_tuned),
        "second_fixed_s": statistics.median(second),
        "second_drawn_s": statistics.median(second_drawn),
        "sweep_ratio": statistics.median(sweep),
        "sweep_rounds_s": statistics.median(sweep_rounds),
        "peak_pss_mib": statistics.median(r["peak_pss_bytes"] for r in runs) / MIB,
        **{k: statistics.median(r[k] for r in runs) for k in ("wall_s", *PHASES) if all(r[k] for r in runs)},
    }
    return {
        "name": "startup",
        "args": vars(args),
        "runs": runs,
        "floors": floors,
        "floors_tuned": floors_tuned,
        "sessions": sessions,
        "before": before,
        "median": median,
    }


def report(res: dict[str, Any]) -> str:
    """The first runs phase by phase, then each measurement's median against its target, and the ratios."""
    header = ["run", "wall s", "imports", "Ray", "parties", "→ 1st round", "rounds", "end", "PSS MiB", "load"]
    labelled = [(f"before {i + 1}", r) for i, r in enumerate(res.get("before", []))]
    labelled += [(f"{'after ' if labelled else ''}{i + 1}", r) for i, r in enumerate(res["runs"])]
    rows = [
        [
            label,
            f"{r['wall_s']:.2f}",
            *(f"{r[k]:.2f}" if r.get(k) is not None else "—" for k in (*PHASES, "end_s")),
            f"{r['peak_pss_bytes'] / MIB:.0f}",
            f"{r['load_before']:.1f}→{r['load_after']:.1f}",
        ]
        for label, r in sorted(labelled, key=lambda lr: lr[0].split()[-1])  # each round's pair together
    ]
    m = res["median"]
    if res.get("before"):
        fixed = statistics.median(r["wall_s"] - r["rounds_s"] for r in res["before"])
        pss = statistics.median(r["peak_pss_bytes"] for r in res["before"]) / MIB
        rows.append(
            [
                "before",
                f"fixed {fixed:.2f} s = {fixed / m['floor_s']:.2f} × floor",
                *[""] * 6,
                f"{pss:.0f}",
                "",
            ]
        )
    first_ratio = m["first_fixed_s"] / m["floor_s"]
    checks = [  # (id, what, value, target, how)
        (
            "first_fixed_vs_floor",
            "first run's fixed cost ÷ floor",
            first_ratio,
            FIXED_TARGET,
            f"{m['first_fixed_s']:.2f} s ÷ {m['floor_s']:.2f} s",
        ),
        (
            "second_fixed_s",
            "second run's fixed cost, s",
            m["second_drawn_s"],
            SECOND_TARGET_S,
            f"in a Session, to its figures ({m['second_fixed_s']:.2f} s to its return)",
        ),
        (
            "sweep_vs_rounds",
            "10-point sweep ÷ its rounds",
            m["sweep_ratio"],
            SWEEP_TARGET,
            f"simulate() ten times, the last figures in (rounds {m['sweep_rounds_s']:.2f} s)",
        ),
        ("peak_pss_mib", "peak PSS, MiB", m["peak_pss_mib"], PSS_TARGET_MIB, "python run.py's process tree"),
    ]
    last = res["runs"][-1]
    where = sorted(last["peak_by_process"].items(), key=lambda kv: -kv[1])[:6]
    lines = [
        f"startup: python run.py {' '.join(res['args']['overrides'])} ({len(res['runs'])} runs; imports, "
        "parties, → 1st round: seconds from the launch; Ray, rounds, end: durations)",
        "",
        table(rows, header),
        "",
        "largest at the peak (MiB, last run): " + ", ".join(f"{k} {v / MIB:.0f}" for k, v in where),
        f"floor, Ray's defaults (the target's): {fmt_seconds(res['floors'])}; with a run's Ray settings "
        f"(PRIVATE_SYSTEM_CONFIG): {fmt_seconds(res['floors_tuned'])}; first run's fixed cost ÷ the "
        f"latter {m['first_fixed_s'] / m['floor_tuned_s']:.2f}",
        "",
        table(
            [[what, f"{v:.3g}", f"{t:g}", "yes" if v <= t else "NO", how] for _, what, v, t, how in checks],
            ["measure (median)", "value", "target", "met", "what"],
        ),
        *(f"CHECK {cid}={v:.3f} target={t:g}" for cid, _, v, t, _ in checks),
        result_line(res["name"], first_ratio / FIXED_TARGET, 1.0),
    ]
    return "\n".join(lines)


def fmt_seconds(values: list[float]) -> str:
    """``3.75 / 4.78 / 4.73 s``: each measurement, in the order taken."""
    return " / ".join(f"{v:.2f}" for v in values) + " s"


def main(argv: list[str] | None = None) -> int:
    """``python -m bench startup``: measure, print the report, write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds of the four measurements (default 3)")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between PSS samples")
    parser.add_argument("--out", default="bench_results/startup.json", help="JSON path")
    parser.add_argument(
        "--before",
        metavar="CHECKOUT",
        help="another checkout whose python run.py is measured too, alternated with this one's",
    )
    parser.add_argument(
        "--before-overrides",
        metavar="KEY=VALUE,...",
        help="the other checkout's overrides, where its keys differ (default: the same as this one's)",
    )
    parser.add_argument("overrides", nargs="*", help="run.py overrides (key=value), e.g. train.rounds=5")
    args = parser.parse_args(argv)
    res = measure(args)
    res["targets"] = {
        "first_fixed": FIXED_TARGET,
        "second_fixed_s": SECOND_TARGET_S,
        "sweep": SWEEP_TARGET,
        "peak_pss_mib": PSS_TARGET_MIB,
    }
    return publish(args.out, res, report(res))


if __name__ == "__main__":
    raise SystemExit(main())
