"""The DP baseline of the paper's Fig. 6: NbAFL, noising before model aggregation (Wei et al. 2020).

Each client clips its local model to ``‖w_i‖₂ ≤ C`` and adds Gaussian noise before uploading; nothing removes
that noise, which is why NbAFL loses accuracy as ε shrinks (docs/method.md "The paper's experiments", Fig. 6:
C = 10, δ = 1e-5, ε ∈ {1, 5, 10, 20}). Only the uplink noise is modelled here, as in the paper's comparison.

Two independent choices fix σ (docs/method.md "Baselines"):

* the exposures L, how many uploads of one client the (ε, δ) must cover (:data:`EXPOSURES`):
  ``"multi_round"``, L = T, all uploads of a run, as NbAFL's Theorem 1 calibrates; ``"per_round"``, L = 1,
  a weaker guarantee for each upload alone (:func:`nbafl_exposures`, :data:`GUARANTEES`);
* the Gaussian calibration formula (:data:`CALIBRATIONS`): ``"classical"``, NbAFL's ``σ = c·L·Δ/ε``, or
  ``"analytic"``, the exact one (:func:`nbafl_sigma`).

Randomness comes only from the ``torch.Generator`` passed in; inputs are never modified.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from sifl_ray.config.names import NBAFL_CALIBRATIONS, NBAFL_EXPOSURES
from sifl_ray.privacy import formulas as F
from sifl_ray.privacy.clipping import clip_norm_

Calibration = Literal["classical", "analytic"]
Exposures = Literal["multi_round", "per_round"]
# The values, spelled once in sifl_ray.config.names (validation reads them there, without torch).
CALIBRATIONS: tuple[str, ...] = NBAFL_CALIBRATIONS
EXPOSURES: tuple[str, ...] = NBAFL_EXPOSURES
GUARANTEES: dict[Exposures, str] = {
    "multi_round": "(ε, δ) for all T uploads of a client (NbAFL Theorem 1)",
    "per_round": "(ε, δ) per upload, per round only",
}
#: Who the (ε, δ) is about: NbAFL's adjacency, record level (its Lemma 1 bounds the local training's
#: sensitivity for two local data sets of the same size that differ in one sample).
NEIGHBOUR_RELATION = (
    "one sample of one client's local data set replaced (record level): D_i and D_i' of the same size m_i "
    "differing in one sample, NbAFL's adjacency (Lemma 1); not a client's whole data set"
)
#: Against whom: every party that sees a noisy upload, and whatever is computed from the uploads.
THREAT_MODEL = (
    "the aggregator and the server (honest-but-curious, together or apart), who see each client's noisy "
    "upload clip_C(w_i) + N(0, σ² I), and everyone downstream of them (the aggregates, the broadcast global "
    "models, the final model: post-processing of the uploads)"
)


def nbafl_exposures(*, exposures: Exposures, rounds: int) -> int:
    """L of NbAFL's Theorem 1: how many uploads of one client the guarantee covers.

    ``"multi_round"`` gives L = T = ``rounds``: under full participation a client uploads once per round,
    and NbAFL's Theorem 1 calibrates the uplink noise for all of them. With client sampling
    (``clients.fraction < 1``) a client can still be drawn in every round, so L = T remains the number of
    rounds it can be sampled in: the worst case, kept here because it needs no argument about the sampling
    (the expected count qT would, and NbAFL's Theorem 1 does not make one). ``"per_round"`` gives L = 1:
    each upload alone is (ε, δ)-DP, and T uploads together are not (ε, δ)-DP.

    Raises:
        ValueError: ``exposures`` is not one of :data:`EXPOSURES`, or ``rounds`` < 1.
    """
    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if exposures == "multi_round":
        return int(rounds)
    if exposures == "per_round":
        return 1
    raise ValueError(
        f"exposures must be one of {', '.join(EXPOSURES)}, got {exposures!r}: multi_round covers all T "
        "uploads of a client (NbAFL Theorem 1), per_round each upload alone"
    )


def _check_positive(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def nbafl_sigma(
    *,
    epsilon: float,
    delta: float,
    clip: float,
    local_size: int,
    exposures: int = 1,
    calibration: Calibration = "classical",
) -> float:
    """Noise std σ of one NbAFL upload for (ε, δ)-DP with sensitivity ``Δ = 2C/|D_i|`` (Remark 3).

    ``calibration="classical"`` (default, the paper's baseline): ``σ = c·L·Δ/ε`` with
    ``c = √(2 ln(1.25/δ))`` and L = ``exposures``, NbAFL's calibration (Wei et al. 2020, Theorem 1, where L
    counts how often a client's parameters are exposed: T uploads under full participation, see
    :func:`nbafl_exposures`; ``exposures=1`` covers one upload only). Be aware: the classical
    Gaussian-mechanism theorem behind it (Dwork and Roth, Theorem A.1) is proven only for ε < 1. NbAFL, and
    the paper's Fig. 6 (ε = 1, 5, 10, 20), use it beyond that range anyway; it is kept so that the baseline
    is the paper's, but for ε ≥ 1 it is not a proof, and for large ε it does not even hold: with δ = 1e-5
    and L = 1 the exact δ of this σ is about 2.3e-5 at ε = 10 and 1.5e-3 at ε = 20
    (:func:`sifl_ray.privacy.formulas.gaussian_mechanism_delta`); for ε ≤ 5 it holds.

    ``calibration="analytic"``: the smallest σ whose exact δ(ε) (Balle and Wang 2018) is at most δ, valid for
    every ε; several exposures are composed exactly as one Gaussian mechanism of sensitivity ``√L·Δ`` (L
    adaptively chosen Gaussian releases of sensitivity Δ and std σ have exactly the privacy loss of one of
    sensitivity ``√L·Δ``), so its σ grows like √L where the classical one grows like L.

    Args:
        epsilon: target ε > 0.
        delta: target δ in (0, 1).
        clip: clipping threshold C > 0.
        local_size: ``|D_i|`` (use the smallest client for a common σ).
        exposures: number of uploads the guarantee must cover (≥ 1).
        calibration: ``"classical"`` or ``"analytic"``.

    Returns:
        σ, the standard deviation of the Gaussian noise added to every coordinate of the clipped upload.
    """
    epsilon = _check_positive("epsilon", epsilon)
    clip = _check_positive("clip", clip)
    F.gaussian_tail_inverse(delta=delta)  # validates δ ∈ (0, 1) with an explanatory message
    if int(exposures) != exposures or exposures < 1:
        raise ValueError(f"exposures must be an integer >= 1, got {exposures!r}")
    sensitivity = float(F.local_sensitivity(clip=clip, local_size=local_size))
    if calibration == "classical":
        return math.sqrt(2.0 * math.log(1.25 / delta)) * exposures * sensitivity / epsilon
    if calibration == "analytic":
        return _analytic_sigma(epsilon=epsilon, delta=delta, sensitivity=math.sqrt(exposures) * sensitivity)
    raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got {calibration!r}")


def nbafl_guarantee(*, exposures: Exposures, rounds: int, calibration: Calibration) -> str:
    """What an NbAFL arm's (ε, δ) guarantees, in words, for its privacy info and summary."""
    nbafl_exposures(exposures=exposures, rounds=rounds)  # validates both
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got {calibration!r}")
    how = (
        "classical calibration σ = c·L·Δ/ε (a proof for ε < 1 only)"
        if calibration == "classical"
        else "analytic Gaussian calibration (exact, any ε)"
    )
    scope = f"= T = {rounds}" if exposures == "multi_round" else "= 1"
    return f"{GUARANTEES[exposures]}; L {scope}, {how}"


def nbafl_condition(*, clip: float, local_size: int) -> str:
    """What NbAFL's (ε, δ) is conditional on, in words (docs/method.md "Conditional sensitivities are named").

    σ assumes Remark 3's sensitivity ``Δs = 2C/m`` (NbAFL's Lemma 1): that one sample moves a client's
    clipped model by at most 2C/m. Model clipping bounds ``‖w_i‖ ≤ C``, which bounds that move by 2C only:
    one outlying sample can move the clipped model ``m`` times further (measured: a quickstart sample scaled
    ×1e3 moves it by 10.27, 69× 2C/m = 0.149; ``tests/privacy/test_nbafl.py``). Nothing in the mechanism
    enforces the assumption, so the guarantee holds only where it holds.
    """
    clip = _check_positive("clip", clip)
    if not isinstance(local_size, int) or local_size < 1:
        raise ValueError(f"local_size must be an integer >= 1, got {local_size!r}")
    return (
        f"CONDITIONAL: σ assumes the sensitivity 2C/m = {2 * clip / local_size:.3g} (C = {clip:g}, "
        f"m = {local_size}, NbAFL Lemma 1 / the paper's Remark 3), which holds only if changing one sample "
        "moves a client's clipped model by at most 2C/m; model clipping (‖w_i‖ ≤ C) does not enforce that "
        "(it bounds the move by 2C only), so the (ε, δ) holds only under that assumption"
    )


def _analytic_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    def excess(sigma: float) -> float:
        return (
            float(F.gaussian_mechanism_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity)) - delta
        )

    # δ(σ) falls monotonically from 1 (σ → 0) to 0 (σ → ∞): bracket, then bisect in log space.
    lo = hi = sensitivity
    while excess(hi) > 0:
        hi *= 2.0
    while excess(lo) <= 0:
        lo /= 2.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi / lo - 1.0 < 1e-14:
            break
    return hi  # the side that satisfies δ(σ) ≤ δ


def clip_model(w: torch.Tensor, *, clip: float) -> torch.Tensor:
    """Scale ``w`` so that ``‖w‖₂ ≤ C`` (NbAFL's clipping; Remark 3's sensitivity assumes it).

    Pass the flat parameter vector: the bound is on the norm of the whole model. Returns a new float64
    tensor (``w`` is never modified); a model already inside the ball, the zero vector included, comes back
    unchanged.

    Raises:
        ValueError: if ``clip`` is not > 0, or ``w`` has a NaN or inf entry (no scaling can bound it, and the
            privacy guarantee would silently not hold).
    """
    clip = _check_positive("clip", clip)
    out = w.detach().to(dtype=torch.float64, copy=True)
    if not math.isfinite(float(torch.linalg.vector_norm(out))):
        raise ValueError(
            "the model has a NaN or inf entry: clipping cannot bound it, so no DP guarantee would hold; "
            "fix the divergent training (lower the learning rate) before privatizing"
        )
    clip_norm_(out, clip)  # the platform's one clipping rule (sifl_ray.privacy.clipping)
    return out


def privatize_upload(
    w: torch.Tensor, *, clip: float, sigma: float, generator: torch.Generator
) -> torch.Tensor:
    """NbAFL's client-side mechanism: clip to ``‖w‖₂ ≤ C``, then add ``N(0, σ² I)``.

    The noise is drawn from ``generator`` only (it must live on ``w``'s device), always ``w.numel()`` standard
    normals, so the stream advances the same way whatever σ is (σ = 0 gives the clipped model). Returns a new
    float64 tensor of ``w``'s shape; ``w`` is not modified.

    Args:
        w: the client's local model (flat parameter vector).
        clip: clipping threshold C > 0.
        sigma: noise std (:func:`nbafl_sigma`), ≥ 0.
        generator: the client's named noise stream.
    """
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    out = clip_model(w, clip=clip)
    noise = torch.randn(out.shape, generator=generator, dtype=torch.float64, device=out.device)
    return out.add_(noise, alpha=sigma)
