"""``python -m bench memory --clients N``: peak memory of a run at N clients against one at 10 clients.

The reference workload (:mod:`bench._common`), ``fl`` arm, run at ``--baseline-clients`` (10) and at N
clients in turn (A, B, A, B, ...), each in a fresh Ray session started by the simulation itself. While a
run lasts (from ``Simulation(...)``, which starts Ray, to the end of its last round) a sampler thread adds
up the proportional set size (PSS, from ``/proc/<pid>/smaps_rollup``) of the driver and every process it
started: GCS, raylet (which maps the object store), Ray's agents and every worker. PSS counts a shared
page once in total, split among the processes that map it, so the shared-memory object store is counted
once, inside the total. The peak of that sum is the run's peak memory; the ratio is the median peak at N
over the median peak at the baseline. The table also shows the peak while rounds run (after start-up,
where the driver's data generation is the largest single allocation) and where the memory sits.

Defaults (about 3 minutes on a 2-core machine): N = 1000, 2 repetitions of each size, 3 rounds after 1
warm-up, a sample every 0.1 s (a spike shorter than that can be missed). Target: ratio ≤ 2.

The last line is ``RESULT memory_n<N> ratio=<ratio> target=2``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import sifl_ray.runner as runner
from bench._common import (
    cuda_missing,
    gpu_overrides,
    not_measured,
    publish,
    reference_config,
    result_line,
    spread,
    table,
)
from sifl_ray.progress import progress

TARGET = 2.0
MIB = 2**20


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from ``/proc/<pid>/task/*/children``)."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


def _pss_bytes(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    m = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _kind(pid: int) -> str:
    """A short name for a process: the actor class of a Ray worker, else the program's name."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    first = cmd[0].decode(errors="replace")
    if first.startswith("ray::"):
        return first[5:].split(".")[0].split(" ")[0] or "ray worker"
    words = [c.decode(errors="replace") for c in cmd if c]
    script = next((w for w in words[1:] if w.endswith(".py")), None)
    return Path(script).stem if script else Path(first).name


class MemorySampler:
    """Samples the summed PSS of a process (``root``: default this one) and all its descendants every
    ``interval`` seconds."""

    def __init__(self, interval: float = 0.1, root: int | None = None):
        self.interval = interval
        self.root = root
        self.samples: list[tuple[float, int, dict[str, int]]] = []  # (time, total, by kind)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, dict[str, int]]:
        me = self.root or os.getpid()
        by_kind: dict[str, int] = defaultdict(int)
        total = 0
        for pid in [me, *_children(me)]:
            pss = _pss_bytes(pid)
            if pss is None:
                continue
            total += pss
            by_kind["driver" if pid == me else _kind(pid)] += pss
        return total, dict(by_kind)

    def _run(self) -> None:
        while not self._stop.is_set():
            total, by_kind = self.sample()
            self.samples.append((time.perf_counter(), total, by_kind))
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, since: float = 0.0) -> tuple[int, dict[str, int]]:
        window = [s for s in self.samples if s[0] >= since] or self.samples
        _, total, by_kind = max(window, key=lambda s: s[1])
        return total, by_kind


def measure_once(clients: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run in a fresh Ray session; its peak memory overall and while rounds run."""
    cfg = reference_config(
        clients,
        rounds=args.warmup + args.rounds,
        workers=args.workers,
        n_train=args.n_train,
        n_test=args.n_test,
        extra=[f"train.model={args.model}", *gpu_overrides(args.device, args.gpus_per_worker, args.workers)],
    )
    with MemorySampler(args.interval) as sampler:
        start = time.perf_counter()
        sim = runner.Simulation(cfg)
        rounds_start = time.perf_counter()
        try:
            for t in progress(range(args.warmup + args.rounds), f"bench memory, {clients} clients"):
                sim.play_round("fl", t, supervise=False)
            end = time.perf_counter()
            sampler.samples.append((end, *sampler.sample()))  # the state at the end of the last round
        finally:
            sim.close()
    peak, by_kind = sampler.peak()
    peak_rounds, by_kind_rounds = sampler.peak(since=rounds_start)
    return {
        "clients": clients,
        "peak_bytes": peak,
        "peak_by_process": by_kind,
        "peak_rounds_bytes": peak_rounds,
        "peak_rounds_by_process": by_kind_rounds,
        "startup_s": rounds_start - start,
        "rounds_s": end - rounds_start,
        "samples": len(sampler.samples),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Peak memory of runs at the baseline N and at N, alternating sizes so that a drifting machine affects
    both."""
    sizes = (args.baseline_clients, args.clients)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for _ in range(args.reps):
        for n in sizes:
            runs[n].append(measure_once(n, args))
    peaks = {n: [r["peak_bytes"] for r in runs[n]] for n in sizes}
    rounds = {n: [r["peak_rounds_bytes"] for r in runs[n]] for n in sizes}
    base, big = sizes
    return {
        "name": f"memory_n{args.clients}",
        "args": vars(args),
        "runs": {str(n): runs[n] for n in sizes},
        "peak_mib": {str(n): spread([p / MIB for p in peaks[n]]) for n in sizes},
        "peak_rounds_mib": {str(n): spread([p / MIB for p in rounds[n]]) for n in sizes},
        "ratio": statistics.median(peaks[big]) / statistics.median(peaks[base]),
        "ratio_rounds": statistics.median(rounds[big]) / statistics.median(rounds[base]),
    }


def report(res: dict[str, Any]) -> str:
    """The peak per size and their ratio (the target is a ratio, not bytes: machines differ)."""
    a = res["args"]
    lines = [
        f"memory: FedAvg, {a['model']}, {a['n_train']:,} samples, {a['workers']} workers; peak PSS of the "
        f"driver + all Ray processes (object store included), {a['reps']} runs per size",
        "",
    ]
    rows = []
    for n, p in res["peak_mib"].items():
        r = res["peak_rounds_mib"][n]
        last = res["runs"][n][-1]
        where = sorted(last["peak_by_process"].items(), key=lambda kv: -kv[1])[:4]
        rows.append(
            [
                f"N={n}",
                f"{p['median']:.0f}",
                f"{p['min']:.0f}–{p['max']:.0f}",
                f"{r['median']:.0f}",
                ", ".join(f"{k} {v / MIB:.0f}" for k, v in where),
            ]
        )
    header = ["run", "peak MiB", "min–max", "peak in rounds MiB", "largest at the peak (MiB, last run)"]
    lines.append(table(rows, header))
    lines.append(f"peak ratio {res['ratio']:.3f} (in rounds: {res['ratio_rounds']:.3f})")
    lines.append(result_line(res["name"], res["ratio"], TARGET))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench memory``: measure, print the report, write the JSON; exit 0."""
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000, help="number of clients N (default 1000)")
    parser.add_argument("--baseline-clients", type=int, default=10, help="the baseline N (default 10)")
    parser.add_argument("--model", default="mlp", help="mlp, cnn2 or cnn (default mlp)")
    parser.add_argument("--reps", type=int, default=2, help="runs per size, alternating (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run after the warm-up (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rounds (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="client workers (default 2)")
    parser.add_argument("--n-train", type=int, default=60000, help="training samples (default 60000)")
    parser.add_argument("--n-test", type=int, default=10000, help="test samples (default 10000)")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples (default 0.1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (GPU memory is not sampled)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="with --device cuda")
    parser.add_argument("--out", default=None, help="JSON path (default bench_results/memory_n<N>.json)")
    args = parser.parse_args(argv)
    name = f"memory_n{args.clients}"
    out = args.out or f"bench_results/{name}.json"
    if cuda_missing(args.device):
        return not_measured(name, TARGET, out, "no GPU", vars(args))
    res = measure(args)
    res["target"] = TARGET
    return publish(out, res, report(res))


if __name__ == "__main__":
    raise SystemExit(main())
