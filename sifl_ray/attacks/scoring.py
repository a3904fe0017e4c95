"""The scorer's side of the attacks: what it holds that no adversary does (the keys), and how figures are
summarised over rounds.

Scoring "up to the unknown linear map". The subspace adversaries recover ``c = A w`` for an invertible map
``A = Uᵀ P1`` (U their basis of ``col(P1)``) that they never learn. The scorer, who holds the key, computes
that A from U and ``P1`` and reports ``max_i ‖A⁻¹ c_i − w_i‖ / ‖w_i‖`` over a round's uploads. This is
invariant to the adversary's choice of basis (another basis U' = U M gives c' = Mᵀc and A' = MᵀA), and it is
zero exactly when the adversary holds every model up to one fixed map, which is what docs/method.md "Noise
removal" claims. The adversary would obtain A itself from any n known (w, w~) pairs, or from one colluding
client (attack d).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sifl_ray.attacks.adversaries import BlockLayout
from sifl_ray.coding.base import ServerKey


def dense(key: ServerKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The key's matrices ``(P1, P1L, N1)`` in float64 on the CPU (scorer side: the adversary has none)."""
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


def nanmax(per_round: dict[int, float]) -> float | None:
    """Max over rounds, ignoring NaN (pairs with a zero vector); None when no round has the figure."""
    vals = [v for v in per_round.values() if not math.isnan(v)]
    return max(vals) if vals else None


def first_round(per_round: dict[int, float]) -> str:
    """``round t: value`` of the first round recorded: a figure exact from round 1 says so here."""
    return f"round {min(per_round)}: {per_round[min(per_round)]:.2e}" if per_round else "no round recorded"


def trend(per_round: dict[int, float | int | None]) -> str:
    """How a figure moved, as the report's prose says it: ``X in round a, Y in round b`` over the rounds
    where the figure exists."""
    pts = [(t, v) for t, v in sorted(per_round.items()) if v is not None]
    if not pts:
        return "never computable: col(P1) was not known in any key epoch"
    (t0, v0), (t1, v1) = pts[0], pts[-1]
    return f"{v0:.2e} in round {t0} (first with col(P1) known), {v1:.2e} in round {t1}"
