"""What the platform asks of whatever hosts the parties, and what a backend says it can do.

A backend spawns a party's host (:mod:`sifl_ray.parties`), calls its methods through a
:class:`~sifl_ray.parties.handle.Handle`, and moves results between parties by reference. The round and the
runner use nothing else, and never ask a backend its name: what differs between backends is declared as
:class:`Capabilities` and read from there.

Two words. A *handle* is what :meth:`Backend.spawn` returns; a *ref* is what a call and :meth:`Backend.put`
return (an ObjectRef, or a resolved stand-in) and what :meth:`Backend.get` and :meth:`Backend.wait` take.
Refs may be passed as arguments to calls and spawns; the backend resolves them where the party runs, so
the driver never holds a parameter vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, runtime_checkable

from sifl_ray.errors import SiflError
from sifl_ray.parties.handle import Handle, Ref

T = TypeVar("T")
H = TypeVar("H")
P = ParamSpec("P")


class ClusterUnreachable(SiflError, RuntimeError):
    """``ray.address`` (or ``RAY_ADDRESS``) names a cluster that cannot be joined; ``str()`` is one line
    for the user, with the fix. Here, not beside the cluster code, so that a caller catches it without
    importing Ray."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, so that the runner asks instead of branching on its name.

    Attributes:
        kill: it can stop one party at once (the faults that kill a party; replacing a straggler).
        own_processes: each party runs in a process of its own, so a client worker gets the threads its
            CPUs allow (``ray.cpus_per_worker``) and a party's process settings are its own to change.
        placement: parties are placed on nodes and GPUs (the GPU check, the placement report).
        default_workers: client workers when ``ray.num_workers`` is 0 and the backend has no CPUs of its
            own to size them from (in-process); ``None``: one per CPU the backend has.
    """

    kill: bool
    own_processes: bool
    placement: bool
    default_workers: int | None = None


@dataclass(frozen=True)
class Placement:
    """What a party reserves where it runs: CPUs, a fraction of a GPU, and whether parties spawned with
    ``spread`` go to different nodes of a cluster where resources allow (client workers with
    ``ray.spread_workers``). ``share``: parties spawned with the same name run in one process of the
    backend's (``ray.placement=compact``), each its own object with its own secrets; a backend without
    processes of its own ignores it, as a backend on one machine ignores what it cannot place. For a
    shared process, ``cpus`` is what the process reserves (its parties together), the same in every
    party's placement: the process is started by its first party, before the others are known."""

    cpus: float = 0.0
    gpus: float = 0.0
    spread: bool = False
    share: str | None = None


@runtime_checkable
class Backend(Protocol):
    """Spawns the parties, calls their methods, and moves results between them by reference."""

    name: str
    """The value of ``backend`` that chose it, written into the run record."""

    description: str
    """What the backend started or joined (a private Ray instance, a cluster and its size): a run's first
    line. Empty when there is nothing to say (in-process, or a Ray the caller started)."""

    capabilities: Capabilities

    def available(self) -> dict[str, float]:
        """Resources free now (``{"CPU": 3.0, "GPU": 1.0, ...}``), for callers that size work to what is
        left."""
        ...

    def cluster(self) -> dict[str, float]:
        """Resources of the whole cluster: the runner sizes the number of client workers from its CPUs."""
        ...

    def spawn(
        self, where: Placement, host: Callable[P, H], /, *args: P.args, **kwargs: P.kwargs
    ) -> Handle[H]:
        """Start one party, ``host(*args, **kwargs)``, with the resources ``where`` reserves.

        The constructor is the trust boundary: it receives only that party's key material.
        """
        ...

    def call(
        self, raw: object, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], n: int
    ) -> Any:
        """Submit ``method(host, *args, **kwargs)`` on the host ``raw`` and return its ref at once (a list
        of ``n`` refs when ``n`` > 1), so that the parties work while the driver submits the next call.
        Called by :meth:`Handle.call <sifl_ray.parties.handle.Handle.call>`, which types it."""
        ...

    def put(self, value: T) -> Ref[T]:
        """Store ``value`` once and return its ref, so that many calls can share it without copies."""
        ...

    def get(self, ref: Ref[T]) -> T:
        """The value of a ref, waiting for it; raises the party's error if its call failed. The driver
        reads only small things this way: metrics and reports."""
        ...

    def get_all(self, refs: Sequence[Ref[T]]) -> list[T]:
        """The values of ``refs`` (:meth:`get` on each, waiting for all of them together)."""
        ...

    def wait(self, refs: Sequence[Any], timeout: float | None = None) -> tuple[list[Any], list[Any]]:
        """``(ready, not_ready)``: which of ``refs`` finished within ``timeout`` seconds (``None``: all of
        them). A failed call counts as ready. It exists for deadlines: a round drops or retries a worker
        that is still in ``not_ready`` when ``faults.deadline_s`` has passed."""
        ...

    def is_lost(self, err: BaseException) -> bool:
        """Whether ``err`` (raised by :meth:`get`) says the party is gone (its process died) rather than that
        its method raised. A lost worker is replaced and its clients re-run; a bug must surface as itself."""
        ...

    def kill(self, handle: Handle[Any]) -> None:
        """Stop one party at once, without a restart (only where :attr:`Capabilities.kill`)."""
        ...

    def shutdown(self) -> None:
        """Release what the backend started (a private Ray instance); leave alone what it only joined."""
        ...
