"""MNIST and Fashion-MNIST files: where they are looked for, where they are fetched from, how they are
verified.

:func:`mnist_files` uses files already on disk, or downloads them from public mirrors. A local file is
verified before it is used: against the published MD5 where one is known (the ``.gz`` files), else by its
IDX header and length (:func:`~sifl_ray.data.idx.check_idx_file`). A local file that fails is fetched again
when downloads are allowed (the user asked for the data set, and a corrupt copy is no copy), and named with
the reason when they are not (it is the user's file: nothing is deleted). A download is written to a
temporary file that is renamed into place only after its checksum passed, so concurrent loaders (several
Ray workers) and interrupted downloads never leave a corrupted file behind. Parsing the files is
:mod:`sifl_ray.data.idx`'s job, turning them into a :class:`~sifl_ray.data.datasets.Dataset`
:func:`~sifl_ray.data.datasets.load_mnist`'s.

Every error here is a :class:`DatasetError` that keeps *what is wrong* (``problem``) apart from *the fix in
Python terms* (``fix``, for a caller of :func:`load_mnist`): the command line states its own fix in
configuration keys (:mod:`sifl_ray.data.preflight`).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from sifl_ray.data.idx import IDXFormatError, check_idx_file
from sifl_ray.errors import SiflError

__all__ = [
    "IDX_FILES",
    "MNIST_CHECKSUMS",
    "MNIST_MIRRORS",
    "ChecksumMismatchError",
    "CorruptFileError",
    "DatasetDownloadError",
    "DatasetError",
    "MissingFilesError",
    "mnist_files",
]

MnistKind = Literal["mnist", "fashion_mnist"]


class DatasetError(SiflError, RuntimeError):
    """A dataset could not be obtained or failed verification.

    Attributes:
        problem: what is wrong (the files, the folder, what each mirror answered), in words any caller can
            show.
        fix: what a caller of :func:`mnist_files` / :func:`~sifl_ray.data.datasets.load_mnist` can do, in
            its arguments' terms; ``str()`` is ``problem`` followed by it.
        folder: the folder the files belong in (``<root>/<kind>``).
    """

    def __init__(self, problem: str, fix: str = "", *, folder: Path | None = None):
        self.problem, self.fix, self.folder = problem, fix, folder
        sep = "\n" if "\n" in problem else " "  # after a list of mirrors' answers, on a line of its own
        super().__init__(problem + (f"{sep}Fix: {fix}" if fix else ""))


class ChecksumMismatchError(DatasetError):
    """A file's checksum differs from the published one."""


class CorruptFileError(DatasetError):
    """A local file is not the one expected: ``path``, and why (``reason``: its checksum, truncated, not an
    IDX file)."""

    def __init__(self, problem: str, fix: str = "", *, folder: Path | None = None, path: Path, reason: str):
        super().__init__(problem, fix, folder=folder)
        self.path, self.reason = path, reason


class LocalChecksumMismatchError(CorruptFileError, ChecksumMismatchError):
    """A local ``.gz`` file's checksum differs from the published one."""


class MissingFilesError(DatasetError, FileNotFoundError):
    """Files are missing and downloads are not allowed; ``missing`` names them (without ``.gz``)."""

    def __init__(self, problem: str, fix: str = "", *, folder: Path, missing: Sequence[str]):
        super().__init__(problem, fix, folder=folder)
        self.missing = tuple(missing)


class DatasetDownloadError(DatasetError):
    """No mirror delivered a verified copy of a file; ``failures`` says what each mirror did."""

    def __init__(
        self, problem: str, fix: str = "", *, folder: Path | None = None, failures: Sequence[str] = ()
    ):
        super().__init__(problem, fix, folder=folder)
        self.failures = tuple(failures)


class DownloadMismatchError(DatasetDownloadError, ChecksumMismatchError):
    """No mirror delivered a verified copy, and at least one served a file with another checksum."""


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
            failures.append(e.problem)
        except (
            urllib.error.URLError,
            http.client.HTTPException,
            OSError,
            ValueError,
            DatasetDownloadError,
        ) as e:
            failures.append(f"{url}: {getattr(e, 'problem', None) or e}")
    error = DownloadMismatchError if any_mismatch else DatasetDownloadError
    raise error(
        f"could not obtain a verified {fname} from any of {len(failures)} mirror(s); no copy of it was "
        f"kept in {folder}.\n  - " + "\n  - ".join(failures),
        f"retry, pass other mirrors=[...], or download the file yourself, check its checksum "
        f"({expected}) and place it in {folder}.",
        folder=folder,
        failures=failures,
    )


def _find_local(root: Path, kind: str, base: str) -> Path | None:
    for folder in (root / kind, root / _TORCHVISION_DIRS[kind]):
        for candidate in (folder / f"{base}.gz", folder / base, folder / base.replace("-idx", ".idx")):
            if candidate.is_file():
                return candidate
    return None


def _local_problem(path: Path, expected: str | None, ndim: int) -> tuple[str, type[CorruptFileError]] | None:
    """Why the local file at ``path`` is not usable, and the error that says so (``None``: it is usable):
    its checksum where one is known (the published ones are of the ``.gz`` files), else its IDX header and
    length."""
    if path.suffix == ".gz" and expected is not None:
        algorithm = _hash_name(expected, path.name)
        actual = _file_digest(path, algorithm)
        if actual != expected.lower():
            return f"{algorithm} is {actual}, expected {expected.lower()}", LocalChecksumMismatchError
        return None
    try:
        check_idx_file(path, expected_ndim=ndim)
    except IDXFormatError as e:
        return str(e).removeprefix(f"{path}: "), CorruptFileError
    return None


def mnist_files(
    root: str | os.PathLike[str],
    *,
    kind: MnistKind = "mnist",
    download: bool = True,
    mirrors: Sequence[str] | None = None,
    checksums: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    log: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """The four files of ``kind`` (keys of :data:`IDX_FILES`), found on disk or downloaded, verified.

    The lookup order, the checksum rules and the arguments are those of
    :func:`~sifl_ray.data.datasets.load_mnist`, which reads the files this returns. A local file that fails
    verification is downloaded again into ``root/<kind>/`` (which the lookup searches first) when
    ``download`` is true; ``log`` (if given) hears of every download and replacement, one line each.

    Raises:
        MissingFilesError: a file is missing and ``download`` is false (a ``FileNotFoundError``).
        CorruptFileError: a local file fails verification and ``download`` is false (its checksum:
            a ``ChecksumMismatchError`` too).
        DatasetDownloadError: no mirror delivered a verified copy (every copy had the wrong digest:
            a ``ChecksumMismatchError`` too).
    """
    if kind not in MNIST_CHECKSUMS:
        raise ValueError(f"unknown kind {kind!r}; expected 'mnist' or 'fashion_mnist'")
    root = Path(root)
    mirrors = tuple(MNIST_MIRRORS[kind] if mirrors is None else mirrors)
    checksums = dict(MNIST_CHECKSUMS[kind] if checksums is None else checksums)
    folder = root / kind
    source = mirrors[0] if mirrors else "the dataset's page"

    paths, missing, corrupt = _local_files(root, kind, checksums, download=download)
    if missing and not download:
        raise MissingFilesError(
            f"{kind}: missing {', '.join(missing)} (.gz or uncompressed) in {folder} "
            f"(or {root / _TORCHVISION_DIRS[kind]}).",
            f"pass download=True, or place the files from {source} there.",
            folder=folder,
            missing=missing,
        )
    if not missing and not corrupt:
        return paths
    if not mirrors:
        raise DatasetDownloadError(
            f"{kind}: files are missing or corrupt in {folder} and no mirrors were given",
            "pass mirrors=[...] (base URLs that hold the .gz files).",
            folder=folder,
        )
    folder.mkdir(parents=True, exist_ok=True)
    return {**paths, **_fetch_missing(folder, paths, corrupt, mirrors, checksums, timeout, log)}


def _local_files(
    root: Path, kind: MnistKind, checksums: Mapping[str, str], *, download: bool
) -> tuple[dict[str, Path], list[str], dict[str, tuple[Path, str]]]:
    """What is on disk: the verified files by role, the missing files' names, and the corrupt files by role
    with their problem. A corrupt file with ``download`` false is an error (a download would replace it)."""
    folder = root / kind
    paths: dict[str, Path] = {}
    missing: list[str] = []
    corrupt: dict[str, tuple[Path, str]] = {}
    for role, base in IDX_FILES.items():
        found = _find_local(root, kind, base)
        if found is None:
            missing.append(base)
            continue
        verdict = _local_problem(found, checksums.get(found.name), 3 if role.endswith("images") else 1)
        if verdict is None:
            paths[role] = found
            continue
        problem, error = verdict
        if not download:
            raise error(
                f"{found}: {problem}. The file is corrupted or not the one expected.",
                "delete it (or pass download=True: a verified copy replaces it), or pass checksums=... if "
                "you replaced it on purpose.",
                folder=folder,
                path=found,
                reason=problem,
            )
        corrupt[role] = (found, problem)
    return paths, missing, corrupt


def _fetch_missing(
    folder: Path,
    paths: Mapping[str, Path],
    corrupt: Mapping[str, tuple[Path, str]],
    mirrors: Sequence[str],
    checksums: Mapping[str, str],
    timeout: float,
    log: Callable[[str], None] | None,
) -> dict[str, Path]:
    """A verified download into ``folder`` of every file not in ``paths`` (missing or corrupt), by role."""
    fetched: dict[str, Path] = {}
    for role, base in IDX_FILES.items():
        if role in paths:
            continue
        fname = f"{base}.gz"
        if fname not in checksums:
            raise ValueError(
                f"no checksum for {fname}: a download is only accepted with a checksum to verify it. "
                "Fix: add it to checksums=..."
            )
        if log is not None:
            if role in corrupt:
                found, problem = corrupt[role]
                log(f"data: {found} is corrupt ({problem}); fetching a verified copy into {folder}")
            else:
                log(f"data: fetching {fname} into {folder}")
        fetched[role] = _fetch(fname, folder, mirrors, checksums[fname], timeout)
    return fetched
