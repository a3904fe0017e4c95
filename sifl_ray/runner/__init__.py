"""The scenario runner: build the parties, run every arm round by round, log, summarise.

One owner per concern:

- :mod:`~sifl_ray.runner.simulation`: :class:`Simulation`, the protocol loop over rounds and arms, and the
  public way to play one round (:meth:`Simulation.play_round`);
- :mod:`~sifl_ray.runner.launch`: a scenario run to its end (interrupts, resume message, ``audit.compare``);
- :mod:`~sifl_ray.runner.canaries`: the in-run audit's canary clients;
- :mod:`~sifl_ray.runner.recovery`: a party lost or a driver resumed: restore and replay;
- :mod:`~sifl_ray.runner.startup`: where a run's fixed cost goes;
- :mod:`~sifl_ray.runner.workload`: what every arm shares (data set, partition, initial model);
- :mod:`~sifl_ray.runner.arms`: setting up an arm (keys, the clients' setup, precision and privacy figures);
- :mod:`~sifl_ray.runner.parties`: the party pool (spawn, respawn, the round's supervisor, injected faults);
- :mod:`~sifl_ray.runner.state`: the driver's state, checkpoints, key restore and resume;
- :mod:`~sifl_ray.runner.recorder`: what the driver records (TensorBoard, stderr, ``summary.json``);
- :mod:`~sifl_ray.runner.summary`: the summary and the RESULT line (functions of data only);
- :mod:`~sifl_ray.runner.table`: the end-of-run tables (functions of the summary only).
"""

from sifl_ray.backends import make_backend
from sifl_ray.runner.launch import run_scenario
from sifl_ray.runner.simulation import Simulation, cpu_count
from sifl_ray.runner.state import default_key_dir
from sifl_ray.runner.summary import RunResult, result_line
from sifl_ray.runner.table import summary_table
from sifl_ray.runner.workload import partition

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
