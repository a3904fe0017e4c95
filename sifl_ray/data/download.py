"""MNIST and Fashion-MNIST files: where they are looked for, where they are fetched from, how they are
verified.

:func:`mnist_files` uses files already on disk, or downloads them from public mirrors; every ``.gz`` file
is checked against the published MD5 before it is used, and a download is written to a temporary file
that is renamed into place only after its checksum passed, so concurrent loaders (several Ray workers)
and interrupted downloads never leave a corrupted file behind. Parsing the files is
:mod:`sifl_ray.data.idx`'s job, turning them into a :class:`~sifl_ray.data.datasets.Dataset`
:func:`~sifl_ray.data.datasets.load_mnist`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

__all__ = [
    "IDX_FILES",
    "MNIST_CHECKSUMS",
    "MNIST_MIRRORS",
    "ChecksumMismatchError",
    "DatasetDownloadError",
    "DatasetError",
    "mnist_files",
]

MnistKind = Literal["mnist", "fashion_mnist"]


class DatasetError(RuntimeError):
    """A dataset could not be obtained or failed verification."""


class ChecksumMismatchError(DatasetError):
    """A file's checksum differs from the published one."""


class DatasetDownloadError(DatasetError):
    """No mirror delivered a verified copy of a file."""


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


def mnist_files(
    root: str | os.PathLike[str],
    *,
    kind: MnistKind = "mnist",
    download: bool = True,
    mirrors: Sequence[str] | None = None,
    checksums: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> dict[str, Path]:
    """The four files of ``kind`` (keys of :data:`IDX_FILES`), found on disk or downloaded, verified.

    The lookup order, the checksum rules and the arguments are those of
    :func:`~sifl_ray.data.datasets.load_mnist`, which reads the files this returns.

    Raises:
        FileNotFoundError: a file is missing and ``download`` is false.
        ChecksumMismatchError: a local ``.gz`` or every downloaded copy has the wrong digest.
        DatasetDownloadError: no mirror could be reached.
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
    return paths
