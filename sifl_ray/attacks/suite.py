"""The attack suite: record what each party of an arm saw, attack it, score the attacks against the truth.

The transcripts come from the platform's own parties (:mod:`sifl_ray.attacks.record`): every arm of
``cfg.arms`` is played on a small model through the shipped server, aggregator and client roles on the
sequential backend, with keys the server and aggregator actors make, and every channel recorded (uploads,
broadcasts, the server's inputs). No second implementation of the protocol exists here. What is attacked
depends on the arm's coding:

* ``m1`` arms (``sifl_m1``): every key design of ``cfg.designs`` under attacks (a)–(d)
  (:func:`evaluate_design`), and the DP audit (f) on the primary design;
* ``m2`` arms (``sifl_m2``): the M2 server's estimate of the global model (e) (:func:`evaluate_m2`);
* ``plain`` arms (``fl``, ``nbafl``, ``dp_fedavg``, an arm of your own): the aggregator's direct view, each
  upload read as what the client trained, its model or its update (:func:`evaluate_plain`);
* every arm: the DP audit (f) of its own release beside the ε it reports (:func:`audit_arm`).

Scoring "up to the unknown linear map". The subspace adversaries recover ``c = A w`` for an invertible map
``A = Uᵀ P1`` (U their basis of ``col(P1)``) that they never learn. The scorer, who holds the key, computes
that A from U and ``P1`` and reports ``max_i ‖A⁻¹ c_i − w_i‖ / ‖w_i‖`` over a round's uploads. This is
invariant to the adversary's choice of basis (another basis U' = U M gives c' = Mᵀc and A' = MᵀA), and it is
zero exactly when the adversary holds every model up to one fixed map, which is the SPEC's claim. The
adversary would obtain A itself from any n known (w, w~) pairs, or from one colluding client (attack d).

Threat models. SPEC "Parties": the aggregator sees only the encoded local models (the uploads), the server
only aggregated encoded models. Every figure labelled :data:`AGGREGATOR` uses the uploads alone. Figures
that also use the broadcasts (the telescoped regression, the geometry of updates relative to ``w~^t``) are
labelled :data:`AGGREGATOR_BROADCASTS`: the SPEC's aggregator does not see them, an eavesdropper on the
server → client channel or a colluding client does. The RESULT line's ``projection_error`` is uploads-only.

Seeds stay in memory. ``seed`` reproduces data, initial model and minibatches (beside a transcript: the
plain models of a SIFL arm); ``key_seed`` reproduces every key and, through the parties' seeds
(:mod:`sifl_ray.keys`), every noise draw. :func:`public_config` drops both from what is written out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from sifl_ray.attacks.adversaries import (
    EPS64,
    BlockLayout,
    DifferenceAttack,
    abs_correlation,
    apply_decoder,
    encoded_updates,
    fit_decoder,
    fit_noise_regression,
    fit_telescoped_regression,
    m2_server_estimate,
    project_onto_signal,
    remove_fitted_noise,
    update_geometry,
)
from sifl_ray.attacks.audit import AuditTest, audit_upload_release
from sifl_ray.attacks.config import Design
from sifl_ray.attacks.element_noise import cross_round_pairs, measure_transcript
from sifl_ray.attacks.record import (
    GroundTruth,
    SmallTask,
    TaskEvaluator,
    make_task,
    platform_config,
    record_arm,
    task_context,
)
from sifl_ray.attacks.transcript import TranscriptRecorder
from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec, ServerKey
from sifl_ray.device import single_threaded
from sifl_ray.progress import Progress
from sifl_ray.seeding import derive_seed, torch_generator

AGGREGATOR = "aggregator (honest-but-curious)"
AGGREGATOR_BROADCASTS = (
    "aggregator + broadcasts (an eavesdropper on the server→client channel, or a colluding client)"
)
AGGREGATOR_KP = "aggregator + known plaintext"
AGGREGATOR_COLLUSION = "aggregator + one colluding client"
SERVER_M2 = "server in M2 (honest-but-curious)"
AUDITOR = "auditor holding the keys"


# ------------------------------------------------------------------------------------------------------------
# The runs: every arm through the shipped parties (sifl_ray.attacks.record).


def design_key_seed(cfg: DictConfig, design: Design) -> int | None:
    """The key seed of ``design``'s run: derived from ``cfg.key_seed`` and the design's name, so that every
    design has keys and noise of its own (``None``: secure random keys)."""
    return None if cfg.key_seed is None else derive_seed(int(cfg.key_seed), "attack", design.name)


def design_coding(cfg: DictConfig, design: Design) -> dict[str, Any]:
    """The platform ``coding`` values of ``design`` at the scales of ``cfg.key``."""
    k = cfg.key
    return {
        "key_seed": design_key_seed(cfg, design),
        "backend": design.backend,
        "left_inverse": design.left_inverse,
        "n_extra": int(k.n_extra),
        "alpha": float(k.alpha),
        "beta": float(k.beta),
        "kappa": None if k.kappa is None else float(k.kappa),
        "block_size": int(k.block_size),
        "noise": {"distribution": k.noise, "sigma1": float(k.noise_scale), "sigma2": float(k.noise_scale)},
    }


def m2_design(cfg: DictConfig) -> Design:
    """Key 1's design in the M2 run (``cfg.m2``)."""
    m2 = cfg.m2
    return Design(name=f"m2-{m2.backend}-{m2.left_inverse}", backend=m2.backend, left_inverse=m2.left_inverse)


def m2_coding(cfg: DictConfig, *, noise2_scale: float) -> dict[str, Any]:
    """The platform ``coding`` values of the M2 run: key 1 of ``cfg.m2``'s design at ``cfg.key``'s scales,
    key 2 of ``cfg.m2`` and its noise ``R2`` of scale ``noise2_scale``. Each scale is a run of its own, with
    keys and noise draws of its own (the same draws scaled would make every scale's figure the same)."""
    m2 = cfg.m2
    coding = design_coding(cfg, m2_design(cfg))
    if coding["key_seed"] is not None:
        coding["key_seed"] = derive_seed(coding["key_seed"], "R2-scale", float(noise2_scale))
    coding.update(p=int(m2.p), gamma=float(m2.gamma), eta=float(m2.eta))
    coding["noise"]["sigma2"] = float(noise2_scale)
    return coding


def attacked_arms(cfg: DictConfig) -> dict[str, str]:
    """The arm instances of ``cfg.arms`` (``nbafl`` runs as ``nbafl_eps1``, ...) → their coding."""
    from sifl_ray.arms import arm_instances, get_arm

    platform = platform_config(cfg, clients=cfg.data.clients, rounds=cfg.training.rounds)
    return {name: get_arm(kind).coding for name, kind in arm_instances(platform).items()}


# ------------------------------------------------------------------------------------------------------------
# Scoring.


@dataclass
class Figure:
    """One attack's figure: a headline value and the same figure per round where it has one."""

    threat_model: str
    attack: str
    figure: str
    value: float | int | None
    per_round: dict[int, float | int | None] = field(default_factory=dict)
    note: str = ""


#: What each figure means and why, printed once per report (the figures' notes hold per-design numbers).
EXPLANATIONS: dict[str, str] = {
    "difference_rank": (
        "Every client of a round starts from the same w~^t, so N1 r^t cancels in w~_i - w~_j = P1 (w_i - "
        "w_j). "
        "The stacked differences span col(P1) after about ceil(n/(N_c-1)) rounds, ceil(s/(N_c-1)) for blocks "
        "of "
        "s parameters. Numerical rank: singular values above c * eps64 * max|w~| * sqrt(rows * columns) per "
        "block, a certified bound on the differences' round-off (Weyl), so every counted direction is signal."
    ),
    "difference_noise": (
        "Per element, uploads only. The paper's per-element epsilon covers element j of ONE upload, whose "
        "noise (N1 r^t)_j has std s_j = ||N1^j|| sigma. The aggregator holds all N_c uploads of a round, and "
        "they share one draw r^t, so element j of w~_i - w~_k is P1^j (w_i - w_k) with round-off only. "
        "Measured by the scorer, who splits a vector x into signal and noise with the key: the noise is "
        "x - P1 P1L x (= N1 r exactly). The figure is the RMS of that noise in the differences over its RMS "
        "in one upload, over every element and round; a float64 bound is a few u * max|w~| / RMS(noise), "
        "u = 2^-53. Element by element the aggregator learns the clients' differences scaled by P1 exactly: "
        "against it the per-element epsilon does not hold (a noise-free release has no finite epsilon; "
        "round-off is deterministic and no noise)."
    ),
    "difference_noise_control": (
        "The same measurement on one upload of round t against one of round t+1 (independent draws, pairs "
        "of rounds used once, within a key epoch): the noise of the difference is N1 (r^t - r^{t+1}), "
        "sqrt(2) times one upload's in RMS. It shows the measurement sees noise where there is some."
    ),
    "projection": (
        "Orthogonal projection onto the recovered col(P1). Under P1L = pinv(P1) the noise lies in "
        "col(P1)^perp "
        "and is removed outright in exact arithmetic. In float64 the differences carry round-off of the "
        "noise's "
        "magnitude, which tilts the recovered subspace, so the leftover noise grows like (noise/alpha)^2: "
        "small "
        "at moderate scales, large at the paper's. An oblique kernel leaves noise of the full scale."
    ),
    "regression": (
        "Uploads only: regress the signal coordinates U^T w~ on the noise coordinates V^T w~ over all rounds "
        "of "
        "the key epoch; the noise of a round enters both through the same r^t, the model does not. The "
        "residual "
        "is the models' spread, so the error falls with rounds, whatever the noise scale."
    ),
    "telescoped": (
        "Needs the broadcasts, which the SPEC's aggregator does not see (every client receives them, so an "
        "eavesdropper on the server->client channel or one colluding client has them): U^T(aggregate_t - "
        "broadcast_t) = A(w^{t+1} - w^t) is noise-free, so the regression has no residual and is exact once "
        "the rounds of a key epoch exceed the noise dimensions (per block), whatever the noise scale or the "
        "left inverse."
    ),
    "geometry_ratio": (
        "Uploads only: P1 d_i = w~_i - sum_j p_j w~_j is noise-free (every upload of a round carries the "
        "same N1 r^t), where d_i = w_i - w_bar is client i's deviation from the round's weighted mean "
        "model; for a scaled-orthogonal P1 (P1^T P1 = alpha^2 I) norm ratios and angles of the deviations "
        "are exact from round 1. A generic dense P1 distorts them."
    ),
    "geometry_cosine": "As above, for the cosines between the deviations.",
    "geometry_ratio_broadcast": (
        "With the broadcast w~^t (same noise as the round's uploads): P1 u_i = w~_i - w~^t gives the client "
        "updates u_i = w_i - w^t themselves, with the same exactness for a scaled-orthogonal P1."
    ),
    "geometry_cosine_broadcast": "As above, for the cosines between the client updates.",
    "known_plaintext": (
        "Pairs (w, w~), each with fresh noise (one per round from a colluding client, or any known model): "
        "the "
        "min-norm decoder fitted on them equals P1L once they span the block's rows: s parameters + the "
        "block's extra rows, per block. Counted by binary search on the decode error of a fresh encoding "
        "falling below the tolerance."
    ),
    "collusion": (
        "Every client holds P1L (the target optimizer needs it), so one colluding client hands it over and "
        "the "
        "aggregator decodes every upload as the server does."
    ),
}


def _dense(key: ServerKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(m.detach().to(dtype=torch.float64, device="cpu").numpy() for m in key.dense())  # type: ignore[return-value]


def errors_up_to_map(
    layout: BlockLayout,
    bases: list[tuple[np.ndarray, np.ndarray]],
    P1: np.ndarray,
    coords: list[np.ndarray],
    truth: np.ndarray,
) -> np.ndarray:
    """Relative error of each recovered model (columns) after undoing the adversary's unknown map
    ``A_b = U_bᵀ P1_b`` block by block (scorer side: it needs the key). Zero-safe: a zero true model is
    scored by its absolute error."""
    w_hat = np.zeros_like(truth)
    for rows, params, (U, _), c in zip(layout.rows, layout.params, bases, coords, strict=True):
        A = U.T @ P1[np.ix_(rows, params)]
        w_hat[params] = np.linalg.solve(A, c)
    num = np.linalg.norm(w_hat - truth, axis=0)
    den = np.linalg.norm(truth, axis=0)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), num)


def _geometry_errors(est: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """Max relative error of norm ratios and max absolute error of cosines over client pairs i != j."""
    _, r_est, c_est = update_geometry(est)
    _, r_true, c_true = update_geometry(true)
    off = ~np.eye(est.shape[1], dtype=bool) & np.isfinite(r_true) & np.isfinite(r_est)
    if not off.any():
        return math.nan, math.nan
    return float(np.max(np.abs(r_est[off] / r_true[off] - 1.0))), float(
        np.max(np.abs(c_est[off] - c_true[off]))
    )


@dataclass
class DesignResult:
    """Every figure of one key design, plus its per-element ε (paper's formula and the sound one)."""

    design: str
    backend: str
    left_inverse: str
    rekey_every: int
    alpha: float
    beta: float
    noise_scale: float
    n: int
    n_tilde: int
    layout: str
    transcript: str
    epsilon_paper: float
    epsilon_sound: float
    figures: dict[str, Figure]
    key_holder_decode_error: float
    seconds: float
    arm: str = "sifl_m1"  # the registered m1 arm played under this design


def _nanmax(per_round: dict[int, float]) -> float | None:
    """Max over rounds, ignoring NaN (pairs with a zero vector); None when no round has the figure."""
    vals = [v for v in per_round.values() if not math.isnan(v)]
    return max(vals) if vals else None


def _first_round(per_round: dict[int, float]) -> str:
    return f"round {min(per_round)}: {per_round[min(per_round)]:.2e}" if per_round else "no round recorded"


def _trend(per_round: dict[int, float | int | None]) -> str:
    """ "X in round a, Y in round b" over the rounds where the figure exists."""
    pts = [(t, v) for t, v in sorted(per_round.items()) if v is not None]
    if not pts:
        return "never computable: col(P1) was not known in any key epoch"
    (t0, v0), (t1, v1) = pts[0], pts[-1]
    return f"{v0:.2e} in round {t0} (first with col(P1) known), {v1:.2e} in round {t1}"


def _per_element_epsilon(cfg: DictConfig, key: ServerKey, task: SmallTask) -> tuple[float, float]:
    """Worst-element ε of the client upload (the paper's formula and the sound one), via the accountant."""
    from sifl_ray.privacy import release_epsilons

    sizes = [int(x.shape[0]) for x in task.X]
    rels = release_epsilons(
        key_norms=key.norms(),
        noise1=NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale),
        clip=cfg.audit.clip,
        local_size=sizes,
        total_size=sum(sizes),
        delta=cfg.audit.delta,
        mode="m1",
    )
    local = next(r for r in rels if r.release == "local")
    return float(local.epsilon_paper), float(local.epsilon)


def known_plaintext(
    key: ServerKey, layout: BlockLayout, cfg: DictConfig, design: Design
) -> tuple[int | None, float, float, float]:
    """(d) How many known (w, w~) pairs, each with fresh noise, give the exact decoder.

    Pairs come from an oracle that encodes random models with the key (as a colluding client would supply
    one per round). Binary search over the pair count on "relative decode error of a fresh encoding below
    the tolerance": below the block's row count the min-norm decoder misses a direction and the error is
    large; from it on the decoder is ``P1L`` up to round-off.

    Returns:
        ``(pairs_needed or None, error with that many pairs, error with one fewer, key holder's error)``.
    """
    n, m = key.n, key.n_tilde - key.n
    gen = torch_generator(cfg.seed, "attack", design.name, "known-plaintext")
    noise = NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale)
    k_max = max(r.size for r in layout.rows) + 2
    W = torch.randn(n, k_max + 1, generator=gen, dtype=CODING_DTYPE) * cfg.training.init_scale
    W_tilde = key.encode(W, noise.sample((m, k_max + 1), gen)).numpy()
    W = W.numpy()
    fresh_w, fresh = W[:, -1], W_tilde[:, -1]

    def error(k: int) -> float:
        if k <= 0:
            return math.inf
        L = fit_decoder(layout, W_tilde[:, :k], W[:, :k])
        return float(np.linalg.norm(apply_decoder(layout, L, fresh) - fresh_w) / np.linalg.norm(fresh_w))

    tol = cfg.known_plaintext.tolerance
    holder = float(
        np.linalg.norm(key.decode(torch.as_tensor(fresh)).numpy() - fresh_w) / np.linalg.norm(fresh_w)
    )
    if error(k_max) >= tol:
        return None, error(k_max), math.nan, holder
    lo, hi = 1, k_max
    while lo < hi:
        mid = (lo + hi) // 2
        if error(mid) < tol:
            hi = mid
        else:
            lo = mid + 1
    return lo, error(lo), error(lo - 1), holder


def evaluate_design(
    task: SmallTask, cfg: DictConfig, design: Design, *, arm: str = "sifl_m1"
) -> tuple[DesignResult, TranscriptRecorder, GroundTruth]:
    """Play the m1 arm ``arm`` under ``design`` through the shipped parties, run attacks (a)–(d) on its
    transcript (each with its threat model), score them."""
    with single_threaded():
        return _evaluate_design(task, cfg, design, arm)


@dataclass
class _PerRound:
    """The aggregator's figures, round by round (None where col(P1) is not yet known in the key epoch)."""

    rank: dict[int, int] = field(default_factory=dict)
    projection: dict[int, float | None] = field(default_factory=dict)
    regression: dict[int, float | None] = field(default_factory=dict)
    telescoped: dict[int, float | None] = field(default_factory=dict)
    ratio_err: dict[int, float] = field(default_factory=dict)  # uploads only: deviations from the mean
    cos_err: dict[int, float] = field(default_factory=dict)
    ratio_err_bcast: dict[int, float] = field(default_factory=dict)  # with the broadcast: the updates
    cos_err_bcast: dict[int, float] = field(default_factory=dict)
    full_rank_round: int | None = None  # rounds into the key epoch when col(P1) was first complete
    best_epoch_rank: int = 0


def _aggregate(recorder: TranscriptRecorder, round: int) -> np.ndarray:
    """The aggregator's own FedAvg of a round's uploads."""
    uploads, clients = recorder.upload_matrix(round)
    return uploads @ recorder.client_weights(clients)


def _aggregator_attacks(
    recorder: TranscriptRecorder, truth: GroundTruth, layout: BlockLayout, cfg: DictConfig
) -> _PerRound:
    """Attacks (a)–(c) round by round on the transcript; each scored against the truth.

    Uploads only (the SPEC's aggregator): (a), projection, regression, geometry of the deviations. With the
    broadcasts as well (:data:`AGGREGATOR_BROADCASTS`): the telescoped regression, geometry of the updates.
    """
    out = _PerRound()
    attack = DifferenceAttack(layout, tol_factor=cfg.rank_tol_factor)
    P1_of_epoch = {e: _dense(k)[0] for e, k in truth.keys.items()}  # scorer side: undoes the unknown map
    epoch, epoch_rounds = None, []
    for t in recorder.rounds():
        if recorder.epoch_of(t) != epoch:  # a new key: what was learnt is useless
            epoch, epoch_rounds = recorder.epoch_of(t), []
            attack.reset()
        uploads, clients = recorder.upload_matrix(t)
        epoch_rounds.append(t)

        # (a) Noise-free differences.
        out.rank[t] = attack.observe(uploads)
        out.best_epoch_rank = max(out.best_epoch_rank, out.rank[t])
        if attack.full_rank and out.full_rank_round is None:
            out.full_rank_round = len(epoch_rounds)

        # (c) Geometry, from round 1. Uploads only: the deviations P1 (w_i - w_bar) from the weighted mean
        # upload (the round's noise cancels). With the M1 broadcast (same noise): the updates P1 (w_i - w^t).
        weights = recorder.client_weights(clients)
        deviations = truth.upload_models[t] - truth.aggregate_models[t][:, None]
        out.ratio_err[t], out.cos_err[t] = _geometry_errors(
            encoded_updates(uploads, None, weights), deviations
        )
        bcast = recorder.broadcasts.get(t)
        if bcast is not None and bcast.ndim == 1:
            out.ratio_err_bcast[t], out.cos_err_bcast[t] = _geometry_errors(
                encoded_updates(uploads, bcast, weights), truth.updates[t]
            )

        # (b) Noise removal, once col(P1) is known in this key epoch.
        if not attack.full_rank:
            out.projection[t] = out.regression[t] = out.telescoped[t] = None
            continue
        bases = attack.bases()
        P1, target = P1_of_epoch[epoch], truth.upload_models[t]

        def score(coords: list[np.ndarray], bases=bases, P1=P1, target=target) -> float:
            return float(errors_up_to_map(layout, bases, P1, coords, target).max())

        out.projection[t] = score(project_onto_signal(layout, bases, uploads))
        G = fit_noise_regression(layout, bases, [recorder.upload_matrix(s)[0] for s in epoch_rounds])
        out.regression[t] = score(remove_fitted_noise(layout, bases, G, uploads))
        G = fit_telescoped_regression(
            layout,
            bases,
            [recorder.broadcasts[s] for s in epoch_rounds],
            [_aggregate(recorder, s) for s in epoch_rounds[:-1]],
        )
        out.telescoped[t] = score(remove_fitted_noise(layout, bases, G, uploads))
    return out


def _difference_noise_figures(
    recorder: TranscriptRecorder, truth: GroundTruth, cfg: DictConfig
) -> dict[str, Figure]:
    """(a) per element: the noise in element j of one upload vs of a same-round difference, and the control
    with independent draws (:mod:`sifl_ray.attacks.element_noise`). Scorer side: the split into signal and
    noise uses the key of each round's epoch."""
    views = {epoch: key.client_view() for epoch, key in truth.keys.items()}

    def view_for_round(t: int):
        return views[truth.epoch_of(t)]

    same = measure_transcript(recorder, view_for_round)
    control = cross_round_pairs(recorder, view_for_round, truth.epoch_of)
    key0 = truth.keys[0]
    std = cfg.key.noise_scale * (math.sqrt(2.0) if cfg.key.noise == "laplace" else 1.0)
    predicted = float(np.median(key0.norms().n1_row_l2.numpy())) * std
    rms = float(np.sqrt(np.mean(np.square(same.upload_rms))))
    bound = EPS64 / 2 * max(float(np.max(np.abs(recorder.upload_matrix(t)[0]))) for t in recorder.rounds())
    return {
        "difference_noise": Figure(
            AGGREGATOR,
            "(a) per element: noise in element j of w~_i - w~_k (same round) vs of one upload w~_i",
            "RMS of the noise in the differences / in one upload (every element and round)",
            same.ratio,
            dict(same.per_round),
            f"worst element {same.worst_element_ratio:.2e}; noise RMS per element in one upload {rms:.3g} "
            f"(median measured {float(np.median(same.upload_rms)):.3g}, the paper's s_j = ||N1^j|| sigma: "
            f"median {predicted:.3g}), in the differences {rms * same.ratio:.2e}, against a round-off unit "
            f"u * max|w~| = {bound:.2e}; {same.pairs} differences over {same.rounds} rounds. The paper's "
            "per-element epsilon covers element j of ONE upload: against the aggregator, who holds every "
            "w~_i - w~_k = P1 (w_i - w_k), it does not hold",
        ),
        "difference_noise_control": Figure(
            AGGREGATOR,
            "(a) per element, control: one upload of round t vs one of round t+1 (independent draws)",
            "RMS of the noise in the differences / in one upload (sqrt(2) = 1.414 expected)",
            control.ratio,
            dict(control.per_round),
            f"{control.pairs} pairs of rounds, {key0.n_tilde - key0.n} noise dimensions each; worst "
            f"element {control.worst_element_ratio:.3g}",
        ),
    }


def _evaluate_design(
    task: SmallTask, cfg: DictConfig, design: Design, arm: str
) -> tuple[DesignResult, TranscriptRecorder, GroundTruth]:
    tic = time.perf_counter()
    recorder = TranscriptRecorder(max_coordinates=cfg.transcript.max_coordinates)
    truth = record_arm(
        task,
        cfg,
        arm=arm,
        design=design,
        coding=design_coding(cfg, design),
        rounds=cfg.training.rounds,
        recorder=recorder,
    )
    recorder.require_full("the aggregator's subspace attacks")
    n = truth.n
    P1_0, _, N1_0 = _dense(truth.keys[0])
    layout = BlockLayout.from_dense(P1_0, N1_0)  # public: which rows form a block, not the blocks
    pr = _aggregator_attacks(recorder, truth, layout, cfg)

    last = recorder.rounds()[-1]
    figures: dict[str, Figure] = {}
    rounds_needed = math.ceil(max(p.size for p in layout.params) / (task.clients - 1))
    figures["difference_rank"] = Figure(
        AGGREGATOR,
        "(a) noise-free same-round differences w~_i - w~_j = P1 (w_i - w_j)",
        "rounds until col(P1) is known (full numerical rank)",
        pr.full_rank_round,
        pr.rank,
        f"expected about ceil(s/(N_c-1)) = {rounds_needed} rounds for the largest block of s = "
        f"{max(p.size for p in layout.params)} parameters; best rank within one key epoch: "
        f"{pr.best_epoch_rank} of n = {n} (c = {cfg.rank_tol_factor:g})",
    )
    figures.update(_difference_noise_figures(recorder, truth, cfg))
    figures["projection"] = Figure(
        AGGREGATOR,
        "(b) noise removal by orthogonal projection onto the recovered col(P1)",
        "max relative error of the round's recovered models, up to the unknown map",
        pr.projection.get(last),
        pr.projection,
        _trend(pr.projection),
    )
    figures["regression"] = Figure(
        AGGREGATOR,
        "(b) noise removal by regression of signal on noise coordinates over rounds",
        "max relative error of the round's recovered models, up to the unknown map",
        pr.regression.get(last),
        pr.regression,
        _trend(pr.regression),
    )
    figures["telescoped"] = Figure(
        AGGREGATOR_BROADCASTS,
        "(b) noise removal by regression on telescoped broadcasts (noise-free global-model increments)",
        "max relative error of the round's recovered models, up to the unknown map",
        pr.telescoped.get(last),
        pr.telescoped,
        _trend(pr.telescoped),
    )
    figures["geometry_ratio"] = Figure(
        AGGREGATOR,
        "(c) norm ratios of the updates' deviations from their mean, P1 d_i = w~_i - sum_j p_j w~_j",
        "max relative error of ||d_i|| / ||d_j|| over client pairs (max over rounds)",
        _nanmax(pr.ratio_err),
        pr.ratio_err,
        _first_round(pr.ratio_err),
    )
    figures["geometry_cosine"] = Figure(
        AGGREGATOR,
        "(c) cosines between the updates' deviations from their mean",
        "max absolute error of cos(d_i, d_j) over client pairs (max over rounds)",
        _nanmax(pr.cos_err),
        pr.cos_err,
        _first_round(pr.cos_err),
    )
    figures["geometry_ratio_broadcast"] = Figure(
        AGGREGATOR_BROADCASTS,
        "(c) norm ratios of the client updates, P1 u_i = w~_i - w~^t (needs the broadcast w~^t)",
        "max relative error of ||u_i|| / ||u_j|| over client pairs (max over rounds)",
        _nanmax(pr.ratio_err_bcast),
        pr.ratio_err_bcast,
        _first_round(pr.ratio_err_bcast),
    )
    figures["geometry_cosine_broadcast"] = Figure(
        AGGREGATOR_BROADCASTS,
        "(c) cosines between the client updates (needs the broadcast w~^t)",
        "max absolute error of cos(u_i, u_j) over client pairs (max over rounds)",
        _nanmax(pr.cos_err_bcast),
        pr.cos_err_bcast,
        _first_round(pr.cos_err_bcast),
    )

    key0 = truth.keys[0]
    needed, err_k, err_km1, holder = known_plaintext(key0, layout, cfg, design)
    rows_b, params_b = layout.largest_block
    figures["known_plaintext"] = Figure(
        AGGREGATOR_KP,
        "(d) exact decoder from known (w, w~) pairs, block by block",
        "pairs needed for the exact decoder",
        needed,
        {},
        f"relative decode error of a fresh encoding: {err_k:.2e} with that many pairs, {err_km1:.2e} with "
        f"one fewer (the key holder's own: {holder:.2e}; tolerance {cfg.known_plaintext.tolerance:g}); "
        f"expected: the rows of the largest block, {rows_b} = {params_b} parameters + "
        f"{rows_b - params_b} extra rows",
    )

    collusion = 0.0
    for t in recorder.rounds():
        view = truth.key_for_round(t).client_view()
        decoded = view.decode(torch.as_tensor(recorder.upload_matrix(t)[0])).numpy()
        target = truth.upload_models[t]
        collusion = max(
            collusion,
            float(np.max(np.linalg.norm(decoded - target, axis=0) / np.linalg.norm(target, axis=0))),
        )
    figures["collusion"] = Figure(
        AGGREGATOR_COLLUSION,
        "(d) the colluding client hands over P1L (every client holds it for the target optimizer)",
        "max relative error of every decoded upload",
        collusion,
        {},
        f"the legitimate decoder's own round-off on a fresh encoding: {holder:.2e}",
    )

    eps_paper, eps_sound = _per_element_epsilon(cfg, key0, task)
    result = DesignResult(
        design=design.name,
        backend=design.backend,
        left_inverse=design.left_inverse,
        rekey_every=design.rekey_every,
        alpha=float(cfg.key.alpha),
        beta=float(cfg.key.beta),
        noise_scale=float(cfg.key.noise_scale),
        n=n,
        n_tilde=truth.n_tilde,
        layout=layout.describe(),
        transcript=recorder.describe(),
        epsilon_paper=eps_paper,
        epsilon_sound=eps_sound,
        figures=figures,
        key_holder_decode_error=holder,
        seconds=time.perf_counter() - tic,
        arm=arm,
    )
    return result, recorder, truth


@dataclass
class M2Result:
    noise2_scale: float
    n: int
    p: int
    corr_per_round: dict[int, float]
    transcript: str
    arm: str = "sifl_m2"


def evaluate_m2(
    cfg: DictConfig, *, transcript_dir: Path | None = None, arm: str = "sifl_m2"
) -> list[M2Result]:
    """(e) The M2 server's estimate of the global model from ``P1L W'_a``, per round, per R2 noise scale.

    The m2 arm ``arm`` is played through the shipped parties on a larger task (``cfg.m2``); the server uses
    only its own view: the inputs ``W'_a`` it received and its own ``P1L``.
    """
    with single_threaded():
        return _evaluate_m2(cfg, transcript_dir, arm)


def _evaluate_m2(cfg: DictConfig, transcript_dir: Path | None, arm: str) -> list[M2Result]:
    task = make_task(
        features=cfg.m2.features,
        hidden=0,
        clients=cfg.m2.clients,
        samples_per_client=cfg.m2.samples_per_client,
        teacher_scale=cfg.data.teacher_scale,
        seed=derive_seed(cfg.seed, "m2"),
    )
    design = m2_design(cfg)
    out = []
    for scale in cfg.m2.noise2_scales:
        recorder = TranscriptRecorder(max_coordinates=None)
        truth = record_arm(
            task,
            cfg,
            arm=arm,
            design=design,
            coding=m2_coding(cfg, noise2_scale=float(scale)),
            rounds=cfg.m2.rounds,
            recorder=recorder,
        )
        key = truth.keys[0]
        corr = {}
        for t, W_a in sorted(recorder.server_inputs.items()):
            W_bar = key.decode(torch.as_tensor(W_a)).numpy()  # the server's own P1L
            corr[t] = abs_correlation(m2_server_estimate(W_bar), truth.aggregate_models[t])
        out.append(M2Result(float(scale), task.n, cfg.m2.p, corr, recorder.describe(), arm))
        if transcript_dir is not None and cfg.transcript.save:
            prefix = "m2" if arm == "sifl_m2" else arm
            recorder.save(transcript_dir / f"{prefix}-R2-scale-{float(scale):g}.npz")
    return out


@dataclass
class PlainResult:
    """A plain arm under the aggregator's direct view: each upload read as its client's model (or update);
    and the server's view of the aggregate it receives.

    ``error`` is ``max ‖upload_i − w_i‖ / ‖w_i‖`` over clients and rounds, ``w_i`` the model client i
    trained (before the arm's client step): 0 for FedAvg, the client's own noise for NbAFL, the masks under
    secure aggregation (far above 1: a masked upload read as numbers is uniform noise). ``correlation`` is the
    median over uploads of ``|corr(upload_i, w_i)|``, the coordinates as samples: 1 for FedAvg; for an upload
    independent of the model it is at chance, ``correlation_chance`` = 0.6745/√n (the median of |N(0, 1/n)|).
    ``server_error`` is the median over rounds of ``‖a − ā‖ / ‖ā‖``, ``a`` what the server received and ``ā``
    the FedAvg of what the clients uploaded before any masking: ~0 where the server learns the aggregate.
    """

    arm: str
    n: int
    rounds: int
    upload: str  # what the arm says an upload is (sifl_ray.arms.Arm.releases)
    error: float
    median_error: float
    per_round: dict[int, float]
    transcript: str
    seconds: float
    correlation: float = math.nan
    correlation_chance: float = math.nan
    server_error: float = math.nan
    masked: bool = False  # the uploads travel under secure aggregation


def evaluate_plain(task: SmallTask, cfg: DictConfig, arm: str) -> tuple[PlainResult, TranscriptRecorder]:
    """The aggregator's direct view of the plain arm ``arm``, played through the shipped parties."""
    with single_threaded():
        return _evaluate_plain(task, cfg, arm)


def _evaluate_plain(task: SmallTask, cfg: DictConfig, arm: str) -> tuple[PlainResult, TranscriptRecorder]:
    from sifl_ray.arms import arm_instances, get_arm

    tic = time.perf_counter()
    recorder = TranscriptRecorder(max_coordinates=cfg.transcript.max_coordinates)
    truth = record_arm(
        task,
        cfg,
        arm=arm,
        design=Design(name=arm, backend="identity", left_inverse="none"),
        coding={},
        rounds=cfg.training.rounds,
        recorder=recorder,
    )
    platform = platform_config(cfg, clients=task.clients, rounds=cfg.training.rounds)
    protocol = get_arm(arm_instances(platform)[arm])
    per_round, every, corr, server = {}, [], [], []
    for t in recorder.rounds():
        uploads, clients = recorder.upload_matrix(t)
        trained = truth.local_models[t][:, clients]
        if protocol.uploads == "update":  # the upload is w_i − w^t: read it as the client's update
            trained = trained - truth.broadcast_models[t][:, None]
        num = np.linalg.norm(uploads - trained, axis=0)
        den = np.linalg.norm(trained, axis=0)
        rel = np.where(den > 0, num / np.where(den > 0, den, 1.0), num)  # zero-safe: a zero model, abs.
        per_round[t] = float(rel.max())
        every.extend(rel.tolist())
        corr.extend(abs(_correlation(uploads[:, i], trained[:, i])) for i in range(len(clients)))
        if t in recorder.server_inputs:  # the server's view: what it received against the clients' FedAvg
            received, expected = recorder.server_inputs[t].reshape(-1), truth.aggregate_models[t]
            scale = float(np.linalg.norm(expected))
            server.append(float(np.linalg.norm(received - expected)) / (scale if scale > 0 else 1.0))
    releases = protocol.releases()
    upload = next((r.content for r in releases if r.name == "upload"), "")
    result = PlainResult(
        arm=arm,
        n=task.n,
        rounds=len(per_round),
        upload=upload,
        error=max(every),
        median_error=float(np.median(every)),
        per_round=per_round,
        transcript=recorder.describe(),
        seconds=time.perf_counter() - tic,
        correlation=float(np.median(corr)),
        correlation_chance=0.6745 / math.sqrt(task.n),
        server_error=float(np.median(server)) if server else math.nan,
        masked=protocol.secure_aggregation,
    )
    return result, recorder


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two vectors' coordinates (0 when either is constant: zero-safe)."""
    a, b = a - a.mean(), b - b.mean()
    den = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / den if den > 0 else 0.0


#: The noise-removal figures that use the uploads alone (the SPEC's aggregator): the RESULT line's best.
UPLOADS_ONLY_REMOVAL = ("projection", "regression")

#: Configuration fields never written out: ``seed`` reproduces the data, the initial model and the
#: minibatches (beside a transcript: the plain models), ``key_seed`` every key and the parties' noise.
REDACTED_FIELDS = ("seed", "key_seed")


def public_config(cfg: DictConfig) -> dict[str, Any]:
    """The configuration as written to JSON, markdown and TensorBoard: :data:`REDACTED_FIELDS` removed, and
    a ``keys`` line saying what kind of keys were used (without any seed)."""
    data: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    reproducible = data.get("key_seed") is not None
    for name in REDACTED_FIELDS:
        data.pop(name, None)
    data["keys"] = (
        "reproducible simulation keys derived from a fixed seed (not secret; the seed is not written out)"
        if reproducible
        else "256 secure random bits per key"
    )
    data["redacted"] = (
        "the run seed (data, initial model, minibatches) and the key seed (keys, noise): either, beside the "
        "transcripts, would give back the plain models or the keys"
    )
    return data


@dataclass
class ArmAudit:
    """(f) for one release of one arm: the ε it reports beside the audit's lower bound on the ε that release
    really has. ``key`` names a release other than the arm's main one (``upload``: a masked upload)."""

    arm: str
    reported_epsilon: float  # inf: the arm claims no privacy for this release
    reported_scope: str
    release: str  # what was audited
    test: AuditTest
    key: str = ""

    @property
    def label(self) -> str:
        """``arm`` or ``arm_key``: the name of this audit in tables and the RESULT line."""
        return f"{self.arm}_{self.key}" if self.key else self.arm

    @property
    def violated(self) -> bool:
        """The audit refutes the claim (a bug for a DP mechanism; the expected outcome for a per-element ε
        read as a guarantee about the whole release)."""
        return self.test.epsilon_lower_bound > self.reported_epsilon

    @property
    def verdict(self) -> str:
        """``REFUTED``, ``not refuted``, ``untestable`` (the claim is at or above the test's ceiling) or ``no
        claim`` (:func:`sifl_ray.attacks.audit.verdict`): never "holds", which no lower bound can show."""
        return self.test.verdict(self.reported_epsilon)


#: Trials of a masked-upload audit: each is a fresh key agreement of its own, so it costs milliseconds.
MASKED_AUDIT_TRIALS = 2000


def audit_arm(
    task: SmallTask,
    cfg: DictConfig,
    arm: str,
    *,
    m1_whole: AuditTest | None,
    paper_eps: float | None,
) -> list[ArmAudit]:
    """(f) on each of ``arm``'s releases, built from the arm's own steps and parties, with neighbouring
    inputs as its guarantee defines them (empty where the suite has no audit for it).

    * central noise on the aggregate (DP-FedAvg's :class:`~sifl_ray.arms.dp_fedavg.CentralNoise`): one round
      of the aggregator step on populations with and without one client whose update is C, each client
      sampled at the arm's q (:func:`~sifl_ray.attacks.audit.audit_aggregator_step`); reported: the
      accountant's ε after ONE round (like with like: the whole run's ε is a composition);
    * secure aggregation: (i) one client's masked upload, fresh keys each trial, read by the aggregator as
      numbers; reported: 0 (the masks hide it perfectly from an aggregator that holds no share); (ii) the
      unmasked aggregate of a round with and without one client whose update is C (or, under the zero-out
      relation the arm declares, with its update 0), through the shipped client step, masking and
      aggregator step (:mod:`sifl_ray.attacks.secure_audit`); reported: the arm's ε after one round (none:
      ∞);
    * any other plain arm: its client step on local models that differ by Remark 3's sensitivity 2C/m
      (C its clip, m the smallest client), the whole upload projected on the difference; reported: the ε its
      privacy report states (none: ε = ∞);
    * M1 arms: the primary design's whole-upload audit with the keys (``m1_whole``, run by the suite);
      reported: the paper's per-element ε (``paper_eps``);
    * M2 arms: the broadcast W' of two neighbouring global models, through the platform's own server and
      aggregator roles with fresh noise each trial, read by a client (P2R then P1L); reported: the paper's
      per-element ε of that release (its ``epsilon_global``).
    """
    from sifl_ray.arms import arm_of
    from sifl_ray.arms.dp_fedavg import CentralNoise
    from sifl_ray.attacks.audit import audit_aggregator_step, audit_release

    platform = platform_config(cfg, clients=task.clients, rounds=cfg.training.rounds)
    protocol = arm_of(platform, arm)
    kw = {
        "trials": int(cfg.audit.trials),
        "delta": float(cfg.audit.delta),
        "confidence": float(cfg.audit.confidence),
    }
    if protocol.coding == "m1":
        if m1_whole is None or paper_eps is None:
            return []
        scope = "per element of one upload (the paper's Theorem 1), worst element"
        return [ArmAudit(arm, paper_eps, scope, "the whole upload, keys known", m1_whole)]
    if protocol.coding == "m2":
        return [_audit_m2_broadcast(task, cfg, platform, arm, kw)]
    sizes = task.sizes
    ctx = task_context(task, platform, arm)
    steps, report = protocol.steps(ctx), protocol.privacy(ctx) or {}
    reported = float(report.get("epsilon", math.inf))
    scope = str(report.get("scope", "no privacy claimed"))
    # Like with like: a one-round audit is compared with the accountant's ε after ONE round (at the same
    # sampling rate), never with the whole run's composition, which one round cannot test.
    per_round = report.get("epsilon_per_round")
    one_round, one_round_scope = reported, scope
    if per_round:
        one_round = float(per_round[0])
        one_round_scope = (
            f"ONE round of {report.get('guarantee', scope)} (the accountant's ε after round 1; the whole "
            f"run's ε {reported:.3g} over {len(per_round)} rounds composes them and is not audited here)"
        )
    sample_rate = float(platform.clients.fraction)
    gen = torch_generator(cfg.seed, "attack", "audit", arm)
    direction = torch.randn(task.n, generator=gen, dtype=CODING_DTYPE)
    direction /= torch.linalg.vector_norm(direction)
    zero = torch.zeros(task.n, dtype=CODING_DTYPE)
    if steps.secagg is not None:
        from sifl_ray.attacks.secure_audit import (
            audit_secure_round,
            neighbour_relation,
            secure_round_release,
        )

        clip = float(protocol.clip(platform) or cfg.audit.clip)
        upload = audit_release(
            _masked_upload(steps.secagg, cfg, arm),
            x0=zero,
            x1=direction * clip,
            **{**kw, "trials": min(kw["trials"], MASKED_AUDIT_TRIALS)},
        )
        hidden = (
            "one masked upload, seen by the aggregator alone (no share of its client's secrets): uniform in "
            "the ring whatever the update"
        )
        relation = neighbour_relation(report)
        shipped = {"num_clients": task.clients, "sample_rate": sample_rate, "sample_seed": int(cfg.seed)}
        if math.isinf(reported):  # no DP claimed: the exact sum, told apart by its projection
            weights = None if protocol.uniform_weights else [float(s) for s in sizes]
            mean = secure_round_release(steps, arm=arm, relation=relation, weights=weights, **shipped)
            share = weights[0] / float(sum(weights)) if weights else 1.0 / task.clients

            def release(x: torch.Tensor, trial: int) -> torch.Tensor | None:
                out = mean(x, trial)  # the target moves the mean by its share of the weight (q = 1)
                return None if out is None else out / share

            aggregate = audit_release(release, x0=zero, x1=direction * clip, exact=True, **kw)
        else:
            aggregate = audit_secure_round(
                steps,
                arm=arm,
                direction=direction,
                clip=clip,
                relation=relation,
                **shipped,
                **{**kw, "trials": min(kw["trials"], MASKED_AUDIT_TRIALS)},
            )
        return [
            ArmAudit(
                arm,
                one_round,
                f"{one_round_scope}; neighbours: {relation}",
                f"one round's unmasked aggregate through the shipped steps ({relation}: the target's update "
                "C, or the target absent / its update 0)",
                aggregate,
            ),
            ArmAudit(arm, 0.0, hidden, "one client's masked upload, fresh keys each trial", upload, "upload"),
        ]
    if isinstance(steps.aggregator, CentralNoise):
        step, clip = steps.aggregator, float(protocol.clip(platform) or 1.0)
        test = audit_aggregator_step(
            step,
            clip=clip,
            clients=max(1, task.clients - 1),
            shift=clip / step.expected_clients,
            arm=arm,
            sample_rate=sample_rate,
            sample_seed=int(cfg.seed),
            **kw,
        )
        what = "one round's noisy mean (aggregator step), add/remove one client"
        return [ArmAudit(arm, one_round, one_round_scope, what, test)]
    clip = float(protocol.clip(platform) or cfg.audit.clip)
    sensitivity = 2 * clip / int(sizes.min())  # Remark 3: one sample of the smallest client
    client = steps.client

    def release(x: torch.Tensor, trial: int) -> torch.Tensor:
        if client is None:
            return x
        return client(x, start=torch.zeros_like(x), arm=arm, client=0, t=trial)[0]

    sigma = getattr(client, "sigma", None)  # a Gaussian client step (NbAFL): the tail threshold is planned
    test = audit_release(
        release, x0=zero, x1=direction * sensitivity, noise_std=sigma, exact=client is None, **kw
    )
    return [ArmAudit(arm, reported, scope, "one client's upload (client step)", test)]


def _masked_upload(spec, cfg: DictConfig, arm: str):
    """``release(x, trial)``: client 0's masked input in a fresh two-client round of secure aggregation
    (its own keys, from the attack's key seed and the trial, or secure random), as the aggregator reads it:
    the ring element decoded as a fixed-point number. The platform's own roles, message by message."""
    from dataclasses import replace as with_

    from sifl_ray.roles.secure import AggregatorSecAgg, WorkerSecAgg
    from sifl_ray.seeding import derive_seed

    def release(x: torch.Tensor, trial: int) -> torch.Tensor:
        seed = None if cfg.key_seed is None else derive_seed(int(cfg.key_seed), "audit", arm, "masks", trial)
        fresh = with_(spec, key_seed=seed, degree=None, threshold=None, min_survivors=0)  # two clients
        head, client = AggregatorSecAgg(fresh, arm), WorkerSecAgg(fresh, arm)
        public = head.open(trial, [0, 1])
        routed = head.route_keys(trial, [client.advertise(public, [0, 1])])
        inboxes = head.route_shares(trial, [client.share(trial, routed)])
        masked = client.mask(trial, 0, x.numpy(), inboxes)
        return torch.from_numpy(fresh.codec.decode(masked))

    return release


def _audit_m2_broadcast(
    task: SmallTask, cfg: DictConfig, platform: DictConfig, arm: str, kw: dict
) -> ArmAudit:
    """(f) on an M2 broadcast ``W' = P1 (P1L W'_a) + N1 R1`` of the global model, through the platform's own
    roles (keys from their factories, the primary design's coding): the server's M1 encoding with fresh
    ``r1``, the aggregator's π2 with fresh ``R2``, the M2 server's re-encoding with fresh ``R1``, read as
    every client reads it (the evaluator's decoding: strip code 2, then ``P1L``)."""
    from sifl_ray.arms import arm_of
    from sifl_ray.attacks.audit import audit_release
    from sifl_ray.roles.factories import (
        aggregator_from_state,
        make_party_aggregator_state,
        make_party_server_key,
    )
    from sifl_ray.roles.messages import Partial
    from sifl_ray.roles.server import Server
    from sifl_ray.specs import CodingSpec

    design = Design.parse(cfg.primary)
    coded = platform_config(
        cfg, clients=task.clients, rounds=cfg.training.rounds, coding=design_coding(cfg, design)
    )
    coding = CodingSpec.from_config(coded)
    server, server_view = make_party_server_key(
        arm=arm, mode="m2", n=task.n, coding=coding, run_seed=int(cfg.seed)
    )
    # the same server in its M1 role: a fresh M1 encoding of the model each trial (r1 of its own round)
    encoder = Server(mode="m1", key=server.key, noise=server.noise, noise_seed=server._noise_seed)
    state = make_party_aggregator_state(arm=arm, mode="m2", coding=coding, run_seed=int(cfg.seed))
    n_tilde = server.key.n_tilde
    aggregator = aggregator_from_state(mode="m2", coding=coding, state=state, bounds=(0, n_tilde), shard=0)
    reader = TaskEvaluator(
        model=task.model(),
        x_test=np.zeros((1, task.features)),
        y_test=np.zeros(1),
        batch_size=1,
        device=torch.device("cpu"),
    )
    reader.set_arm(arm, "m2", server_view, aggregator.key.client_view())
    ctx = task_context(task, coded, arm, key_norms=server.key.norms(), agg_norms=aggregator.key.norms())
    report = arm_of(coded, arm).privacy(ctx) or {}

    def release(x: torch.Tensor, trial: int) -> torch.Tensor:
        first, second = 2 * trial, 2 * trial + 1  # distinct noise rounds for the two encodings
        w_tilde, _ = encoder.finish_round(first, encoder.initial_broadcast(x))
        upload = Partial(source=0, round=second, key_epoch=0, weighted_sum=w_tilde, weight=1.0, accepted=1)
        W_a, _ = aggregator.reduce(second, 0, [upload])
        W, _ = server.finish_round(second, W_a)
        return reader.decode(arm, W)

    clip = float(platform.privacy.clip)
    sensitivity = (
        2 * clip / int(task.sizes.sum())
    )  # Remark 3's global sensitivity: one sample of all the data
    gen = torch_generator(cfg.seed, "attack", "audit", arm)
    direction = torch.randn(task.n, generator=gen, dtype=CODING_DTYPE)
    x1 = direction * (sensitivity / torch.linalg.vector_norm(direction))
    # 2 × trials releases through the platform's server and aggregator: most of the suite's time, so its
    # own progress (lines at most every 10 s off a terminal)
    with Progress(f"{arm}, the DP audit's releases", total=2 * kw["trials"], min_interval=10.0) as bar:

        def counted(x: torch.Tensor, trial: int) -> torch.Tensor:
            out = release(x, trial)
            bar.step()
            return out

        test = audit_release(counted, x0=torch.zeros(task.n, dtype=CODING_DTYPE), x1=x1, **kw)
    scope = "per element of one broadcast (the paper's Theorem 2, global release), worst element"
    what = "the whole broadcast W', read by a client (P2R, P1L)"
    return ArmAudit(arm, float(report.get("epsilon_global", math.nan)), scope, what, test)


@dataclass
class SuiteResult:
    config: dict[str, Any]
    designs: list[DesignResult]
    m2: list[M2Result]
    audit_whole: AuditTest | None
    audit_single: AuditTest | None
    audit_design: str
    audit_sensitivity: float
    primary: str
    seconds: float
    arms: dict[str, str] = field(default_factory=dict)  # arm instance → what was attacked
    plain: list[PlainResult] = field(default_factory=list)
    audits: list[ArmAudit] = field(default_factory=list)  # (f) for every attacked arm that has one

    def primary_result(self) -> DesignResult | None:
        """The primary design's result (``None`` when no m1 arm was attacked)."""
        return next((d for d in self.designs if d.design == self.primary), None)

    def headline(self) -> dict[str, float | int | None]:
        """The RESULT line's figures (see :func:`sifl_ray.attacks.report.result_line`).

        ``projection_error`` is the best noise removal from the uploads alone (orthogonal projection or
        regression), the SPEC's aggregator; the telescoped regression needs the broadcasts and is reported
        apart (:meth:`broadcast_headline`). ``diff_noise_ratio`` (last, uploads only): the noise in the
        elements of same-round differences over the noise in one upload (:mod:`.element_noise`). Figures of
        an arm that was not attacked are ``None``.
        """
        d = self.primary_result()
        m2_round1 = [r.corr_per_round[min(r.corr_per_round)] for r in self.m2]
        removal = [] if d is None else [d.figures[k].value for k in UPLOADS_ONLY_REMOVAL]
        removal = [v for v in removal if v is not None]
        return {
            "full_rank_round": None if d is None else d.figures["difference_rank"].value,
            "projection_error": min(removal) if removal else None,
            "m2_server_corr": min(m2_round1) if m2_round1 else None,
            "audit_eps_lb": self.audit_whole.epsilon_lower_bound if self.audit_whole else None,
            "paper_eps": None if d is None else d.epsilon_paper,
            "diff_noise_ratio": None if d is None else d.figures["difference_noise"].value,
        }

    def broadcast_headline(self) -> dict[str, float | str | None]:
        """The primary design's noise removal with the broadcasts too (not on the RESULT line)."""
        d = self.primary_result()
        tele = None if d is None else d.figures["telescoped"].value
        return {"threat_model": AGGREGATOR_BROADCASTS, "telescoped_error": tele}


#: What the suite does to an arm of each coding (``SuiteResult.arms``).
ATTACKED_AS = {
    "m1": "aggregator attacks (a)-(d) under every key design, DP audit (f) on the primary",
    "m2": "the M2 server's view (e), DP audit (f) of its broadcast",
    "plain": "the aggregator's direct view (each upload read as the client's model, or its update), the "
    "server's view of the aggregate, DP audit (f)",
    "secure": "the aggregator's direct view of the masked uploads, the server's view of the unmasked "
    "aggregate, DP audit (f) of both",
}


def suite_steps(cfg: DictConfig) -> int:
    """How many times :func:`run_suite` calls its ``log``: once per m1 arm and design (contrast designs
    included), per m2 arm attacked by its server, per plain arm, and per arm audited (the progress total)."""
    arms = attacked_arms(cfg)
    m1 = sum(1 for coding in arms.values() if coding == "m1")
    m2 = sum(1 for coding in arms.values() if coding == "m2") if cfg.m2.enabled else 0
    plain = sum(1 for coding in arms.values() if coding == "plain")
    return m1 * (len(cfg.designs) + len(cfg.contrast.designs)) + m2 + plain + len(arms)


def run_suite(
    cfg: DictConfig, *, transcript_dir: Path | None = None, log: Callable[[str], object] = print
) -> SuiteResult:
    """Attack every arm of ``cfg.arms``: m1 arms under every design of ``cfg`` (attacks (a)–(d), the audit
    (f)), m2 arms by their server (e), plain arms by the aggregator's direct view. ``log`` is told of each
    step done (:func:`suite_steps` of them)."""
    with single_threaded():
        return _run_suite(cfg, transcript_dir=transcript_dir, log=log)


def _run_suite(cfg: DictConfig, *, transcript_dir: Path | None, log: Callable[[str], object]) -> SuiteResult:
    tic = time.perf_counter()
    arms = attacked_arms(cfg)
    task = make_task(
        features=cfg.model.features,
        hidden=cfg.model.hidden,
        clients=cfg.data.clients,
        samples_per_client=cfg.data.samples_per_client,
        teacher_scale=cfg.data.teacher_scale,
        seed=cfg.seed,
    )
    save = transcript_dir is not None and cfg.transcript.save
    m1_arms = [a for a, coding in arms.items() if coding == "m1"]
    designs = []
    truths: dict[str, GroundTruth] = {}
    for arm in m1_arms:
        # The first m1 arm's designs keep their names (``primary`` names one of them); others are prefixed.
        prefix = "" if arm == m1_arms[0] else f"{arm}:"
        for name in cfg.designs:
            result, recorder, truths[prefix + name] = evaluate_design(task, cfg, Design.parse(name), arm=arm)
            result.design = prefix + name
            designs.append(result)
            if save:
                recorder.save(transcript_dir / f"{prefix.replace(':', '-')}{name}.npz")
            log(f"{arm}, design {result.design}: done in {result.seconds:.1f}s")

        quiet = OmegaConf.merge(
            cfg, {"key": {"beta": cfg.contrast.beta, "noise_scale": cfg.contrast.noise_scale}}
        )
        for name in cfg.contrast.designs:
            result, _, _ = evaluate_design(task, quiet, Design.parse(name), arm=arm)
            result.design = f"{prefix}{name}@moderate"
            designs.append(result)
            log(
                f"{arm}, design {result.design} (beta = {cfg.contrast.beta:g}, noise "
                f"{cfg.contrast.noise_scale:g}): done"
            )

    m2 = []
    for arm in (a for a, coding in arms.items() if coding == "m2" and cfg.m2.enabled):
        got = evaluate_m2(cfg, transcript_dir=transcript_dir, arm=arm)
        m2 += got
        log(f"{arm}, the M2 server attack: n = {got[0].n}, done")

    plain = []
    for arm in (a for a, coding in arms.items() if coding == "plain"):
        result, recorder = evaluate_plain(task, cfg, arm)
        plain.append(result)
        if save:
            recorder.save(transcript_dir / f"{arm}.npz")
        log(f"{arm}, the aggregator's direct view: done in {result.seconds:.1f}s")

    from sifl_ray.privacy import local_sensitivity

    sensitivity = float(
        local_sensitivity(clip=cfg.audit.clip, local_size=min(int(x.shape[0]) for x in task.X))
    )
    whole = single = None
    truth = truths.get(cfg.primary)
    if truth is not None:
        last = max(truth.aggregate_models)
        whole, single = audit_upload_release(
            truth.keys[0],
            w0=torch.as_tensor(truth.aggregate_models[last]),
            sensitivity=sensitivity,
            noise=NoiseSpec(distribution=cfg.key.noise, scale=cfg.key.noise_scale),
            trials=cfg.audit.trials,
            generator=torch_generator(cfg.seed, "attack", "audit"),
            delta=cfg.audit.delta,
            confidence=cfg.audit.confidence,
        )
    primary = next((d for d in designs if d.design == cfg.primary), None)
    secure = {p.arm for p in plain if p.masked}
    audits = []
    for arm in arms:
        first_m1 = bool(m1_arms) and arm == m1_arms[0]  # the primary design's audit is the first m1 arm's
        got = audit_arm(
            task,
            cfg,
            arm,
            m1_whole=whole if first_m1 else None,
            paper_eps=primary.epsilon_paper if primary is not None and first_m1 else None,
        )
        audits += got
        said = [
            f"{a.label}, the DP audit: eps >= {a.test.epsilon_lower_bound:.3g} "
            f"(reported {a.reported_epsilon:.3g})"
            for a in got
        ]
        log("; ".join(said) or f"{arm}, the DP audit: none (the suite has no audit for this arm)")
    return SuiteResult(
        config=public_config(cfg),
        designs=designs,
        m2=m2,
        audit_whole=whole,
        audit_single=single,
        audit_design=cfg.primary,
        audit_sensitivity=sensitivity,
        primary=cfg.primary,
        seconds=time.perf_counter() - tic,
        audits=audits,
        arms={arm: ATTACKED_AS["secure" if arm in secure else coding] for arm, coding in arms.items()},
        plain=plain,
    )
