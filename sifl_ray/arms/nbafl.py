"""``nbafl``: noising before aggregation (Wei et al., 2020), the paper's DP baseline (docs/method.md
"Baselines").

Each client clips its model to ``nbafl.clip`` and adds Gaussian noise of the σ that gives (ε, δ) for the
uploads ``nbafl.exposures`` covers; one arm per ε of ``nbafl.epsilons`` (``nbafl_eps1``, ``nbafl_eps5``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from sifl_ray.arms.base import Arm, ArmContext, PartySteps, Release, plain_releases
from sifl_ray.arms.steps import chain, clip, gaussian
from sifl_ray.config import names
from sifl_ray.config.validation import POSITIVE, PROBABILITY, Choice, Range, setting
from sifl_ray.specs import Coding

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass
class NbaflConfig:
    """The NbAFL baseline (docs/method.md "Baselines"): σ from ε, δ, C, the exposures L and the Gaussian
    formula."""

    # one nbafl arm per ε
    epsilons: list[float] = setting(
        default_factory=lambda: [1.0],
        rule=Range(lambda v: all(e > 0 for e in v), "every ε > 0; for example nbafl.epsilons=[1,5]"),
    )
    delta: float = setting(1e-5, rule=PROBABILITY)  # δ of every nbafl arm's (ε, δ)
    clip: float = setting(10.0, rule=POSITIVE)  # C: a client's model is clipped to ‖w_i‖ ≤ C before the noise
    # multi_round: (ε, δ) for all T uploads of a client, L = T (NbAFL Theorem 1); per_round: L = 1, each
    # upload alone (weaker). Default multi_round: the guarantee NbAFL states and a reader of "ε" assumes.
    exposures: str = setting(
        "multi_round",
        rule=Choice(
            lambda: names.NBAFL_EXPOSURES,
            meaning="multi_round: (ε, δ) for all T uploads of a client, NbAFL Theorem 1, σ grows with T; "
            "per_round: (ε, δ) per upload, per round only",
        ),
    )
    # classical: NbAFL's c·L·Δ/ε (a proof for ε < 1); analytic: exact
    calibration: str = setting(
        "classical",
        rule=Choice(
            lambda: names.NBAFL_CALIBRATIONS,
            meaning="the Gaussian formula: classical, NbAFL's σ = c·L·Δ/ε, a proof for ε < 1 only; "
            "analytic, exact for every ε. How many uploads it covers is nbafl.exposures",
        ),
    )


def eps_label(eps: float) -> str:
    """``5`` → ``5``, ``0.5`` → ``0p5`` (an ε as part of an arm's name)."""
    return f"{eps:g}".replace(".", "p")


class NbAFL(Arm):
    """NbAFL: each client clips its model and adds Gaussian noise before upload (local DP); one arm per ε."""

    kind: ClassVar[str] = "nbafl"
    coding: ClassVar[Coding] = Coding.PLAIN
    clip_key: ClassVar[str | None] = "nbafl.clip"
    colormap: ClassVar[str | None] = "YlOrBr"
    summary: ClassVar[str] = "NbAFL: clients clip and add Gaussian noise before upload, one arm per ε"
    settings: ClassVar[Mapping[str, type]] = MappingProxyType({"nbafl": NbaflConfig})
    noise_stream: ClassVar[str] = "nbafl"  # its clients' Gaussian noise

    def instances(self, cfg: DictConfig) -> list[str]:
        return [f"nbafl_eps{eps_label(e)}" for e in cfg.nbafl.epsilons]

    def epsilon(self, cfg: Any, arm: str) -> float:
        """The ε of instance ``arm`` (``nbafl_eps5`` → 5.0)."""
        for eps in cfg.nbafl.epsilons:
            if f"nbafl_eps{eps_label(eps)}" == arm:
                return float(eps)
        raise KeyError(arm)

    def sigma(self, ctx: ArmContext) -> float:
        # deferred: numpy, torch, which this module does not load otherwise
        from sifl_ray.privacy.nbafl import nbafl_exposures, nbafl_sigma

        nb = ctx.cfg.nbafl
        return float(
            nbafl_sigma(
                epsilon=self.epsilon(ctx.cfg, ctx.arm),
                delta=nb.delta,
                clip=nb.clip,
                local_size=ctx.local_size,
                # L = T: a client can upload in every round (also under sampling), see nbafl_exposures.
                exposures=nbafl_exposures(exposures=nb.exposures, rounds=ctx.cfg.train.rounds),
                calibration=nb.calibration,
            )
        )

    def steps(self, ctx: ArmContext) -> PartySteps:
        # Each client's noise seed is made in its worker (secure random, or from coding.key_seed).
        seeds = self.client_noise_seeds(ctx)
        return PartySteps(client=chain(clip(ctx.cfg.nbafl.clip), gaussian(self.sigma(ctx), seeds)))

    def releases(self) -> tuple[Release, ...]:
        return plain_releases("clip_C(w_i) + N(0, sigma^2 I) (the client's own noise)")

    def privacy(self, ctx: ArmContext) -> dict[str, Any] | None:
        # deferred: numpy, torch, which this module does not load otherwise
        from sifl_ray.privacy.nbafl import (
            NEIGHBOUR_RELATION,
            THREAT_MODEL,
            nbafl_condition,
            nbafl_exposures,
            nbafl_guarantee,
        )

        nb, rounds = ctx.cfg.nbafl, ctx.cfg.train.rounds
        exposures = nbafl_exposures(exposures=nb.exposures, rounds=rounds)
        eps = self.epsilon(ctx.cfg, ctx.arm)
        return {
            "mechanism": "nbafl-gaussian",
            "epsilon": eps,
            "epsilon_local": eps,
            "delta": nb.delta,
            "sigma": self.sigma(ctx),
            "clip": nb.clip,
            "exposures": nb.exposures,
            "uploads_covered": exposures,
            "calibration": nb.calibration,
            "guarantee": nbafl_guarantee(exposures=nb.exposures, rounds=rounds, calibration=nb.calibration),
            "scope": "the whole upload vector, "
            + (f"all {exposures} rounds together" if exposures > 1 else "each round alone"),
            "neighbour_relation": NEIGHBOUR_RELATION,
            "threat_model": THREAT_MODEL,
            "conditional": nbafl_condition(clip=float(nb.clip), local_size=int(ctx.local_size)),
        }
