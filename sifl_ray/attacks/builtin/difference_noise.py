"""(a) per element: the noise in element j of one upload against the noise in a same-round difference.

The paper's per-element ε covers element j of ONE upload; the aggregator holds all uploads of a round, which
share one noise draw, so their differences carry round-off only. Measured by the scorer, who splits a vector
into signal and noise with the key (:mod:`sifl_ray.attacks.element_noise`), with a control on uploads of two
rounds (independent draws) showing that the measurement sees noise where there is some.
"""

from __future__ import annotations

import math

import numpy as np

from sifl_ray.attacks.adversaries import EPS64
from sifl_ray.attacks.element_noise import cross_round_pairs, measure_transcript
from sifl_ray.attacks.registry import (
    AGGREGATOR,
    Attack,
    DesignView,
    FigureSpec,
    Measured,
    register_attack,
)


def _measure(view: DesignView) -> dict[str, Measured]:
    recorder, truth, cfg = view.recorder, view.truth, view.cfg
    views = {epoch: key.client_view() for epoch, key in truth.keys.items()}

    def view_for_round(t: int):
        return views[truth.epoch_of(t)]

    same = measure_transcript(recorder, view_for_round)
    control = cross_round_pairs(recorder, view_for_round, truth.epoch_of)
    key0 = truth.keys[0]
    noise = cfg.coding.noise
    std = noise.sigma1 * (math.sqrt(2.0) if noise.distribution == "laplace" else 1.0)
    predicted = float(np.median(key0.norms().n1_row_l2.numpy())) * std
    rms = float(np.sqrt(np.mean(np.square(same.upload_rms))))
    bound = EPS64 / 2 * max(float(np.max(np.abs(recorder.upload_matrix(t)[0]))) for t in recorder.rounds())
    return {
        "difference_noise": Measured(
            same.ratio,
            dict(same.per_round),
            f"worst element {same.worst_element_ratio:.2e}; noise RMS per element in one upload {rms:.3g} "
            f"(median measured {float(np.median(same.upload_rms)):.3g}, the paper's s_j = ||N1^j|| sigma: "
            f"median {predicted:.3g}), in the differences {rms * same.ratio:.2e}, against a round-off unit "
            f"u * max|w~| = {bound:.2e}; {same.pairs} differences over {same.rounds} rounds. The paper's "
            "per-element epsilon covers element j of ONE upload: against the aggregator, who holds every "
            "w~_i - w~_k = P1 (w_i - w_k), it does not hold",
        ),
        "difference_noise_control": Measured(
            control.ratio,
            dict(control.per_round),
            f"{control.pairs} pairs of rounds, {key0.n_tilde - key0.n} noise dimensions each; worst "
            f"element {control.worst_element_ratio:.3g}",
        ),
    }


register_attack(
    Attack(
        name="difference_noise",
        figures=(
            FigureSpec(
                name="difference_noise",
                threat_model=AGGREGATOR,
                attack=(
                    "(a) per element: noise in element j of w~_i - w~_k (same round) vs of one upload w~_i"
                ),
                figure="RMS of the noise in the differences / in one upload (every element and round)",
                explanation=(
                    "Per element, uploads only. The paper's per-element epsilon covers element j of ONE "
                    "upload, whose noise (N1 r^t)_j has std s_j = ||N1^j|| sigma. The aggregator holds all "
                    "N_c uploads of a round, and they share one draw r^t, so element j of w~_i - w~_k is "
                    "P1^j (w_i - w_k) with round-off only. Measured by the scorer, who splits a vector x "
                    "into signal and noise with the key: the noise is x - P1 P1L x (= N1 r exactly). The "
                    "figure is the RMS of that noise in the differences over its RMS in one upload, over "
                    "every element and round; a float64 bound is a few u * max|w~| / RMS(noise), u = "
                    "2^-53. Element by element the aggregator learns the clients' differences scaled by P1 "
                    "exactly: against it the per-element epsilon does not hold (a noise-free release has "
                    "no finite epsilon; round-off is deterministic and no noise)."
                ),
                column="diff noise",
            ),
            FigureSpec(
                name="difference_noise_control",
                threat_model=AGGREGATOR,
                attack=(
                    "(a) per element, control: one upload of round t vs one of round t+1 (independent draws)"
                ),
                figure="RMS of the noise in the differences / in one upload (sqrt(2) = 1.414 expected)",
                explanation=(
                    "The same measurement on one upload of round t against one of round t+1 (independent "
                    "draws, pairs of rounds used once, within a key epoch): the noise of the difference is "
                    "N1 (r^t - r^{t+1}), sqrt(2) times one upload's in RMS. It shows the measurement sees "
                    "noise where there is some."
                ),
                column="control",
            ),
        ),
        measure=_measure,
    )
)
