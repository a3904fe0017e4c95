"""The scenario runner: build the parties, run every arm round by round, log, summarise.

- :mod:`~sifl_ray.runner.simulation`: :class:`Simulation`, the protocol loop over rounds and arms.
- :mod:`~sifl_ray.runner.summary`: the summary, the table and the RESULT line (functions of data only).
"""

from sifl_ray.runner.simulation import (
    Simulation,
    cpu_count,
    default_key_dir,
    make_backend,
    partition,
    run_scenario,
)
from sifl_ray.runner.summary import RunResult, result_line, summary_table

__all__ = [
    "RunResult",
    "Simulation",
    "cpu_count",
    "default_key_dir",
    "make_backend",
    "partition",
    "result_line",
    "run_scenario",
    "summary_table",
]
