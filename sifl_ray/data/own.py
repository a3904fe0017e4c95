"""Your own data: arrays on disk, LEAF JSON, a function of yours, or a registered data set.

Why: to judge SIFL, secure aggregation or DP-FedAvg on *their* problem, a researcher brings their samples
and, often, the clients those samples belong to (the writers of FEMNIST, the speakers of Shakespeare): the
non-IID split federated learning is studied on. ``data.name`` takes, beside the built-in sets:

* ``arrays``: ``data.path`` is a ``.npz`` (NumPy) or ``.pt`` (a dict of tensors, ``torch.save``) file with
  ``x_train`` and ``y_train``, and optionally ``x_test``, ``y_test`` and ``client_train`` (a client id per
  training sample);
* ``leaf``: ``data.path`` is a LEAF JSON file (``{"users": [...], "num_samples": [...], "user_data":
  {user: {"x": [...], "y": [...]}}}``) or a folder of them; ``data.test_path`` the same for the test set;
* ``package.module:function``: called as ``function(**data.args)``, returns such a mapping (arrays or
  tensors) or a tuple ``(x, y)`` / ``(x, y, client_ids)``;
* a name registered with :func:`register_dataset` (in a plug-in module, ``SIFL_PLUGINS``), called the same,
  or, when it declares its settings (``register_dataset("writers", settings=WritersSettings)``), with the
  typed values of its own section ``writers`` (``writers.per_class=3``), validated like every section.

Without a test set, a stratified ``data.test_fraction`` of the samples is held out, drawn from the stream
``(seed, "data", "own_split", name)`` (LEAF: that share of each user's samples, as LEAF's own sample split
does). Values are taken as given and cast to float32 (no scaling or standardisation: the data is yours);
a sample of ``D`` values becomes ``(1, 1, D)``, ``H×W`` values ``(1, H, W)``, as the models'
``input_shape`` is ``(C, H, W)``. Text in LEAF (Shakespeare's strings) becomes character ids over the
characters the files use, sorted, stored as floats (a model's embedding casts them back with ``.long()``).

Every problem with the data is a :class:`DataInputError` naming the configuration key to change; the run
reports it as a configuration error (exit code 2, :func:`sifl_ray.data.preflight.data_problem`).

This module is the entry (:func:`load_any_dataset`) and the registry of named data sets; arrays become a
data set in :mod:`sifl_ray.data.from_arrays`, files are read in :mod:`sifl_ray.data.files`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from sifl_ray.data.dataset import Dataset, subsample
from sifl_ray.data.datasets import DATASET_NAMES, load_dataset
from sifl_ray.data.files import load_arrays_file, load_leaf
from sifl_ray.data.from_arrays import DataInputError, dataset_from_arrays
from sifl_ray.import_paths import ImportPathError, import_object, is_import_path
from sifl_ray.sections import (
    component_section,
    register_component_section,
    section_defaults,
    unregister_component_section,
)

__all__ = [
    "FILE_DATASETS",
    "USER_DATASETS",
    "DataInputError",
    "all_dataset_names",
    "dataset_from_arrays",
    "load_any_dataset",
    "load_arrays_file",
    "load_leaf",
    "register_dataset",
    "unregister_dataset",
]

FILE_DATASETS: tuple[str, ...] = ("arrays", "leaf")
"""Data sets read from the user's files at ``data.path`` (and ``data.test_path``)."""

DataLoader = Callable[..., Any]
"""``loader(**settings)`` → a mapping of arrays or a tuple ``(x, y[, client_ids])``; ``settings`` are its
section's values, or ``data.args`` for a loader that declares none."""

USER_DATASETS: dict[str, DataLoader] = {}
"""Data sets registered with :func:`register_dataset`: the further names ``data.name`` accepts."""


def all_dataset_names() -> tuple[str, ...]:
    """Every name ``data.name`` accepts besides an import path: built in, file formats, registered."""
    return (*DATASET_NAMES, *FILE_DATASETS, *USER_DATASETS)


def register_dataset(name: str, *, settings: type | None = None) -> Callable[[DataLoader], DataLoader]:
    """Decorator: make ``loader`` the data set ``data.name=<name>`` loads, and return it unchanged.

    With ``settings`` (a dataclass whose fields have defaults and, through
    :func:`sifl_ray.validation.setting`, ranges), the section ``<name>`` is a key of the configuration
    (``writers.per_class=3``), checked like every section, and the loader is called with its typed values
    as keyword arguments; without, it is called as ``loader(**data.args)``. The data set is loaded by the
    driver alone (the workers receive its arrays), so a registered loader need not be importable on the
    workers.

    Raises:
        ValueError: ``name`` is built in or already registered.
        SectionError: ``settings`` is no dataclass with defaults, the loader takes no keyword of one of its
            fields, or the section ``name`` is another component's (a ``ValueError`` too).
    """

    def register(loader: DataLoader) -> DataLoader:
        if name in DATASET_NAMES or name in FILE_DATASETS or name in USER_DATASETS:
            raise ValueError(f"data set {name!r} is already registered; choose another name")
        if settings is not None:
            register_component_section("data set", name, settings, loader)
        USER_DATASETS[name] = loader
        return loader

    return register


def unregister_dataset(name: str) -> None:
    """Remove the registered data set ``name`` and its section (tests that register data sets of theirs)."""
    USER_DATASETS.pop(name, None)
    unregister_component_section("data set", name)


# ---------------------------------------------------------------------------------------------------------
# One entry: any data.name
# ---------------------------------------------------------------------------------------------------------


def _from_function(
    loader: DataLoader, name: str, args: Mapping[str, Any], seed: int, test_fraction: float, args_key: str
) -> Dataset:
    try:  # checked apart from the call: a TypeError inside the loader is a bug of its own, shown as such
        inspect.signature(loader).bind(**dict(args))
    except TypeError as err:
        raise DataInputError(
            args_key,
            f"data set {name!r} could not be called with {args_key}={dict(args)} ({err})",
            f"fix {args_key}",
        ) from None
    except ValueError:  # no signature to read (a builtin): the call itself will tell
        pass
    out = loader(**dict(args))
    if isinstance(out, Dataset):
        return out
    if isinstance(out, tuple) and len(out) in (2, 3):
        out = dict(zip(("x_train", "y_train", "client_train"), out, strict=False))
    if not isinstance(out, Mapping):
        raise DataInputError(
            "data.name",
            f"data set {name!r} returned a {type(out).__name__}",
            "return a dict of arrays (x_train, y_train, ...) or a tuple (x, y) or (x, y, client_ids)",
        )
    return dataset_from_arrays(out, name=name, seed=seed, test_fraction=test_fraction)


def resolve_data_loader(name: str) -> DataLoader | None:
    """The user's loader ``data.name`` stands for (``None`` for a built-in or file data set).

    Raises:
        DataInputError: the import path does not import (its message names ``data.name``).
    """
    if name in USER_DATASETS:
        return USER_DATASETS[name]
    if is_import_path(name):
        try:
            return import_object(name, key="data.name")
        except ImportPathError as err:
            raise DataInputError("data.name", str(err).removeprefix("data.name: "), "") from None
    return None


def load_any_dataset(
    name: str,
    *,
    seed: int,
    path: str | None = None,
    test_path: str | None = None,
    args: Mapping[str, Any] | None = None,
    test_fraction: float = 0.25,
    limit_train: int | None = None,
    limit_test: int | None = None,
    **builtin: Any,
) -> Dataset:
    """Load ``data.name`` whatever it names: a built-in set (:func:`~sifl_ray.data.datasets.load_dataset`,
    which also takes ``builtin``'s options), ``arrays``, ``leaf``, a registered name or an import path.

    ``args`` are the loader's keyword arguments: a data set registered with ``settings`` takes them over its
    dataclass's defaults (a run passes its section's validated values), any other loader ``data.args``.

    Raises:
        DataInputError: the user's data cannot be read or used (with the key to change).
    """
    if name in DATASET_NAMES:
        return load_dataset(
            name,
            seed=seed,
            test_fraction=test_fraction,
            limit_train=limit_train,
            limit_test=limit_test,
            **builtin,
        )
    if name == "arrays":
        ds = dataset_from_arrays(
            load_arrays_file(path), name="arrays", seed=seed, test_fraction=test_fraction, key="data.path"
        )
    elif name == "leaf":
        ds = load_leaf(path, test_path=test_path, seed=seed, test_fraction=test_fraction)
    else:
        loader = resolve_data_loader(name)
        if loader is None:
            raise DataInputError(
                "data.name",
                f"unknown data set {name!r}; expected one of {', '.join(all_dataset_names())} or an import "
                "path package.module:function",
                "register yours with @sifl_ray.data.own.register_dataset in a module named in SIFL_PLUGINS",
            )
        schema = component_section("data set", name)
        if schema is None:
            ds = _from_function(loader, name, args or {}, seed, test_fraction, "data.args")
        else:
            args = {**section_defaults(schema), **(args or {})}
            ds = _from_function(loader, name, args, seed, test_fraction, name)
    return subsample(ds, limit_train, limit_test, seed)
