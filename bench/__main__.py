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
    "clock": "bench.clock",
}


def main(argv: list[str] | None = None) -> int:
    """The dispatcher of ``python -m bench NAME``: each benchmark is a module with its own ``main``, imported
    only when named (a bench's imports, Ray or torch, cost seconds)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in COMMANDS:
        print("usage: python -m bench {" + ",".join(COMMANDS) + "} [options]", file=sys.stderr)
        return 0 if argv and argv[0] in {"-h", "--help"} else 2
    module = importlib.import_module(COMMANDS[argv[0]])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
