"""The immersion codes: key 1 (π1, the server's) and key 2 (π2, the aggregator's), with their backends.

Backends of key 1 (docs/method.md "Choosing the matrices"): ``identity`` (plain FL through the same pipeline),
``dense`` (the paper's explicit matrices, small n), ``fast`` (a structured random orthogonal transform,
O(ñ log ñ), any n), ``block`` (a deliberately weak block-diagonal key for the attack suite). Use the
factories :func:`make_server_key` and :func:`make_aggregator_key`; :mod:`.precision` predicts and guards
the float64 decode error.
"""

from sifl_ray.coding._common import ClientKeyView, MissingKeyMaterial
from sifl_ray.coding.aggregator import AggregatorClientView, DenseAggregatorKey
from sifl_ray.coding.base import (
    CODING_DTYPE,
    AggregatorKey,
    AggregatorNorms,
    ClientServerKey,
    KeyNorms,
    NoiseSpec,
    ServerKey,
)
from sifl_ray.coding.block import BlockServerKey
from sifl_ray.coding.dense import DenseServerKey
from sifl_ray.coding.fast import FastServerKey
from sifl_ray.coding.identity import IdentityKey
from sifl_ray.coding.keys import (
    BACKENDS,
    DEFAULT_LEFT_INVERSE,
    aggregator_key_from_state_dict,
    make_aggregator_key,
    make_server_key,
    register_server_key,
    server_key_class,
    server_key_from_state_dict,
    transform_depth,
)
from sifl_ray.coding.precision import (
    PrecisionError,
    PrecisionReport,
    PrecisionWarning,
    check_precision,
    max_noise_scale,
    measure_round_trip_error,
    precision_tradeoff,
    predict_decode_error,
)
from sifl_ray.coding.transform import StructuredOrthogonal, release_workspace

__all__ = [
    "BACKENDS",
    "CODING_DTYPE",
    "DEFAULT_LEFT_INVERSE",
    "AggregatorClientView",
    "AggregatorKey",
    "AggregatorNorms",
    "BlockServerKey",
    "ClientKeyView",
    "ClientServerKey",
    "DenseAggregatorKey",
    "DenseServerKey",
    "FastServerKey",
    "IdentityKey",
    "KeyNorms",
    "MissingKeyMaterial",
    "NoiseSpec",
    "PrecisionError",
    "PrecisionReport",
    "PrecisionWarning",
    "ServerKey",
    "StructuredOrthogonal",
    "aggregator_key_from_state_dict",
    "check_precision",
    "make_aggregator_key",
    "make_server_key",
    "max_noise_scale",
    "measure_round_trip_error",
    "precision_tradeoff",
    "predict_decode_error",
    "register_server_key",
    "release_workspace",
    "server_key_class",
    "server_key_from_state_dict",
    "transform_depth",
]
