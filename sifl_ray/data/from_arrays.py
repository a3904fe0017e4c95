"""Your own data as arrays: the checks and shapes that turn a mapping of arrays (or tensors) into a
:class:`~sifl_ray.data.dataset.Dataset`, and the error every problem with your data raises.

Values are taken as given and cast to float32 (no scaling or standardisation: the data is yours); a sample
of ``D`` values becomes ``(1, 1, D)``, ``H×W`` values ``(1, H, W)``, as the models' ``input_shape`` is
``(C, H, W)``. Without a test set, a stratified ``test_fraction`` of the samples is held out, drawn from the
stream ``(seed, "data", "own_split", name)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sifl_ray.data.dataset import Dataset, stratified_split
from sifl_ray.data.download import DatasetError
from sifl_ray.seeding import numpy_generator

#: The keys a mapping of arrays may have.
ARRAY_KEYS = ("x_train", "y_train", "x_test", "y_test", "client_train")


class DataInputError(DatasetError):
    """The user's data cannot be read or used; ``key`` is the configuration key to change."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        super().__init__(problem, fix)
        self.key = key


def as_numpy(value: Any) -> np.ndarray:
    """A NumPy array from an array, a tensor (on any device) or a list."""
    if hasattr(value, "detach"):  # a torch tensor; torch is not imported for a NumPy-only user
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def as_images(x: np.ndarray, key: str, what: str) -> np.ndarray:
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


def as_labels(y: np.ndarray, n: int, key: str, what: str) -> np.ndarray:
    """``(n,)`` int64 labels 0, 1, ..., refused (naming ``key``) unless each sample has one whole label."""
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
    unknown = sorted(set(arrays) - set(ARRAY_KEYS))
    missing = [k for k in ("x_train", "y_train") if k not in arrays]
    if unknown or missing:
        raise DataInputError(
            key,
            f"data set {name!r}: "
            + (f"missing {', '.join(missing)}" if missing else f"unknown entries {', '.join(unknown)}"),
            f"give x_train and y_train, and optionally x_test, y_test and client_train (the keys "
            f"{', '.join(ARRAY_KEYS)})",
        )
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise DataInputError(
            key, f"data set {name!r}: x_test and y_test come together", "give both or neither"
        )
    x = as_images(as_numpy(arrays["x_train"]), key, "x_train")
    y = as_labels(as_numpy(arrays["y_train"]), x.shape[0], key, "y_train")
    if x.shape[0] == 0:
        raise DataInputError(key, f"data set {name!r} has no training samples", "")
    clients = None
    if arrays.get("client_train") is not None:
        raw = as_numpy(arrays["client_train"])
        if raw.shape != y.shape:
            raise DataInputError(
                key, f"client_train has shape {raw.shape}; expected {y.shape}, one client id per sample", ""
            )
        clients = np.unique(raw, return_inverse=True)[1].astype(np.int64).reshape(-1)  # ids → 0..U-1
    if "x_test" in arrays:
        x_test = as_images(as_numpy(arrays["x_test"]), key, "x_test")
        y_test = as_labels(as_numpy(arrays["y_test"]), x_test.shape[0], key, "y_test")
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
        train, test = stratified_split(y, test_fraction, numpy_generator(seed, "data", "own_split", name))
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
