"""The canaries' secret draws and their statistic (docs/method.md "Auditing inside the run"): each canary's
direction, which canaries are inserted, and the cosine that scores a release against them.

Apart from :mod:`sifl_ray.privacy.one_run` (the bounds, which need SciPy) because every run that audits
draws these in its parties and its driver, and a run that does not audit imports neither: NumPy and the
run's seeded streams only.
"""

from __future__ import annotations

import math

import numpy as np

from sifl_ray.seeding import noise_generator


def canary_directions(*, d: int, k: int, seed: bytes, clip: float, first: int = 0) -> np.ndarray:
    """The uploads of canaries ``first .. first+k-1``: uniform random directions in R^d at norm ``clip``.

    Canary j's direction comes from its own secret stream ``(seed, "canary", "direction", j)``, so a client
    can build its one canary without the others, and a direction never depends on k. Nulls (directions never
    inserted, for the estimate) are canaries past the last inserted one: ``first=k``.

    Args:
        d: dimension of the update.
        k: number of canaries.
        seed: the auditing party's secret seed (at least 16 bytes): whoever knows it knows the canaries.
        clip: C, the clip norm (a canary's upload sits on the clip sphere, the largest a client may send).
        first: index of the first canary.

    Returns:
        A float64 array of shape ``(k, d)``, each row of norm ``clip``.
    """
    if int(d) != d or d < 1 or int(k) != k or k < 0 or int(first) != first or first < 0:
        raise ValueError(f"need integers d >= 1, k >= 0, first >= 0; got d={d!r}, k={k!r}, first={first!r}")
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be finite and > 0, got {clip!r}: a canary sits on the clip sphere")
    out = np.empty((int(k), int(d)))
    for row, j in enumerate(range(int(first), int(first) + int(k))):
        draw = noise_generator(seed, "canary", "direction", j).standard_normal(int(d))
        out[row] = draw * (clip / np.linalg.norm(draw))  # a zero draw has probability 0 (d normals)
    return out


def inclusion_draws(*, k: int, seed: bytes) -> np.ndarray:
    """Which of k canaries are inserted: each independently with probability ½, canary j from its own secret
    stream ``(seed, "canary", "inclusion", j)``.

    Steinke et al.'s theorem needs these bits uniform and independent, and hidden from the mechanism's
    adversary and from whoever scores the release; the auditor reads them only after the run. ``seed`` is
    the auditor's inclusion seed, apart from the seed of the directions that the scoring parties hold.

    Returns:
        A boolean array of length k.
    """
    if int(k) != k or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k!r}")
    return np.array(
        [noise_generator(seed, "canary", "inclusion", j).integers(0, 2) == 1 for j in range(int(k))],
        dtype=bool,
    )


def cosines(delta: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Cosine between the release's change ``delta`` (shape ``(d,)``) and each row of ``directions``
    (shape ``(k, d)`` or ``(d,)``): the canary statistic. Zero-safe: a zero ``delta`` or a zero direction
    gives cosine 0 (nothing released in that direction).
    """
    delta = np.asarray(delta, dtype=np.float64)
    dirs = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    if delta.ndim != 1 or dirs.ndim != 2 or dirs.shape[1] != delta.shape[0]:
        raise ValueError(
            f"need delta of shape (d,) and directions of shape (k, d); got {delta.shape}, {dirs.shape}"
        )
    norms = np.linalg.norm(dirs, axis=1) * np.linalg.norm(delta)
    dots = dirs @ delta
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
