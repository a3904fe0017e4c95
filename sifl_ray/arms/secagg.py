"""``secagg`` and ``dp_fedavg_secagg``: FedAvg and DP-FedAvg with the uploads under secure aggregation.

Both are compositions of steps the platform already has, registered once, around the masking of
:mod:`sifl_ray.parties.secure` (Bonawitz et al., CCS 2017; SecAgg+ graph of Bell et al., CCS 2020):

=====================  ====================================  ===================================  ========
arm                    client step, then mask                the aggregator, on the unmasked sum  server
=====================  ====================================  ===================================  ========
``secagg``             clip the update to C (secagg.clip)    the FedAvg mean (weights |D_i|)      add it
``dp_fedavg_secagg``   clip to C, add this client's share    the fixed-denominator mean Σ/(qN)    add it
                       of the noise, N(0, (zC)²/t)           (no noise: the clients added it)
=====================  ====================================  ===================================  ========

``secagg`` hides each update from the aggregator exactly, and its model equals ``fl``'s within the
fixed-point quantisation bound (it is paired with ``fl``, which the evaluator checks each round); it claims no
differential privacy: the sum itself is released in the clear to the aggregator and the server.
``dp_fedavg_secagg`` is distributed DP (Kairouz et al., ICML 2021, with continuous noise): every client adds
a share of the Gaussian noise before masking, so the aggregator sees only the noisy sum and no party ever
holds an update with less noise than the accountant's. Its accountant and calibration are DP-FedAvg's
(:class:`~sifl_ray.arms.dp_fedavg.DpFedAvg`), under the assumptions the noise split states
(:func:`sifl_ray.privacy.dp_fedavg.distributed_noise_std`): at least t clients add their share in a round,
and the rounding of each noised update to the ring is not accounted.

Its neighbour relation is zero-out, not add/remove (docs/method.md "What a DP guarantee must say"): the noise
in the sum grows with the clients in it (k shares of (zC)²/t), so a client that is absent takes its share away
and the variance of the release tells whether it took part; the aggregator also receives the roster. So the
guarantee is stated for a client that takes part and adds its share, its update replaced by 0, with
participation public; there is then no amplification by sampling, and the accountant composes T unsampled
Gaussian mechanisms (the worst case: a client sampled in every round). A round refused below the threshold t
releases nothing new, and what it tells (that fewer than t clients took part) is participation, public under
this relation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from sifl_ray.arms.base import Arm, ArmContext, PartySteps, Release
from sifl_ray.arms.dp_fedavg import DpFedAvg, DpFedAvgConfig, clipped_update
from sifl_ray.arms.fedavg import FedAvg
from sifl_ray.arms.nbafl import NbAFL
from sifl_ray.arms.steps import add_update, chain, fixed_denominator, noise_share
from sifl_ray.config.validation import AT_LEAST_1, NONNEG, POSITIVE, Range, setting
from sifl_ray.specs import Coding

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from sifl_ray.privacy.secagg.ring import FixedPointCodec
    from sifl_ray.privacy.secagg.spec import SecAggSpec


@dataclass
class SecAggConfig:
    """Secure aggregation (docs/method.md "Baselines"; Bonawitz et al. 2017, SecAgg+ of Bell et al. 2020): the
    arms ``secagg`` and ``dp_fedavg_secagg``. Each client's upload is encoded in fixed point into Z_(2^k) and
    masked; the aggregator can unmask only the sum of the survivors' uploads."""

    # C of the secagg arm: each update is clipped to ‖w_i − w^t‖₂ ≤ C (its coordinates too)
    clip: float = setting(10.0, rule=POSITIVE)
    # k: the ring Z_(2^k); a masked upload costs k bits per parameter
    ring_bits: int = setting(
        32, rule=Range(lambda v: 2 <= v <= 64, "an integer in [2, 64] (the ring is held in uint64)")
    )
    # f: 2^-f resolution; None → the largest for which no sum can wrap
    frac_bits: int | None = setting(None, rule=NONNEG)
    # SecAgg+ neighbours per client; None → every pair (the original protocol)
    degree: int | None = setting(None, rule=AT_LEAST_1)
    # Shamir t per closed neighbourhood; None → ⌈2(k+1)/3⌉ (a majority)
    threshold: int | None = setting(
        None, rule=Range(lambda v: v >= 2, "an integer ≥ 2 (one share alone must not rebuild a secret)")
    )
    # dp_fedavg_secagg: coordinates are encoded up to C + margin·σ_client
    noise_margin: float = setting(8.0, rule=POSITIVE)
    # dp_fedavg_secagg: the shares its noise is split into, each client adding 1/shares of the variance;
    # null → the threshold t, so that a round that is unmasked carries at least the planned noise. More
    # (up to the clients of a round) add less noise when every client arrives; a round with fewer survivors
    # than shares then carries less, and the run reports the ε that the noise which arrived gives
    noise_shares: int | None = setting(None, rule=AT_LEAST_1)


def arm_codec(cfg: Any, clip: float) -> FixedPointCodec:
    """The fixed-point ring of a secure arm whose coordinates are clipped to ``clip``: ``secagg.ring_bits``,
    and ``secagg.frac_bits`` or the most that keep a sum of every client's encoding from wrapping.

    Raises:
        ValueError: no precision fits the ring (the message says the ring size that would).
    """
    # deferred: cryptography, numpy, torch, which this module does not load otherwise
    from sifl_ray.privacy.secagg.spec import fit_codec

    sa = cfg.secagg
    return fit_codec(
        clip=clip,
        # every client, and the in-run audit's canary clients, can be in one round's sum
        num_summands=int(cfg.clients.num_clients) + int(cfg.audit.canaries),
        ring_bits=int(sa.ring_bits),
        frac_bits=None if sa.frac_bits is None else int(sa.frac_bits),
    )


def secagg_spec(cfg: Any, *, n: int, clip: float, weight_ref: float, min_survivors: int = 0) -> SecAggSpec:
    """The public parameters every party of a secure arm agrees on (:class:`~sifl_ray.privacy.secagg.spec.
    SecAggSpec`): a ring sized so that the sum of every client's encoding cannot wrap."""
    # deferred: cryptography, numpy, torch, which this module does not load otherwise
    from sifl_ray.privacy.secagg.spec import SecAggSpec

    sa = cfg.secagg
    return SecAggSpec(
        codec=arm_codec(cfg, clip),
        vector_len=n,
        degree=None if sa.degree is None else int(sa.degree),
        threshold=None if sa.threshold is None else int(sa.threshold),
        weight_ref=weight_ref,
        key_seed=cfg.coding.key_seed,
        min_survivors=min_survivors,
    )


def _ring_problems(cfg: Any, clip: float) -> list[str]:
    """The ring must hold a sum of every client's encoding at some precision (checked up front)."""
    try:
        arm_codec(cfg, clip)
    except ValueError as err:
        return [f"secagg.ring_bits: {err}"]
    return []


def _graph_problems(cfg: Any) -> list[str]:
    """A configured threshold must fit the closed neighbourhoods of a full round."""
    # deferred: cryptography, numpy, torch, which this module does not load otherwise
    from sifl_ray.privacy.secagg import default_threshold

    sa = cfg.secagg
    num_clients = int(cfg.clients.num_clients)
    if num_clients < 2:
        return ["clients.num_clients: secure aggregation needs at least 2 clients a round, got 1"]
    degree = sa.degree
    closed = (num_clients - 1 if degree is None else min(int(degree), num_clients - 1)) + 1
    t = sa.threshold
    if t is not None and not closed // 2 + 1 <= int(t) <= closed:
        return [
            f"secagg.threshold: expected an integer in [{closed // 2 + 1}, {closed}] for closed "
            f"neighbourhoods of {closed} clients (degree {closed - 1}), got {t}; a majority stops the "
            "aggregator from rebuilding both secrets of one client. Set it, or null for "
            f"{default_threshold(closed)}"
        ]
    return []


class SecAgg(Arm):
    """Secure aggregation (SecAgg / SecAgg+): the server learns only the sum of the uploads; equal to fl
    within the fixed-point quantisation."""

    kind: ClassVar[str] = "secagg"
    coding: ClassVar[Coding] = Coding.PLAIN
    secure_aggregation: ClassVar[bool] = True
    paired_with: ClassVar[str | None] = FedAvg.kind  # equal to it within the fixed-point quantisation
    clip_key: ClassVar[str | None] = "secagg.clip"
    colormap: ClassVar[str | None] = "Purples"
    clips: ClassVar[str] = "updates to ‖w_i − w^t‖"
    uploads: ClassVar[str] = "update"
    settings: ClassVar[Mapping[str, type]] = MappingProxyType({"secagg": SecAggConfig})
    summary: ClassVar[str] = (
        "secure aggregation (SecAgg/SecAgg+): masked fixed-point updates, the aggregator unmasks only the sum"
    )

    def problems(self, cfg: DictConfig) -> list[str]:
        return _ring_problems(cfg, float(cfg.secagg.clip)) + _graph_problems(cfg)

    def steps(self, ctx: ArmContext) -> PartySteps:
        clip = float(ctx.cfg.secagg.clip)
        # the largest |D_i| of any client: public (it bounds the weights), from the partition the driver made
        spec = secagg_spec(ctx.cfg, n=ctx.n, clip=clip, weight_ref=float(ctx.largest_size or ctx.local_size))
        return PartySteps(client=clipped_update(clip), server=add_update(), secagg=spec)

    def releases(self) -> tuple[Release, ...]:
        return secure_releases("clip_C(w_i - w^t)", "the FedAvg mean of the clipped updates")

    def privacy(self, ctx: ArmContext) -> dict[str, Any] | None:
        return {
            "mechanism": "secure-aggregation",
            "guarantee": "the aggregator learns the sum of the surviving clients' updates and nothing else "
            "(semi-honest parties, Bonawitz et al. 2017); no differential privacy: the sum is exact",
            "scope": "each upload is hidden from the aggregator and the server; the aggregate is not",
            **ring_report(ctx.cfg, clip=float(ctx.cfg.secagg.clip)),
        }


class DpFedAvgSecAgg(DpFedAvg):
    """DP-FedAvg with the noise split over the clients and the uploads under secure aggregation."""

    kind: ClassVar[str] = "dp_fedavg_secagg"
    secure_aggregation: ClassVar[bool] = True
    amplified: ClassVar[bool] = False  # zero-out, participation public: the accountant's q is 1
    zero_out: ClassVar[bool] = True
    every_round: ClassVar[bool] = (
        False  # a round nobody took part in has nothing to unmask: participation is public
    )
    #: its clients' Gaussian noise shares are drawn under the label of NbAFL's client noise: each client's
    #: seed depends on the arm's name, so the two arms' streams are apart all the same
    noise_stream: ClassVar[str] = NbAFL.noise_stream
    colormap: ClassVar[str | None] = "RdPu"
    settings: ClassVar[Mapping[str, type]] = MappingProxyType(
        {"dp_fedavg": DpFedAvgConfig, "secagg": SecAggConfig}
    )
    summary: ClassVar[str] = (
        "DP-FedAvg, distributed: each client adds its share of the noise, uploads masked (secure aggregation)"
    )

    def problems(self, cfg: DictConfig) -> list[str]:
        clip = float(cfg.dp_fedavg.clip)
        # the ring must hold C plus the noise margin; the noise multiplier is known only after calibration,
        # so the up-front check uses C alone and the set-up reports the precision actually fitted
        return super().problems(cfg) + _ring_problems(cfg, clip) + _graph_problems(cfg)

    def threshold(self, cfg: Any) -> int:
        """t: the fewest clients whose masked inputs a round can unmask (the protocol's floor)."""
        return round_threshold(cfg)

    def num_noisers(self, cfg: Any) -> int:
        """s: the shares the round's noise is split into (each client adds ``1/s`` of the variance):
        ``secagg.noise_shares``, or t, the fewest survivors a round that completes can have, so that it
        carries at least the planned noise (more when more survive, never less)."""
        shares = cfg.secagg.noise_shares
        return int(shares) if shares is not None else self.threshold(cfg)

    def realised_privacy(
        self, privacy: Mapping[str, Any], rounds: Sequence[Mapping[str, float]]
    ) -> dict[str, float]:
        """The ε of the noise that arrived, after ``rounds``: a round's sum carries one share per upload in it
        (``clients/accepted``, k), so its multiplier is ``z·√(k/s)``; a round that released nothing costs
        nothing. ``{}`` while no round carried fewer than s shares (the planned ε then holds)."""
        z, s = float(privacy["noise_multiplier"]), int(privacy["num_noisers"])
        shares = [int(r["clients/accepted"]) for r in rounds if r["clients/accepted"] > 0]
        if all(k >= s for k in shares):
            return {}
        # deferred: dp_accounting, numpy, torch, which this module does not load otherwise
        from sifl_ray.privacy.dp_fedavg import epsilon_of_rounds

        epsilon = epsilon_of_rounds(
            noise_multipliers=[z * math.sqrt(k / s) for k in shares],
            delta=float(privacy["delta"]),
            accountant=privacy["accountant"],
        )
        return {"privacy/epsilon_realised": epsilon, "privacy/shares_missing": float(s - min(shares))}

    def steps(self, ctx: ArmContext) -> PartySteps:
        # deferred: dp_accounting, numpy, torch, which this module does not load otherwise
        from sifl_ray.privacy.dp_fedavg import distributed_noise_std

        cfg, clip = ctx.cfg, float(ctx.cfg.dp_fedavg.clip)
        z = self.accounting(ctx)["noise_multiplier"]
        t = self.num_noisers(cfg)
        sigma = distributed_noise_std(noise_multiplier=z, clip=clip, num_noisers=t)
        bound = clip + float(cfg.secagg.noise_margin) * sigma
        spec = secagg_spec(cfg, n=ctx.n, clip=bound, weight_ref=1.0, min_survivors=self.threshold(cfg))
        seeds = self.client_noise_seeds(ctx)
        expected = float(cfg.clients.fraction) * int(cfg.clients.num_clients)
        return PartySteps(
            # clip the update to C, then add this client's share N(0, (zC)²/t) of the round's noise
            client=chain(clipped_update(clip), noise_share(z, clip, t, seeds)),
            aggregator=fixed_denominator(expected),
            server=add_update(),
            secagg=spec,
        )

    def releases(self) -> tuple[Release, ...]:
        return secure_releases(
            "clip_C(w_i - w^t) + N(0, (zC)^2/t) (the client's share of the noise)",
            "sum_i (clipped update + noise share)/(qN): DP-FedAvg's noisy mean",
        )

    def privacy(self, ctx: ArmContext) -> dict[str, Any] | None:
        out = dict(super().privacy(ctx) or {})
        cfg = ctx.cfg
        t = self.num_noisers(cfg)
        out.update(
            mechanism="dp-fedavg-distributed-gaussian",
            num_noisers=t,
            threshold=self.threshold(cfg),
            amplified_by_sampling=False,  # the aggregator receives the roster: every round is counted
            aggregator_covered=True,  # it unmasks only the noisy sum
            neighbour_relation="zero-out: the client takes part and adds its noise share, its update "
            "replaced by 0; who takes part is public",
            threat_model="the aggregator (which sees the roster and only the noisy sum), the server and "
            f"anyone downstream, all rounds; at least s = {t} honest clients add their share in every round",
            epsilon_roster_known=out["epsilon"],
            roster_known="the ε already assumes the roster is known: it is not amplified by sampling",
            guarantee="client-level (ε, δ) of everything the aggregator and the server receive over all "
            "rounds, zero-out relation (the noise in the sum grows with the clients in it, so it gives no "
            "add/remove guarantee), unsampled Gaussian composed over every round, from dp_accounting; the "
            f"noise is added by the clients, 1/s of the variance each, s = {t}: it holds when at least s "
            "honest clients add their share in every round (a round with fewer survivors than the threshold "
            "is not unmasked: it tells only who took part, public here; one unmasked with fewer than s "
            "carries less noise, and the run reports the ε of the noise that arrived, "
            "privacy/epsilon_realised), for the continuous mechanism (the ring's rounding of each noised "
            "update is not accounted; Kairouz et al. 2021 discretise it)",
            scope="every global model released, all rounds together; the aggregator sees only the noisy sum",
        )
        sigma = out["noise_multiplier"] * float(cfg.dp_fedavg.clip) / math.sqrt(t)
        out.update(ring_report(cfg, clip=float(cfg.dp_fedavg.clip) + float(cfg.secagg.noise_margin) * sigma))
        return out


def round_threshold(cfg: Any) -> int:
    """Shamir's t of a full round (``secagg.threshold``, or the default for the round's closed
    neighbourhoods): the fewest clients whose masked inputs the aggregator can unmask."""
    # deferred: cryptography, numpy, torch, which this module does not load otherwise
    from sifl_ray.privacy.secagg import default_threshold

    sa = cfg.secagg
    expected = max(2, math.floor(float(cfg.clients.fraction) * int(cfg.clients.num_clients)))
    closed = (expected - 1 if sa.degree is None else min(int(sa.degree), expected - 1)) + 1
    return int(sa.threshold) if sa.threshold is not None else default_threshold(closed)


def secure_releases(upload: str, aggregate: str) -> tuple[Release, ...]:
    """The channels of an arm under secure aggregation."""
    return (
        Release("client", "aggregator", "upload", f"{upload}, fixed-point, masked: uniform in Z_(2^k)"),
        Release("aggregator", "server", "aggregate", aggregate + " (unmasked sum of the survivors only)"),
        Release("server", "clients", "broadcast", "w^t + the mean update"),
    )


def ring_report(cfg: Any, *, clip: float) -> dict[str, Any]:
    """The ring's public parameters and its quantisation bound, for the privacy report and the summary."""
    sa = cfg.secagg
    codec = arm_codec(cfg, clip)
    degree = int(cfg.clients.num_clients) - 1 if sa.degree is None else int(sa.degree)
    return {
        "ring_bits": codec.ring_bits,
        "frac_bits": codec.frac_bits,
        "coordinate_clip": codec.clip,
        "graph_degree": min(degree, int(cfg.clients.num_clients) - 1),
        "sum_error_bound_per_client": codec.sum_error_bound(1),
    }
