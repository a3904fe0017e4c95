"""Backends: what hosts the parties. In-process (:mod:`~sifl_ray.backends.local`), Ray on this machine or a
cluster (:mod:`~sifl_ray.backends.ray`, :mod:`~sifl_ray.backends.cluster`).

A backend is one module with a class that has the members of :class:`Backend`, a ``from_config``
constructor and its :class:`Capabilities`, plus its line in :data:`BACKENDS`; ``backend=<name>`` chooses it.
Nothing else names a backend: the runner reads what it can do from its capabilities.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from sifl_ray.backends.base import Backend, Capabilities, Placement

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["BACKENDS", "Backend", "Capabilities", "Placement", "make_backend"]

#: name → where its class lives (``module:Class``): imported only when chosen (Ray costs a second or more).
BACKENDS: dict[str, str] = {
    "local": "sifl_ray.backends.local:LocalBackend",
    "ray": "sifl_ray.backends.ray:RayBackend",
}


def backend_class(name: str) -> Any:
    """The class registered as ``name`` (importing its module)."""
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(import_module(module), attr)


def make_backend(cfg: DictConfig, **options: Any) -> Backend:
    """The backend the configuration names, built from it (``options``: a private Ray instance's size)."""
    backend: Backend = backend_class(backend_name(cfg)).from_config(cfg, **options)
    return backend


def backend_name(cfg: DictConfig) -> str:
    """The configured backend's registered name."""
    return "local" if cfg.ray.backend == "sequential" else str(cfg.ray.backend)
