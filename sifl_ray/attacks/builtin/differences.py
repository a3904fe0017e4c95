"""(a) Noise-free same-round differences: the aggregator learns ``col(P1)``.

Every client of a round starts from the same ``w~^t``, so ``N1 r^t`` cancels in ``w~_i − w~_j = P1 (w_i −
w_j)``; the stacked differences span ``col(P1)`` after about ``⌈n/(N_c−1)⌉`` rounds of one key epoch.
:func:`subspace_pass` is that pass over the uploads; the noise-removal attacks (b) start from the basis it
recovers, so they share it (:meth:`~sifl_ray.attacks.registry.DesignView.once`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sifl_ray.attacks.adversaries import DifferenceAttack
from sifl_ray.attacks.registry import (
    AGGREGATOR,
    Attack,
    DesignView,
    FigureSpec,
    Measured,
    register_attack,
)


@dataclass
class SubspacePass:
    """The aggregator's subspace attack, round by round, on the uploads alone."""

    rank: dict[int, int] = field(default_factory=dict)
    #: rounds where col(P1) is known in the key epoch → the recovered bases (signal, noise) per block
    bases: dict[int, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    #: every round → the rounds of its key epoch so far (itself included)
    epoch_rounds: dict[int, list[int]] = field(default_factory=dict)
    full_rank_round: int | None = None  # rounds into the key epoch when col(P1) was first complete
    best_epoch_rank: int = 0


def subspace_pass(view: DesignView) -> SubspacePass:
    """Observe every round's uploads; a new key epoch starts from nothing (what was learnt is useless)."""
    out = SubspacePass()
    recorder = view.recorder
    attack = DifferenceAttack(view.layout, tol_factor=view.cfg.rank_tol_factor)
    epoch, rounds = None, []
    for t in recorder.rounds():
        if recorder.epoch_of(t) != epoch:
            epoch, rounds = recorder.epoch_of(t), []
            attack.reset()
        rounds.append(t)
        out.epoch_rounds[t] = list(rounds)
        out.rank[t] = attack.observe(recorder.upload_matrix(t)[0])
        out.best_epoch_rank = max(out.best_epoch_rank, out.rank[t])
        if attack.full_rank:
            out.bases[t] = attack.bases()
            if out.full_rank_round is None:
                out.full_rank_round = len(rounds)
    return out


def _measure(view: DesignView) -> dict[str, Measured]:
    got = view.once(subspace_pass)
    params = max(p.size for p in view.layout.params)
    expected = math.ceil(params / (view.task.clients - 1))
    note = (
        f"expected about ceil(s/(N_c-1)) = {expected} rounds for the largest block of s = {params} "
        f"parameters; best rank within one key epoch: {got.best_epoch_rank} of n = {view.truth.n} "
        f"(c = {view.cfg.rank_tol_factor:g})"
    )
    return {"difference_rank": Measured(got.full_rank_round, got.rank, note)}


register_attack(
    Attack(
        name="differences",
        figures=(
            FigureSpec(
                name="difference_rank",
                threat_model=AGGREGATOR,
                attack="(a) noise-free same-round differences w~_i - w~_j = P1 (w_i - w_j)",
                figure="rounds until col(P1) is known (full numerical rank)",
                explanation=(
                    "Every client of a round starts from the same w~^t, so N1 r^t cancels in w~_i - w~_j = "
                    "P1 (w_i - w_j). The stacked differences span col(P1) after about ceil(n/(N_c-1)) "
                    "rounds, ceil(s/(N_c-1)) for blocks of s parameters. Numerical rank: singular values "
                    "above c * eps64 * max|w~| * sqrt(rows * columns) per block, a certified bound on the "
                    "differences' round-off (Weyl), so every counted direction is signal."
                ),
                column="full rank",
            ),
        ),
        measure=_measure,
    )
)
