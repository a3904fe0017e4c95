"""(b) Noise removal, once the differences gave ``col(P1)`` (:func:`.differences.subspace_pass`).

Three ways to strip ``N1 r^t`` from an upload: orthogonal projection onto the recovered ``col(P1)`` and a
regression of signal on noise coordinates over the key epoch (uploads only, the method's aggregator), and a
regression on telescoped broadcasts (needs the broadcasts). Scored up to the adversary's unknown map
(:func:`sifl_ray.attacks.scoring.errors_up_to_map`).
"""

from __future__ import annotations

import numpy as np

from sifl_ray.attacks.adversaries import (
    fit_noise_regression,
    fit_telescoped_regression,
    project_onto_signal,
    remove_fitted_noise,
)
from sifl_ray.attacks.builtin.differences import subspace_pass
from sifl_ray.attacks.registry import (
    AGGREGATOR,
    AGGREGATOR_BROADCASTS,
    Attack,
    DesignView,
    FigureSpec,
    Measured,
    register_attack,
)
from sifl_ray.attacks.scoring import dense, errors_up_to_map, trend
from sifl_ray.attacks.transcript import TranscriptRecorder

_ERROR = "max relative error of the round's recovered models, up to the unknown map"


def _aggregate(recorder: TranscriptRecorder, round: int) -> np.ndarray:
    """The aggregator's own FedAvg of a round's uploads."""
    uploads, clients = recorder.upload_matrix(round)
    return uploads @ recorder.client_weights(clients)


def _measure(view: DesignView) -> dict[str, Measured]:
    recorder, truth, layout = view.recorder, view.truth, view.layout
    known = view.once(subspace_pass)
    P1_of_epoch = {e: dense(k)[0] for e, k in truth.keys.items()}  # scorer side: undoes the unknown map
    projection: dict[int, float | None] = {}
    regression: dict[int, float | None] = {}
    telescoped: dict[int, float | None] = {}
    for t in recorder.rounds():
        bases = known.bases.get(t)
        if bases is None:  # col(P1) not yet known in this key epoch
            projection[t] = regression[t] = telescoped[t] = None
            continue
        uploads = recorder.upload_matrix(t)[0]
        epoch_rounds = known.epoch_rounds[t]
        P1, target = P1_of_epoch[recorder.epoch_of(t)], truth.upload_models[t]

        def score(coords: list[np.ndarray], bases=bases, P1=P1, target=target) -> float:
            return float(errors_up_to_map(layout, bases, P1, coords, target).max())

        projection[t] = score(project_onto_signal(layout, bases, uploads))
        G = fit_noise_regression(layout, bases, [recorder.upload_matrix(s)[0] for s in epoch_rounds])
        regression[t] = score(remove_fitted_noise(layout, bases, G, uploads))
        G = fit_telescoped_regression(
            layout,
            bases,
            [recorder.broadcasts[s] for s in epoch_rounds],
            [_aggregate(recorder, s) for s in epoch_rounds[:-1]],
        )
        telescoped[t] = score(remove_fitted_noise(layout, bases, G, uploads))
    last = recorder.rounds()[-1]
    return {
        name: Measured(series.get(last), series, trend(series))
        for name, series in (
            ("projection", projection),
            ("regression", regression),
            ("telescoped", telescoped),
        )
    }


register_attack(
    Attack(
        name="noise_removal",
        figures=(
            FigureSpec(
                name="projection",
                threat_model=AGGREGATOR,
                attack="(b) noise removal by orthogonal projection onto the recovered col(P1)",
                figure=_ERROR,
                explanation=(
                    "Orthogonal projection onto the recovered col(P1). Under P1L = pinv(P1) the noise lies "
                    "in col(P1)^perp and is removed outright in exact arithmetic. In float64 the "
                    "differences carry round-off of the noise's magnitude, which tilts the recovered "
                    "subspace, so the leftover noise grows like (noise/alpha)^2: small at moderate scales, "
                    "large at the paper's. An oblique kernel leaves noise of the full scale."
                ),
                column="project",
            ),
            FigureSpec(
                name="regression",
                threat_model=AGGREGATOR,
                attack="(b) noise removal by regression of signal on noise coordinates over rounds",
                figure=_ERROR,
                explanation=(
                    "Uploads only: regress the signal coordinates U^T w~ on the noise coordinates V^T w~ "
                    "over all rounds of the key epoch; the noise of a round enters both through the same "
                    "r^t, the model does not. The residual is the models' spread, so the error falls with "
                    "rounds, whatever the noise scale."
                ),
                column="regress",
            ),
            FigureSpec(
                name="telescoped",
                threat_model=AGGREGATOR_BROADCASTS,
                attack=(
                    "(b) noise removal by regression on telescoped broadcasts (noise-free global-model "
                    "increments)"
                ),
                figure=_ERROR,
                explanation=(
                    "Needs the broadcasts, which the method's aggregator does not see (every client receives "
                    "them, so an eavesdropper on the server->client channel or one colluding client has "
                    "them): U^T(aggregate_t - broadcast_t) = A(w^{t+1} - w^t) is noise-free, so the "
                    "regression has no residual and is exact once the rounds of a key epoch exceed the "
                    "noise dimensions (per block), whatever the noise scale or the left inverse."
                ),
                column="telescope*",
            ),
        ),
        measure=_measure,
    )
)
