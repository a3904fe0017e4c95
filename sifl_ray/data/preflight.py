"""A run's pre-flight check of its data set: its files are on disk and right before anything else starts.

Why before: the driver loads the data set once Ray has started (seconds, and a dozen processes), and a
missing, truncated or foreign file found there would end the run with a traceback in a library's words
(``pass download=True``). Checked here, right after the configuration, the same problems are configuration
errors: one message that names the key to change (``data.download``, ``data.root``, ``data.mirrors``) and
the fix, exit code 2, no traceback. What is checked: the folder and the four files (``.gz`` or not, this
package's layout or torchvision's), each file's checksum where one is published (the ``.gz`` files), else
its IDX header and length, and that each split has as many labels as images. A file that is missing or
fails its check is downloaded when ``data.download`` is true (a verified copy, in ``<root>/<name>/``, read
first) and named with the fix when it is false.

:func:`data_problem` words any data error in configuration keys, for a problem met later (a label out of
range is seen only when the values are read).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sifl_ray.config.import_paths import ImportPathError, import_object, is_import_path
from sifl_ray.config.validation import ConfigError
from sifl_ray.data.builtin import OFFLINE
from sifl_ray.data.download import (
    MNIST_CHECKSUMS,
    CorruptFileError,
    DatasetDownloadError,
    DatasetError,
    MissingFilesError,
    mnist_files,
)
from sifl_ray.data.idx import IDXFormatError, check_idx_file
from sifl_ray.data.own import resolve_data_loader

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = ["check_data", "data_problem"]

DEFAULT_ROOT = "data_cache"  # the schema's data.root = null


def _root(cfg: DictConfig) -> Path:
    return Path(str(cfg.data.root or DEFAULT_ROOT)).expanduser()


def _mirrors(cfg: DictConfig) -> list[str] | None:
    return None if cfg.data.mirrors is None else [str(u) for u in cfg.data.mirrors]


def check_data(cfg: DictConfig, *, log: Callable[[str], None] | None = None) -> None:
    """Make sure the data set of ``cfg`` is on disk and right, downloading what is missing or corrupt where
    ``data.download`` allows it (``log`` hears of each download). Data sets made in memory (digits,
    synthetic, mnist_sample) need nothing; a user's own files must exist and an import path of theirs
    (``data.name``, ``train.model``) must import (:func:`_check_own`).

    Raises:
        ConfigError: one problem, in configuration keys, with the fix (:func:`data_problem`).
    """
    name = str(cfg.data.name)
    _check_own(cfg)
    if name not in MNIST_CHECKSUMS:
        return
    try:
        paths = mnist_files(
            _root(cfg), kind=name, download=bool(cfg.data.download), mirrors=_mirrors(cfg), log=log
        )  # type: ignore[arg-type]
        published = set(MNIST_CHECKSUMS[name])
        for split in ("train", "test"):
            images, labels = paths[f"{split}_images"], paths[f"{split}_labels"]
            if images.name in published and labels.name in published:
                continue  # both verified against the published checksums: the published shapes
            n_images = check_idx_file(images, expected_ndim=3)
            n_labels = check_idx_file(labels, expected_ndim=1)
            if n_images[1:] != (28, 28) or n_images[0] != n_labels[0]:
                raise IDXFormatError(
                    f"{images} / {labels}: {n_images[0]} images of {n_images[1:]} and {n_labels[0]} labels; "
                    "expected as many labels as 28×28 images"
                )
    except (DatasetError, IDXFormatError) as err:
        raise ConfigError([data_problem(err, cfg)]) from None
    except OSError as err:  # the folder cannot be made or written (a download needs both)
        where = err.filename or _root(cfg) / name
        raise ConfigError(
            [
                f"data.root: cannot write {where} ({err.strerror or err}); set data.root to a folder you can "
                f"write, or put the files in {_root(cfg) / name} and set data.download=false"
            ]
        ) from None


def _check_own(cfg: DictConfig) -> None:
    """A user's own data and model, as far as they can be checked before the data is read: an import path
    (``data.name``, ``train.model``) imports. The files a data set reads are its own rule, checked with the
    configuration (:mod:`sifl_ray.data.builtin`); what the values hold is checked when they are read
    (:class:`~sifl_ray.data.own.DataInputError`, exit code 2 as well)."""
    problems = []
    name = str(cfg.data.name)
    try:
        resolve_data_loader(name)
    except DatasetError as err:
        problems.append(data_problem(err, cfg))
    if is_import_path(cfg.train.model):
        try:
            import_object(str(cfg.train.model), key="train.model")
        except ImportPathError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError(problems)


def data_problem(err: DatasetError | IDXFormatError, cfg: DictConfig) -> str:
    """The configuration problem ``err`` is, in ``sifl run``'s keys: what is wrong, then the fix, and for a
    data set that must be fetched, the one that ships with the install (:data:`OFFLINE`)."""
    return _data_problem(err, cfg) + OFFLINE.get(str(cfg.data.name), "")


def _data_problem(err: DatasetError | IDXFormatError, cfg: DictConfig) -> str:
    key = getattr(err, "key", None)  # a user's data (sifl_ray.data.own), a partition: the key is known
    if key is not None and isinstance(err, DatasetError):
        return f"{key}: {err.problem}" + (f"; {err.fix}" if err.fix else "")
    name, root = str(cfg.data.name), _root(cfg)
    folder = getattr(err, "folder", None) or root / name
    if isinstance(err, MissingFilesError):
        return (
            f"data.root: expected {name}'s four IDX files in {folder} (.gz or uncompressed), missing "
            f"{', '.join(err.missing)}; set data.download=true to fetch them (checked against the published "
            f"checksums), or put them there (or set data.root to the folder that holds {name}/)"
        )
    if isinstance(err, CorruptFileError):
        return (
            f"data.root: {err.path} is corrupt or not the published file ({err.reason}); "
            f"set data.download=true to fetch a verified copy into {folder} (it is read first), or replace "
            "the file yourself"
        )
    if isinstance(err, DatasetDownloadError):
        what = err.problem.splitlines()[0].rstrip(".")
        tried = "; ".join(err.failures)
        return (
            f"data.mirrors: {what}" + (f" (tried {tried})" if tried else "") + "; retry, set "
            "data.mirrors=[URL,...] to base URLs that hold the four .gz files, or put the files in "
            f"{folder} yourself and set data.download=false"
        )
    fix = (
        "set data.download=true to fetch a verified copy, or replace the file"
        if not cfg.data.download
        else f"delete the file named: a verified copy is then fetched into {folder}"
    )
    detail = err.problem if isinstance(err, DatasetError) else str(err)
    return f"data.root: {detail}; {fix}"
