"""What Ray prints on a run's terminal that tells a user nothing, and the supported switches that quiet it.

Colour codes first: Ray prefixes what a party prints with ``(WorkerHost pid=…)`` in ANSI colours, which
a log file, a pipe or a notebook shows as raw escapes (``^[[36m``); ``RAY_COLOR_PREFIX=0``, read each time
Ray prints, keeps the prefix and drops the colours where the driver's stderr is not a terminal.

Two messages, both through Ray's own environment variables, read when ``ray`` is imported (so
:func:`quiet_ray` must set them before that, and leaves them once ``ray`` is in ``sys.modules``):

* "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out", on every
  start of a private instance: Ray (2.5x) turns token authentication on for a new local instance when
  ``RAY_AUTH_MODE`` is unset, and warns because it chose for the user. Setting ``RAY_AUTH_MODE=token``
  makes the same choice explicit: the same security, no warning. Only for a private instance: a joined
  cluster keeps whatever mode it was started with (a driver set to ``token`` without a token file cannot
  join a cluster started without one). A user's own ``RAY_AUTH_MODE`` is left as it is.
* after an injected ``worker_exit`` fault, on stdout, the raylet's "A worker died or was killed while
  executing a task by an unexpected system error ... (1) the process is killed by SIGKILL by OOM killer
  ... (2) ray stop --force is called": the death was the drill's own ``os._exit(1)``, which the platform
  reports itself ("round t arm: worker k died (ActorDiedError); replaced it"). Ray's log deduplicator
  skips lines matching ``RAY_DEDUP_LOGS_SKIP_REGEX``; it is set only for runs that inject ``worker_exit``,
  so a real crash (an OOM kill) in any other run still shows Ray's diagnosis.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

from omegaconf import DictConfig

#: The raylet's report of a worker that exited without telling it (what ``os._exit`` looks like to Ray).
WORKER_DIED = r"A worker died or was killed while executing a task by an unexpected system error"
PRIVATE = (
    "",
    "local",
)  # ray.address values that start a private instance (sifl_ray.backends.cluster.PRIVATE)


def private_switches(address: str | None) -> dict[str, str]:
    """The switch a private Ray instance wants (none for a joined cluster: it keeps its own mode)."""
    return {"RAY_AUTH_MODE": "token"} if (address or "") in PRIVATE else {}


def quiet_ray(cfg: DictConfig, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set Ray's switches for the run ``cfg`` before ``ray`` is imported; returns what it set.

    Args:
        environ: the environment to set (default ``os.environ``; tests pass a dict).
    """
    env = os.environ if environ is None else environ
    wanted = {}
    if not sys.stderr.isatty():
        wanted["RAY_COLOR_PREFIX"] = "0"  # read whenever Ray prints: never too late
    if environ is None and "ray" in sys.modules:
        # too late for the rest: Ray read them at import (RAY_AUTH_MODE set now would even break)
        set_now = {k: v for k, v in wanted.items() if k not in env}
        env.update(set_now)
        return set_now
    wanted.update(private_switches(cfg.ray.address))
    if any(f.kind == "worker_exit" for f in cfg.faults.inject):
        wanted["RAY_DEDUP_LOGS_SKIP_REGEX"] = WORKER_DIED
    set_now = {k: v for k, v in wanted.items() if k not in env}
    env.update(set_now)
    return set_now
