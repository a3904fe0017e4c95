"""The adversaries: what a curious aggregator or server computes from its own view (docs/method.md "Attacks").

Everything here uses only what the threat model grants the attacking party: the transcript it saw, the public
shape of the model (n), the public layout of a block key, its own key material (the M2 aggregator's ``P2R``,
the server's ``P1L``) and, for the known-plaintext attack, the pairs it is granted. Plain models and keys of
other parties never enter; scoring against the truth happens in :mod:`sifl_ray.attacks.suite`.

Attacks (lettered as the report and docs/attacks.md letter them):

a. :class:`DifferenceAttack`: within a round every upload carries the same noise ``N1 r^t``, so
   ``w~_i − w~_j = P1 (w_i − w_j)`` exactly; stacking these differences over rounds spans ``col(P1)``.
b. noise removal, three ways, all up to one unknown linear map ``A`` (n×n):
   :func:`project_onto_signal` (orthogonal projection: removes ``N1 r`` outright when ``P1L = pinv(P1)``),
   :func:`fit_noise_regression` (oblique keys: regress the signal coordinates on the noise coordinates across
   rounds), :func:`fit_telescoped_regression` (uses the broadcasts: the noise-free increments of the global
   model make the regression exact once there are more rounds than noise dimensions).
c. :func:`update_geometry`: norms and angles of client updates, read off the noise-free encoded updates.
d. :func:`fit_decoder`: the exact decoder from known (w, w~) pairs, block by block.
e. :func:`m2_server_estimate`: the M2 server's smallest right singular vector of ``P1L W'_a``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

EPS64 = float(np.finfo(np.float64).eps)

#: Default safety factor of the numerical-rank tolerance (see :class:`DifferenceAttack`).
RANK_TOL_FACTOR = 4.0


# ------------------------------------------------------------------------------------------------------------
# Public structure of a key.


@dataclass(frozen=True)
class BlockLayout:
    """Which encoded coordinates (rows) carry which model parameters, block by block.

    A dense or fast key is one block (every row mixes every parameter). A block-diagonal key is several; its
    layout is part of the public algorithm (backend and block size), not of the secret matrices, so the
    adversary is granted it. If a deployment hid the layout behind a secret permutation, the attacker would
    first have to find it; these measurements skip that step and say so.

    Attributes:
        rows: per block, the encoded coordinates (indices into ñ).
        params: per block, the model parameters (indices into n) those rows encode.
    """

    rows: tuple[np.ndarray, ...]
    params: tuple[np.ndarray, ...]

    @classmethod
    def whole(cls, *, n: int, n_tilde: int) -> BlockLayout:
        """One block: every encoded coordinate depends on every parameter."""
        return cls(rows=(np.arange(n_tilde),), params=(np.arange(n),))

    @classmethod
    def from_dense(cls, P1: np.ndarray, N1: np.ndarray) -> BlockLayout:
        """The blocks of ``[P1 N1]``: connected components of its nonzero pattern.

        Used by the scorer to hand the adversary the public layout of a block key without reading any
        attribute of a particular backend: exact zeros outside the blocks are what makes a key
        block-diagonal.
        """
        P1 = np.asarray(P1)
        F = np.hstack([P1, np.asarray(N1)])
        n_tilde, n = P1.shape
        rows, cols = np.nonzero(F)
        size = n_tilde + F.shape[1]
        graph = coo_matrix((np.ones(rows.size), (rows, n_tilde + cols)), shape=(size, size))
        _, label = connected_components(graph, directed=False)
        blocks_rows, blocks_params = [], []
        for lab in np.unique(label[:n_tilde]):
            r = np.flatnonzero(label[:n_tilde] == lab)
            p = np.flatnonzero(label[n_tilde : n_tilde + n] == lab)
            blocks_rows.append(r)
            blocks_params.append(p)
        orphan = np.setdiff1d(np.arange(n), np.concatenate(blocks_params))
        if orphan.size:
            raise ValueError(f"{orphan.size} parameters are encoded by no row: P1 is not of full column rank")
        return cls(rows=tuple(blocks_rows), params=tuple(blocks_params))

    @property
    def n(self) -> int:
        return int(sum(p.size for p in self.params))

    @property
    def n_tilde(self) -> int:
        return int(sum(r.size for r in self.rows))

    @property
    def num_blocks(self) -> int:
        return len(self.rows)

    @property
    def largest_block(self) -> tuple[int, int]:
        """``(rows, params)`` of the block with the most rows."""
        b = int(np.argmax([r.size for r in self.rows]))
        return int(self.rows[b].size), int(self.params[b].size)

    def describe(self) -> str:
        if self.num_blocks == 1:
            return f"one block: each of the ñ = {self.n_tilde} coordinates mixes all n = {self.n} parameters"
        shapes: dict[tuple[int, int], int] = {}
        for r, p in zip(self.rows, self.params, strict=True):
            shapes[(p.size, r.size - p.size)] = shapes.get((p.size, r.size - p.size), 0) + 1
        parts = ", ".join(f"{c} × ({s} parameters + {e} extra rows)" for (s, e), c in sorted(shapes.items()))
        return f"{self.num_blocks} blocks: {parts} (layout public, block matrices secret)"


# ------------------------------------------------------------------------------------------------------------
# (a) Noise-free same-round differences → col(P1).


@dataclass
class _BlockState:
    factor: np.ndarray | None = None  # Z with Z Zᵀ = D Dᵀ over all differences so far (left sing. vecs × σ)
    columns: int = 0
    max_abs: float = 0.0
    rank: int = 0


class DifferenceAttack:
    """The aggregator's noise-free differences, accumulated into an estimate of ``col(P1)`` (docs/method.md
    "Noise-free differences").

    Each round the aggregator forms ``N_c − 1`` differences ``w~_i − w~_1 = P1 (w_i − w_1)``; the noise
    ``N1 r^t`` cancels because every client of a round starts from the same ``w~^t``. The span grows by up to
    ``N_c − 1`` per round, so the whole ``col(P1)`` (rank n) is known after about ``⌈n/(N_c − 1)⌉`` rounds, or
    ``⌈s/(N_c − 1)⌉`` for blocks of s parameters (each block is attacked on its own rows).

    Numerical rank. A difference of two float64 numbers of magnitude at most M is exact up to about
    ``eps64·M`` per entry (a client's ``w~^t + P1 δ`` rounds once per addition), so the round-off matrix E
    of a block with r rows and k difference columns has ``‖E‖₂ ≤ ‖E‖_F ≤ eps64·M·√(r·k)``. A singular
    value above that cannot be round-off (Weyl's inequality), so the rank counted with the tolerance
    ``tol = c·eps64·M·√(r·k)`` (``c = tol_factor``, default 4, allowing for up to 8 roundings per entry as
    in a stepwise client with small K) is a certified lower bound on the rank of the noise-free
    differences. M is the largest magnitude seen in the block's uploads so far.

    The accumulation is exact: a factor Z with ``Z Zᵀ = D Dᵀ`` (at most r columns) replaces the growing D.

    Args:
        layout: the key's public block layout.
        tol_factor: c above.
    """

    def __init__(self, layout: BlockLayout, *, tol_factor: float = RANK_TOL_FACTOR):
        if tol_factor <= 0:
            raise ValueError(f"tol_factor must be > 0, got {tol_factor!r}")
        self.layout = layout
        self.tol_factor = float(tol_factor)
        self.reset()

    def reset(self) -> None:
        """Forget everything: a new key epoch makes the old subspace useless."""
        self._blocks = [_BlockState() for _ in self.layout.rows]
        self.rounds_seen = 0

    def observe(self, uploads: np.ndarray) -> int:
        """Add one round's uploads (ñ × N_c); return the total recovered rank (sum over blocks)."""
        uploads = np.asarray(uploads, dtype=np.float64)
        if uploads.ndim != 2 or uploads.shape[0] != self.layout.n_tilde:
            raise ValueError(f"expected uploads of shape ({self.layout.n_tilde}, N_c), got {uploads.shape}")
        self.rounds_seen += 1
        if uploads.shape[1] < 2:
            return self.rank  # one client: no difference to take
        diffs = uploads[:, 1:] - uploads[:, :1]
        for rows, st in zip(self.layout.rows, self._blocks, strict=True):
            d = diffs[rows]
            st.max_abs = max(st.max_abs, float(np.max(np.abs(uploads[rows]))))
            st.columns += d.shape[1]
            stacked = d if st.factor is None else np.hstack([st.factor, d])
            u, s, _ = np.linalg.svd(stacked, full_matrices=False)
            st.factor = u * s
            tol = self.tol_factor * EPS64 * st.max_abs * math.sqrt(rows.size * st.columns)
            st.rank = int(np.count_nonzero(s > tol))
        return self.rank

    @property
    def rank(self) -> int:
        """Recovered dimension of ``col(P1)``: the sum of the blocks' numerical ranks."""
        return int(sum(st.rank for st in self._blocks))

    @property
    def full_rank(self) -> bool:
        """Whether every block's rank has reached its number of parameters (``col(P1)`` is known)."""
        return all(st.rank >= p.size for st, p in zip(self._blocks, self.layout.params, strict=True))

    def bases(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per block ``(U, V)``: orthonormal bases of the recovered ``col(P1)`` (r × s) and its orthogonal
        complement (r × (r − s)). Meaningful once :attr:`full_rank`."""
        out = []
        for rows, params, st in zip(self.layout.rows, self.layout.params, self._blocks, strict=True):
            if st.factor is None:
                raise ValueError("no round observed yet: the signal subspace is unknown")
            u = np.linalg.svd(st.factor, full_matrices=True)[0]
            s = params.size
            out.append((u[:, :s], u[:, s : rows.size]))
        return out


# ------------------------------------------------------------------------------------------------------------
# (b) Noise removal: signal coordinates c = Uᵀ w~ = A w + G z, noise coordinates z = Vᵀ w~.


def split_coordinates(
    layout: BlockLayout, bases: Sequence[tuple[np.ndarray, np.ndarray]], x: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per block ``(c, z) = (Uᵀ x_b, Vᵀ x_b)`` for encoded vectors ``x`` (ñ,) or (ñ, k).

    With ``A = Uᵀ P1_b`` (an unknown invertible s×s map once U spans ``col(P1_b)``) and
    ``G = Uᵀ N1_b (Vᵀ N1_b)⁻¹``: ``c = A w_b + G z``. Under ``P1L = pinv(P1)``, ``col(N1) ⊥ col(P1)`` makes
    ``G = 0`` (in exact arithmetic): the projection alone removes the noise.
    """
    x = np.asarray(x, dtype=np.float64)
    return [(U.T @ x[rows], V.T @ x[rows]) for rows, (U, V) in zip(layout.rows, bases, strict=True)]


def project_onto_signal(
    layout: BlockLayout, bases: Sequence[tuple[np.ndarray, np.ndarray]], x: np.ndarray
) -> list[np.ndarray]:
    """(b, pinv) The orthogonal projection's coordinates ``Uᵀ x``, per block: ``A w`` plus ``G z``."""
    return [c for c, _ in split_coordinates(layout, bases, x)]


def _regress(targets: np.ndarray, regressors: np.ndarray) -> np.ndarray:
    """Least squares ``targets ≈ a0 + G regressors`` (columns are samples); returns G (min-norm if short)."""
    design = np.vstack([regressors, np.ones((1, regressors.shape[1]))])
    coef = np.linalg.lstsq(design.T, targets.T, rcond=None)[0].T
    return coef[:, :-1]


def fit_noise_regression(
    layout: BlockLayout, bases: Sequence[tuple[np.ndarray, np.ndarray]], uploads: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """(b, oblique) Estimate ``G`` per block by regressing c on z (with an intercept) over uploads.

    The noise of round t enters c and z through the same draw ``r^t``, while the model ``A w`` is independent
    of it; across rounds the regression therefore recovers ``G`` with an error that falls as rounds accumulate
    (about ``spread(A w)·√(m/T)`` for m noise dimensions and T rounds), whatever the noise scale. Subtracting
    ``Ĝ z`` leaves ``A w`` plus that error.

    Args:
        layout: the key's public layout.
        bases: :meth:`DifferenceAttack.bases`.
        uploads: the upload matrices (ñ × N_c) of the rounds used, all under the same key.

    Returns:
        Per block, Ĝ (s × (r − s)).
    """
    X = np.hstack([np.asarray(u, dtype=np.float64) for u in uploads])
    return [_regress(c, z) for c, z in split_coordinates(layout, bases, X)]


def fit_telescoped_regression(
    layout: BlockLayout,
    bases: Sequence[tuple[np.ndarray, np.ndarray]],
    broadcasts: Sequence[np.ndarray],
    aggregates: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """(b, with broadcasts) Estimate ``G`` exactly from consecutive rounds' broadcasts and aggregates.

    Round t's broadcast ``b_t = P1 w^t + N1 r^t`` and the aggregate ``ā_t = Σ_i p_i w~_i`` carry the same
    noise, so ``Uᵀ(ā_t − b_t) = A (w^{t+1} − w^t)`` is noise-free, and the sum of these increments gives
    ``A(w^t − w^1)`` for every t. Then ``Uᵀ b_t − A(w^t − w^1) = A w^1 + G z_t`` holds exactly: a regression
    with no residual beyond round-off, determined once there are more rounds than noise dimensions
    (``T ≥ ñ − n + 1``, or the extra rows per block plus one). Round-off aside, the noise scale drops out.

    Args:
        layout: the key's public layout.
        bases: :meth:`DifferenceAttack.bases`.
        broadcasts: ``b_1 … b_T`` (ñ,) of consecutive rounds under one key (M2: ``W' P2R``, stripped with the
            aggregator's own ``P2R``).
        aggregates: ``ā_1 … ā_{T−1}``, the aggregator's weighted average of each of those rounds' uploads.

    Returns:
        Per block, Ĝ (s × (r − s)).
    """
    if len(aggregates) < len(broadcasts) - 1:
        raise ValueError("need the aggregate of every round but the last to telescope the broadcasts")
    B = np.stack([np.asarray(b, dtype=np.float64) for b in broadcasts], axis=1)
    out = []
    for rows, (U, V) in zip(layout.rows, bases, strict=True):
        y = U.T @ B[rows]
        z = V.T @ B[rows]
        inc = [U.T @ (np.asarray(aggregates[t])[rows] - B[rows, t]) for t in range(B.shape[1] - 1)]
        offsets = np.cumsum(np.stack([np.zeros(U.shape[1]), *inc], axis=1), axis=1)
        out.append(_regress(y - offsets, z))
    return out


def remove_fitted_noise(
    layout: BlockLayout,
    bases: Sequence[tuple[np.ndarray, np.ndarray]],
    G: Sequence[np.ndarray],
    x: np.ndarray,
) -> list[np.ndarray]:
    """``c − Ĝ z`` per block: the recovered ``A w`` for encoded vectors ``x``."""
    return [c - g @ z for (c, z), g in zip(split_coordinates(layout, bases, x), G, strict=True)]


# ------------------------------------------------------------------------------------------------------------
# (c) Geometry of client updates.


def encoded_updates(uploads: np.ndarray, broadcast: np.ndarray | None, weights: np.ndarray) -> np.ndarray:
    """Noise-free encoded updates from one round: ``P1 (w_i − w^t)`` if the broadcast is known (same noise as
    the uploads), else ``P1 (w_i − w̄)``, the deviations from the weighted mean upload."""
    uploads = np.asarray(uploads, dtype=np.float64)
    ref = uploads @ weights if broadcast is None else np.asarray(broadcast, dtype=np.float64)
    return uploads - ref[:, None]


def update_geometry(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Norms, pairwise norm ratios ``‖v_i‖/‖v_j‖`` and cosines of the columns of ``vectors``.

    An exact linear code keeps these up to the map: ``‖P1 x‖ = α‖x‖`` and ``⟨P1 x, P1 y⟩ = α²⟨x, y⟩`` for a
    scaled-orthogonal ``P1``, so the aggregator reads ratios and angles of the plain updates from round 1.
    Zero-safe: a zero column gives ratio ``nan`` against and from it and cosine ``nan`` (callers skip them).
    """
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = norms[:, None] / norms[None, :]
        unit = v / norms
        cos = unit.T @ unit
    bad = norms == 0
    ratios[bad, :] = np.nan
    ratios[:, bad] = np.nan
    cos[bad, :] = np.nan
    cos[:, bad] = np.nan
    return norms, ratios, cos


# ------------------------------------------------------------------------------------------------------------
# (d) Known plaintext: the exact decoder from (w, w~) pairs.


def fit_decoder(layout: BlockLayout, W_tilde: np.ndarray, W: np.ndarray) -> list[np.ndarray]:
    """Per block, the min-norm decoder ``L_b`` with ``L_b W~_b = W_b`` on the known pairs.

    The code is an invertible map ``[w; r] ↦ [P1 N1][w; r]`` (per block), and the decoder ``P1L`` is its first
    n rows. Once the encodings of a block span all its r rows (r = s parameters + the block's extra rows, with
    fresh noise per pair), ``L_b`` equals ``P1L_b`` exactly, so r pairs suffice whatever the noise.

    Args:
        layout: the key's public layout.
        W_tilde: encodings (ñ × k).
        W: the matching plain models (n × k).
    """
    W_tilde = np.asarray(W_tilde, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    return [
        np.linalg.lstsq(W_tilde[rows].T, W[params].T, rcond=None)[0].T
        for rows, params in zip(layout.rows, layout.params, strict=True)
    ]


def apply_decoder(layout: BlockLayout, decoder: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Decode ``x`` (ñ,) or (ñ, k) with a fitted decoder; returns (n,) or (n, k) in parameter order."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros((layout.n, *x.shape[1:]), dtype=np.float64)
    for rows, params, L in zip(layout.rows, layout.params, decoder, strict=True):
        out[params] = L @ x[rows]
    return out


# ------------------------------------------------------------------------------------------------------------
# (e) M2: the server's view.


def m2_server_estimate(W_bar: np.ndarray) -> np.ndarray:
    """The global model up to one scalar, from the M2 server's ``W̄ = P1L W'_a = w P2 + (P1L R2) N2`` (n × p).

    The n rows are samples in R^p. Along ``P2R`` (where ``N2 P2R = 0``) a row is ``w_j·(P2 P2R)``: signal
    only, small; along any other direction it carries the large noise ``P1L R2``. The smallest right
    singular vector therefore points along ``P2R``, and ``W̄ v`` is the model up to a scalar. What remains is
    the component of w along the one random noise direction, about ``1/√n`` of it, whatever the noise size.
    """
    W_bar = np.asarray(W_bar, dtype=np.float64)
    if W_bar.ndim != 2 or W_bar.shape[1] < 2:
        raise ValueError(f"expected P1L W'_a of shape (n, p) with p >= 2, got {W_bar.shape}")
    v = np.linalg.svd(W_bar, full_matrices=False)[2][-1]
    return W_bar @ v


def abs_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """``|corr(x, y)|`` (Pearson); 0 if either is constant (no information, and no NaN)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    if nx == 0 or ny == 0:
        return 0.0
    return float(abs(x @ y) / (nx * ny))
