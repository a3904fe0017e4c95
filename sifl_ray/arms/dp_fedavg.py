"""``dp_fedavg``: DP-FedAvg with central noise (McMahan et al., ICLR 2018; docs/method.md "Baselines").

A round, as Algorithm 1 there has it: each client is sampled with probability q (``clients.sampling=poisson``,
``clients.fraction=q``), clips its update ``Δ_i = w_i − w^t`` to ``‖Δ_i‖ ≤ C`` and uploads it; the aggregator
forms the fixed-denominator mean ``Σ_i Δ_i / (qN)`` (equal weights: the weights must not depend on a client's
data) and adds ``N(0, (zC/(qN))²)`` per coordinate; the server adds the noisy mean to the global model. One
client moves the sum by at most C, whoever else is sampled, so each round is the Poisson-subsampled Gaussian
mechanism with noise multiplier z, and T rounds compose: the client-level (ε, δ) over the whole run comes from
Google's ``dp_accounting`` (``dp_fedavg.accountant``: RDP or PLD; :mod:`sifl_ray.privacy.dp_fedavg`), and z is
calibrated so that it meets each target ε of ``dp_fedavg.epsilons`` after ``train.rounds`` rounds (one arm per
target: ``dp_fedavg_eps5``, ...).

Trust: the noise is central, so the aggregator and the server see the clipped updates in the clear; the
guarantee is about what the released models reveal (to the clients, to anyone downstream), not about what the
aggregator sees. Hiding the updates from it as well is secure aggregation's job (docs/method.md "Baselines").

What the ε says (docs/method.md "What a DP guarantee must say"): the relation is add/remove (one client's
whole data set present or absent), and the amplification by sampling in it holds against whoever cannot tell
who was sampled: the sample is drawn from the sampling party's secret seed, and a round in which nobody was
sampled still releases the central noise (the arm's ``every_round``: the aggregator's step runs on a zero
sum). Against the server, which draws the sample, the report gives the ε without amplification
(``epsilon_roster_known``: a client sampled in every round).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from sifl_ray.arms.base import Arm, ArmContext, ClientStep, PartySteps, Release
from sifl_ray.arms.nbafl import eps_label
from sifl_ray.arms.steps import add_update, chain, clip, to_update
from sifl_ray.config import names
from sifl_ray.config.validation import POSITIVE, PROBABILITY, Choice, Range, setting
from sifl_ray.specs import Coding

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from sifl_ray.privacy.dp_fedavg import Accountant


@dataclass
class DpFedAvgConfig:
    """DP-FedAvg (docs/method.md "Baselines"; McMahan et al. 2018): client-level (ε, δ) over all rounds, from
    an accountant (``sifl_ray.privacy.dp_fedavg``), with the noise multiplier calibrated to each target ε."""

    # one dp_fedavg arm per target ε
    epsilons: list[float] = setting(
        default_factory=lambda: [5.0],
        rule=Range(lambda v: all(e > 0 for e in v), "every ε > 0; for example dp_fedavg.epsilons=[1,5,10]"),
    )
    delta: float = setting(1e-5, rule=PROBABILITY)  # δ of every dp_fedavg arm's (ε, δ), for the accountant
    # C: every client's update Δ_i = w_i − w^t is clipped to ‖Δ_i‖ ≤ C
    clip: float = setting(1.0, rule=POSITIVE)
    # rdp | pld (dp_accounting)
    accountant: str = setting(
        "rdp",
        rule=Choice(
            lambda: names.DP_ACCOUNTANTS,
            meaning="rdp: Rényi DP (conservative); pld: privacy loss distributions (tighter, slower), both "
            "from Google's dp_accounting",
        ),
    )


def clipped_update(radius: float) -> ClientStep:
    """Client step: upload the update ``clip_C(w_i − w^t)`` instead of the model."""
    return chain(to_update(), clip(radius))


@dataclass
class CentralNoise:
    """Aggregator step: the fixed-denominator mean of the clipped updates plus ``N(0, (zC/m)²)``, m = qN.

    The shard receives the mean over the accepted clients, ``Σ Δ_i / k`` (k = ``weight``, their number under
    equal weights), and rescales it to ``Σ Δ_i / m``. It runs in every round (the arm's ``every_round``), on
    a zero sum when nobody was sampled, and adds its noise whatever the weight. The noise comes from the
    aggregator's own secret stream: in a run, the seed the aggregator keeps in its key file (``seed``), so
    that a replayed round draws the same noise; called alone, a seed made in this process on first use
    (secure random, or from ``coding.key_seed`` for a reproducible simulation), which never leaves it:
    pickling keeps only ``key_seed``. Metric ``noise_std``: the std zC/m of the noise in each coordinate of
    the released mean, the figure the accountant's ε rests on.

    One step, not a chain of :func:`~sifl_ray.arms.steps.fixed_denominator` and a noise step: the audit
    (:mod:`sifl_ray.attacks.arm_audit`) recognises the mechanism by this class and reads its z, C and m.
    """

    noise_multiplier: float
    clip: float
    expected_clients: float
    key_seed: int | None = None
    _seeds: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def __call__(
        self,
        average: torch.Tensor,
        *,
        arm: str,
        t: int,
        shard: int,
        bounds: tuple[int, int],
        weight: float,
        seed: bytes | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        # deferred: numpy, which this module does not load otherwise
        from sifl_ray.party_seeds import party_seed

        # deferred: dp_accounting, numpy, torch, which this module does not load otherwise
        from sifl_ray.privacy.dp_fedavg import add_central_noise, central_noise_std

        # deferred: numpy, which this module does not load otherwise
        from sifl_ray.seeding import secret_torch_generator

        if seed is None:
            seed = self._seeds.get(arm)
        if seed is None:
            seed = self._seeds[arm] = party_seed(self.key_seed, arm, "aggregator-dp-noise")
        noisy = add_central_noise(
            average * (weight / self.expected_clients),
            noise_multiplier=self.noise_multiplier,
            clip=self.clip,
            expected_clients=self.expected_clients,
            generator=secret_torch_generator(seed, "noise", "dp_fedavg", t, shard),
        )
        std = central_noise_std(
            noise_multiplier=self.noise_multiplier, clip=self.clip, expected_clients=self.expected_clients
        )
        return noisy, {"noise_std": std}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_seeds"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._seeds = {}


class DpFedAvg(Arm):
    """DP-FedAvg (central noise): clipped updates averaged with a fixed denominator, Gaussian noise added by
    the trusted server; one arm per target ε, calibrated by the accountant."""

    kind: ClassVar[str] = "dp_fedavg"
    coding: ClassVar[Coding] = Coding.PLAIN
    clip_key: ClassVar[str | None] = "dp_fedavg.clip"
    colormap: ClassVar[str | None] = "Blues"
    uniform_weights: ClassVar[bool] = True
    clips: ClassVar[str] = "updates to ‖w_i − w^t‖"
    uploads: ClassVar[str] = "update"
    every_round: ClassVar[bool] = True  # an empty round releases the central noise (amplification needs it)
    settings: ClassVar[Mapping[str, type]] = MappingProxyType({"dp_fedavg": DpFedAvgConfig})
    summary: ClassVar[str] = (
        "DP-FedAvg: clipped updates, central Gaussian noise, (ε, δ) over all rounds from dp_accounting"
    )

    def instances(self, cfg: DictConfig) -> list[str]:
        return [f"{self.kind}_eps{eps_label(e)}" for e in cfg.dp_fedavg.epsilons]

    def problems(self, cfg: DictConfig) -> list[str]:
        clients = cfg.clients
        if clients.sampling != "poisson" and clients.fraction < 1:
            return [
                "clients.sampling: dp_fedavg's accountant assumes each client is sampled independently with "
                f"probability clients.fraction, got sampling={clients.sampling!r}; set "
                "clients.sampling=poisson (or clients.fraction=1)"
            ]
        return []

    def epsilon(self, cfg: Any, arm: str) -> float:
        """The target ε of instance ``arm`` (``dp_fedavg_eps5`` → 5.0)."""
        for eps in cfg.dp_fedavg.epsilons:
            if f"{self.kind}_eps{eps_label(eps)}" == arm:
                return float(eps)
        raise KeyError(arm)

    #: the accountant's sampling rate is q (amplification by a secret sample); ``False``: 1, the sample is
    #: public to the parties the guarantee is stated against (distributed DP under secure aggregation)
    amplified: ClassVar[bool] = True

    def sample_rate(self, cfg: Any) -> float:
        """The sampling rate the accountant is told: q when the guarantee is amplified by sampling, else 1."""
        return float(cfg.clients.fraction) if self.amplified else 1.0

    def accounting(self, ctx: ArmContext) -> dict[str, Any]:
        """The noise multiplier calibrated for this instance's ε, and what the accountant then says."""
        cfg, dp = ctx.cfg, ctx.cfg.dp_fedavg
        return dict(
            _calibrated(
                self.epsilon(cfg, ctx.arm),
                float(dp.delta),
                self.sample_rate(cfg),
                int(cfg.train.rounds),
                _accountant(dp),
            )
        )

    def roster_known_epsilon(self, ctx: ArmContext, noise_multiplier: float) -> float:
        """ε against a party that knows who was sampled, for a client sampled in every round: no
        amplification, T Gaussian mechanisms of multiplier z (the worst case over the sample)."""
        # deferred: dp_accounting, numpy, torch, which this module does not load otherwise
        from sifl_ray.privacy.dp_fedavg import epsilon

        cfg, dp = ctx.cfg, ctx.cfg.dp_fedavg
        return epsilon(
            noise_multiplier=noise_multiplier,
            sample_rate=1.0,
            steps=int(cfg.train.rounds),
            delta=float(dp.delta),
            accountant=_accountant(dp),
        )

    def steps(self, ctx: ArmContext) -> PartySteps:
        cfg, clip = ctx.cfg, float(ctx.cfg.dp_fedavg.clip)
        noise = CentralNoise(
            noise_multiplier=self.accounting(ctx)["noise_multiplier"],
            clip=clip,
            expected_clients=float(cfg.clients.fraction) * int(cfg.clients.num_clients),
            key_seed=cfg.coding.key_seed,
        )
        return PartySteps(client=clipped_update(clip), aggregator=noise, server=add_update())

    def releases(self) -> tuple[Release, ...]:
        return (
            Release("client", "aggregator", "upload", "clip_C(w_i - w^t), in the clear (central DP)"),
            Release("aggregator", "server", "aggregate", "sum_i clip_C(Delta_i)/(qN) + N(0, (zC/(qN))^2 I)"),
            Release("server", "clients", "broadcast", "w^t + the noisy mean update"),
        )

    def privacy(self, ctx: ArmContext) -> dict[str, Any] | None:
        cfg, dp = ctx.cfg, ctx.cfg.dp_fedavg
        acc = self.accounting(ctx)
        q = float(cfg.clients.fraction)
        z = acc["noise_multiplier"]
        eps = acc["epsilon_per_round"][-1]
        return {
            "mechanism": "dp-fedavg-gaussian",
            "epsilon": eps,
            "epsilon_target": self.epsilon(cfg, ctx.arm),
            "delta": float(dp.delta),
            "noise_multiplier": z,
            # the sampler's rate, and the rate the accountant was told (q amplifies; 1: the sample is known)
            "sampling_rate": q,
            "accountant_sample_rate": self.sample_rate(cfg),
            "clip": float(dp.clip),
            "accountant": str(dp.accountant),
            "sampling": "poisson",  # from the server's secret seed (Checkpoints.sampler_seed)
            "amplified_by_sampling": self.amplified and q < 1,
            # its trade-off curve: T Gaussian mechanisms compose to one (μ = √T/z), a sampled one does not
            # (what the in-run audit's f-DP bound tests: docs/method.md "Auditing inside the run")
            "tradeoff": "gaussian" if self.sample_rate(cfg) >= 1 else "subsampled gaussian",
            "epsilon_per_round": list(acc["epsilon_per_round"]),
            "neighbour_relation": "add/remove: one client's whole data set present or absent",
            "threat_model": "the released global models, all rounds, seen by anyone who cannot tell who was "
            "sampled (the clients, everyone downstream); the aggregator sees every clipped update in the "
            "clear and is not covered",
            "aggregator_covered": False,  # it sees every clipped update in the clear
            "epsilon_roster_known": eps if q >= 1 else self.roster_known_epsilon(ctx, z),
            "roster_known": "the server draws the sample: against it (and anyone it tells) amplification by "
            "sampling does not hold, and the ε is that of a client sampled in every round",
            "accountant_cross_check": _cross_check(
                z, self.sample_rate(cfg), int(cfg.train.rounds), float(dp.delta)
            ),
            "guarantee": "client-level (ε, δ) of the released global models over all rounds "
            "(add or remove one client's whole data set), Poisson-subsampled Gaussian, from dp_accounting; "
            "a round in which nobody was sampled still releases the noise",
            "scope": "every global model released, all rounds together; the aggregator sees the updates",
        }


def _accountant(dp: Any) -> Accountant:
    """``dp_fedavg.accountant`` as the accountant's type: the validator has checked it is one of them."""
    name = str(dp.accountant)
    if name not in ("rdp", "pld"):
        raise ValueError(f"dp_fedavg.accountant: expected rdp or pld, got {name!r}")
    return name  # type: ignore[return-value]


@lru_cache(maxsize=64)
def _calibrated(
    target: float, delta: float, sample_rate: float, rounds: int, accountant: Accountant
) -> tuple[tuple[str, Any], ...]:
    """z for ``target`` after ``rounds`` rounds, and the cumulative ε after each round (cached: the arm's
    steps and its report both need them)."""
    # deferred: dp_accounting, numpy, torch, which this module does not load otherwise
    from sifl_ray.privacy.dp_fedavg import calibrate, epsilon_per_round

    z = calibrate(
        target_epsilon=target,
        steps=rounds,
        delta=delta,
        sample_rate=sample_rate,
        accountant=accountant,
        sampling="poisson",
    )
    history = epsilon_per_round(
        noise_multiplier=z,
        rounds=rounds,
        delta=delta,
        sample_rate=sample_rate,
        accountant=accountant,
        sampling="poisson",
    )
    return (("noise_multiplier", z), ("epsilon_per_round", tuple(history)))


@lru_cache(maxsize=64)
def _cross_check(noise_multiplier: float, sample_rate: float, rounds: int, delta: float) -> dict[str, Any]:
    """The same schedule's ε from RDP and from PLD (both ``dp_accounting``), their ratio, and whether they
    disagree beyond the accountants' known slack (:func:`sifl_ray.privacy.dp_fedavg.cross_check`)."""
    from dataclasses import asdict

    # deferred: dp_accounting, numpy, torch, which this module does not load otherwise
    from sifl_ray.privacy.dp_fedavg import cross_check

    got = cross_check(noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=rounds, delta=delta)
    return asdict(got)
