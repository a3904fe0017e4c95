"""What a run says of its clock: per arm, the simulated time, the time to the target accuracy, and where the
clients that dropped left (pure functions of an arm's recorded rounds, for summary.json and the messages).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sifl_ray.clock.timeline import STEPS


def time_to_accuracy(rows: Sequence[Mapping[str, float]], target: float) -> float | None:
    """The simulated seconds at the end of the first round whose test accuracy reached ``target``
    (``None``: no round did)."""
    for row in rows:
        if row["test_accuracy"] >= target:
            return float(row["clock/elapsed_s"])
    return None


def clock_dropped(rows: Sequence[Mapping[str, float]]) -> bool:
    """Whether the clock dropped a client of any of ``rows`` (offline, late, cut, gone)."""
    return any(r.get(f"clock/{name}", 0) for r in rows for name in STEPS[1:])


def arm_clock(rows: Sequence[Mapping[str, float]], target: float | None) -> dict[str, Any]:
    """An arm's clock over the run (``rows``: its recorded rounds, each with ``clock/*``)."""
    durations = [r["clock/round_s"] for r in rows]
    out: dict[str, Any] = {
        "simulated_s": float(rows[-1]["clock/elapsed_s"]),
        "round_s_median": float(np.median(durations)),
        "round_s_max": float(max(durations)),
        "uploads_arrived": int(sum(r["clock/arrived"] for r in rows)),
        "clients_left": {name: int(sum(r[f"clock/{name}"] for r in rows)) for name in STEPS[1:]},
    }
    if target is not None:
        out["target_accuracy"] = target
        out["time_to_target_s"] = time_to_accuracy(rows, target)
    return out
