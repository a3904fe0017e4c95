"""The arms a scenario can run, registered by name: ``fl``, ``sifl_m1``, ``sifl_m2``, ``nbafl``, and yours.

An arm is one :class:`~sifl_ray.arms.base.Arm` object (what each party does, what it releases, what it
claims); the registry maps the names a scenario lists in ``arms`` to them. The configuration validator, the
runner, the summary and the attack suite all ask the registry, so a new arm is one module plus one
:func:`register_arm` call and nothing else changes.
"""

from __future__ import annotations

# The built-in arms register themselves on import.
from sifl_ray.arms import builtin as _builtin  # noqa: F401
from sifl_ray.arms.base import (
    AggregatorStep,
    Arm,
    ArmContext,
    ClientStep,
    PartySteps,
    Release,
    ServerStep,
    plain_releases,
)
from sifl_ray.arms.pairing import baseline_arm, play_order, reference_of, unpaired_arms
from sifl_ray.arms.registry import (
    ARMS,
    arm_instances,
    arm_kinds,
    arm_names,
    arm_of,
    get_arm,
    register_arm,
    unregister_arm,
)

__all__ = [
    "ARMS",
    "AggregatorStep",
    "Arm",
    "ArmContext",
    "ClientStep",
    "PartySteps",
    "Release",
    "ServerStep",
    "arm_instances",
    "arm_kinds",
    "arm_names",
    "arm_of",
    "baseline_arm",
    "get_arm",
    "plain_releases",
    "play_order",
    "reference_of",
    "register_arm",
    "unpaired_arms",
    "unregister_arm",
]
