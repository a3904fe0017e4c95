"""The data sets ``data.name`` names: the built-in ones and a user's, registered alike.

Why one registry for both: a data set owns its settings and its rules. Its settings are a dataclass, the
configuration section named after it (``synthetic.n_train``, ``arrays.path``, ``writers.per_class``),
whose typed values its loader receives as keyword arguments; its rules are ``problems(cfg)`` (what must hold
of the rest of the configuration: a file named, a folder present) and ``samples(cfg)`` (how many training
samples it gives, so that every client and every shard gets one). The configuration reads them here and
never names a data set (:mod:`sifl_ray.config.checks`). The built-in data sets register in
:mod:`sifl_ray.data.builtin`, a user's in a plug-in module (``SIFL_PLUGINS``)::

    @register_dataset("writers", settings=WritersSettings)
    def writers(per_class):
        return {"x_train": ..., "y_train": ..., "client_train": ...}

A loader returns a :class:`~sifl_ray.data.Dataset`, a mapping of arrays or a tuple ``(x, y[,
client_ids])`` (:func:`sifl_ray.data.own.load_any_dataset`). One that needs the run's context asks for it
by name in ``options`` (:data:`DATA_OPTIONS`: the run seed, the test share, the download folder, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sifl_ray.config.components import DATASETS, Samples, train_samples

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = [
    "DATASETS",
    "DATA_OPTIONS",
    "DataLoader",
    "DataSource",
    "Samples",
    "register_dataset",
    "train_samples",
    "unregister_dataset",
]

DataLoader = Callable[..., Any]
"""``loader(**settings, **options)`` → a :class:`~sifl_ray.data.Dataset`, a mapping of arrays or a tuple
``(x, y[, client_ids])``; ``settings`` are its section's values, or ``data.args`` for a loader that
declares none."""

DATA_OPTIONS = ("seed", "test_fraction", "root", "download", "mirrors")
"""What of the run a loader may ask for by keyword: the run seed, ``data.test_fraction``, and where
downloaded files live (``data.root``, ``data.download``, ``data.mirrors``)."""


def _no_problems(cfg: DictConfig) -> list[str]:
    return []


@dataclass(frozen=True)
class DataSource:
    """A registered data set.

    Attributes:
        loader: the function that reads or makes it (:data:`DataLoader`).
        options: the names in :data:`DATA_OPTIONS` it takes as keyword arguments.
        settings: its section's dataclass (named after the data set), or ``None``.
        problems: ``problems(cfg)``, its rules on the configuration (each message with its key and fix).
        samples: ``samples(cfg)``, the training samples it gives before ``data.limit_train`` (``None``:
            known only once read).
        more: how to get more training samples, for a message (``"raise synthetic.n_train"``).
    """

    loader: DataLoader
    options: tuple[str, ...] = ()
    settings: type | None = None
    problems: Callable[[DictConfig], list[str]] = _no_problems
    samples: Callable[[DictConfig], int | None] | None = None
    more: str = "use a larger data set"


def register_dataset(
    name: str,
    *,
    settings: type | None = None,
    options: Sequence[str] = (),
    problems: Callable[[DictConfig], list[str]] | None = None,
    samples: Callable[[DictConfig], int | None] | None = None,
    more: str = "use a larger data set",
) -> Callable[[DataLoader], DataLoader]:
    """Decorator: make ``loader`` the data set ``data.name=<name>`` loads, and return it unchanged.

    With ``settings`` (a dataclass whose fields have defaults and, through :func:`sifl_ray.config.setting`,
    ranges), the section ``<name>`` is a key of the configuration (``writers.per_class=3``), checked like
    every section, and the loader is called with its typed values as keyword arguments; without, it is
    called with ``data.args``. The data set is loaded by the driver alone (the workers receive its arrays),
    so a registered loader need not be importable on the workers. See :class:`DataSource` for the rest.

    Raises:
        ValueError: ``name`` is taken, or an option is not one of :data:`DATA_OPTIONS`.
        SectionError: ``settings`` is no dataclass with defaults, the loader takes no keyword of one of its
            fields, or the section ``name`` is another component's (a ``ValueError`` too).
    """
    unknown = [o for o in options if o not in DATA_OPTIONS]
    if unknown:
        raise ValueError(
            f"data set {name!r}: unknown option(s) {', '.join(unknown)}; a loader may take "
            f"{', '.join(DATA_OPTIONS)}"
        )

    def register(loader: DataLoader) -> DataLoader:
        if name in DATASETS:
            raise ValueError(f"data set {name!r} is already registered; choose another name")
        source = DataSource(loader, tuple(options), settings, problems or _no_problems, samples, more)
        DATASETS.register(name, source, settings=settings, takes=loader)
        return loader

    return register


def unregister_dataset(name: str) -> None:
    """Remove the data set ``name`` and its section (tests that register data sets of theirs)."""
    DATASETS.unregister(name)
