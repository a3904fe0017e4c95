"""Calling a party: one typed handle, the host's method object, results that are references.

Why: the driver orchestrates every party and must be readable by a type checker and a reader's tools from
:func:`~sifl_ray.round.run_round` into the party that does the work. So a remote call names the host's
method itself, not a string::

    finished = parties.server.call(ServerHost.finish_round, arm, t, *shards, previous=None)

and mypy checks the arguments against :meth:`ServerHost.finish_round`'s signature and types the result as
its return type. A method that returns several objects (each its own reference, so that each can travel to
a different party without the others) declares it once, on the host, with :func:`returns`; both backends
read that declaration, and the handle hands back the host's own result record with a reference in each
field.

Results stay references (ObjectRefs on Ray, resolved stand-ins in-process): a call submits and returns at
once, so the parties keep working while the driver submits the next call, and the driver never holds a
parameter vector. To the type checker a ``Ref[T]`` is a ``T``: a host method's parameter takes either (the
backend resolves a reference where the party runs), and :func:`collect` gives the value, which is then read
by its fields' names and types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from inspect import Signature, signature
from typing import Annotated, Any, Concatenate, Generic, ParamSpec, Protocol, TypeAlias, TypeVar, cast

from sifl_ray.errors import SiflError

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
H_co = TypeVar("H_co", covariant=True)
F = TypeVar("F", bound=Callable[..., Any])

Ref: TypeAlias = Annotated[T, "a reference to a party's result: an ObjectRef on Ray, a stand-in in-process"]


class Caller(Protocol):
    """What a handle needs of a backend (:class:`sifl_ray.backends.Backend` has it all)."""

    def call(
        self, raw: object, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], n: int
    ) -> Any: ...

    def get(self, ref: Ref[T]) -> T: ...

    def is_lost(self, err: BaseException) -> bool: ...


def returns(record: type[tuple[Any, ...]], count: Callable[..., int] | None = None) -> Callable[[F], F]:
    """Declare that a host method returns ``record`` (a tuple: a NamedTuple, or a tuple subclass with
    ``_make``), each of its items a separate object. ``count``: how many, from the call's arguments (by
    name), when the record's length varies (one partial sum per aggregator shard); else its fields (at
    least two: a single object is an ordinary result)."""
    fixed = len(getattr(record, "_fields", ()))
    if count is None and fixed < 2:
        raise TypeError(f"{record.__name__}: a record of several objects needs two fields or a count")

    def declare(method: F) -> F:
        method.__dict__["returns"] = (record, count, fixed)
        return method

    return declare


def num_returns(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """How many objects a call of ``method`` returns (1 unless :func:`returns` says otherwise)."""
    declared = getattr(method, "returns", None)
    if declared is None:
        return 1
    _, count, fixed = declared
    if count is None:
        return int(fixed)
    bound = _signature(method).bind(None, *args, **kwargs).arguments
    return int(count(**{k: v for k, v in bound.items() if k in _signature(count).parameters}))


@cache
def _signature(fn: Callable[..., Any]) -> Signature:
    return signature(fn)


@dataclass(frozen=True)
class Handle(Generic[H_co]):
    """A party as the driver calls it: the backend, and what the backend spawned (an actor, or the host
    object itself in-process). One handle per spawned host: a replaced host gets a new handle."""

    caller: Caller
    raw: object

    def call(self, method: Callable[Concatenate[H_co, P], R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Submit ``method`` on this party and return at once; the result's items are references."""
        count = num_returns(method, args, dict(kwargs))
        out = self.caller.call(self.raw, method, args, dict(kwargs), count)
        declared = getattr(method, "returns", None)
        return cast(R, out if declared is None else declared[0]._make(out))


class PartyLost(SiflError, RuntimeError):
    """The server, an aggregator shard or the evaluator died during a round."""

    def __init__(self, party: str, index: int, *, arm: str, round: int, error: BaseException) -> None:
        self.party, self.index, self.arm, self.round = party, index, arm, round
        name = party if party != "aggregator" else f"aggregator shard {index}"
        super().__init__(f"the {name} died in round {round} of {arm} ({type(error).__name__})")


def collect(caller: Caller, ref: Ref[T], party: str, index: int, *, arm: str, t: int) -> T:
    """The value behind ``ref``, naming the party when the call failed because that party is gone."""
    try:
        return caller.get(ref)
    except Exception as err:
        if caller.is_lost(err):
            raise PartyLost(party, index, arm=arm, round=t, error=err) from err
        raise
