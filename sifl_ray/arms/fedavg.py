"""``fl``: plain FedAvg (McMahan et al., 2017), the reference the SIFL arms and ``secagg`` are paired with.

Its clients clip to ``privacy.clip`` like the SIFL arms' do, so that the paired deviation of a SIFL arm from
``fl`` measures the coding alone.
"""

from __future__ import annotations

from typing import ClassVar

from sifl_ray.arms.base import Arm, ArmContext, PartySteps
from sifl_ray.arms.steps import clip
from sifl_ray.specs import Coding


class FedAvg(Arm):
    """Plain FedAvg: the reference every other arm is compared with (same data, initial model and
    minibatches), and the one whose model the arms that name it in :attr:`~Arm.paired_with` must equal."""

    kind: ClassVar[str] = "fl"
    coding: ClassVar[Coding] = Coding.PLAIN
    clip_key: ClassVar[str | None] = "privacy.clip"
    colormap: ClassVar[str | None] = "Greys"
    baseline: ClassVar[bool] = True
    summary: ClassVar[str] = "plain FedAvg: the reference every other arm is compared with"

    def steps(self, ctx: ArmContext) -> PartySteps:
        return PartySteps(client=clip(ctx.cfg.privacy.clip))
