"""Where a run's fixed cost goes (``summary.json``'s ``startup``): wall-clock marks from the driver
process's start to its first round, turned into the seconds each stage took.

``python -m bench startup`` reads them from outside, beside the end of the run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


class StartupMarks:
    """Wall-clock marks of a run's start (epoch seconds; ``None`` where not measured).

    ``process`` is when the driver process started (:func:`process_start`); ``imports`` defaults to now, the
    marks' creation. A caller that started the backend itself passes its own marks (the CLI starts Ray while
    it imports).
    """

    def __init__(self, given: dict[str, float] | None = None) -> None:
        self.marks: dict[str, float | None] = {"process": process_start(), **(given or {})}
        self.marks.setdefault("imports", time.time())

    def mark(self, name: str) -> None:
        """Mark stage ``name`` now (``backend_start``, ``backend``, ``parties``, ``first_round``, ...)."""
        self.marks[name] = time.time()

    def spans(self) -> dict[str, float | None]:
        """Seconds of the run's start (``None`` where not reached or not measured). From the driver
        process's start: ``imports_s`` (interpreter, configuration, the driver's imports), ``parties_s``
        (and the data set, actors, keys), ``to_first_round_s`` (and the records opened). Durations:
        ``backend_s`` (starting or joining Ray; under ``sifl run`` it overlaps the imports), ``rounds_s``
        (every round played)."""
        m = self.marks

        def span(a: str, b: str) -> float | None:
            start, end = m.get(a), m.get(b)
            return round(end - start, 3) if start is not None and end is not None else None

        return {
            "imports_s": span("process", "imports"),
            "backend_s": span("backend_start", "backend"),
            "parties_s": span("process", "parties"),
            "to_first_round_s": span("process", "first_round"),
            "rounds_s": span("first_round", "rounds_done"),
        }


def process_start() -> float | None:
    """When this process started (epoch seconds; ``None`` where the OS does not say).

    On Linux from the process's start in clock ticks since boot and the seconds since boot (both to 10 ms),
    not from psutil's ``create_time``, whose boot time is rounded to a whole second: enough to place the start
    after marks that follow it."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil  # a dependency of Ray

        return float(psutil.Process().create_time())
    except Exception:
        return None
