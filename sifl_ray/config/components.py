"""The registries of the components a scenario chooses among, held here so that the configuration reads
them without importing a component: the arms (``arms``), the data sets (``data.name``), the partitioners
(``data.partition``) and the simulated clock's device profiles (``clock.profile``).

Why here: the configuration sits below every component (a component declares its settings with the
configuration's ``setting`` and registers here), so it may not import one. A component module registers
itself when it is imported; the built-in ones are imported by name, as a user's plug-ins are
(:func:`load_components`), before a configuration is validated.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sifl_ray.config.registry import Registry

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: The modules whose import registers the built-in components (and declares their sections): loaded like
#: a user's plug-ins, by name. None imports torch.
BUILTIN_COMPONENTS: tuple[str, ...] = ("sifl_ray.arms", "sifl_ray.data", "sifl_ray.clock.profiles")

#: The arms (:class:`sifl_ray.arms.Arm` objects), by kind: ``register_arm`` adds one.
ARMS: Registry[Any] = Registry("arm", key="arms")

#: The data sets ``data.name`` accepts besides an import path (:class:`sifl_ray.data.registry.DataSource`):
#: ``register_dataset`` adds one.
DATASETS: Registry[Any] = Registry("data set", key="data.name")

#: The partitioners ``data.partition`` accepts (:class:`sifl_ray.data.partition.Partitioner`):
#: ``register_partitioner`` adds one.
PARTITIONERS: Registry[Any] = Registry("partitioner", key="data.partition")

#: The device profiles ``clock.profile`` accepts (:func:`sifl_ray.clock.profiles.register_profile` adds one):
#: each draws every client's device (compute speed, links, latency, availability) from the run's seed.
DEVICE_PROFILES: Registry[Any] = Registry("device profile", key="clock.profile")


def load_components() -> None:
    """Import the built-in components' modules (they register their arms, data sets and partitioners and
    declare their sections), as :func:`sifl_ray.config.plugins.load_plugins` imports a user's."""
    for module in BUILTIN_COMPONENTS:
        importlib.import_module(module)


def arm_instances(cfg: DictConfig) -> dict[str, str]:
    """Concrete arm names of ``cfg`` → their kind (``nbafl`` runs as ``nbafl_eps1``, ``nbafl_eps5``, ...).

    ``cfg`` is a configuration (validated, or merged and typed inside the validator's cross-checks);
    unknown kinds are skipped (the validator reports them).
    """
    out: dict[str, str] = {}
    for kind in cfg.arms:
        if kind in ARMS:
            for name in ARMS[kind].instances(cfg):
                out[name] = kind
    return out


def arm_names(cfg: DictConfig) -> list[str]:
    """Concrete arm names of ``cfg``, in the order the scenario lists them."""
    return list(arm_instances(cfg))


@dataclass(frozen=True)
class Samples:
    """How many training samples a configuration gives, where that number comes from, and how to get more
    (for a message)."""

    count: int
    source: str
    more: str


def train_samples(cfg: DictConfig) -> Samples | None:
    """The training samples ``cfg`` gives (its data set's, at most ``data.limit_train``); ``None`` where
    they are known only once the data is read (a user's files or loader without a limit)."""
    source = DATASETS.get(cfg.data.name)
    count: Callable[[DictConfig], int | None] | None = None if source is None else source.samples
    found = count(cfg) if count is not None else None
    limit = cfg.data.limit_train
    if limit is not None and (found is None or limit < found):
        return Samples(int(limit), f"data.limit_train={limit}", "raise data.limit_train")
    if found is None or source is None:
        return None
    return Samples(int(found), f"data.name={cfg.data.name}", source.more)
