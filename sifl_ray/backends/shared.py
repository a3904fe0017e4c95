"""Several parties in one process: a Ray actor that hosts each party as its own object.

Why: the light parties (the server, the aggregator, the evaluator on a CPU) compute little, but a process
each costs a second or more of CPU to start and a torch import's memory (``python -m bench startup``
measures both). With ``ray.placement=compact`` they share one process, and client worker 0 joins them where
nothing may kill or stall its process (:func:`sifl_ray.runner.parties.worker_shares`): each is still its
own object, made by its own constructor from its own arguments, holding only its own secrets, and called
only through its own handle; what they lose is running at the same time as each other (a round is
synchronous: the worker trains while the light parties wait for its upload).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Slot:
    """A party in a shared process: the process's actor and the party's place in it."""

    actor: Any
    slot: int


class SharedProcess:
    """The process (a Ray actor) that hosts several parties, each its own object."""

    def __init__(self) -> None:
        self.parties: dict[int, Any] = {}
        self.failed: dict[int, BaseException] = {}

    def adopt(self, _sifl_slot: int, _sifl_host: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Make the party ``_sifl_host(*args, **kwargs)`` in this process, in place ``_sifl_slot``. A
        constructor that fails is kept and raised by the party's first call, as a party in its own process
        fails its first call when its constructor did (nobody waits on this call's result)."""
        try:
            self.parties[_sifl_slot] = _sifl_host(*args, **kwargs)
        except Exception as err:
            self.failed[_sifl_slot] = err

    def invoke(self, _sifl_slot: int, _sifl_method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the party in place ``_sifl_slot`` (its arguments arrive resolved: they are this call's)."""
        if _sifl_slot in self.failed:
            raise RuntimeError(f"this party could not start: {self.failed[_sifl_slot]!r}") from self.failed[
                _sifl_slot
            ]
        return getattr(self.parties[_sifl_slot], _sifl_method)(*args, **kwargs)
