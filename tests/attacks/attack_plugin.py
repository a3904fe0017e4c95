"""A new attack in one file, as a newcomer writes it: its figure, explanation and measurement, registered on
import. ``SIFL_PLUGINS=attack_plugin sifl attack ...`` loads it (``tests/attacks/test_attack_registry.py``).

What it measures (a real, if modest, attack): how much larger an upload is than the model it encodes,
‖w~_i‖ / ‖w_i‖, the worst client of each round. The aggregator sees the norms; the scorer holds the models.
"""

from __future__ import annotations

import numpy as np

from sifl_ray.attacks.registry import AGGREGATOR, Attack, DesignView, FigureSpec, Measured, register_attack

NAME = "upload_inflation"


def measure(view: DesignView) -> dict[str, Measured]:
    """Per round, the largest ‖w~_i‖ / ‖w_i‖ over the round's uploads; the headline is the last round's."""
    per_round = {}
    for t in view.recorder.rounds():
        uploads = view.recorder.upload_matrix(t)[0]
        models = view.truth.upload_models[t]
        per_round[t] = float(np.max(np.linalg.norm(uploads, axis=0) / np.linalg.norm(models, axis=0)))
    last = view.recorder.rounds()[-1]
    return {NAME: Measured(per_round[last], per_round, f"over {len(per_round)} rounds")}


ATTACK = register_attack(
    Attack(
        name=NAME,
        figures=(
            FigureSpec(
                name=NAME,
                threat_model=AGGREGATOR,
                attack="(x) the size of an upload against the model it encodes",
                figure="max ||w~_i|| / ||w_i|| over the round's uploads",
                explanation=(
                    "The noise N1 r^t dominates an upload at the paper's scales, so its norm says nothing "
                    "of the model's: a figure far above 1 is the noise's share."
                ),
                column="inflation",
            ),
        ),
        measure=measure,
    )
)
