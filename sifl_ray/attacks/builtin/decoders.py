"""(d) The exact decoder: from known (w, w~) pairs, or handed over by one colluding client.

Every client holds ``P1L`` (the target optimizer needs it), so one colluding client gives the aggregator
the server's decoder; without one, pairs with fresh noise fix the min-norm decoder once they span a block's
rows. Both figures are set beside the key holder's own round-off on a fresh encoding.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.attacks.adversaries import BlockLayout, apply_decoder, fit_decoder
from sifl_ray.attacks.registry import (
    AGGREGATOR_COLLUSION,
    AGGREGATOR_KP,
    Attack,
    DesignView,
    FigureSpec,
    Measured,
    register_attack,
)
from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec, ServerKey
from sifl_ray.seeding import torch_generator


def known_plaintext(
    key: ServerKey, layout: BlockLayout, cfg: DictConfig, design_name: str
) -> tuple[int | None, float, float, float]:
    """How many known (w, w~) pairs, each with fresh noise, give the exact decoder.

    Pairs come from an oracle that encodes random models with the key (as a colluding client would supply
    one per round). Binary search over the pair count on "relative decode error of a fresh encoding below
    the tolerance": below the block's row count the min-norm decoder misses a direction and the error is
    large; from it on the decoder is ``P1L`` up to round-off.

    Returns:
        ``(pairs_needed or None, error with that many pairs, error with one fewer, key holder's error)``.
    """
    n, m = key.n, key.n_tilde - key.n
    gen = torch_generator(cfg.seed, "attack", design_name, "known-plaintext")
    noise = NoiseSpec(distribution=cfg.coding.noise.distribution, scale=cfg.coding.noise.sigma1)
    k_max = max(r.size for r in layout.rows) + 2
    W = torch.randn(n, k_max + 1, generator=gen, dtype=CODING_DTYPE) * cfg.train.init_scale
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


def key_holder_error(view: DesignView) -> float:
    """The legitimate decoder's own relative round-off on a fresh encoding (the floor of both figures)."""
    return view.once(_known_plaintext)[3]


def _known_plaintext(view: DesignView) -> tuple[int | None, float, float, float]:
    return known_plaintext(view.truth.keys[0], view.layout, view.cfg, view.design.name)


def _measure(view: DesignView) -> dict[str, Measured]:
    recorder, truth = view.recorder, view.truth
    needed, err_k, err_km1, holder = view.once(_known_plaintext)
    rows_b, params_b = view.layout.largest_block
    collusion = 0.0
    for t in recorder.rounds():
        decoded = truth.key_for_round(t).client_view().decode(torch.as_tensor(recorder.upload_matrix(t)[0]))
        target = truth.upload_models[t]
        collusion = max(
            collusion,
            float(np.max(np.linalg.norm(decoded.numpy() - target, axis=0) / np.linalg.norm(target, axis=0))),
        )
    return {
        "known_plaintext": Measured(
            needed,
            {},
            f"relative decode error of a fresh encoding: {err_k:.2e} with that many pairs, {err_km1:.2e} "
            f"with one fewer (the key holder's own: {holder:.2e}; tolerance "
            f"{view.cfg.known_plaintext.tolerance:g}); expected: the rows of the largest block, {rows_b} = "
            f"{params_b} parameters + {rows_b - params_b} extra rows",
        ),
        "collusion": Measured(
            collusion, {}, f"the legitimate decoder's own round-off on a fresh encoding: {holder:.2e}"
        ),
    }


register_attack(
    Attack(
        name="decoders",
        figures=(
            FigureSpec(
                name="known_plaintext",
                threat_model=AGGREGATOR_KP,
                attack="(d) exact decoder from known (w, w~) pairs, block by block",
                figure="pairs needed for the exact decoder",
                explanation=(
                    "Pairs (w, w~), each with fresh noise (one per round from a colluding client, or any "
                    "known model): the min-norm decoder fitted on them equals P1L once they span the "
                    "block's rows: s parameters + the block's extra rows, per block. Counted by binary "
                    "search on the decode error of a fresh encoding falling below the tolerance."
                ),
                column="KP pairs",
            ),
            FigureSpec(
                name="collusion",
                threat_model=AGGREGATOR_COLLUSION,
                attack=(
                    "(d) the colluding client hands over P1L (every client holds it for the target optimizer)"
                ),
                figure="max relative error of every decoded upload",
                explanation=(
                    "Every client holds P1L (the target optimizer needs it), so one colluding client hands "
                    "it over and the aggregator decodes every upload as the server does."
                ),
                column="collude",
            ),
        ),
        measure=_measure,
    )
)
