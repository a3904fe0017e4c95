"""Per-element DP bounds of SIFL (paper §5: Theorems 1 and 2, Remark 3; docs/method.md "Differential
privacy").

Every function here is pure and keyword-only. Norm arguments are vectorised over rows: each accepts a Python
float, a NumPy array or a torch tensor, inputs broadcast by NumPy rules, and the result has the broadcast
shape and the kind of the array inputs (a torch tensor if any input is one, on that tensor's device; else a
NumPy array if any input is one; else a float). Arithmetic is float64.

What these numbers are. Each ε is for ONE element j (or (j, m)) of ONE release in ONE round, exactly the
property the paper proves (its Problem 3, "element-wise DP"). They say nothing about

* the whole released vector: with the keys known, the signal lives in ``col(P1)`` and the noise in
  ``col(N1)``, two subspaces meeting only at 0, so the vector release has no finite ε (docs/method.md
  "Attacks");
* several rounds: no composition is applied, and the noise ``N1 r1^t`` is shared by every upload of a round;
* other parties' views not covered by a theorem (for example the server's ``P1L W'_a`` in M2).

Zero safety. A zero sensitivity (or a zero key row) gives ε = 0; zero noise with a nonzero shift gives
ε = +inf; no input combination gives NaN or raises, except inputs that are themselves invalid (negative
norms or scales, NaN, δ outside (0, 1)), which raise ``ValueError`` naming the argument.

Two bounds for Laplace noise. The paper's Theorem 1 treats ``N1^j r1`` as one Laplace variable of scale
``‖N1^j‖₂·b``; a sum of independent Laplace variables is not Laplace, and the paper's ε is then too small
(see :func:`laplace_local_epsilon_sound`). The ``*_sound`` functions are the guarantee; the ``*_paper`` ones
are reported beside them so that the paper's figures can be reproduced. They live in
:mod:`sifl_ray.privacy.laplace` and are re-exported here, so that ``formulas`` names every formula; the array
plumbing all of them share is :mod:`sifl_ray.privacy.arrays`.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from sifl_ray.privacy.arrays import Arrayish, as_array, check_delta, quiet, shift_over_noise, wrap
from sifl_ray.privacy.laplace import (
    laplace_broadcast_epsilon_paper,
    laplace_broadcast_epsilon_sound,
    laplace_global_epsilon_paper,
    laplace_global_epsilon_sound,
    laplace_local_epsilon_paper,
    laplace_local_epsilon_sound,
)

__all__ = [
    "Arrayish",
    "gaussian_broadcast_epsilon",
    "gaussian_global_epsilon",
    "gaussian_global_epsilon_sound",
    "gaussian_local_epsilon",
    "gaussian_mechanism_delta",
    "gaussian_tail_inverse",
    "global_sensitivity",
    "laplace_broadcast_epsilon_paper",
    "laplace_broadcast_epsilon_sound",
    "laplace_global_epsilon_paper",
    "laplace_global_epsilon_sound",
    "laplace_local_epsilon_paper",
    "laplace_local_epsilon_sound",
    "local_sensitivity",
    "worst_element",
    "worst_element_index",
]

_STANDARD_NORMAL = NormalDist()


# ------------------------------------------------------------------------------------------------------------
# Sensitivities (Remark 3).


def local_sensitivity(*, clip: Arrayish, local_size: Arrayish) -> Arrayish:
    """Sensitivity of a client's local model, ``Δ^{w_i} = 2C/|D_i|`` (Remark 3, after Wei et al. 2020).

    Why this value: it is the figure the paper uses for both ``Δ₁`` and ``Δ₂``; with ``‖w_i‖ ≤ C`` it is the
    NbAFL bound on how far one replaced sample can move the local model.

    What it does not guarantee: clipping ``‖w_i‖ ≤ C`` alone only gives ``‖w_i(D) − w_i(D')‖ ≤ 2C``; the
    extra ``1/|D_i|`` is NbAFL's modelling assumption about local training, which this platform takes from the
    paper and does not prove for K steps of SGD, Momentum or Adam. Every ε below inherits that assumption.

    Args:
        clip: the clipping threshold C (> 0 in practice; 0 gives 0).
        local_size: ``|D_i|``, the client's number of samples (> 0). For a worst case over clients pass the
            smallest ``|D_i|``.

    Returns:
        ``2C/|D_i|``, in the kind and broadcast shape of the inputs.
    """
    c = as_array("clip", clip)
    n = as_array("local_size", local_size)
    if np.any(n <= 0):
        raise ValueError("local_size must be > 0: a client without data has no sensitivity to account for")
    return wrap(2.0 * c / n, clip, local_size)


def global_sensitivity(*, clip: Arrayish, total_size: Arrayish) -> Arrayish:
    """Sensitivity of the FedAvg global model, ``Δ^w = 2C/|D|`` (Remark 3).

    Why: ``w = Σ_i (|D_i|/|D|) w_i``, so a change of ``2C/|D_i|`` in one ``w_i`` moves ``w`` by ``2C/|D|``.
    It inherits the assumption of :func:`local_sensitivity` and guarantees nothing without it.

    Args:
        clip: the clipping threshold C.
        total_size: ``|D| = Σ_i |D_i|`` (> 0).

    Returns:
        ``2C/|D|``, in the kind and broadcast shape of the inputs.
    """
    c = as_array("clip", clip)
    n = as_array("total_size", total_size)
    if np.any(n <= 0):
        raise ValueError("total_size must be > 0: the federation holds no data")
    return wrap(2.0 * c / n, clip, total_size)


# ------------------------------------------------------------------------------------------------------------
# Gaussian noise (Theorem 2).


def gaussian_tail_inverse(*, delta: float) -> float:
    """``Q⁻¹(δ)``, the inverse of the standard normal tail ``Q(x) = P(Y ≥ x)`` (Theorem 2).

    Computed as ``−Φ⁻¹(δ)``, equal to ``NormalDist().inv_cdf(1 − δ)`` but accurate for tiny δ, where
    ``1 − δ`` rounds to 1 in float64. ``Q⁻¹(1e-5) ≈ 4.2649``.
    """
    return -_STANDARD_NORMAL.inv_cdf(check_delta(delta))


def _gaussian_epsilon(a: np.ndarray, s: np.ndarray, delta: float) -> np.ndarray:
    # Theorem 2's condition s² − s·(a/ε)·Q⁻¹(δ) − a²/(2ε) ≥ 0, multiplied by ε/s², is linear in ε:
    # the smallest ε is r·Q⁻¹(δ) + r²/2 with r = a/s. Written as r·(Q⁻¹ + r/2) so r = inf gives inf, not NaN.
    q = gaussian_tail_inverse(delta=delta)
    r = shift_over_noise(a, s)
    with np.errstate(over="ignore"):
        eps = r * (q + 0.5 * r)
    # delta >= 1/2 makes Q⁻¹ negative; the condition then holds for some ε < 0, and ε = 0 is the honest floor.
    return np.maximum(eps, 0.0)


@quiet
def gaussian_local_epsilon(
    *,
    p1_row_l2: Arrayish,
    n1_row_l2: Arrayish,
    sigma1: Arrayish,
    sensitivity: Arrayish,
    delta: float,
    p2r_l2: Arrayish = 1.0,
) -> Arrayish:
    """Smallest ε of Theorem 2 (first inequality) for element j of a client upload ``w~_i``.

    The element is ``w~_{i,j} = P1^j w_i + N1^j r``: Gaussian with std ``s_j = ‖N1^j‖₂·σ1·‖P2R‖₂`` (in M2
    ``r = R1 P2R`` has i.i.d. entries of std ``σ1‖P2R‖₂``; in M1 pass ``p2r_l2=1``), and its mean moves by at
    most ``a_j = ‖P1^j‖₂·Δ₂`` between neighbouring datasets. Theorem 2 asks
    ``s² − s·(a/ε)·Q⁻¹(δ) − a²/(2ε) ≥ 0``; its smallest solution is ``ε = a·Q⁻¹(δ)/s + a²/(2s²)``.

    What it guarantees: (ε, δ)-DP of that single element in that round. The condition is the classical
    sufficient one (privacy-loss tail ``P(L > ε) ≤ δ``), valid for every ε, so the figure is sound given the
    sensitivity assumption of :func:`local_sensitivity`. It guarantees nothing about the whole vector ``w~_i``
    (no finite ε once the keys are known) or about several rounds.

    Args:
        p1_row_l2: ``‖P1^j‖₂`` per row (an upper bound is conservative).
        n1_row_l2: ``‖N1^j‖₂`` per row (a lower bound is conservative).
        sigma1: std σ1 of the server noise ``r1`` / ``R1``.
        sensitivity: ``Δ^{w_i}`` (:func:`local_sensitivity`).
        delta: δ in (0, 1).
        p2r_l2: ``‖P2R‖₂`` in M2; 1 in M1.

    Returns:
        ε per row, in the kind and broadcast shape of the inputs.
    """
    p1 = as_array("p1_row_l2", p1_row_l2)
    n1 = as_array("n1_row_l2", n1_row_l2)
    sig = as_array("sigma1", sigma1)
    d = as_array("sensitivity", sensitivity)
    p2r = as_array("p2r_l2", p2r_l2)
    eps = _gaussian_epsilon(p1 * d, n1 * sig * p2r, delta)
    return wrap(eps, p1_row_l2, n1_row_l2, sigma1, sensitivity, p2r_l2)


def gaussian_broadcast_epsilon(
    *,
    p1_row_l2: Arrayish,
    n1_row_l2: Arrayish,
    sigma1: Arrayish,
    sensitivity: Arrayish,
    delta: float,
) -> Arrayish:
    """Smallest ε for element j of the M1 broadcast ``w~^t = P1 w^t + N1 r1^t`` (the encoded global model).

    Not a theorem of the paper, which bounds the upload and M2's ``W'``; it is Theorem 2's first argument
    applied to the global model: ``a_j = ‖P1^j‖₂·Δ^w``, ``s_j = ‖N1^j‖₂·σ1`` (no code 2), so
    ``ε = a·Q⁻¹(δ)/s + a²/(2s²)``. Same scope as :func:`gaussian_local_epsilon`: one element, one round.

    Args:
        p1_row_l2: ``‖P1^j‖₂`` per row.
        n1_row_l2: ``‖N1^j‖₂`` per row.
        sigma1: std of ``r1``.
        sensitivity: ``Δ^w`` (:func:`global_sensitivity`).
        delta: δ in (0, 1).

    Returns:
        ε per row.
    """
    return gaussian_local_epsilon(
        p1_row_l2=p1_row_l2, n1_row_l2=n1_row_l2, sigma1=sigma1, sensitivity=sensitivity, delta=delta
    )


@quiet
def gaussian_global_epsilon(
    *,
    p1_row_l2: Arrayish,
    n1_row_l2: Arrayish,
    sigma1: Arrayish,
    sigma2: Arrayish,
    p1l_spectral: Arrayish,
    n2_spectral: Arrayish,
    p2_m: Arrayish,
    sensitivity: Arrayish,
    delta: float,
) -> Arrayish:
    """The paper's ε for element (j, m) of M2's ``W' = P1 w P2 + N1 R1 + P1 P1L R2 N2`` (Theorem 2, second).

    As docs/method.md "Differential privacy" reads it: ``a = ‖P1^j‖₂·Δ^w·|P2^m|``,
    ``s = ‖N1^j‖₂σ1 + ‖P1^j‖₂‖P1L‖₂‖N2‖₂σ2``, ``ε = a·Q⁻¹(δ)/s + a²/(2s²)``. To get a (ñ, p) table pass rows
    as ``(ñ, 1)`` and ``p2_m`` as ``(1, p)``.

    What it does NOT guarantee: the noise of the element is ``N1^j R1[:, m]`` (std ``‖N1^j‖₂σ1``) plus the
    independent ``(P1^j P1L) R2 N2[:, m]`` (std ``‖P1^j P1L‖₂‖N2[:, m]‖₂σ2``, which
    ``‖P1^j‖₂‖P1L‖₂‖N2‖₂σ2`` bounds from above). Independent Gaussian stds add in quadrature,
    ``√(s1² + s2²) < s1 + s2``, so ``s`` here is never below the true std and, whenever both noises are
    present, above it: this ε is then too small. It is reported as the paper's figure;
    :func:`gaussian_global_epsilon_sound` is the guarantee. (The paper's own statement of the inequality
    even squares ``‖N1^j‖σ1 + ‖N2^m‖σ2`` on the left; the method page's consistent reading is used here.)

    Args:
        p1_row_l2: ``‖P1^j‖₂``.
        n1_row_l2: ``‖N1^j‖₂``.
        sigma1: std of ``R1`` (server).
        sigma2: std of ``R2`` (aggregator).
        p1l_spectral: ``‖P1L‖₂``.
        n2_spectral: ``‖N2‖₂``.
        p2_m: ``|P2^m|`` (its absolute value is used).
        sensitivity: ``Δ^w``.
        delta: δ in (0, 1).

    Returns:
        ε per (j, m) in the broadcast shape.
    """
    p1 = as_array("p1_row_l2", p1_row_l2)
    n1 = as_array("n1_row_l2", n1_row_l2)
    s1 = as_array("sigma1", sigma1)
    s2 = as_array("sigma2", sigma2)
    p1l = as_array("p1l_spectral", p1l_spectral)
    n2 = as_array("n2_spectral", n2_spectral)
    p2 = np.abs(as_array("p2_m", p2_m, nonnegative=False))
    d = as_array("sensitivity", sensitivity)
    s = n1 * s1 + p1 * p1l * n2 * s2
    eps = _gaussian_epsilon(p1 * d * p2, s, delta)
    return wrap(eps, p1_row_l2, n1_row_l2, sigma1, sigma2, p1l_spectral, n2_spectral, p2_m, sensitivity)


@quiet
def gaussian_global_epsilon_sound(
    *,
    p1_row_l2: Arrayish,
    n1_row_l2: Arrayish,
    sigma1: Arrayish,
    p2_m: Arrayish,
    sensitivity: Arrayish,
    delta: float,
    p1p1l_row_l2: Arrayish = 0.0,
    n2_col_l2: Arrayish = 0.0,
    sigma2: Arrayish = 0.0,
) -> Arrayish:
    """The sound ε for element (j, m) of M2's ``W'``: both noises, added in quadrature (Theorem 2's argument).

    Element (j, m) of ``W' = P1 Wbar + N1 R1``, with ``Wbar = P1L W'_a = w P2 + P1L R2 N2``, is
    ``P1^j w P2^m + (P1^j P1L) R2 N2[:, m] + N1^j R1[:, m]``. With i.i.d. ``N(0, σ1²)`` entries in ``R1`` and
    ``N(0, σ2²)`` in ``R2`` the two noise terms are independent Gaussians of stds ``‖N1^j‖₂σ1`` and
    ``‖P1^j P1L‖₂·‖N2[:, m]‖₂·σ2``, so the element's noise is Gaussian with std exactly

        ``s_jm = √((‖N1^j‖₂σ1)² + (‖P1^j P1L‖₂‖N2[:, m]‖₂σ2)²)``,

    and its mean moves by at most ``a = ‖P1^j‖₂Δ^w|P2^m|``. Theorem 2's condition then gives
    ``ε = a·Q⁻¹(δ)/s + a²/(2s²)``. Scope: one element, one round.

    Soundness needs ``s`` never overestimated: pass ``‖N1^j‖₂``, ``‖P1^j P1L‖₂`` and ``‖N2[:, m]‖₂`` exactly
    or as lower bounds. A rigorous lower bound on ``‖P1^j P1L‖₂`` when it cannot be computed: ``P1L P1 = I``
    gives ``‖P1^j‖₂ = ‖P1^j P1L P1‖₂ ≤ ‖P1^j P1L‖₂‖P1‖₂``, so ``‖P1^j P1L‖₂ ≥ ‖P1^j‖₂/‖P1‖₂`` (for the fast
    backend's ``P1 = α Q[:, :n]``, ``‖P1^j‖₂/α``, exact with the pseudo-inverse). The defaults (0) drop the
    ``R2`` term: the R1-only figure, still sound (the ``R2`` term is independent noise added afterwards,
    post-processing) but conservative, by a large factor when ``‖N1^j‖₂σ1`` is small next to the ``R2``
    term: with β = 1 the R2 term dominates. :func:`gaussian_global_epsilon` (the paper's) adds the two stds
    linearly with ``‖P1^j‖₂‖P1L‖₂‖N2‖₂`` in place of ``‖P1^j P1L‖₂‖N2[:, m]‖₂``: an overestimate of ``s``,
    hence an ε that can be too small.

    Args:
        p1_row_l2: ``‖P1^j‖₂`` (upper bounds are conservative).
        n1_row_l2: ``‖N1^j‖₂`` (lower bounds are conservative).
        sigma1: std of ``R1``.
        p2_m: ``|P2^m|``.
        sensitivity: ``Δ^w``.
        delta: δ in (0, 1).
        p1p1l_row_l2: ``‖P1^j P1L‖₂``, row j of ``P1 P1L`` (lower bounds are conservative); 0 drops R2.
        n2_col_l2: ``‖N2[:, m]‖₂``, column m of ``N2`` (lower bounds are conservative); 0 drops R2.
        sigma2: std of ``R2``; 0 drops R2.

    Returns:
        ε per (j, m) in the broadcast shape. For a (ñ, p) table pass rows as ``(ñ, 1)`` and ``p2_m``,
        ``n2_col_l2`` as ``(1, p)``.
    """
    p1 = as_array("p1_row_l2", p1_row_l2)
    n1 = as_array("n1_row_l2", n1_row_l2)
    s1 = as_array("sigma1", sigma1)
    p2 = np.abs(as_array("p2_m", p2_m, nonnegative=False))
    d = as_array("sensitivity", sensitivity)
    pp = as_array("p1p1l_row_l2", p1p1l_row_l2)
    n2 = as_array("n2_col_l2", n2_col_l2)
    s2 = as_array("sigma2", sigma2)
    s = np.hypot(n1 * s1, pp * n2 * s2)  # √(x² + y²) without overflow or underflow of the squares
    eps = _gaussian_epsilon(p1 * d * p2, s, delta)
    return wrap(eps, p1_row_l2, n1_row_l2, sigma1, p2_m, sensitivity, p1p1l_row_l2, n2_col_l2, sigma2)


@quiet
def gaussian_mechanism_delta(*, epsilon: Arrayish, sigma: Arrayish, sensitivity: Arrayish) -> Arrayish:
    """Exact δ(ε) of the scalar Gaussian mechanism (Balle and Wang 2018, Theorem 8).

    ``δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε·Φ(−Δ/(2σ) − εσ/Δ)``: the smallest δ for which adding ``N(0, σ²)`` to a query
    of ℓ2 sensitivity Δ is (ε, δ)-DP. Used to check a calibration (for example NbAFL's classical
    ``σ = Δ√(2 ln(1.25/δ))/ε``, which is only proven for ε < 1). ``sensitivity = 0`` gives 0; ``sigma = 0``
    with a positive sensitivity gives 1 (no privacy).
    """
    e = as_array("epsilon", epsilon)
    sg = as_array("sigma", sigma)
    d = as_array("sensitivity", sensitivity)
    e, sg, d = np.broadcast_arrays(e, sg, d)
    out = np.zeros(e.shape, dtype=np.float64)
    out[(d > 0) & (sg == 0)] = 1.0
    ok = (d > 0) & (sg > 0)
    if np.any(ok):
        from scipy.special import log_ndtr, ndtr

        u = d[ok] / (2.0 * sg[ok])
        v = e[ok] * sg[ok] / d[ok]
        # e^ε Φ(−u − v) in log space so that large ε times a tiny tail neither overflows nor underflows to
        # 0·inf.
        out[ok] = np.clip(ndtr(u - v) - np.exp(e[ok] + log_ndtr(-u - v)), 0.0, 1.0)
    return wrap(out, epsilon, sigma, sensitivity)


# ------------------------------------------------------------------------------------------------------------
# Reporting.


def worst_element(eps: Arrayish) -> float:
    """The largest per-element ε of a release (max over j, and m for ``W'``): the figure to report.

    Every element must meet the target for the paper's element-wise DP to hold, so the release's figure is
    the worst one; it is still a per-element, per-round number, never a bound on the vector.

    Raises:
        ValueError: if ``eps`` is empty or contains NaN (there is nothing sound to report).
    """
    arr = as_array("eps", eps, allow_inf=True)
    if arr.size == 0:
        raise ValueError("no elements: an empty release has no per-element ε to report")
    return float(arr.max())


def worst_element_index(eps: Arrayish) -> tuple[int, ...]:
    """Index (``(j,)`` or ``(j, m)``) of the first element attaining :func:`worst_element`."""
    arr = as_array("eps", eps, allow_inf=True)
    if arr.size == 0:
        raise ValueError("no elements: an empty release has no worst element")
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(arr)), arr.shape))
