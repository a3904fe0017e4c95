"""The in-process backend: the same role hosts as the Ray actors, called directly, in order.

Why: a reference run without Ray (fast tests, debugging with a plain debugger) that must agree with the Ray
run number for number. It implements :class:`sifl_ray.backend.Backend`, as :class:`actors.backend.RayBackend`
does.
"""

from __future__ import annotations

from typing import Any


class LocalRef:
    """A resolved value standing in for an ObjectRef."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _resolve(x: Any) -> Any:
    return x.value if isinstance(x, LocalRef) else x


class SequentialBackend:
    """Every party is a plain object in this process; a call runs to completion before it returns."""

    name = "sequential"
    description = ""

    def available(self) -> dict[str, float]:
        return {"CPU": 1.0}

    def cluster(self) -> dict[str, float]:
        return {"CPU": 1.0}

    def spawn(
        self,
        cls: type,
        *args: Any,
        num_cpus: float = 0,
        num_gpus: float = 0,
        spread: bool = False,
        **kwargs: Any,
    ):
        return cls(*[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kwargs.items()})

    def call(self, handle, method: str, *args: Any, num_returns: int = 1, **kwargs: Any):
        out = getattr(handle, method)(
            *[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kwargs.items()}
        )
        if num_returns == 1:
            return LocalRef(out)
        return [LocalRef(v) for v in out]

    def put(self, value: Any) -> LocalRef:
        return LocalRef(value)

    def get(self, refs):
        if isinstance(refs, list):
            return [_resolve(r) for r in refs]
        return _resolve(refs)

    def wait(self, refs: list, timeout: float | None = None) -> tuple[list, list]:
        # ``call`` runs the method to completion (an error raises there): every ref is ready, none is late.
        return list(refs), []

    def is_lost(self, err: BaseException) -> bool:
        # A party lives in this process and cannot die on its own: every error is its method's.
        return False

    def kill(self, handle) -> None:
        raise RuntimeError("the sequential backend has no actors to kill")

    def shutdown(self) -> None:
        pass
