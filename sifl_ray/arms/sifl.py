"""``sifl_m1`` and ``sifl_m2``: System Immersion coding (docs/method.md "SIFL M1", "SIFL M2").

The coding is the parties' own (they hold the keys): the server encodes with key 1, the clients decode,
train and re-encode (the target optimizer), the aggregator averages encoded vectors and, in M2, encodes the
average with key 2. The arm adds the clients' clipping (every ε assumes ‖w_i‖ ≤ C) and the privacy figures
of docs/method.md "Differential privacy" (:mod:`sifl_ray.arms.sifl_figures`), which the accountant also
records round by round. Both modes are paired with ``fl``, whose model theirs must equal up to round-off.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sifl_ray.arms.base import Arm, ArmContext, PartySteps, Release
from sifl_ray.arms.fedavg import FedAvg
from sifl_ray.arms.steps import clip
from sifl_ray.specs import Coding


class Sifl(Arm):
    """What both SIFL arms share: the immersion coding of the uploads, local models clipped to the ball every
    SIFL ε assumes, and a model equal to fl's up to round-off."""

    coding: ClassVar[Coding] = Coding.M1
    clip_key: ClassVar[str | None] = "privacy.clip"
    colormap: ClassVar[str | None] = "Greens"
    paired_with: ClassVar[str | None] = FedAvg.kind  # the coding must not change the model beyond round-off

    def steps(self, ctx: ArmContext) -> PartySteps:
        return PartySteps(client=clip(ctx.cfg.privacy.clip))

    def privacy(self, ctx: ArmContext) -> dict[str, Any] | None:
        # deferred: numpy, omegaconf, torch, which this module does not load otherwise
        from sifl_ray.arms.sifl_figures import describe_arm

        return describe_arm(ctx.cfg, coding=self.coding, **_norms(ctx))

    def accountant_releases(self, ctx: ArmContext) -> Any:
        """What the accountant records each round (:class:`sifl_ray.privacy.accountant.ArmReleases`)."""
        # deferred: numpy, omegaconf, torch, which this module does not load otherwise
        from sifl_ray.arms.sifl_figures import arm_releases

        return arm_releases(ctx.cfg, coding=self.coding, **_norms(ctx))


class SiflM1(Sifl):
    """SIFL M1: uploads and aggregate encoded with key 1; the server decodes the average (private
    aggregation)."""

    kind: ClassVar[str] = "sifl_m1"
    coding: ClassVar[Coding] = Coding.M1
    summary: ClassVar[str] = (
        "SIFL M1: uploads and aggregate encoded with key 1; the server decodes the average"
    )

    def releases(self) -> tuple[Release, ...]:
        return (
            Release("client", "aggregator", "upload", "w~_i = P1 w_i + N1 r^t (the broadcast's noise r^t)"),
            Release("aggregator", "server", "aggregate", "w~_a = sum_i p_i w~_i (key 1 only)"),
            Release("server", "clients", "broadcast", "w~^t = P1 w^t + N1 r^t (fresh r^t each round)"),
        )


class SiflM2(Sifl):
    """SIFL M2: the aggregator adds key 2, so the server never holds a plain model (private aggregation and
    broadcasting)."""

    kind: ClassVar[str] = "sifl_m2"
    coding: ClassVar[Coding] = Coding.M2
    summary: ClassVar[str] = (
        "SIFL M2: the aggregator adds key 2, so the server never holds a plain model; round 0 is an M1 round"
    )

    def releases(self) -> tuple[Release, ...]:
        return (
            Release("client", "aggregator", "upload", "w~_i = P1 w_i + N1 r (the stripped broadcast's)"),
            Release("aggregator", "server", "aggregate", "W'_a = w~_a P2 + R2 N2 (key 2 on top of key 1)"),
            Release("server", "clients", "broadcast", "W' = P1 (P1L W'_a) + N1 R1 (code 2 still on)"),
        )


def _norms(ctx: ArmContext) -> dict[str, Any]:
    return {
        "key_norms": ctx.key_norms,
        "agg_norms": ctx.agg_norms,
        "local_size": ctx.local_size,
        "total_size": ctx.total_size,
    }
