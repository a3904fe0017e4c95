"""The backend interface: everything the platform asks of whatever hosts the parties.

Two backends implement it: :class:`actors.backend.RayBackend` (each party a Ray actor, ObjectRefs between
them) and :class:`sifl_ray.sequential.SequentialBackend` (the same role hosts called in-process, in order:
the reference run). :func:`~sifl_ray.round.run_round` and the runner use nothing else, so a new backend (a
process pool, another actor framework) is a class with these members, named in ``ray.backend`` and built by
:func:`make_backend` (here, not in the runner: the CLI starts Ray before it imports torch and the runner);
``tests/test_backend.py`` checks that each backend has them all.

Two words. A *handle* is what :meth:`Backend.spawn` returns (an actor, or the object itself); a *ref* is
what :meth:`Backend.call` and :meth:`Backend.put` return (an ObjectRef, or a resolved stand-in) and what
:meth:`Backend.get` and :meth:`Backend.wait` take. Refs may be passed as arguments to ``call`` and
``spawn``; the backend resolves them where the party runs, so the driver never holds a parameter vector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from omegaconf import DictConfig


@runtime_checkable
class Backend(Protocol):
    """Spawns the parties, calls their methods, and moves results between them by reference."""

    name: str
    """``ray`` or ``sequential``: the value of ``ray.backend``, written into the run record."""

    description: str
    """What the backend started or joined (a private Ray instance, a cluster and its size): a run's first
    line. Empty when there is nothing to say (in-process, or a Ray the caller started)."""

    def available(self) -> dict[str, float]:
        """Resources free now (``{"CPU": 3.0, "GPU": 1.0, ...}``), for callers that size work to what is
        left."""

    def cluster(self) -> dict[str, float]:
        """Resources of the whole cluster: the runner sizes the number of client workers from its CPUs."""

    def spawn(
        self,
        cls: type,
        *args: Any,
        num_cpus: float = 0,
        num_gpus: float = 0,
        spread: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Start one party, ``cls(*args, **kwargs)``, with the resources it reserves; return its handle.

        The constructor is the trust boundary: it receives only that party's key material. ``spread``: place
        the parties spawned with it on different nodes of a cluster where resources allow (client workers
        with ``ray.spread_workers``); a backend with one machine ignores it.
        """

    def call(self, handle: Any, method: str, *args: Any, num_returns: int = 1, **kwargs: Any) -> Any:
        """Submit ``handle.method(*args, **kwargs)`` and return its ref at once (a list of ``num_returns``
        refs when the method returns that many values), so that the parties can work while the driver
        submits the next call."""

    def put(self, value: Any) -> Any:
        """Store ``value`` once and return its ref, so that many calls can share it without copies."""

    def get(self, refs: Any) -> Any:
        """The value of a ref (or the list of values of a list of refs), waiting for it; raises the party's
        error if its call failed. The driver reads only small things this way: metrics and reports."""

    def wait(self, refs: list, timeout: float | None = None) -> tuple[list, list]:
        """``(ready, not_ready)``: which of ``refs`` finished within ``timeout`` seconds (``None``: all of
        them). A failed call counts as ready. It exists for deadlines: a round drops or retries a worker
        that is still in ``not_ready`` when ``faults.deadline_s`` has passed."""

    def is_lost(self, err: BaseException) -> bool:
        """Whether ``err`` (raised by :meth:`get`) says the party is gone (its process died) rather than that
        its method raised. A lost worker is replaced and its clients re-run; a bug must surface as itself."""

    def kill(self, handle: Any) -> None:
        """Stop one party at once, without a restart: the runner replaces failed parties (and faults are
        injected) this way."""

    def shutdown(self) -> None:
        """Release what the backend started (a private Ray instance); leave alone what it only joined."""


def make_backend(cfg: DictConfig, **ray_kwargs: Any) -> Backend:
    """The backend ``ray.backend`` names: in-process, or Ray (a private instance, or the cluster
    ``ray.address`` names). Imports only what that backend needs (Ray, not torch)."""
    if cfg.ray.backend == "sequential":
        from sifl_ray.sequential import SequentialBackend

        return SequentialBackend()
    from actors.backend import RayBackend

    return RayBackend(address=cfg.ray.address, **ray_kwargs)
