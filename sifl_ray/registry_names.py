"""The names of the registries whose owners import torch, spelled once, in a module that imports nothing.

Why a module of names: a configuration is validated before torch is loaded (a typo in ``sifl run`` answers
at once, not a second later or from inside a worker), yet its choices must be the registries' own. Every
owner below imports its names from here and keys its registry by them, so adding an entry means adding its
name here and its implementation in the owner; ``tests/test_config.py`` checks that each registry and its
names agree. Registries that import no torch keep their names themselves: the arms
(:data:`sifl_ray.arms.ARMS`), the partitioners (:data:`sifl_ray.data.partition.PARTITIONERS`), the data
sets (:data:`sifl_ray.data.datasets.DATASET_NAMES`, and a user's: :func:`sifl_ray.data.own.all_dataset_names`)
and the fault kinds (:data:`sifl_ray.faults.FAULT_KINDS`).

======================  ===================================================  ==============================
names                   owner (its registry)                                 configuration keys
======================  ===================================================  ==============================
``CODING_BACKENDS``     :data:`sifl_ray.coding.keys.SERVER_KEYS`             ``coding.backend``, attack
                                                                             designs, ``m2.backend``
``LEFT_INVERSES``       :func:`sifl_ray.coding._common.left_inverse`         ``coding.left_inverse``
``NOISE_DISTRIBUTIONS`` :class:`sifl_ray.coding.base.NoiseSpec`              ``coding.noise.distribution``
``PRECISION_POLICIES``  :func:`sifl_ray.coding.precision.check_precision`    ``coding.precision.policy``
``MODEL_NAMES``         :data:`sifl_ray.models.MODEL_NAMES` (its factories)  ``train.model``
``USER_MODELS``         :func:`sifl_ray.models.register_model`               ``train.model``
``OPTIMIZER_NAMES``     :data:`sifl_ray.optim.trainer.OPTIMIZERS`            ``train.optimizer``
``NBAFL_EXPOSURES``     :data:`sifl_ray.privacy.nbafl.EXPOSURES`             ``nbafl.exposures``
``NBAFL_CALIBRATIONS``  :data:`sifl_ray.privacy.nbafl.CALIBRATIONS`          ``nbafl.calibration``
``DP_ACCOUNTANTS``      :data:`sifl_ray.privacy.dp_fedavg.ACCOUNTANTS`       ``dp_fedavg.accountant``
======================  ===================================================  ==============================
"""

from __future__ import annotations

#: Key 1's backends: name → where its class lives (``module:Class``), so that a party's process can import a
#: backend by name, also one registered by the user (:func:`sifl_ray.coding.keys.register_server_key` adds
#: it here). ``identity`` is plain FL's code (an arm with coding ``plain`` takes it), so a configuration
#: chooses among the others (:func:`immersion_backends`).
CODING_BACKENDS: dict[str, str] = {
    "identity": "sifl_ray.coding.identity:IdentityKey",
    "dense": "sifl_ray.coding.dense:DenseServerKey",
    "fast": "sifl_ray.coding.fast:FastServerKey",
    "block": "sifl_ray.coding.block:BlockServerKey",
}
LEFT_INVERSES: tuple[str, ...] = ("pinv", "oblique")
NOISE_DISTRIBUTIONS: tuple[str, ...] = ("gaussian", "laplace")
PRECISION_POLICIES: tuple[str, ...] = ("refuse", "warn")
MODEL_NAMES: tuple[str, ...] = ("mlp", "cnn", "cnn2", "digits_mlp")
#: Users' models: name → their factory's import path (``module:function``), added by
#: :func:`sifl_ray.models.register_model`; ``train.model`` accepts these names beside :data:`MODEL_NAMES`
#: and any import path ``package.module:factory``.
USER_MODELS: dict[str, str] = {}
#: The optimizers known by a short name; any ``torch.optim`` class name is accepted besides.
OPTIMIZER_NAMES: tuple[str, ...] = ("sgd", "momentum", "adam")
NBAFL_EXPOSURES: tuple[str, ...] = ("multi_round", "per_round")
NBAFL_CALIBRATIONS: tuple[str, ...] = ("classical", "analytic")
DP_ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld")


def immersion_backends() -> tuple[str, ...]:
    """The backends a configuration may name (``coding.backend``, an attack design): all but ``identity``.
    Read when called, so a backend added to :data:`CODING_BACKENDS` is a choice at once."""
    return tuple(b for b in CODING_BACKENDS if b != "identity")
