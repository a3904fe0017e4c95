"""The in-process backend: the same party hosts as on Ray, called directly, in order.

Why: a reference run without Ray (fast tests, sweeps in a notebook, debugging with a plain debugger) that
must agree with the Ray run number for number. Every party is a plain object in this process and a call runs
to completion before it returns, so nothing is ever late and no party can die on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from sifl_ray.backends.base import Capabilities, Placement
from sifl_ray.parties.handle import Handle, Ref

T = TypeVar("T")
H = TypeVar("H")
P = ParamSpec("P")


class LocalRef:
    """A resolved value standing in for an ObjectRef."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _resolve(x: Any) -> Any:
    return x.value if isinstance(x, LocalRef) else x


class LocalBackend:
    """Every party is a plain object in this process (:class:`~sifl_ray.backends.Backend`)."""

    name = "local"
    description = ""
    capabilities = Capabilities(kill=False, own_processes=False, placement=False, default_workers=2)

    @classmethod
    def from_config(cls, cfg: object, **options: object) -> LocalBackend:
        return cls()

    def available(self) -> dict[str, float]:
        return {"CPU": 1.0}

    def cluster(self) -> dict[str, float]:
        return {"CPU": 1.0}

    def spawn(
        self, where: Placement, host: Callable[P, H], /, *args: P.args, **kwargs: P.kwargs
    ) -> Handle[H]:
        resolved = host(*[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kwargs.items()})
        return Handle(self, resolved)

    def call(
        self, raw: object, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], n: int
    ) -> Any:
        # By name on the object: a subclass's override (a task's evaluator) is the one that runs, as on Ray.
        bound = getattr(raw, method.__name__)
        out = bound(*[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kwargs.items()})
        return LocalRef(out) if n == 1 else [LocalRef(v) for v in out]

    def put(self, value: T) -> Ref[T]:
        return LocalRef(value)  # type: ignore[return-value]  # a stand-in: to the type checker, the value

    def get(self, ref: Ref[T]) -> T:
        return _resolve(ref)  # type: ignore[no-any-return]

    def get_all(self, refs: Sequence[Ref[T]]) -> list[T]:
        return [_resolve(r) for r in refs]

    def wait(self, refs: Sequence[Any], timeout: float | None = None) -> tuple[list[Any], list[Any]]:
        # A call runs to completion (an error raises there): every ref is ready, none is late.
        return list(refs), []

    def is_lost(self, err: BaseException) -> bool:
        # A party lives in this process and cannot die on its own: every error is its method's.
        return False

    def kill(self, handle: Handle[Any]) -> None:
        raise RuntimeError("the local backend runs every party in this process: it cannot kill one")

    def shutdown(self) -> None:
        pass
