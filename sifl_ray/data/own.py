"""Your own data (issue 23): arrays on disk, LEAF JSON, a function of yours, or a registered data set.

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
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sifl_ray.config.import_paths import ImportPathError, import_object, is_import_path
from sifl_ray.config.sections import section_defaults
from sifl_ray.data.datasets import Dataset, _stratified_split, _subsample
from sifl_ray.data.download import DatasetError
from sifl_ray.data.registry import DATASETS, DataLoader, DataSource, register_dataset, unregister_dataset
from sifl_ray.seeding import numpy_generator

__all__ = [
    "DataInputError",
    "dataset_from_arrays",
    "load_any_dataset",
    "load_arrays_file",
    "load_leaf",
    "register_dataset",
    "unregister_dataset",
]

_ARRAY_KEYS = ("x_train", "y_train", "x_test", "y_test", "client_train")


class DataInputError(DatasetError):
    """The user's data cannot be read or used; ``key`` is the configuration key to change."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        super().__init__(problem, fix)
        self.key = key


# ---------------------------------------------------------------------------------------------------------
# Arrays → Dataset
# ---------------------------------------------------------------------------------------------------------


def _numpy(value: Any) -> np.ndarray:
    """A NumPy array from an array, a tensor (on any device) or a list."""
    if hasattr(value, "detach"):  # a torch tensor; torch is not imported for a NumPy-only user
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _as_images(x: np.ndarray, key: str, what: str) -> np.ndarray:
    """``(N, C, H, W)`` float32 from ``(N, D)``, ``(N, H, W)`` or ``(N, C, H, W)``."""
    if x.ndim == 2:
        x = x[:, None, None, :]
    elif x.ndim == 3:
        x = x[:, None, :, :]
    elif x.ndim != 4:
        raise DataInputError(
            key,
            f"{what} has shape {x.shape}; expected (N, D), (N, H, W) or (N, C, H, W)",
            "give one sample per row",
        )
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise DataInputError(key, f"{what} holds {x.dtype} values, not numbers", "convert them to numbers")
    out = x.astype(np.float32)
    if not np.isfinite(out).all():
        raise DataInputError(key, f"{what} holds NaN or infinite values", "clean the data")
    return out


def _as_labels(y: np.ndarray, n: int, key: str, what: str) -> np.ndarray:
    if y.ndim != 1 or y.shape[0] != n:
        raise DataInputError(key, f"{what} has shape {y.shape}; expected ({n},), one label per sample", "")
    integral = np.issubdtype(y.dtype, np.integer) or (
        np.issubdtype(y.dtype, np.floating) and bool(np.all(y == np.round(y)))
    )
    if y.size and not integral:
        raise DataInputError(key, f"{what} holds {y.dtype} values, not integer class labels", "")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise DataInputError(key, f"{what} has a negative label ({y.min()})", "use labels 0, 1, ..., K-1")
    return y


def dataset_from_arrays(
    arrays: Mapping[str, Any],
    *,
    name: str,
    seed: int,
    test_fraction: float,
    key: str = "data.name",
) -> Dataset:
    """A :class:`Dataset` from ``x_train``, ``y_train`` and, optionally, ``x_test``, ``y_test`` and
    ``client_train``.

    Without a test set a stratified ``test_fraction`` is held out (stream ``(seed, "data", "own_split",
    name)``); the held-out samples' client ids are dropped (clients train, the server's test set is
    everyone's). The number of classes is the largest label plus one.

    Raises:
        DataInputError: a key is missing or unknown, or an array has the wrong shape or values (``key`` is
            what the message names).
    """
    unknown = sorted(set(arrays) - set(_ARRAY_KEYS))
    missing = [k for k in ("x_train", "y_train") if k not in arrays]
    if unknown or missing:
        raise DataInputError(
            key,
            f"data set {name!r}: "
            + (f"missing {', '.join(missing)}" if missing else f"unknown entries {', '.join(unknown)}"),
            f"give x_train and y_train, and optionally x_test, y_test and client_train (the keys "
            f"{', '.join(_ARRAY_KEYS)})",
        )
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataInputError(
            key, f"data set {name!r}: x_test and y_test come together", "give both or neither"
        )
    x = _as_images(_numpy(arrays["x_train"]), key, "x_train")
    y = _as_labels(_numpy(arrays["y_train"]), x.shape[0], key, "y_train")
    if x.shape[0] == 0:
        raise DataInputError(key, f"data set {name!r} has no training samples", "")
    clients = None
    if arrays.get("client_train") is not None:
        raw = _numpy(arrays["client_train"])
        if raw.shape != y.shape:
            raise DataInputError(
                key, f"client_train has shape {raw.shape}; expected {y.shape}, one client id per sample", ""
            )
        clients = np.unique(raw, return_inverse=True)[1].astype(np.int64).reshape(-1)  # ids → 0..U-1
    if "x_test" in arrays:
        x_test = _as_images(_numpy(arrays["x_test"]), key, "x_test")
        y_test = _as_labels(_numpy(arrays["y_test"]), x_test.shape[0], key, "y_test")
        if x_test.shape[1:] != x.shape[1:]:
            raise DataInputError(
                key,
                f"test samples are {x_test.shape[1:]}, training samples {x.shape[1:]}",
                "give both one shape",
            )
    else:
        if not 0.0 < test_fraction < 1.0:
            raise DataInputError(
                "data.test_fraction", f"expected a number in (0, 1), got {test_fraction}", ""
            )
        train, test = _stratified_split(y, test_fraction, numpy_generator(seed, "data", "own_split", name))
        if train.size == 0 or test.size == 0:
            raise DataInputError(
                "data.test_fraction",
                f"data set {name!r}: {y.size} samples leave an empty train or test set at {test_fraction}",
                "give more samples, a test set, or another data.test_fraction",
            )
        x_test, y_test, x, y = x[test], y[test], x[train], y[train]
        clients = None if clients is None else clients[train]
    num_classes = int(max(y.max(), y_test.max() if y_test.size else 0)) + 1
    if num_classes < 2:
        raise DataInputError(key, f"data set {name!r} has a single class", "give at least two classes")
    return Dataset(
        name=name,
        x_train=x,
        y_train=y,
        x_test=x_test,
        y_test=y_test,
        num_classes=num_classes,
        client_train=clients,
    )


# ---------------------------------------------------------------------------------------------------------
# Files: .npz / .pt arrays and LEAF JSON
# ---------------------------------------------------------------------------------------------------------


def _existing(path: str | os.PathLike[str] | None, key: str, what: str) -> Path:
    if path is None:
        raise DataInputError(key, f"{what} needs {key}, which is not set", f"set {key}=<file or folder>")
    p = Path(path).expanduser()
    if not p.exists():
        raise DataInputError(key, f"{p} does not exist", f"point {key} at your {what} file")
    return p


def load_arrays_file(
    path: str | os.PathLike[str] | None, *, key: str = "arrays.path"
) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file or of a ``.pt`` file holding a dict of tensors (read with
    ``weights_only=True``: a data file must not run code)."""
    p = _existing(path, key, "data.name=arrays's .npz or .pt")
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        if p.suffix == ".pt":
            import torch

            obj = torch.load(p, map_location="cpu", weights_only=True)
            if not isinstance(obj, Mapping):
                raise DataInputError(
                    key,
                    f"{p} holds a {type(obj).__name__}, not a dict of tensors",
                    "torch.save({'x_train': ...})",
                )
            return {str(k): _numpy(v) for k, v in obj.items()}
    except DataInputError:
        raise
    except Exception as err:
        raise DataInputError(
            key, f"cannot read {p} ({type(err).__name__}: {err})", "check the file"
        ) from None
    raise DataInputError(key, f"{p} is neither .npz nor .pt", "save the arrays with np.savez or torch.save")


def _leaf_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.json")) if path.is_dir() else [path]


def _read_leaf(path: Path, key: str) -> list[tuple[str, list[Any], list[Any]]]:
    """``(user, xs, ys)`` of every user in LEAF file(s) ``path``, in the files' order."""
    files = _leaf_files(path)
    if not files:
        raise DataInputError(key, f"{path} holds no .json files", "point it at LEAF's JSON files")
    users: list[tuple[str, list[Any], list[Any]]] = []
    for f in files:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DataInputError(key, f"{f} is not readable JSON ({err})", "check the file") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("users"), list) or "user_data" not in doc:
            raise DataInputError(
                key,
                f"{f} is not in LEAF's format (a dict with 'users' and 'user_data')",
                'write {"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}',
            )
        for user in doc["users"]:
            data = doc["user_data"].get(user) if isinstance(doc["user_data"], dict) else None
            if (
                not isinstance(data, dict)
                or not isinstance(data.get("x"), list)
                or not isinstance(data.get("y"), list)
            ):
                raise DataInputError(key, f"{f}: user {user!r} has no 'x' and 'y' lists in user_data", "")
            if len(data["x"]) != len(data["y"]):
                raise DataInputError(
                    key, f"{f}: user {user!r} has {len(data['x'])} samples but {len(data['y'])} labels", ""
                )
            users.append((str(user), data["x"], data["y"]))
    if not any(xs for _, xs, _ in users):
        raise DataInputError(key, f"{path} holds no samples", "")
    return users


def _leaf_arrays(
    samples: list[Any], labels: list[Any], vocab: dict[str, int], key: str
) -> tuple[np.ndarray, np.ndarray]:
    """Numbers as they are; strings (Shakespeare) as character ids over ``vocab``."""
    if samples and isinstance(samples[0], str):
        width = len(samples[0])
        if any(not isinstance(s, str) or len(s) != width for s in samples):
            raise DataInputError(
                key, "text samples must be strings of one length", "pad or cut them to one length"
            )
        x = np.array([[vocab[c] for c in s] for s in samples], dtype=np.float32)
    else:
        try:
            x = np.asarray(samples, dtype=np.float32)
        except (TypeError, ValueError):
            raise DataInputError(
                key,
                "samples 'x' must be lists of numbers of one length (FEMNIST) or strings (Shakespeare)",
                "convert them (e.g. Sent140's tweets to token ids) before loading",
            ) from None
        x = x.reshape(x.shape[0], -1)
    if labels and isinstance(labels[0], str):
        y = np.array([vocab[c] if len(c) == 1 else -1 for c in labels], dtype=np.int64)
        if (y < 0).any():
            raise DataInputError(key, "string labels must be single characters (the next character)", "")
    else:
        y = _as_labels(np.asarray(labels), len(labels), key, "labels 'y'")
    side = math.isqrt(x.shape[1])
    if side * side == x.shape[1] and not (samples and isinstance(samples[0], str)):
        return x.reshape(-1, 1, side, side), y  # FEMNIST's 784 values are a 28×28 image
    return x.reshape(-1, 1, 1, x.shape[1]), y


def load_leaf(
    path: str | os.PathLike[str] | None,
    *,
    test_path: str | os.PathLike[str] | None = None,
    seed: int,
    test_fraction: float = 0.25,
    name: str = "leaf",
) -> Dataset:
    """A LEAF data set (FEMNIST, Shakespeare, or anything in its JSON format), with each training sample's
    user as its client id (the ``natural`` partition).

    Args:
        path: a LEAF JSON file or a folder of them (LEAF's ``data/train/``).
        test_path: the same for the test set; ``None``: ``test_fraction`` of each user's samples, at random
            (stream ``(seed, "data", "own_split", name)``), as LEAF's ``--sf`` sample split.
    """
    train_users = _read_leaf(_existing(path, "leaf.path", "data.name=leaf's JSON"), "leaf.path")
    test_users = (
        _read_leaf(_existing(test_path, "leaf.test_path", "LEAF test"), "leaf.test_path") if test_path else []
    )
    chars = {c for _, xs, ys in train_users + test_users for v in (*xs, *ys) if isinstance(v, str) for c in v}
    vocab = {c: i for i, c in enumerate(sorted(chars))}
    xs, ys, owners = [], [], []
    for u, (_, ux, uy) in enumerate(train_users):
        if ux:
            x, y = _leaf_arrays(ux, uy, vocab, "leaf.path")
            xs.append(x)
            ys.append(y)
            owners.append(np.full(len(y), u, dtype=np.int64))
    if len({x.shape[1:] for x in xs}) != 1:
        raise DataInputError(
            "leaf.path", "the users' samples differ in length", "give every sample one length"
        )
    x_all, y_all, c_all = np.concatenate(xs), np.concatenate(ys), np.concatenate(owners)
    if test_users:
        tx, ty = zip(
            *(_leaf_arrays(ux, uy, vocab, "leaf.test_path") for _, ux, uy in test_users if ux), strict=True
        )
        x_test, y_test = np.concatenate(tx), np.concatenate(ty)
        train = np.arange(y_all.size)
    else:
        if not 0.0 < test_fraction < 1.0:
            raise DataInputError(
                "data.test_fraction", f"expected a number in (0, 1), got {test_fraction}", ""
            )
        gen = numpy_generator(seed, "data", "own_split", name)
        held = []
        for u in np.unique(c_all):
            idx = gen.permutation(np.flatnonzero(c_all == u))
            held.append(idx[: math.floor(test_fraction * idx.size)])
        test = np.sort(np.concatenate(held))
        train = np.setdiff1d(np.arange(y_all.size), test)
        x_test, y_test = x_all[test], y_all[test]
        if test.size == 0:
            raise DataInputError(
                "data.test_fraction",
                f"{test_fraction} of each LEAF user's samples holds out none",
                "raise data.test_fraction or set leaf.test_path",
            )
    num_classes = max(len(vocab), int(max(y_all.max(), y_test.max())) + 1)
    return Dataset(
        name=name,
        x_train=x_all[train],
        y_train=y_all[train],
        x_test=x_test.astype(np.float32, copy=False),
        y_test=y_test,
        num_classes=num_classes,
        client_train=c_all[train],
    )


# ---------------------------------------------------------------------------------------------------------
# One entry: any data.name
# ---------------------------------------------------------------------------------------------------------


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
    return _subsample(ds, limit_train, limit_test, seed)
