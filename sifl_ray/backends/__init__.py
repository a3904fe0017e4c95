"""Backends: what hosts the parties. In-process (:mod:`~sifl_ray.backends.local`), Ray on this machine or a
cluster (:mod:`~sifl_ray.backends.ray`, :mod:`~sifl_ray.backends.cluster`).

A backend is one module with a class that has the members of :class:`Backend`, a ``from_config``
constructor and its :class:`Capabilities`, and its registration: a line in the registry the configuration
reads (:data:`BACKENDS`, declared in :mod:`sifl_ray.config.names` for the built-in ones), or
:func:`register_backend` from a plug-in. ``backend=<name>`` then chooses it. Nothing else names a backend:
the runner reads what it can do from its capabilities.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

from sifl_ray.backends.base import Backend, Capabilities, Placement
from sifl_ray.config.names import BACKENDS

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = [
    "BACKENDS",
    "Backend",
    "Capabilities",
    "Placement",
    "make_backend",
    "register_backend",
    "starting",
]

B = TypeVar("B", bound=type)


def make_backend(cfg: DictConfig, **options: Any) -> Backend:
    """The backend ``backend`` names, built from the configuration (``options``: a private Ray instance's
    size, for tests and benches)."""
    backend: Backend = BACKENDS[str(cfg.backend)].from_config(cfg, **options)
    return backend


def starting(kind: str, address: str | None = None, num_cpus: int | None = None) -> str:
    """The line a run says the moment it starts its backend (before Ray's seconds of start): what it
    starts or joins."""
    if kind == "local":
        return "starting the parties in this process"
    if kind != "ray":
        return f"starting the {kind} backend"
    if (address or "") in ("", "local"):
        cpus = num_cpus or os.cpu_count() or 1
        return f"starting Ray: a private local instance with {cpus} CPU{'s' if cpus != 1 else ''}"
    if address == "auto":
        return "joining the Ray cluster this machine runs (ray.address=auto)"
    return f"joining the Ray cluster at {address}"


def register_backend(name: str) -> Any:
    """Decorator: make the class a backend, chosen with ``backend=<name>`` (a plug-in's module, imported
    before the configuration is read: ``SIFL_PLUGINS``)."""

    def register(cls: B) -> B:
        BACKENDS.register(name, cls)
        return cls

    return register
