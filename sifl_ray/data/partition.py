"""Partitions of a training set across clients: IID, Dirichlet label skew, McMahan's shards.

Each partitioner returns ``num_clients`` sorted int64 index arrays that together cover every sample
exactly once, and draws its randomness from the generator it is given; :func:`partition_dataset` gives
it the stream ``(seed, "partition", scheme)``.

The schemes live in one registry, :data:`PARTITIONERS` (the platform's registry helper,
:class:`~sifl_ray.config.registry.Registry`), which :func:`partition_dataset` dispatches through and the
configuration validator reads (``data.partition``). Adding a scheme is one function and one registration::

    @register_partitioner("round_robin")
    def partition_round_robin(labels, num_clients, generator):
        return [np.arange(k, len(labels), num_clients) for k in range(num_clients)]

A scheme with knobs of its own declares them as a settings dataclass, which becomes the configuration
section named after the scheme, validated like every section (unknown key, type, range through
:func:`sifl_ray.config.setting`, all problems at once), and whose typed values the scheme receives as
keyword arguments; a rule that spans other keys (the shards against the samples) is its ``problems``::

    from dataclasses import dataclass
    from sifl_ray.config import Range, setting

    @dataclass
    class BlocksSettings:
        # samples per block dealt round-robin to the clients
        block: int = setting(8, rule=Range(lambda v: v >= 1, "an integer >= 1"))

    @register_partitioner("blocks", settings=BlocksSettings)
    def partition_blocks(labels, num_clients, generator, block):
        ...

    # data.partition=blocks blocks.block=16

The built-in schemes register the same way: ``dirichlet.alpha``, ``shards.per_client``.
``options=("groups",)`` gives any scheme the data's own client id per sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from sifl_ray.config.components import PARTITIONERS as _PARTITIONERS
from sifl_ray.config.components import train_samples
from sifl_ray.config.registry import Registry
from sifl_ray.config.sections import section_defaults
from sifl_ray.config.validation import AT_LEAST_1, Range, setting
from sifl_ray.data.download import DatasetError
from sifl_ray.seeding import numpy_generator

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = [
    "PARTITIONERS",
    "PARTITION_OPTIONS",
    "PartitionError",
    "Partitioner",
    "partition_dataset",
    "partition_dirichlet",
    "partition_iid",
    "partition_natural",
    "partition_shards",
    "register_partitioner",
    "unregister_partitioner",
]

PARTITION_OPTIONS = ("min_size", "groups")
"""The keyword options of :func:`partition_dataset` a partitioner can ask for: the smallest part, and
``groups``, the data's own client id per sample (:attr:`sifl_ray.data.Dataset.client_train`)."""

Problems = Callable[["DictConfig"], list[str]]
"""``problems(cfg)``: what is wrong with a configuration that uses the scheme, on keys beyond its own
section (each message with its key and fix); run by the configuration's cross-checks."""


def _no_problems(cfg: DictConfig) -> list[str]:
    return []


@dataclass(frozen=True)
class Partitioner:
    """A registered scheme: ``function(labels, num_clients, generator=..., **options) -> parts``.

    Attributes:
        function: returns ``num_clients`` sorted int64 index arrays covering every sample exactly once.
        options: the names in :data:`PARTITION_OPTIONS` it takes, passed as keyword arguments.
        settings: its section's dataclass (the section is named after the scheme), whose values it takes
            as keyword arguments; ``None``: it declares no section.
        problems: its rules on the rest of the configuration (:data:`Problems`).
    """

    function: Callable[..., list[np.ndarray]]
    options: tuple[str, ...] = ()
    settings: type | None = None
    problems: Problems = _no_problems


PARTITIONERS: Registry[Partitioner] = _PARTITIONERS
"""Scheme name → :class:`Partitioner`, in registration order: the names ``data.partition`` accepts (held by
the configuration, :mod:`sifl_ray.config.components`, which reads it without importing this module)."""

_F = TypeVar("_F", bound=Callable[..., list[np.ndarray]])


def register_partitioner(
    name: str, *, options: Sequence[str] = (), settings: type | None = None, problems: Problems | None = None
) -> Callable[[_F], _F]:
    """Decorator: register a partitioner under ``name`` and return it unchanged.

    Args:
        name: the scheme's name, as a scenario writes it (``data.partition=<name>``).
        options: which of :data:`PARTITION_OPTIONS` the function takes as keyword arguments.
        settings: a dataclass of the scheme's own knobs (defaults, and ranges through
            :func:`sifl_ray.config.setting`): the configuration section ``<name>``, whose values the
            function takes as keyword arguments.
        problems: its rules on the rest of the configuration (:data:`Problems`).

    Raises:
        ValueError: ``name`` is already registered (two schemes must not silently share a name), or an
            option is not one :func:`partition_dataset` can give.
        SectionError: ``settings`` is no dataclass with defaults, the function takes no keyword of one of
            its fields, or the section ``name`` is another component's (a ``ValueError`` too).
    """
    unknown = [o for o in options if o not in PARTITION_OPTIONS]
    if unknown:
        raise ValueError(
            f"partitioner {name!r}: unknown option(s) {', '.join(unknown)}; partition_dataset can pass "
            f"{', '.join(PARTITION_OPTIONS)}"
        )

    def register(function: _F) -> _F:
        if name in PARTITIONERS:
            taken_by = PARTITIONERS[name].function.__qualname__
            raise ValueError(
                f"partition scheme {name!r} is already registered ({taken_by}); choose another name"
            )
        entry = Partitioner(function, tuple(options), settings, problems or _no_problems)
        PARTITIONERS.register(name, entry, settings=settings, takes=function)
        return function

    return register


def unregister_partitioner(name: str) -> None:
    """Remove the scheme ``name`` and its section (tests that register schemes of their own)."""
    PARTITIONERS.unregister(name)


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


@register_partitioner("iid")
def partition_iid(labels: np.ndarray, num_clients: int, generator: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and cut into ``num_clients`` near-equal parts (sizes differ by at most one).

    The paper's setting (§6: N_c = 10, IID). Each part is a sorted index array; together they cover every
    sample exactly once.
    """
    labels = _check_partition_args(labels, num_clients)
    return _sorted_int64(np.array_split(generator.permutation(labels.size), num_clients))


@dataclass
class DirichletSettings:
    """Dirichlet label skew's knob (section ``dirichlet``)."""

    # the Dirichlet concentration of each client's label mix: small, few labels a client; large, near IID
    alpha: float = setting(0.5, rule=Range(lambda v: v > 0, "a number > 0 (smaller means more label skew)"))


@register_partitioner("dirichlet", options=("min_size",), settings=DirichletSettings)
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


@dataclass
class ShardsSettings:
    """McMahan's shards' knob (section ``shards``)."""

    per_client: int = setting(2, rule=AT_LEAST_1)  # shards dealt to each client


def _shards_problems(cfg: DictConfig) -> list[str]:
    """Every shard needs a sample: clients × shards.per_client at most the training samples."""
    samples = train_samples(cfg)
    shards = cfg.clients.num_clients * cfg.shards.per_client
    if samples is None or shards <= samples.count:
        return []
    return [
        f"shards.per_client: {cfg.clients.num_clients} clients × {cfg.shards.per_client} shards = {shards} "
        f"shards, more than the {samples.count} training samples ({samples.source}); lower "
        "shards.per_client or clients.num_clients"
    ]


@register_partitioner("shards", settings=ShardsSettings, problems=_shards_problems)
def partition_shards(
    labels: np.ndarray,
    num_clients: int,
    per_client: int,
    generator: np.random.Generator,
) -> list[np.ndarray]:
    """McMahan et al.'s pathological non-IID split: sort by label, cut into shards, deal shards out.

    With 2 shards per client most clients see only two classes. Ties within a label are broken at random
    so the shards are not the file's order.

    Returns:
        ``num_clients`` sorted index arrays covering every sample exactly once.

    Raises:
        ValueError: ``per_client < 1`` or more shards than samples.
    """
    labels = _check_partition_args(labels, num_clients)
    if per_client < 1:
        raise ValueError(f"shards.per_client must be at least 1; got {per_client}")
    n_shards = num_clients * per_client
    if n_shards > labels.size:
        raise ValueError(
            f"{num_clients} clients × {per_client} shards = {n_shards} shards, more than the "
            f"{labels.size} samples"
        )
    order = generator.permutation(labels.size)
    order = order[np.argsort(labels[order], kind="stable")]
    shards = np.array_split(order, n_shards)
    deal = generator.permutation(n_shards).reshape(num_clients, per_client)
    return _sorted_int64([np.concatenate([shards[j] for j in row]) for row in deal])


class PartitionError(DatasetError, ValueError):
    """The data cannot be split as the scenario asks; ``key`` is the configuration key to change (a run
    reports it as a configuration error, :func:`sifl_ray.data.preflight.data_problem`)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key


@register_partitioner("natural", options=("groups",))
def partition_natural(
    labels: np.ndarray,
    num_clients: int,
    generator: np.random.Generator,
    groups: np.ndarray | None = None,
) -> list[np.ndarray]:
    """The data's own clients (LEAF's users, a writer, a speaker): the non-IID split FL research uses.

    With as many clients as users, client ``k`` holds user ``k``'s samples (users in the data's order);
    with fewer, the users are shuffled (from ``generator``) and dealt out in near-equal groups, so a client
    is a few whole users. More clients than users cannot be made without cutting a user in two.

    Raises:
        PartitionError: the data set has no client ids, or fewer users than clients.
    """
    labels = _check_partition_args(labels, num_clients)
    if groups is None:
        raise PartitionError(
            "data.partition",
            "natural splits by the data's own client ids, and this data set has none; use a data set "
            "with them (data.name=leaf, or arrays / your loader with client_train) or data.partition=iid",
        )
    groups = np.asarray(groups)
    if groups.shape != labels.shape:
        raise ValueError(f"groups must give one client id per sample; got shape {groups.shape}")
    users, first, owner = np.unique(groups, return_index=True, return_inverse=True)
    appearance = np.empty(users.size, dtype=np.int64)
    appearance[np.argsort(first, kind="stable")] = np.arange(users.size)  # user → its rank in the data
    owner = appearance[owner.reshape(-1)]
    if num_clients > users.size:
        raise PartitionError(
            "clients.num_clients",
            f"{num_clients} clients but the data has {users.size} users of its own (data.partition=natural "
            f"gives each client whole users); set clients.num_clients to at most {users.size}",
        )
    order = np.arange(users.size) if num_clients == users.size else generator.permutation(users.size)
    client_of_user = np.empty(users.size, dtype=np.int64)
    for k, members in enumerate(np.array_split(order, num_clients)):
        client_of_user[members] = k
    client = client_of_user[owner]
    return _sorted_int64([np.flatnonzero(client == k) for k in range(num_clients)])


def partition_dataset(
    labels: np.ndarray,
    *,
    scheme: str,
    num_clients: int,
    seed: int,
    min_size: int = 1,
    groups: np.ndarray | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Partition with the registered ``scheme``, drawing from the stream ``(seed, "partition", scheme)``.

    Each scheme receives only the options it registered (``min_size`` for ``dirichlet``, ``groups``, the
    data's client id per sample, for ``natural``); the others are ignored. A scheme that declared a section
    receives ``settings`` (a run passes the section's validated values: ``{"alpha": 0.3}`` for
    ``dirichlet``) over its dataclass's defaults.

    Raises:
        ValueError: ``scheme`` is not registered (the message lists the registered ones), ``settings``
            given to a scheme that declares none, or the partitioner's own checks fail.
    """
    partitioner = PARTITIONERS.get(scheme)
    if partitioner is None:
        raise ValueError(
            f"unknown partition scheme {scheme!r}; registered: {', '.join(PARTITIONERS)}. Fix: use one of "
            "them, or register yours with @register_partitioner (sifl_ray.data.partition)"
        )
    given = {"min_size": min_size, "groups": groups}
    options = {name: given[name] for name in partitioner.options}
    if partitioner.settings is not None:
        options.update(section_defaults(partitioner.settings), **(settings or {}))
    elif settings:
        raise ValueError(f"partition scheme {scheme!r} declares no settings; got {dict(settings)}")
    generator = numpy_generator(seed, "partition", scheme)
    return partitioner.function(labels, num_clients, generator=generator, **options)


def partition_report(
    parts: Sequence[np.ndarray], labels: np.ndarray, num_classes: int, *, scheme: str
) -> dict[str, Any]:
    """What a split gave each client, for ``sifl describe`` and ``summary.json``: its size and its label
    histogram (``label_histogram[i][c]``: client i's samples of class c), with the smallest, median and
    largest size and the fewest and most classes a client holds (a ``natural`` or Dirichlet split is
    uneven, and the ε of a record-level guarantee depends on the smallest client)."""
    labels = np.asarray(labels)
    sizes = [len(p) for p in parts]
    histogram = [np.bincount(labels[p], minlength=num_classes).astype(int).tolist() for p in parts]
    classes = [sum(1 for c in row if c) for row in histogram]
    return {
        "scheme": scheme,
        "clients": len(parts),
        "sizes": sizes,
        "size_min": int(min(sizes)),
        "size_median": float(np.median(sizes)),
        "size_max": int(max(sizes)),
        "classes_per_client_min": int(min(classes)),
        "classes_per_client_max": int(max(classes)),
        "label_histogram": histogram,
    }
