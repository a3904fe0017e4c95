"""Clipping a client's model to ``‖w_i‖₂ ≤ C``: the setting every SIFL ε assumes.

Why the clients clip. Theorems 1–2 bound what one element reveals through Remark 3's sensitivities
``2C/|D_i|`` and ``2C/|D|``, which hold only for models inside the ball of radius C (``privacy.clip``).
Nothing in training keeps a model there, so without clipping the reported ε would be a figure about
models that do not exist. The clients clip as NbAFL's do, and each round counts how many models it had
to scale: a run whose models are clipped every round is a run whose C shapes its accuracy, and the user
should see that.
"""

from __future__ import annotations

import math

import torch


def clip_norm_(w: torch.Tensor, clip: float) -> bool:
    """Scale ``w`` in place so that ``‖w‖₂ ≤ clip``; return whether it had to.

    The norm is checked after scaling: rounding can leave it an ulp or two above C (both the scaling and
    the norm round), so the vector shrinks by an ulp at a time until the bound holds exactly. A non-finite
    ``w`` is left alone and reported as not clipped: no scaling can bound it, and the upload check rejects it.
    """
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip!r}: it is the radius C of the ball the models live in")
    norm = float(torch.linalg.vector_norm(w))
    if not math.isfinite(norm) or norm <= clip:
        return False
    w.mul_(clip / norm)
    for _ in range(64):
        if float(torch.linalg.vector_norm(w)) <= clip:
            break
        w.mul_(1.0 - 2.0**-52)
    return True
