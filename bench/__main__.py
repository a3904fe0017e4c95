"""``python -m bench <command> [options]``: dispatch to ``bench/<command>.py``'s ``main(argv)``."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "kernels": "bench.kernels",
    "overhead": "bench.overhead",
    "coding-overhead": "bench.coding_overhead",
    "memory": "bench.memory",
    "reliability": "bench.reliability",
    "privacy-cost": "bench.privacy_cost",
    "gpu": "bench.gpu",
    "startup": "bench.startup",
    "wheelhouse": "bench.wheelhouse",
    "check": "bench.check",
    "clock": "bench.clock",
}

#: What each benchmark measures, in a few words (``python -m bench --help``, ``sifl bench --help``).
WHAT = {
    "kernels": "encode + decode time of the fast key, as a ratio to one vector copy",
    "overhead": "the platform's round time against a bare PyTorch loop (--clients N)",
    "coding-overhead": "what SIFL M2 costs per round over FedAvg (--model mlp|cnn2|cnn)",
    "memory": "peak memory of a run at N clients against one at 10 clients (--clients N)",
    "reliability": "fault drills on real Ray: what each failure costs and that the figures survive",
    "privacy-cost": "secure aggregation and SIFL M2 per round and per client, as ratios to FedAvg",
    "gpu": "every GPU measurement in one command, for a lent GPU machine (--quick)",
    "startup": "where the fixed cost of python run.py goes, measured from outside",
    "wheelhouse": "the wheels that carry the platform to a GPU machine with no internet",
    "clock": "the simulated clock's cost in a run at N clients, as a share of the round (--clients N)",
    "check": "every bench's last ratio against its target and its recorded history (--record)",
}


def usage() -> str:
    """The benchmarks, one line each: its name and what it measures (its own ``--help`` says how)."""
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m bench NAME [options]   (python -m bench NAME --help: its options)", ""]
    lines += [f"  {name.ljust(width)}  {WHAT[name]}" for name in COMMANDS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The dispatcher of ``python -m bench NAME``: each benchmark is a module with its own ``main``, imported
    only when named (a bench's imports, Ray or torch, cost seconds)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"error: no benchmark {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
