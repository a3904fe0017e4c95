"""sifl-ray: simulate privacy-preserving federated learning with System Immersion coding (SIFL) on Ray.

The coding core (``sifl_ray.coding``, ``sifl_ray.optim``, ``sifl_ray.privacy``) runs without Ray; each party
(``sifl_ray.parties``) is plain Python that a backend (``sifl_ray.backends``) hosts in-process or as a Ray
actor. From Python,
``from sifl_ray import simulate`` runs a scenario and returns its history as data (:mod:`sifl_ray.api`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

#: The names ``from sifl_ray import ...`` offers, each read from its module on first use: ``import sifl_ray``
#: (every submodule's import starts with it) must not pay for the configuration's loader.
_LAZY = {
    "simulate": "sifl_ray.api",
    "Session": "sifl_ray.api",
    "SimulationResult": "sifl_ray.api",
    "SiflError": "sifl_ray.errors",
}

__all__ = ["Session", "SiflError", "SimulationResult", "__version__", "simulate"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sifl_ray' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
