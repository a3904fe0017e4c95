"""SIFL's figures before any training: the precision claims and the ε of every release of a SIFL arm.

The SIFL arms (:mod:`sifl_ray.arms.sifl`) report them, the runner checks each coded arm against them when
it sets the arm up (refusing a configuration float64 cannot carry, docs/method.md "Precision"), and
``sifl describe`` (:mod:`sifl_ray.describe`) prints them for a scenario: one source for the three. The ε are
the per-element figures of docs/method.md "Differential privacy", which the accountant also records round by
round (:mod:`sifl_ray.privacy.accountant`).

It imports torch (the precision model reads ``coding.dtype`` as a torch dtype): the arm modules, which the
configuration validator reads, import it inside the methods that need it.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from omegaconf import DictConfig

from sifl_ray.coding.base import AggregatorNorms, KeyNorms, NoiseSpec, ServerKey
from sifl_ray.coding.precision import PrecisionReport, Scheme, check_precision, predict_decode_error
from sifl_ray.coding.roundoff import (
    AggregatorRoundoff,
    KeyRoundoff,
    RoundBound,
    round_error_bound,
    run_round_bound,
)
from sifl_ray.privacy.accountant import ArmReleases, arm_release_epsilons, describe_release_epsilons
from sifl_ray.specs import Coding

ROUND0_NOTE = (
    "round 0 of M2 is an M1 round: its clients start from the server's M1 encoding P1 w0 + N1 r1 and strip "
    "no code 2, so its uploads carry N1 r1 without the ||P2R|| factor and its broadcast is M1's"
)
#: Who a SIFL ε is about: the paper's adjacency (§5: local data sets that differ on a single element), record
#: level, for one element of one release in one round.
SIFL_NEIGHBOUR_RELATION = (
    "one sample of one client's local data set changed (record level): D_i and D_i' differing on a single "
    "element, as the paper's §5 states it; each ε is per element of one release, per round"
)
#: Against whom (the caveat says why not more).
SIFL_THREAT_MODEL = (
    "an observer without key 1 of one element of one release in one round: the aggregator (one upload's "
    "element: the round's uploads share one noise draw, so their differences are not covered) and an "
    "eavesdropper on the broadcast; not the clients, which hold P1L (and P2R in M2) and decode the "
    "broadcast exactly"
)
ROUND_BOUND_CONFIDENCE = 1e-9  # per noise draw: the round bound fails only if a draw exceeds this quantile


def noise_specs(cfg: DictConfig) -> tuple[NoiseSpec, NoiseSpec]:
    """The two SIFL noises of a configuration (the client's and the aggregator's), as the coding bounds take
    them."""
    noise = cfg.coding.noise
    return (
        NoiseSpec(distribution=noise.distribution, scale=float(noise.sigma1)),
        NoiseSpec(distribution=noise.distribution, scale=float(noise.sigma2)),
    )


def predict(
    cfg: DictConfig, *, coding: Coding, n: int, w_max: float, key: ServerKey | None = None
) -> PrecisionReport:
    """The precision model's report for one round of an arm of ``coding`` (``M1`` or ``M2``).

    The configuration alone gives the fast design's ‖P1L‖₂ and conditioning; dense and block keys are worse
    conditioned, so their owner passes ``key`` and the prediction uses its real values.
    """
    c = cfg.coding
    return predict_decode_error(
        scheme=cast(Scheme, coding.scheme),  # M1 or M2: only coded arms are predicted
        dtype=getattr(torch, c.dtype),
        n=n,
        n_tilde=n + c.n_extra,
        alpha=c.alpha,
        beta=c.beta,
        kappa=c.kappa if c.kappa is not None else 1.0 / c.alpha,
        left_inverse=c.left_inverse,
        backend=c.backend,
        distribution=c.noise.distribution,
        sigma1=c.noise.sigma1,
        sigma2=c.noise.sigma2,
        p=c.p,
        gamma=c.gamma,
        eta=c.eta,
        w_max=w_max,
        clients=cfg.clients.num_clients,
        key=key,
    )


def arm_precision(cfg: DictConfig, *, coding: Coding, n: int, w_max: float) -> dict[str, Any]:
    """The precision model's estimate of one round's decode error, checked against the tolerance.

    Raises:
        PrecisionError: the estimate exceeds ``coding.precision.tolerance`` and the policy is ``refuse``.

    ``deviation_estimate`` adds the per-round estimate once per round: what the paired FedAvg run would
    differ by if local training did not amplify a perturbation from round to round. It is an estimate, not
    a bound (the paper's CNNs amplify; a CPU may round less kindly than the estimate assumes); the
    rigorous figure is the per-round bound of :func:`arm_round_bound`.
    """
    report = predict(cfg, coding=coding, n=n, w_max=w_max)
    check_precision(report, tolerance=cfg.coding.precision.tolerance, policy=cfg.coding.precision.policy)
    per_round = float(report.predicted_max_error)
    return {
        "estimate_per_round": per_round,
        "deviation_estimate": per_round * cfg.train.rounds,
        "tolerance": float(cfg.coding.precision.tolerance),
    }


def arm_round_bound(
    cfg: DictConfig,
    *,
    coding: Coding,
    n: int,
    key_roundoff: KeyRoundoff,
    aggregator_roundoff: AggregatorRoundoff | None,
    clients_per_worker: int,
    workers: int,
    initial_norm: float,
) -> dict[str, Any] | None:
    """The rigorous per-round float64 bound of one arm (:mod:`sifl_ray.coding.roundoff`), or ``None`` where
    it does not apply (the stepwise client form trains on decoded points)."""
    if cfg.coding.client_form != "fused":
        return None
    c = cfg.coding

    def compute(model_norm: float) -> RoundBound:
        return round_error_bound(
            key_roundoff,
            scheme=coding.scheme,
            n=n,
            n_tilde=n + c.n_extra,
            model_norm=model_norm,
            clients_per_worker=clients_per_worker,
            workers=workers,
            noise_scale1=c.noise.sigma1,
            noise_scale2=c.noise.sigma2,
            distribution=c.noise.distribution,
            aggregator=aggregator_roundoff if coding.aggregator_encodes else None,
            confidence=ROUND_BOUND_CONFIDENCE,
        )

    result = run_round_bound(compute, clip=cfg.privacy.clip, initial_norm=initial_norm)
    return {
        "round_bound": result.bound,
        "round_bound_confidence": result.confidence,
        "round_bound_terms": {name: value for name, value in result.terms},
    }


def arm_releases(
    cfg: DictConfig,
    *,
    coding: Coding,
    key_norms: KeyNorms,
    agg_norms: AggregatorNorms | None,
    local_size: int,
    total_size: int,
) -> ArmReleases:
    """The ε of every release of a SIFL arm's rounds (the keys are fixed, so once per run); M2's round 0
    is an M1 round (see :class:`~sifl_ray.privacy.accountant.ArmReleases`)."""
    noise1, noise2 = noise_specs(cfg)
    return arm_release_epsilons(
        key_norms=key_norms,
        agg_norms=agg_norms if coding.aggregator_encodes else None,
        noise1=noise1,
        noise2=noise2 if coding.aggregator_encodes else None,
        clip=cfg.privacy.clip,
        local_size=local_size,
        total_size=total_size,
        delta=cfg.privacy.delta,
        coding=coding,
    )


def describe_arm(
    cfg: DictConfig,
    *,
    coding: Coding,
    key_norms: KeyNorms,
    agg_norms: AggregatorNorms | None,
    local_size: int,
    total_size: int,
) -> dict[str, Any]:
    """JSON-safe privacy summary of one SIFL arm: sound ε (the guarantee) and the paper's, per release.

    M2 also gets ``epsilon_*_round0``: its round 0 is an M1 round (the clients start from the server's M1
    encoding and strip no code 2), with M1's local and broadcast figures.
    """
    noise1, noise2 = noise_specs(cfg)
    common = {
        "key_norms": key_norms,
        "noise1": noise1,
        "clip": cfg.privacy.clip,
        "local_size": local_size,
        "total_size": total_size,
        "delta": cfg.privacy.delta,
    }
    info = describe_release_epsilons(
        agg_norms=agg_norms if coding.aggregator_encodes else None,
        noise2=noise2 if coding.aggregator_encodes else None,
        coding=coding,
        **common,
    )
    out: dict[str, Any] = {"mechanism": f"sifl-{cfg.coding.noise.distribution}", "delta": cfg.privacy.delta}
    for release, rel in info["releases"].items():
        out[f"epsilon_{release}"] = float(rel["epsilon"])
        out[f"epsilon_{release}_paper"] = float(rel["epsilon_paper"])
    if coding.aggregator_encodes:  # its round 0 is an M1 round
        first = describe_release_epsilons(agg_norms=None, noise2=None, coding=Coding.M1, **common)
        for release, rel in first["releases"].items():
            out[f"epsilon_{release}_round0"] = float(rel["epsilon"])
            out[f"epsilon_{release}_round0_paper"] = float(rel["epsilon_paper"])
        out["round0"] = ROUND0_NOTE
    out["scope"] = info["scope"]
    out["caveat"] = info["caveat"]
    out["neighbour_relation"] = SIFL_NEIGHBOUR_RELATION
    out["threat_model"] = SIFL_THREAT_MODEL
    clip = float(cfg.privacy.clip)
    out["conditional"] = (
        f"CONDITIONAL: each ε assumes the sensitivities 2C/|D_i| = {2 * clip / local_size:.3g} and "
        f"2C/|D| = {2 * clip / total_size:.3g} (C = {clip:g}, the paper's Remark 3), "
        "which hold only if changing one sample moves a client's clipped model by at most 2C/|D_i|; model "
        "clipping (‖w_i‖ ≤ C) does not enforce that (it bounds the move by 2C only)"
    )
    out["norms_exact"] = info["norms_exact"]
    return out
