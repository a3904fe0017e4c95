"""Your own data: arrays on disk, LEAF JSON, a function of yours, or a registered data set.

Why: to judge SIFL, secure aggregation or DP-FedAvg on *their* problem, a researcher brings their samples
and, often, the clients those samples belong to (the writers of FEMNIST, the speakers of Shakespeare): the
non-IID split federated learning is studied on. ``data.name`` takes, beside the built-in sets:

* ``arrays``: ``arrays.path`` is a ``.npz`` (NumPy) or ``.pt`` (a dict of tensors, ``torch.save``) file
  with ``x_train`` and ``y_train``, and optionally ``x_test``, ``y_test`` and ``client_train`` (a client id
  per training sample);
* ``leaf``: ``leaf.path`` is a LEAF JSON file (``{"users": [...], "num_samples": [...], "user_data":
  {user: {"x": [...], "y": [...]}}}``) or a folder of them; ``leaf.test_path`` the same for the test set;
* ``package.module:function``: called as ``function(**data.args)``, returns such a mapping (arrays or
  tensors) or a tuple ``(x, y)`` / ``(x, y, client_ids)``;
* a name registered with :func:`~sifl_ray.data.registry.register_dataset` (in a plug-in module,
  ``SIFL_PLUGINS``), called the same, or, when it declares its settings
  (``register_dataset("writers", settings=WritersSettings)``), with the typed values of its own section
  ``writers`` (``writers.per_class=3``), validated like every section.

Without a test set, a stratified ``data.test_fraction`` of the samples is held out, drawn from the stream
``(seed, "data", "own_split", name)`` (LEAF: that share of each user's samples, as LEAF's own sample split
does). Values are taken as given and cast to float32 (no scaling or standardisation: the data is yours);
a sample of ``D`` values becomes ``(1, 1, D)``, ``H×W`` values ``(1, H, W)``, as the models'
``input_shape`` is ``(C, H, W)``. Text in LEAF (Shakespeare's strings) becomes character ids over the
characters the files use, sorted, stored as floats (a model's embedding casts them back with ``.long()``).

Every problem with the data is a :class:`DataInputError` naming the configuration key to change; the run
reports it as a configuration error (exit code 2, :func:`sifl_ray.data.preflight.data_problem`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from sifl_ray.config.import_paths import ImportPathError, import_object, is_import_path
from sifl_ray.config.sections import section_defaults
from sifl_ray.data.dataset import Dataset, subsample
from sifl_ray.data.files import load_arrays_file, load_leaf
from sifl_ray.data.from_arrays import DataInputError, dataset_from_arrays
from sifl_ray.data.registry import DATASETS, DataLoader, DataSource, register_dataset, unregister_dataset

__all__ = [
    "DataInputError",
    "dataset_from_arrays",
    "load_any_dataset",
    "load_arrays_file",
    "load_leaf",
    "register_dataset",
    "unregister_dataset",
]


def _from_function(
    source: DataSource,
    name: str,
    args: Mapping[str, Any],
    options: Mapping[str, Any],
    seed: int,
    test_fraction: float,
    args_key: str,
) -> Dataset:
    loader = source.loader
    try:  # checked apart from the call: a TypeError inside the loader is a bug of its own, shown as such
        inspect.signature(loader).bind(**dict(args), **dict(options))
    except TypeError as err:
        raise DataInputError(
            args_key,
            f"data set {name!r} could not be called with {args_key}={dict(args)} ({err})",
            f"fix {args_key}",
        ) from None
    except ValueError:  # no signature to read (a builtin): the call itself will tell
        pass
    out = loader(**dict(args), **dict(options))
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
    """The loader ``data.name`` stands for: a registered data set's, or a user's by import path (``None``:
    neither).

    Raises:
        DataInputError: the import path does not import (its message names ``data.name``).
    """
    if name in DATASETS:
        return DATASETS[name].loader
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
    args: Mapping[str, Any] | None = None,
    test_fraction: float = 0.25,
    root: str = "data_cache",
    download: bool = True,
    mirrors: Sequence[str] | None = None,
    limit_train: int | None = None,
    limit_test: int | None = None,
) -> Dataset:
    """Load ``data.name`` whatever it names: a registered data set (the built-in ones,
    :mod:`sifl_ray.data.builtin`, and a user's) or an import path.

    ``args`` are the loader's keyword arguments: a data set with a settings section takes them over its
    dataclass's defaults (a run passes its section's validated values, ``{"path": ...}`` for ``arrays``),
    any other loader ``data.args``. The loader also receives what it asked for of ``seed``,
    ``test_fraction``, ``root``, ``download`` and ``mirrors`` (:data:`~sifl_ray.data.registry.DATA_OPTIONS`).

    Raises:
        DataInputError: the user's data cannot be read or used (with the key to change).
    """
    source = DATASETS.get(name)
    if source is None:
        loader = resolve_data_loader(name)
        if loader is None:
            raise DataInputError(
                "data.name",
                f"unknown data set {name!r}; expected one of {', '.join(DATASETS)} or an import path "
                "package.module:function",
                "register yours with @sifl_ray.data.register_dataset in a module named in SIFL_PLUGINS",
            )
        source = DataSource(loader)
    context = {
        "seed": seed,
        "test_fraction": test_fraction,
        "root": root,
        "download": download,
        "mirrors": mirrors,
    }
    options = {k: context[k] for k in source.options}
    if source.settings is None:
        ds = _from_function(source, name, args or {}, options, seed, test_fraction, "data.args")
    else:
        given = {**section_defaults(source.settings), **(args or {})}
        ds = _from_function(source, name, given, options, seed, test_fraction, name)
    return subsample(ds, limit_train, limit_test, seed)
