"""Your own data from files: ``.npz`` / ``.pt`` arrays (``data.name=arrays``) and LEAF JSON
(``data.name=leaf``), read into a :class:`~sifl_ray.data.dataset.Dataset`.

Text in LEAF (Shakespeare's strings) becomes character ids over the characters the files use, sorted,
stored as floats (a model's embedding casts them back with ``.long()``). Without a test set, LEAF holds out
that share of each user's samples, as LEAF's own sample split does. Every problem is a
:class:`~sifl_ray.data.from_arrays.DataInputError` naming the key to change (``arrays.path``,
``leaf.path``, ``leaf.test_path``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sifl_ray.data.dataset import Dataset
from sifl_ray.data.from_arrays import DataInputError, as_labels, as_numpy
from sifl_ray.seeding import numpy_generator


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
            return {str(k): as_numpy(v) for k, v in obj.items()}
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
        y = as_labels(np.asarray(labels), len(labels), key, "labels 'y'")
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
