"""(c) The geometry of the clients' updates: norm ratios and cosines, exact from round 1 for a
scaled-orthogonal ``P1``.

Uploads only, the deviations from the round's weighted mean upload (every upload of a round carries the same
``N1 r^t``, so it cancels); with the broadcast ``w~^t`` (same noise), the client updates themselves.
"""

from __future__ import annotations

import math

import numpy as np

from sifl_ray.attacks.adversaries import encoded_updates, update_geometry
from sifl_ray.attacks.registry import (
    AGGREGATOR,
    AGGREGATOR_BROADCASTS,
    Attack,
    DesignView,
    FigureSpec,
    Measured,
    register_attack,
)
from sifl_ray.attacks.scoring import first_round, nanmax


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


def _measure(view: DesignView) -> dict[str, Measured]:
    recorder, truth = view.recorder, view.truth
    ratio, cos, ratio_b, cos_b = {}, {}, {}, {}
    for t in recorder.rounds():
        uploads, clients = recorder.upload_matrix(t)
        weights = recorder.client_weights(clients)
        deviations = truth.upload_models[t] - truth.aggregate_models[t][:, None]
        ratio[t], cos[t] = _geometry_errors(encoded_updates(uploads, None, weights), deviations)
        bcast = recorder.broadcasts.get(t)
        if bcast is not None and bcast.ndim == 1:
            ratio_b[t], cos_b[t] = _geometry_errors(
                encoded_updates(uploads, bcast, weights), truth.updates[t]
            )
    return {
        name: Measured(nanmax(series), series, first_round(series))
        for name, series in (
            ("geometry_ratio", ratio),
            ("geometry_cosine", cos),
            ("geometry_ratio_broadcast", ratio_b),
            ("geometry_cosine_broadcast", cos_b),
        )
    }


register_attack(
    Attack(
        name="geometry",
        figures=(
            FigureSpec(
                name="geometry_ratio",
                threat_model=AGGREGATOR,
                attack=(
                    "(c) norm ratios of the updates' deviations from their mean, P1 d_i = w~_i - sum_j p_j "
                    "w~_j"
                ),
                figure="max relative error of ||d_i|| / ||d_j|| over client pairs (max over rounds)",
                explanation=(
                    "Uploads only: P1 d_i = w~_i - sum_j p_j w~_j is noise-free (every upload of a round "
                    "carries the same N1 r^t), where d_i = w_i - w_bar is client i's deviation from the "
                    "round's weighted mean model; for a scaled-orthogonal P1 (P1^T P1 = alpha^2 I) norm "
                    "ratios and angles of the deviations are exact from round 1. A generic dense P1 "
                    "distorts them."
                ),
                column="ratio err",
            ),
            FigureSpec(
                name="geometry_cosine",
                threat_model=AGGREGATOR,
                attack="(c) cosines between the updates' deviations from their mean",
                figure="max absolute error of cos(d_i, d_j) over client pairs (max over rounds)",
                explanation="As above, for the cosines between the deviations.",
                column="cos err",
            ),
            FigureSpec(
                name="geometry_ratio_broadcast",
                threat_model=AGGREGATOR_BROADCASTS,
                attack=(
                    "(c) norm ratios of the client updates, P1 u_i = w~_i - w~^t (needs the broadcast w~^t)"
                ),
                figure="max relative error of ||u_i|| / ||u_j|| over client pairs (max over rounds)",
                explanation=(
                    "With the broadcast w~^t (same noise as the round's uploads): P1 u_i = w~_i - w~^t "
                    "gives the client updates u_i = w_i - w^t themselves, with the same exactness for a "
                    "scaled-orthogonal P1."
                ),
                column="ratio err*",
            ),
            FigureSpec(
                name="geometry_cosine_broadcast",
                threat_model=AGGREGATOR_BROADCASTS,
                attack="(c) cosines between the client updates (needs the broadcast w~^t)",
                figure="max absolute error of cos(u_i, u_j) over client pairs (max over rounds)",
                explanation="As above, for the cosines between the client updates.",
                column="cos err*",
            ),
        ),
        measure=_measure,
    )
)
