"""Pairs of arms whose models must agree: an arm declares the one it is paired with (:attr:`Arm.paired_with`).

A SIFL arm's model must equal plain FedAvg's up to round-off, and a secure aggregation arm's within the
fixed-point quantisation: the evaluator measures each round how far a paired arm's model is from its
reference's (``max_deviation``), which is the platform's precision check. The runner reads the pairs here,
and the summary the baseline every arm's accuracy is compared with, so that no other module names an arm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sifl_ray.arms.registry import arm_of

if TYPE_CHECKING:
    from omegaconf import DictConfig


def reference_of(cfg: DictConfig, arm: str) -> str | None:
    """The arm whose model ``arm``'s is measured against each round (``None``: it is paired with none)."""
    return arm_of(cfg, arm).paired_with


def play_order(cfg: DictConfig, arms: list[str]) -> list[str]:
    """The order a round plays ``arms`` in: every reference of a listed arm first, the others as listed.

    The evaluator measures a paired arm's ``max_deviation`` against its reference's model of the same
    round, which it has only once the reference has played that round: the precision check must not depend
    on the order in which a scenario lists its arms. A paired arm whose reference is not among ``arms`` has
    none, and :func:`unpaired_arms` says so.
    """
    wanted = {reference_of(cfg, a) for a in arms}
    references = [a for a in arms if a in wanted]
    return [*references, *(a for a in arms if a not in references)]


def unpaired_arms(cfg: DictConfig, arms: list[str]) -> dict[str, str]:
    """The arms of ``arms`` paired with an arm that does not run, each with the reference it lacks (their
    ``max_deviation``, the precision check, is then not measured)."""
    out: dict[str, str] = {}
    for arm in arms:
        reference = reference_of(cfg, arm)
        if reference is not None and reference not in arms:
            out[arm] = reference
    return out


def baseline_arm(cfg: DictConfig, arms: list[str]) -> str | None:
    """The arm of ``arms`` every other one's final accuracy is compared with: the first whose arm declares
    itself the baseline (:attr:`Arm.baseline`: plain FedAvg), ``None`` when none runs."""
    return next((a for a in arms if arm_of(cfg, a).baseline), None)
