"""Warm party hosts: the hosts a session keeps between runs, started again for the next one.

Why: a researcher's day is many small runs (a learning-rate sweep, a notebook cell run again), and each
would otherwise pay for a process per party, and its imports, before its first round. When a run of a
session (:class:`sifl_ray.api.Session`) ends, its parties' hosts go back to the session instead of being
stopped, and the next run takes a host of the same shape (its class and what it reserves) and starts it
again from that run's arguments: :meth:`~sifl_ray.parties.process.Host.reset` clears the host's whole state
and runs its constructor again, so its keys, streams and data are the new run's own and the numbers are
bit for bit a fresh host's (``tests/test_session.py`` checks every arm on both backends).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from sifl_ray.backends import Backend, Placement
from sifl_ray.backends.shared import Slot
from sifl_ray.parties.handle import Handle
from sifl_ray.parties.process import Host

H = TypeVar("H")
P = ParamSpec("P")


@dataclass(eq=False)
class WarmHosts:
    """The hosts a session keeps between runs, by shape (host class, what it reserves), and the backend
    that spawns new ones. A run's party pool spawns through it and gives its hosts back when it ends."""

    backend: Backend
    idle: dict[tuple[Any, Placement], list[Handle[Any]]] = field(default_factory=dict)
    shape: dict[int, tuple[Any, Placement]] = field(default_factory=dict)
    process: dict[int, int] = field(default_factory=dict)  # handle id → its process (process_of)
    reused: int = 0  # how many hosts a run took warm (a session's report; tests)

    def spawn(
        self, where: Placement, host: Callable[P, H], /, *args: P.args, **kwargs: P.kwargs
    ) -> Handle[H]:
        """A host of class ``host`` reserving ``where``: a warm one started again with these arguments, or a
        new one when none is idle (or the idle one is gone)."""
        key = (host, where)
        while self.idle.get(key):
            handle = self.idle[key].pop()
            try:
                self.backend.get(handle.call(Host.reset, *args, **kwargs))
            except Exception as err:
                if not self.backend.is_lost(err):
                    raise
                self.forget(handle)  # it died since (a fault drill): spawn another
                continue
            self.reused += 1
            return handle  # type: ignore[return-value]  # reset by its own class's constructor
        self._evict(key)
        handle = self.backend.spawn(where, host, *args, **kwargs)
        self.shape[id(handle)] = key
        self.process[id(handle)] = process_of(handle)
        return handle

    def __post_init__(self) -> None:
        _POOLS.add(self)

    def _evict(self, key: tuple[Any, Placement]) -> None:
        make_room(self.backend, key[1])

    def in_use_processes(self) -> set[int]:
        """The processes (:func:`process_of`) that host a party given out and not yet given back."""
        idle = {id(h) for handles in self.idle.values() for h in handles}
        return {pid for hid, pid in self.process.items() if hid not in idle}

    def _stop(self, handle: Handle[Any]) -> None:
        self.shape.pop(id(handle), None)
        self.process.pop(id(handle), None)
        if self.backend.capabilities.kill:
            with contextlib.suppress(Exception):
                self.backend.kill(handle)

    def release(self, handles: Sequence[Handle[Any]]) -> None:
        """Take back a run's live hosts (each once), to start them again for the next run."""
        for handle in {id(h): h for h in handles}.values():
            key = self.shape.get(id(handle))
            if key is not None:
                self.idle.setdefault(key, []).append(handle)

    def forget(self, handle: Handle[Any]) -> None:
        """A host that was stopped (a fault drill, a replaced party): never given out again."""
        self.shape.pop(id(handle), None)
        self.process.pop(id(handle), None)

    def stop(self) -> None:
        """Stop every idle host (where the backend can stop one; in-process they are just dropped)."""
        for handles in self.idle.values():
            for handle in handles:
                self._stop(handle)
        self.idle.clear()
        self.shape.clear()
        self.process.clear()


def make_room(backend: Backend, where: Placement) -> None:
    """Stop the idle hosts that hold resources (CPUs, GPUs), of any session, before a new host asks for
    ``where``: an idle worker must not keep the CPU a host of this run waits for (a run without warm
    hosts of its own, beside a session's, waited for ever). A host in a shared process
    (:class:`~sifl_ray.backends.shared.Slot`) goes only with its whole process, and only when none of that
    process's parties is in use: stopping it stops them all.

    Only a backend that places its parties (Ray) reserves resources: an in-process host holds nothing a
    host elsewhere waits for, so it neither evicts nor is evicted (a Ray run and an in-process run of the
    same settings, one after the other, keep each other's hosts warm)."""
    if not (where.cpus or where.gpus) or not reserves(backend):
        return
    for pool in [p for p in _POOLS if reserves(p.backend)]:
        busy = pool.in_use_processes()
        for other, handles in list(pool.idle.items()):
            if not (other[1].cpus or other[1].gpus):
                continue
            keep = [h for h in handles if process_of(h) in busy]
            for handle in handles:
                if process_of(handle) not in busy:
                    pool._stop(handle)
            if keep:
                pool.idle[other] = keep
            else:
                del pool.idle[other]


def spawn_making_room(
    backend: Backend, where: Placement, host: Callable[P, H], /, *args: P.args, **kwargs: P.kwargs
) -> Handle[H]:
    """A new host on ``backend`` for a run without warm hosts (:func:`make_room` first)."""
    make_room(backend, where)
    return backend.spawn(where, host, *args, **kwargs)


def reserves(backend: Backend) -> bool:
    """Whether ``backend``'s hosts hold resources other hosts may wait for: CPUs and GPUs of the cluster
    its parties are placed on (Ray); in-process hosts hold none."""
    return backend.capabilities.placement


def process_of(handle: Handle[Any]) -> int:
    """Which process hosts ``handle``'s party, as an identity: its shared process's, or its own."""
    raw = handle.raw
    return id(raw.actor) if isinstance(raw, Slot) else id(raw)


_POOLS: weakref.WeakSet[WarmHosts] = weakref.WeakSet()  # every session's hosts (they share one machine)
_DEFAULT: dict[str, WarmHosts] = {}


def default_hosts(backend: str) -> WarmHosts | None:
    """The warm hosts a simulation of ``backend`` takes when it is given neither a backend nor hosts
    (:func:`use_default`; ``None``: it starts its own)."""
    return _DEFAULT.get(backend)


@contextlib.contextmanager
def use_default(kind: str, hosts: WarmHosts) -> Iterator[WarmHosts]:
    """Within the block, every simulation of backend ``kind`` made without a backend runs on ``hosts``
    (a test suite's one Ray instance and its warm hosts); they are stopped after it."""
    _DEFAULT[kind] = hosts
    try:
        yield hosts
    finally:
        _DEFAULT.pop(kind, None)
        hosts.stop()
