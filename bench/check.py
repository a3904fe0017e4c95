"""``python -m bench check [--record]``: has a bench's ratio got worse since the last one recorded on this
kind of CPU?

Each bench writes its JSON to ``bench_results/<name>.json`` with its ``RESULT`` ratio and the machine that
measured it (:func:`bench._common.machine`: the CPU model, AVX-512). The history of recorded ratios is
``bench_results/history.jsonl``, kept in the repository, one line per recorded result: the bench, its
ratio and target, the CPU model, the commit and the date. A release records its ratios with ``--record``.

Without ``--record`` the command compares every result in ``bench_results/*.json`` with the last one
recorded for the same bench on the same CPU model and flags a ratio more than 10 % worse (a larger
ratio: every bench's ratio is a cost, lower is better); a result with no earlier one on that CPU is said
to be new. Exit code 1 when anything is flagged. Ratios of different CPU kinds are never compared: the
same code gives other ratios on another kind (AVX-512 or not, AMD or Intel).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import table

ROOT = Path(__file__).resolve().parent.parent
WORSE = 1.10  # a ratio more than 10 % above the last recorded one on the same CPU kind is flagged


def results(folder: Path) -> list[dict[str, Any]]:
    """Every bench result in ``folder`` (``<name>.json`` files that carry a ``result`` and a machine)."""
    out = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "result" in data and "cpu" in data.get("machine", {}):
            result = data["result"]
            out.append({**result, "cpu": cpu_kind(data["machine"]), "file": path.name})
    return out


def cpu_kind(machine: dict[str, Any]) -> str:
    """The kind of CPU a ratio belongs to: its model and whether it has AVX-512 (one model name can cover
    both, and the vectorised clients' lead differs between them)."""
    return f"{machine['cpu']}{' AVX-512' if machine.get('avx512') else ''}"


def history(path: Path) -> list[dict[str, Any]]:
    """The recorded results, oldest first (no file: none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(current: list[dict[str, Any]], past: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each current result beside the last recorded one of the same bench on the same CPU model, and the
    verdict: ``worse`` (more than 10 % above it), ``ok``, or ``new`` (nothing recorded there yet)."""
    rows = []
    for now in current:
        before = [p for p in past if p["name"] == now["name"] and p["cpu"] == now["cpu"]]
        last = before[-1] if before else None
        if last is None or not last["ratio"] > 0:
            verdict = "new"
        else:
            verdict = "worse" if now["ratio"] > WORSE * last["ratio"] else "ok"
        rows.append({**now, "last": None if last is None else last["ratio"], "verdict": verdict})
    return rows


def commit() -> str:
    """The repository's commit (``unknown`` outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Compare, or record, the results in the results folder."""
    parser = argparse.ArgumentParser(prog="python -m bench check", description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="bench_results", help="the folder of the benches' JSON")
    parser.add_argument("--history", default="bench_results/history.jsonl", help="the recorded results")
    parser.add_argument("--record", action="store_true", help="append the current results to the history")
    args = parser.parse_args(argv)
    current = results(Path(args.results))
    if not current:
        print(f"no bench results in {args.results}: run a bench first (python -m bench NAME)")
        return 1
    rows = compare(current, history(Path(args.history)))
    print(
        table(
            [
                [
                    r["name"],
                    r["cpu"],
                    f"{r['ratio']:.3f}",
                    "—" if r["last"] is None else f"{r['last']:.3f}",
                    f"{r['target']:g}",
                    r["verdict"],
                ]
                for r in rows
            ],
            ["bench", "CPU", "ratio", "last recorded", "target", "verdict"],
        )
    )
    if args.record:
        stamp, head = time.strftime("%Y-%m-%d"), commit()
        with Path(args.history).open("a") as out:
            for r in current:
                entry = {k: r[k] for k in ("name", "ratio", "target", "cpu")}
                out.write(json.dumps({**entry, "commit": head, "date": stamp}) + "\n")
        print(f"recorded {len(current)} results in {args.history}")
        return 0
    worse = [r["name"] for r in rows if r["verdict"] == "worse"]
    if worse:
        print(
            f"worse by more than {WORSE - 1:.0%} than recorded on this CPU: {', '.join(worse)}",
            file=sys.stderr,
        )
    return 1 if worse else 0
