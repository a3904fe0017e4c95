"""The :class:`Dataset` value, and what every data set does to its arrays: standardise them with the
training set's scalars (:func:`finish`), hold out a test set class by class (:func:`stratified_split`), and
keep a random subset for scaled-down runs (:func:`subsample`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sifl_ray.seeding import numpy_generator


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test pair of images and labels, ready for training.

    Treat the arrays as read-only: the value is shared between arms and clients.

    Attributes:
        name: ``"mnist"``, ``"fashion_mnist"``, ``"digits"``, ``"synthetic"``, ...
        x_train: ``(N, C, H, W)`` float32 images (scaled to [0, 1], then standardised if ``std != 1``).
        y_train: ``(N,)`` int64 labels in ``[0, num_classes)``.
        x_test: ``(M, C, H, W)`` float32 images, same transform as the training images.
        y_test: ``(M,)`` int64 labels.
        num_classes: number of classes.
        mean: the value subtracted after scaling to [0, 1] (the training set's mean, or 0).
        std: the divisor applied after subtracting ``mean`` (the training set's std, or 1).
        client_train: ``(N,)`` int64, the data's own client (user, writer) of each training sample, or
            ``None``; what the ``natural`` partition splits by (LEAF's users, a user's own ids).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    mean: float = 0.0
    std: float = 1.0
    client_train: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.client_train is not None and (
            self.client_train.dtype != np.int64 or self.client_train.shape != self.y_train.shape
        ):
            raise ValueError(
                f"{self.name}: client_train must be int64 of shape {self.y_train.shape}; got "
                f"{self.client_train.dtype} {self.client_train.shape}"
            )
        for split, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            if x.dtype != np.float32 or x.ndim != 4:
                raise ValueError(
                    f"{self.name}: x_{split} must be float32 (N, C, H, W); got {x.dtype} {x.shape}"
                )
            if y.dtype != np.int64 or y.shape != (x.shape[0],):
                raise ValueError(
                    f"{self.name}: y_{split} must be int64 of shape ({x.shape[0]},); got {y.dtype} {y.shape}"
                )
            if y.size and (y.min() < 0 or y.max() >= self.num_classes):
                raise ValueError(f"{self.name}: y_{split} has labels outside [0, {self.num_classes})")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(
                f"{self.name}: train and test samples differ in shape: "
                f"{self.x_train.shape[1:]} vs {self.x_test.shape[1:]}"
            )

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one sample, what ``models.build_model`` takes."""
        c, h, w = self.x_train.shape[1:]
        return (c, h, w)

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])


def finish(
    name: str,
    x_train01: np.ndarray,
    y_train: np.ndarray,
    x_test01: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    standardize: bool,
) -> Dataset:
    """Standardise [0, 1] images with the training set's scalars (never the test set's) and pack them."""
    mean, std = 0.0, 1.0
    if standardize:
        mean = float(x_train01.mean(dtype=np.float64))
        std = float(x_train01.std(dtype=np.float64)) or 1.0
    x_train = ((x_train01 - mean) / std).astype(np.float32, copy=False)
    x_test = ((x_test01 - mean) / std).astype(np.float32, copy=False)
    return Dataset(
        name=name,
        x_train=x_train,
        y_train=y_train.astype(np.int64, copy=False),
        x_test=x_test,
        y_test=y_test.astype(np.int64, copy=False),
        num_classes=num_classes,
        mean=mean,
        std=std,
    )


def stratified_split(
    labels: np.ndarray, test_fraction: float, generator: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per class, a random ``test_fraction`` goes to the test set (so both sets keep the class balance)."""
    train, test = [], []
    for c in np.unique(labels):
        idx = generator.permutation(np.flatnonzero(labels == c))
        k = round(test_fraction * idx.size)
        test.append(idx[:k])
        train.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def subsample(ds: Dataset, limit_train: int | None, limit_test: int | None, seed: int) -> Dataset:
    """A random subset (sorted, so the order stays the file's) for scaled-down runs."""
    out: dict[str, np.ndarray | None] = {"client_train": ds.client_train}
    for split, limit in (("train", limit_train), ("test", limit_test)):
        x, y = getattr(ds, f"x_{split}"), getattr(ds, f"y_{split}")
        if limit is not None and limit < len(y):
            if limit < 1:
                raise ValueError(f"limit_{split} must be at least 1; got {limit}")
            keep = np.sort(
                numpy_generator(seed, "data", "subsample", ds.name, split).permutation(len(y))[:limit]
            )
            x, y = x[keep], y[keep]
            if split == "train" and ds.client_train is not None:
                out["client_train"] = ds.client_train[keep]
        out[f"x_{split}"], out[f"y_{split}"] = x, y
    return Dataset(name=ds.name, num_classes=ds.num_classes, mean=ds.mean, std=ds.std, **out)  # type: ignore[arg-type]
