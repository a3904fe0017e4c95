"""Datasets, client partitions, client sampling and minibatch order (SPEC "The paper's experiments").

Everything random here takes its randomness from a named stream of the run seed (``sifl_ray.seeding``):
the train/test split of digits (``"data", "digits_split"``), synthetic data (``"data", "synthetic"``),
subsampling (``"data", "subsample", name``), partitions (``"partition", scheme``), client sampling
(``"sample_clients", round``) and minibatches (``"batches", client, round``). The stream names do not
mention the arm (FL, SIFL M1, SIFL M2), so every arm of a scenario sees the same data, the same clients and
the same minibatches: differences between arms come from the coding alone.

Pixel values are scaled to [0, 1] (``uint8 / 255``, digits ``/ 16``) and then, by default, standardised
with the training set's own mean and standard deviation (one scalar each; for MNIST that gives the
familiar 0.1307 / 0.3081). The scalars are kept on :class:`Dataset` so a report can state them.

MNIST and Fashion-MNIST come from IDX files. :func:`load_mnist` uses files already on disk, or downloads
them from public mirrors; every ``.gz`` file is checked against the published MD5 before it is used, and
a download is written to a temporary file that is renamed into place only after its checksum passed, so
concurrent loaders (several Ray workers) and interrupted downloads never leave a corrupted file behind.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import math
import os
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from sifl_ray.seeding import numpy_generator

__all__ = [
    "DATASET_NAMES",
    "IDX_FILES",
    "MNIST_CHECKSUMS",
    "MNIST_MIRRORS",
    "ChecksumMismatchError",
    "Dataset",
    "DatasetDownloadError",
    "DatasetError",
    "IDXFormatError",
    "client_batches",
    "encode_idx",
    "load_dataset",
    "load_digits_dataset",
    "load_mnist",
    "make_synthetic",
    "partition_dataset",
    "partition_dirichlet",
    "partition_iid",
    "partition_shards",
    "read_idx",
    "sample_clients",
]

DatasetName = Literal["digits", "mnist", "fashion_mnist", "synthetic"]
MnistKind = Literal["mnist", "fashion_mnist"]
PartitionScheme = Literal["iid", "dirichlet", "shards"]

DATASET_NAMES: tuple[str, ...] = ("digits", "mnist", "fashion_mnist", "synthetic")


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
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self) -> None:
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
# IDX files
# ---------------------------------------------------------------------------------------------------------


class IDXFormatError(ValueError):
    """An IDX file is malformed (bad magic, unknown type, truncated, trailing bytes, wrong dimensions)."""


class DatasetError(RuntimeError):
    """A dataset could not be obtained or failed verification."""


class ChecksumMismatchError(DatasetError):
    """A file's checksum differs from the published one."""


class DatasetDownloadError(DatasetError):
    """No mirror delivered a verified copy of a file."""


_IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES = {dt.newbyteorder(">") if dt.itemsize > 1 else dt: code for code, dt in _IDX_TYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


def read_idx(
    source: str | os.PathLike[str] | bytes,
    *,
    expected_ndim: int | None = None,
    name: str | None = None,
) -> np.ndarray:
    """Parse an IDX file (gzip-compressed or raw; detected from the content, not the file name).

    The format (LeCun's MNIST page): two zero bytes, a type code, the number of dimensions, one big-endian
    uint32 per dimension, then the values in C order, big-endian. Parsing is strict: anything left over or
    missing is an error, because a silently truncated training set would quietly change every result.

    Args:
        source: a path, or the file's bytes.
        expected_ndim: if given, the number of dimensions the file must have (3 for images, 1 for labels).
        name: how to call the file in error messages (defaults to the path, or ``"<bytes>"``).

    Returns:
        The array, in native byte order (uint8 for MNIST).

    Raises:
        IDXFormatError: the content is not a well-formed IDX file (the message names the file).
        FileNotFoundError: ``source`` is a path that does not exist.
    """
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        label = name or "<bytes>"
    else:
        label = name or str(source)
        data = Path(source).read_bytes()
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise IDXFormatError(
                f"{label}: corrupt or truncated gzip stream ({e}); delete it and fetch it again"
            ) from e
    if len(data) < 4:
        raise IDXFormatError(f"{label}: {len(data)} bytes is too short for an IDX header")
    if data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise IDXFormatError(
            f"{label}: bad IDX magic {data[:4].hex()}: expected 0000 then a type code in "
            f"{{{', '.join(f'{c:02x}' for c in _IDX_TYPES)}}} and the number of dimensions; "
            "is this really an IDX file?"
        )
    dtype, ndim = _IDX_TYPES[data[2]], data[3]
    if expected_ndim is not None and ndim != expected_ndim:
        raise IDXFormatError(f"{label}: has {ndim} dimensions, expected {expected_ndim}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IDXFormatError(
            f"{label}: truncated header ({len(data)} bytes, {header} needed for {ndim} dims)"
        )
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise IDXFormatError(
            f"{label}: {what}: shape {shape} of {dtype} needs {expected} bytes, the file has {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def encode_idx(array: np.ndarray) -> bytes:
    """The raw IDX bytes of ``array`` (uint8, int8, int16, int32, float32 or float64), the inverse of
    :func:`read_idx`. Useful to cache a subset or to build test fixtures."""
    arr = np.asarray(array)
    big = arr.dtype.newbyteorder(">") if arr.dtype.itemsize > 1 else arr.dtype
    if big not in _IDX_CODES:
        raise ValueError(
            f"IDX cannot store dtype {arr.dtype}; use one of uint8, int8, int16, int32, float32, float64"
        )
    if arr.ndim > 255 or any(s >= 2**32 for s in arr.shape):
        raise ValueError(f"IDX cannot store shape {arr.shape}")
    head = bytes([0, 0, _IDX_CODES[big], arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    return head + np.ascontiguousarray(arr, dtype=big).tobytes()


# ---------------------------------------------------------------------------------------------------------
# MNIST and Fashion-MNIST: local files, mirrors, checksums
# ---------------------------------------------------------------------------------------------------------

IDX_FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
"""The four files of both datasets (same names for MNIST and Fashion-MNIST), without ``.gz``."""

MNIST_MIRRORS: dict[str, tuple[str, ...]] = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ),
    "fashion_mnist": (
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    ),
}
"""Base URLs tried in order; a file's URL is the base followed by its ``.gz`` name."""

MNIST_CHECKSUMS: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion_mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
}
"""The published MD5s of the ``.gz`` files (the ones torchvision and the dataset pages list)."""

# torchvision's layout, accepted too so an existing download can be reused without copying.
_TORCHVISION_DIRS = {"mnist": "MNIST/raw", "fashion_mnist": "FashionMNIST/raw"}
_HASH_BY_HEXLEN = {32: "md5", 40: "sha1", 64: "sha256"}
_MAX_DOWNLOAD_BYTES = 256 * 2**20  # the largest real file is ~26 MB; a bound stops an endless stream
_CHUNK = 2**20


def _hash_name(expected: str, label: str) -> str:
    algorithm = _HASH_BY_HEXLEN.get(len(expected))
    if algorithm is None or any(ch not in "0123456789abcdefABCDEF" for ch in expected):
        raise ValueError(
            f"checksum for {label} must be a hex MD5 (32), SHA-1 (40) or SHA-256 (64) digest; "
            f"got {expected!r}"
        )
    return algorithm


def _file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm, usedforsecurity=False)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_verified(url: str, dest: Path, expected: str, timeout: float) -> None:
    """Stream ``url`` to a temporary file beside ``dest``; rename it to ``dest`` only if the digest matches.

    The rename is atomic, so ``dest`` either does not exist or is a verified copy, even if this process is
    killed or several workers download at once.
    """
    algorithm = _hash_name(expected, dest.name)
    h = hashlib.new(algorithm, usedforsecurity=False)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "sifl-ray"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as response:
            size = 0
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > _MAX_DOWNLOAD_BYTES:
                    raise DatasetDownloadError(
                        f"{url}: more than {_MAX_DOWNLOAD_BYTES} bytes; not an IDX file"
                    )
                h.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        actual = h.hexdigest()
        if actual != expected.lower():
            raise ChecksumMismatchError(
                f"{dest.name} from {url}: {algorithm} is {actual}, expected {expected.lower()} "
                f"({size} bytes received); the download is corrupted or the mirror serves another file, "
                "and it was discarded"
            )
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _fetch(fname: str, folder: Path, mirrors: Sequence[str], expected: str, timeout: float) -> Path:
    """Download ``fname`` from the first mirror that delivers a verified copy; say what each one did."""
    dest = folder / fname
    failures: list[str] = []
    any_mismatch = False
    for base in mirrors:
        url = base.rstrip("/") + "/" + fname
        try:
            _download_verified(url, dest, expected, timeout)
            return dest
        except ChecksumMismatchError as e:
            any_mismatch = True
            failures.append(str(e))
        except (urllib.error.URLError, http.client.HTTPException, OSError, DatasetDownloadError) as e:
            failures.append(f"{url}: {e}")
    error = ChecksumMismatchError if any_mismatch else DatasetDownloadError
    raise error(
        f"could not obtain a verified {fname} from any of {len(failures)} mirror(s); no copy of it was "
        f"kept in {folder}.\n  - "
        + "\n  - ".join(failures)
        + "\nFix: retry, pass other mirrors=[...], or download the file yourself, check its checksum "
        f"({expected}) and place it in {folder}."
    )


def _find_local(root: Path, kind: str, base: str) -> Path | None:
    for folder in (root / kind, root / _TORCHVISION_DIRS[kind]):
        for candidate in (folder / f"{base}.gz", folder / base, folder / base.replace("-idx", ".idx")):
            if candidate.is_file():
                return candidate
    return None


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
    if kind not in MNIST_CHECKSUMS:
        raise ValueError(f"unknown kind {kind!r}; expected 'mnist' or 'fashion_mnist'")
    root = Path(root)
    mirrors = tuple(MNIST_MIRRORS[kind] if mirrors is None else mirrors)
    checksums = dict(MNIST_CHECKSUMS[kind] if checksums is None else checksums)
    folder = root / kind

    paths: dict[str, Path] = {}
    missing: list[str] = []
    for role, base in IDX_FILES.items():
        found = _find_local(root, kind, base)
        if found is None:
            missing.append(base)
            continue
        expected = checksums.get(found.name)
        if found.suffix == ".gz" and expected is not None:
            actual = _file_digest(found, _hash_name(expected, found.name))
            if actual != expected.lower():
                raise ChecksumMismatchError(
                    f"{found}: {_hash_name(expected, found.name)} is {actual}, expected {expected.lower()}. "
                    "The file is corrupted or not the published one. Fix: delete it (it will be downloaded "
                    "again), or pass checksums=... if you replaced it on purpose."
                )
        paths[role] = found
    if missing:
        if not download:
            raise FileNotFoundError(
                f"{kind}: missing {', '.join(missing)} (.gz or uncompressed) in {folder} "
                f"(or {root / _TORCHVISION_DIRS[kind]}). Fix: pass download=True, or place the files from "
                f"{mirrors[0] if mirrors else 'the dataset page'} there."
            )
        if not mirrors:
            raise DatasetDownloadError(f"{kind}: files are missing in {folder} and no mirrors were given")
        folder.mkdir(parents=True, exist_ok=True)
        for role, base in IDX_FILES.items():
            if role in paths:
                continue
            fname = f"{base}.gz"
            if fname not in checksums:
                raise ValueError(
                    f"no checksum for {fname}: a download is only accepted with a checksum to verify it. "
                    "Fix: add it to checksums=..."
                )
            paths[role] = _fetch(fname, folder, mirrors, checksums[fname], timeout)

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
    from sklearn.datasets import load_digits  # deferred: scikit-learn is slow to import

    bunch = load_digits()
    images = (bunch.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    train, test = _stratified_split(labels, test_fraction, generator)
    return _finish("digits", images[train], labels[train], images[test], labels[test], 10, standardize)


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
    out = {}
    for split, limit in (("train", limit_train), ("test", limit_test)):
        x, y = getattr(ds, f"x_{split}"), getattr(ds, f"y_{split}")
        if limit is not None and limit < len(y):
            if limit < 1:
                raise ValueError(f"limit_{split} must be at least 1; got {limit}")
            keep = np.sort(
                numpy_generator(seed, "data", "subsample", ds.name, split).permutation(len(y))[:limit]
            )
            x, y = x[keep], y[keep]
        out[f"x_{split}"], out[f"y_{split}"] = x, y
    return Dataset(name=ds.name, num_classes=ds.num_classes, mean=ds.mean, std=ds.std, **out)


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
        name: ``"digits"``, ``"mnist"``, ``"fashion_mnist"`` or ``"synthetic"``.
        seed: the run seed.
        root: data folder (needed for MNIST and Fashion-MNIST; see :func:`load_mnist`).
        download: whether MNIST/Fashion-MNIST files may be downloaded.
        standardize: standardise with the training set's mean and std after scaling to [0, 1]. The
            statistics are computed before subsampling, so a subset keeps the full set's transform.
        limit_train: keep a random subset of this many training samples (for scaled-down runs).
        limit_test: the same for the test set.
        test_fraction: digits only: the share held out for testing.
        synthetic_train: synthetic only: training samples.
        synthetic_test: synthetic only: test samples.
        synthetic_shape: synthetic only: ``(C, H, W)``.
        mirrors: MNIST/Fashion-MNIST only: see :func:`load_mnist`.
        checksums: MNIST/Fashion-MNIST only: see :func:`load_mnist`.
        timeout: MNIST/Fashion-MNIST only: see :func:`load_mnist`.
    """
    if name == "digits":
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


# ---------------------------------------------------------------------------------------------------------
# Partitions across clients
# ---------------------------------------------------------------------------------------------------------


def _check_partition_args(labels: np.ndarray, num_clients: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D array; got shape {labels.shape}")
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1; got {num_clients}")
    if num_clients > labels.size:
        raise ValueError(
            f"{num_clients} clients but only {labels.size} samples: every client needs at least one sample. "
            "Fix: use fewer clients or more data (limit_train, synthetic_train)."
        )
    return labels


def _sorted_int64(parts: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def partition_iid(labels: np.ndarray, num_clients: int, generator: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and cut into ``num_clients`` near-equal parts (sizes differ by at most one).

    The paper's setting (§6: N_c = 10, IID). Each part is a sorted index array; together they cover every
    sample exactly once.
    """
    labels = _check_partition_args(labels, num_clients)
    return _sorted_int64(np.array_split(generator.permutation(labels.size), num_clients))


def partition_dirichlet(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    generator: np.random.Generator,
    min_size: int = 1,
) -> list[np.ndarray]:
    """Label skew: each class is spread over the clients with proportions drawn from Dir(α, ..., α).

    Small α gives each client few classes; large α tends to IID. The raw draw can leave a client empty
    (often for α < 1), and an empty client breaks size-weighted averaging, so clients below ``min_size``
    are then topped up with random samples taken from the currently largest client. That repair always
    terminates (unlike redrawing until it works) and moves at most ``num_clients·min_size`` samples.

    Returns:
        ``num_clients`` sorted index arrays covering every sample exactly once, each of size ≥ ``min_size``.

    Raises:
        ValueError: α ≤ 0, ``min_size < 1``, or fewer than ``num_clients·min_size`` samples.
    """
    labels = _check_partition_args(labels, num_clients)
    if not alpha > 0 or not math.isfinite(alpha):
        raise ValueError(f"Dirichlet alpha must be a positive finite number; got {alpha}")
    if min_size < 1:
        raise ValueError(f"min_size must be at least 1; got {min_size}")
    if num_clients * min_size > labels.size:
        raise ValueError(
            f"{num_clients} clients × min_size {min_size} = {num_clients * min_size} samples needed, "
            f"only {labels.size} available"
        )
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        idx = generator.permutation(np.flatnonzero(labels == c))
        p = generator.dirichlet(np.full(num_clients, float(alpha)))  # NumPy ≥ 1.22 is exact for tiny α
        cuts = np.round(np.cumsum(p)[:-1] * idx.size).astype(int)
        for k, chunk in enumerate(np.split(idx, cuts)):
            parts[k].extend(chunk.tolist())
    for k in range(num_clients):
        while len(parts[k]) < min_size:
            donor = max(range(num_clients), key=lambda j: len(parts[j]))
            pos = int(generator.integers(len(parts[donor])))
            parts[donor][pos], parts[donor][-1] = parts[donor][-1], parts[donor][pos]
            parts[k].append(parts[donor].pop())
    return _sorted_int64(parts)


def partition_shards(
    labels: np.ndarray,
    num_clients: int,
    shards_per_client: int,
    generator: np.random.Generator,
) -> list[np.ndarray]:
    """McMahan et al.'s pathological non-IID split: sort by label, cut into shards, deal shards out.

    With 2 shards per client most clients see only two classes. Ties within a label are broken at random
    so the shards are not the file's order.

    Returns:
        ``num_clients`` sorted index arrays covering every sample exactly once.

    Raises:
        ValueError: ``shards_per_client < 1`` or more shards than samples.
    """
    labels = _check_partition_args(labels, num_clients)
    if shards_per_client < 1:
        raise ValueError(f"shards_per_client must be at least 1; got {shards_per_client}")
    n_shards = num_clients * shards_per_client
    if n_shards > labels.size:
        raise ValueError(
            f"{num_clients} clients × {shards_per_client} shards = {n_shards} shards, more than the "
            f"{labels.size} samples"
        )
    order = generator.permutation(labels.size)
    order = order[np.argsort(labels[order], kind="stable")]
    shards = np.array_split(order, n_shards)
    deal = generator.permutation(n_shards).reshape(num_clients, shards_per_client)
    return _sorted_int64([np.concatenate([shards[j] for j in row]) for row in deal])


def partition_dataset(
    labels: np.ndarray,
    *,
    scheme: PartitionScheme | str,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    shards_per_client: int = 2,
    min_size: int = 1,
) -> list[np.ndarray]:
    """Dispatch on ``scheme`` with the stream ``(seed, "partition", scheme)``, as a scenario names it."""
    gen = numpy_generator(seed, "partition", scheme)
    if scheme == "iid":
        return partition_iid(labels, num_clients, gen)
    if scheme == "dirichlet":
        return partition_dirichlet(labels, num_clients, alpha, gen, min_size=min_size)
    if scheme == "shards":
        return partition_shards(labels, num_clients, shards_per_client, gen)
    raise ValueError(f"unknown partition scheme {scheme!r}; expected 'iid', 'dirichlet' or 'shards'")


# ---------------------------------------------------------------------------------------------------------
# Per-round choices: which clients, which minibatches
# ---------------------------------------------------------------------------------------------------------


def sample_clients(num_clients: int, fraction: float, round: int, seed: int) -> np.ndarray:
    """The clients taking part in ``round``: ``max(1, ⌈fraction·num_clients⌉)`` of them, sorted.

    Drawn without replacement from the stream ``(seed, "sample_clients", round)``, so the choice of a
    round does not depend on earlier rounds (a resumed run picks the same clients). ``fraction = 1``
    selects everyone, as in the paper.
    """
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1; got {num_clients}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}")
    if round < 0:
        raise ValueError(f"round must be non-negative; got {round}")
    m = max(1, math.ceil(fraction * num_clients - 1e-9))  # the tolerance keeps 0.3·10 at 3, not 4
    chosen = numpy_generator(seed, "sample_clients", round).choice(num_clients, size=m, replace=False)
    return np.sort(chosen).astype(np.int64)


def client_batches(
    indices: np.ndarray,
    *,
    batch_size: int,
    epochs: int | None = None,
    steps: int | None = None,
    seed: int,
    client_id: int,
    round: int,
    drop_last: bool = False,
) -> list[np.ndarray]:
    """The minibatches (dataset indices) client ``client_id`` uses in ``round``.

    Each epoch is a fresh permutation of ``indices`` cut into consecutive batches of ``batch_size`` (the
    last one shorter unless ``drop_last``). Local work is ``epochs`` passes (the paper's K), or, when
    ``steps`` is positive, exactly ``steps`` optimizer steps running through as many epochs as needed;
    ``steps`` then wins over ``epochs`` and ``steps`` of 0 or None means "use epochs" (the convention of
    the scenario keys ``train.local_epochs`` / ``train.local_steps``). The order comes from the stream
    ``(seed, "batches", client_id, round)``, which does not name the arm, so FL and both SIFL arms train on
    identical minibatches and their difference is the coding's alone.

    Raises:
        ValueError: empty ``indices``, a non-positive ``batch_size``, negative ``steps``, no positive
            ``steps`` and no ``epochs`` ≥ 1, or ``drop_last`` with fewer samples than one batch.
    """
    indices = np.asarray(indices)
    if indices.ndim != 1 or indices.size == 0:
        raise ValueError(f"client {client_id} has no samples (indices shape {indices.shape})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1; got {batch_size}")
    if steps is not None and steps < 0:
        raise ValueError(f"steps must be non-negative (0 means: use epochs); got {steps}")
    if steps:
        epochs = None
    else:
        steps = None
        if epochs is None or epochs < 1:
            raise ValueError(f"give epochs >= 1 or steps >= 1; got epochs={epochs}, steps=0/None")
    if drop_last and indices.size < batch_size:
        raise ValueError(
            f"client {client_id} has {indices.size} samples, fewer than batch_size {batch_size}, and "
            "drop_last=True would leave it no batch. Fix: drop_last=False or a smaller batch."
        )
    gen = numpy_generator(seed, "batches", client_id, round)
    n = indices.size
    stop = n - n % batch_size if drop_last else n
    batches: list[np.ndarray] = []
    epoch = 0
    while (epochs is not None and epoch < epochs) or (steps is not None and len(batches) < steps):
        perm = indices[gen.permutation(n)]
        for start in range(0, stop, batch_size):
            if steps is not None and len(batches) == steps:
                break
            batches.append(perm[start : start + batch_size])
        epoch += 1
    return batches
