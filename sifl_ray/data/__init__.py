"""Datasets, client partitions, client sampling and minibatch order (docs/method.md "The paper's
experiments").

One module per concern:

- :mod:`~sifl_ray.data.idx`: the IDX file format (MNIST, Fashion-MNIST), read strictly and written back;
- :mod:`~sifl_ray.data.download`: where those files are found, fetched from and how they are verified;
- :mod:`~sifl_ray.data.datasets`: the :class:`Dataset` value and its loaders (MNIST, Fashion-MNIST,
  digits, synthetic), scaling, standardisation and subsampling;
- :mod:`~sifl_ray.data.own`: your own data (``.npz`` / ``.pt`` arrays, LEAF JSON, a loader by import path
  or registered name), with each sample's own client for the ``natural`` partition;
- :mod:`~sifl_ray.data.registry` and :mod:`~sifl_ray.data.builtin`: the data sets ``data.name`` names,
  built-in and yours registered alike, each with its settings section and its rules;
- :mod:`~sifl_ray.data.partition`: how the training set is split across clients, one registered
  function per scheme (:data:`PARTITIONERS`);
- :mod:`~sifl_ray.data.sampling`: per round, which clients take part and which minibatches they use.

Everything random here takes its randomness from a named stream of the run seed (``sifl_ray.seeding``):
the train/test split of digits (``"data", "digits_split"``), synthetic data (``"data", "synthetic"``),
subsampling (``"data", "subsample", name``), partitions (``"partition", scheme``), client sampling
(``"sample_clients", round``) and minibatches (``"batches", client, round``). The stream names do not
mention the arm (FL, SIFL M1, SIFL M2), so every arm of a scenario sees the same data, the same clients and
the same minibatches: differences between arms come from the coding alone.
"""

from sifl_ray.data import builtin as _builtin  # noqa: F401 - the built-in data sets register on import
from sifl_ray.data.datasets import (
    DATASET_NAMES,
    Dataset,
    load_dataset,
    load_digits_dataset,
    load_mnist,
    make_synthetic,
)
from sifl_ray.data.download import (
    IDX_FILES,
    MNIST_CHECKSUMS,
    MNIST_MIRRORS,
    ChecksumMismatchError,
    DatasetDownloadError,
    DatasetError,
)
from sifl_ray.data.idx import IDXFormatError, encode_idx, read_idx
from sifl_ray.data.own import DataInputError, load_any_dataset
from sifl_ray.data.partition import (
    PARTITIONERS,
    Partitioner,
    partition_dataset,
    partition_dirichlet,
    partition_iid,
    partition_natural,
    partition_shards,
    register_partitioner,
)
from sifl_ray.data.registry import DATASETS, register_dataset, unregister_dataset
from sifl_ray.data.sampling import client_batches, sample_clients

__all__ = [
    "DATASETS",
    "DATASET_NAMES",
    "IDX_FILES",
    "MNIST_CHECKSUMS",
    "MNIST_MIRRORS",
    "PARTITIONERS",
    "ChecksumMismatchError",
    "DataInputError",
    "Dataset",
    "DatasetDownloadError",
    "DatasetError",
    "IDXFormatError",
    "Partitioner",
    "client_batches",
    "encode_idx",
    "load_any_dataset",
    "load_dataset",
    "load_digits_dataset",
    "load_mnist",
    "make_synthetic",
    "partition_dataset",
    "partition_dirichlet",
    "partition_iid",
    "partition_natural",
    "partition_shards",
    "read_idx",
    "register_dataset",
    "register_partitioner",
    "sample_clients",
    "unregister_dataset",
]
