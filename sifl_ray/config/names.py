"""The registries whose entries import torch, and the method's fixed choices, spelled once, importing no
torch.

Why here: a configuration is validated before torch is loaded (a typo in ``sifl run`` answers at once, not
a second later or from inside a worker), yet its choices must be the registries' own. A registry behind
torch is a :class:`~sifl_ray.config.registry.Registry` whose built-in entries are *declared* here by import
path: the name and where its implementation lives are written once, the owner module holds no list of its
own and reads its entries from the registry (imported on first use), and an entry registered at run time
(:func:`sifl_ray.models.register_model`, :func:`sifl_ray.coding.keys.register_server_key`) is a valid
choice at once. Registries that import no torch are declared by their owners: the arms
(:data:`sifl_ray.arms.ARMS`), the partitioners (:data:`sifl_ray.data.partition.PARTITIONERS`), the data
sets (:data:`sifl_ray.data.registry.DATASETS`) and the attacks (:data:`sifl_ray.attacks.registry.ATTACKS`).

=======================  ===================================================  ===========================
names                    read by                                              configuration keys
=======================  ===================================================  ===========================
:data:`SERVER_KEYS`      :mod:`sifl_ray.coding.keys` (key 1's backends)       ``coding.backend``, designs
:data:`MODELS`           :mod:`sifl_ray.models`                               ``train.model``
:data:`OPTIMIZERS`       :mod:`sifl_ray.optim.trainer`                        ``train.optimizer``
:data:`BACKENDS`         :mod:`sifl_ray.backends` (what hosts the parties)   ``backend``
``LEFT_INVERSES``        :func:`sifl_ray.coding._common.left_inverse`         ``coding.left_inverse``
``NOISE_DISTRIBUTIONS``  :class:`sifl_ray.coding.base.NoiseSpec`              ``coding.noise.distribution``
``PRECISION_POLICIES``   :func:`sifl_ray.coding.precision.check_precision`    ``coding.precision.policy``
``NBAFL_EXPOSURES``      :data:`sifl_ray.privacy.nbafl.EXPOSURES`             ``nbafl.exposures``
``NBAFL_CALIBRATIONS``   :data:`sifl_ray.privacy.nbafl.CALIBRATIONS`          ``nbafl.calibration``
``DP_ACCOUNTANTS``       :data:`sifl_ray.privacy.dp_fedavg.ACCOUNTANTS`       ``dp_fedavg.accountant``
=======================  ===================================================  ===========================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sifl_ray.config.registry import Registry

#: Key 1's backends (π1): name → its :class:`~sifl_ray.coding.base.ServerKey` class. ``identity`` is plain
#: FL's code (an arm with coding ``plain`` takes it), so a configuration chooses among the others
#: (:func:`immersion_backends`). A party's process imports a backend from its path (:meth:`Registry.path`),
#: also one the user registered in the driver.
SERVER_KEYS: Registry[Any] = Registry(
    "coding backend",
    key="coding.backend",
    declared={
        "identity": "sifl_ray.coding.identity:IdentityKey",
        "dense": "sifl_ray.coding.dense:DenseServerKey",
        "fast": "sifl_ray.coding.fast:FastServerKey",
        "block": "sifl_ray.coding.block:BlockServerKey",
    },
)

#: The models a scenario names in ``train.model``: ``factory(input_shape, num_classes, **settings)``. The
#: declared ones are the paper's (built on the meta device and drawn from the run's ``init`` stream,
#: :func:`sifl_ray.models.build_model`); a user's registers with :func:`sifl_ray.models.register_model`.
MODELS: Registry[Any] = Registry(
    "model",
    key="train.model",
    declared={
        "mlp": "sifl_ray.models:mlp",
        "cnn": "sifl_ray.models:CNN",
        "cnn2": "sifl_ray.models:CNN2",
        "digits_mlp": "sifl_ray.models:digits_mlp",
        "digits_mlp_wide": "sifl_ray.models:digits_mlp_wide",
    },
)


@dataclass(frozen=True)
class TorchOptimizer:
    """An optimizer known by a short name: a ``torch.optim`` class, by its name, and the settings it takes
    beyond the learning rate. Names, not classes, so that the registry needs no torch."""

    torch_class: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


#: The optimizers known by a short name (``train.optimizer``); any ``torch.optim`` class name is accepted
#: besides (:func:`sifl_ray.optim.trainer.torch_optimizer_names`).
OPTIMIZERS: Registry[TorchOptimizer] = Registry("optimizer", key="train.optimizer")
OPTIMIZERS.register("sgd", TorchOptimizer("SGD"))
OPTIMIZERS.register("momentum", TorchOptimizer("SGD", {"momentum": 0.9}))
OPTIMIZERS.register("adam", TorchOptimizer("Adam"))

#: What hosts the parties (``backend``): name → its class (:class:`~sifl_ray.backends.Backend`). Imported
#: only when chosen (Ray costs a second or more); a user's registers with
#: :func:`sifl_ray.backends.register_backend`.
BACKENDS: Registry[Any] = Registry(
    "backend",
    key="backend",
    declared={"local": "sifl_ray.backends.local:LocalBackend", "ray": "sifl_ray.backends.ray:RayBackend"},
)

LEFT_INVERSES: tuple[str, ...] = ("pinv", "oblique")
NOISE_DISTRIBUTIONS: tuple[str, ...] = ("gaussian", "laplace")
PRECISION_POLICIES: tuple[str, ...] = ("refuse", "warn")
NBAFL_EXPOSURES: tuple[str, ...] = ("multi_round", "per_round")
NBAFL_CALIBRATIONS: tuple[str, ...] = ("classical", "analytic")
DP_ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld")
#: How a round's clients are drawn (``clients.sampling``): ``fixed``, exactly ⌈qN⌉ of them without
#: replacement; ``poisson``, each independently with probability q (what DP-FedAvg's accountant assumes).
SAMPLINGS: tuple[str, ...] = ("fixed", "poisson")
#: Every kind of fault a drill injects (``faults.inject[i].kind``; what each does: :mod:`sifl_ray.faults`).
FAULT_KINDS: tuple[str, ...] = (
    "worker_exit",
    "worker_kill",
    "straggle",
    "corrupt_upload",
    "corrupt_partial",
    "server_kill",
    "aggregator_kill",
    "evaluator_kill",
    "driver_kill",
)
#: The faults that fire once per run folder (a respawned party must not die again on the replay).
FAULT_ONCE_KINDS: tuple[str, ...] = ("server_kill", "aggregator_kill", "evaluator_kill", "driver_kill")
#: When a ``worker_exit`` fault fires: in training, or in secure aggregation's step 3
#: (:mod:`sifl_ray.faults`).
FAULT_PHASES: tuple[str, ...] = ("train", "unmask")
#: What a ``corrupt_*`` fault sends (:func:`sifl_ray.faults.corrupt`).
FAULT_CORRUPTIONS: tuple[str, ...] = ("nan", "inf", "shape", "round", "epoch")


def torch_optimizer_names() -> tuple[str, ...]:
    """The ``torch.optim`` class names a configuration may give besides :data:`OPTIMIZERS` (``"AdamW"``).
    Asked only for a name that is not in the registry: it imports torch, which validation otherwise never
    loads."""
    import torch.optim  # deferred: torch, a second or more, for a name outside the registry only

    base = torch.optim.Optimizer
    found = (k for k, v in vars(torch.optim).items() if isinstance(v, type) and issubclass(v, base))
    return tuple(sorted((k for k in found if k != base.__name__), key=str.lower))


def immersion_backends() -> tuple[str, ...]:
    """The backends a configuration may name (``coding.backend``, an attack design): all but ``identity``.
    Read when called, so a backend registered at run time is a choice at once."""
    return tuple(b for b in SERVER_KEYS.names() if b != "identity")
