"""Per-element DP bounds of SIFL under Laplace noise (paper §5, Theorem 1; docs/method.md "Differential
privacy").

Two bounds for each release. The paper's Theorem 1 treats ``N1^j r1`` as one Laplace variable of scale
``‖N1^j‖₂·b``; a sum of independent Laplace variables is not Laplace, and the paper's ε is then too small
(see :func:`laplace_local_epsilon_sound`). The ``*_sound`` functions are the guarantee; the ``*_paper`` ones
are reported beside them so that the paper's figures can be reproduced. Every function is pure and
keyword-only, vectorised over rows as :mod:`sifl_ray.privacy.arrays` describes; the scope of each ε is one
element of one release in one round.
"""

from __future__ import annotations

import numpy as np

from sifl_ray.privacy.arrays import Arrayish, as_array, quiet, shift_over_noise, wrap


@quiet
def laplace_local_epsilon_paper(
    *,
    p1_row_l1: Arrayish,
    n1_row_l2: Arrayish,
    scale1: Arrayish,
    sensitivity: Arrayish,
    p2r_l2: Arrayish = 1.0,
) -> Arrayish:
    """The paper's ε for element j of a client upload under Laplace noise (Theorem 1, Eq. dpnoisewt).

    ``ε_j = ‖P1^j‖₁·Δ₁ / (‖N1^j‖₂·b·‖P2R‖₂)``, b the Laplace scale of ``r1`` (the paper calls it σ1; its proof
    uses it as the scale). In M1 pass ``p2r_l2=1``.

    What it does NOT guarantee: the proof assumes ``N1^j r1`` is Laplace with scale ``‖N1^j‖₂·b``. It is a sum
    of independent Laplace variables ``Σ_k N1_jk r1_k``, which is not Laplace; its density tail decays like
    ``exp(−|x|/(b·max_k|N1_jk|))``, so the true pure-DP ε is ``shift/(b·max_k|N1_jk|)`` (see
    :func:`laplace_local_epsilon_sound`), larger than this figure by up to ``√(ñ−n)``. Reported only to
    reproduce the paper's numbers.
    """
    p1 = as_array("p1_row_l1", p1_row_l1)
    n1 = as_array("n1_row_l2", n1_row_l2)
    b = as_array("scale1", scale1)
    d = as_array("sensitivity", sensitivity)
    p2r = as_array("p2r_l2", p2r_l2)
    eps = shift_over_noise(p1 * d, n1 * b * p2r)
    return wrap(eps, p1_row_l1, n1_row_l2, scale1, sensitivity, p2r_l2)


@quiet
def laplace_local_epsilon_sound(
    *,
    p1_row_l1: Arrayish,
    n1_row_maxabs: Arrayish,
    scale1: Arrayish,
    sensitivity: Arrayish,
    p2r_maxabs: Arrayish = 1.0,
) -> Arrayish:
    """A sound pure ε for element j of a client upload under Laplace noise: the guarantee beside Theorem 1.

    ``ε_j = ‖P1^j‖₁·Δ / (max_k|N1_jk| · b · max_m|P2R_m|)``.

    Argument. The element is ``P1^j w_i + Σ_c β_c L_c`` with independent ``L_c ~ Laplace(0, b)`` and
    coefficients ``β_c``: ``N1_jk`` in M1, ``N1_jk·P2R_m`` in M2 (there ``r1 = R1 P2R`` is itself a sum). Take
    the single term with the largest ``|β_c|``: ``P1^j w_i + β_c L_c`` is a Laplace mechanism with scale
    ``|β_c|·b``, and adding the other terms, independent of it and of the data, is post-processing. The shift
    is ``|P1^j(w − w')| ≤ ‖P1^j‖₁·Δ`` whether Δ bounds the ℓ1 or the ℓ2 change of w (Hölder, and
    ``‖P1^j‖₂ ≤ ‖P1^j‖₁``), so Remark 3's ``2C/|D_i|`` fits either clipping norm. The noise side of this
    bound is tight for δ = 0: the density of the sum is log-concave and its log-slope tends to
    ``1/(b·max|β_c|)`` in the tails, so no larger denominator is valid.

    Why the paper's bound is wrong in general: it treats the sum as one Laplace variable of scale
    ``b·‖β‖₂``; a sum of independent Laplace variables is not Laplace, and ``‖β‖₂ ≥ max|β_c|`` overstates the
    tail. So this ε is never below :func:`laplace_local_epsilon_paper` (``max|N1_jk| ≤ ‖N1^j‖₂`` and
    ``max_m|P2R_m| ≤ ‖P2R‖₂``), with equality when ``N1^j`` (and ``P2R``) have a single nonzero entry.

    The paper writes ``‖P2R‖₂`` in this denominator; that is sound only when ``P2R`` has one nonzero entry.
    When only ``‖P2R‖₂`` is known, ``‖P2R‖₂/√p`` is a valid lower bound on ``max_m|P2R_m|`` and keeps the
    bound sound.

    Scope: one element, one round, given the sensitivity assumption of :func:`local_sensitivity`.

    Args:
        p1_row_l1: ``‖P1^j‖₁`` (an upper bound is conservative).
        n1_row_maxabs: ``max_k |N1_jk|`` (a lower bound is conservative).
        scale1: Laplace scale b of ``r1`` / ``R1`` (not its standard deviation, which is ``b√2``).
        sensitivity: ``Δ^{w_i}``.
        p2r_maxabs: ``max_m |P2R_m|`` in M2 (or the lower bound ``‖P2R‖₂/√p``); 1 in M1.

    Returns:
        ε per row.
    """
    p1 = as_array("p1_row_l1", p1_row_l1)
    n1 = as_array("n1_row_maxabs", n1_row_maxabs)
    b = as_array("scale1", scale1)
    d = as_array("sensitivity", sensitivity)
    p2r = as_array("p2r_maxabs", p2r_maxabs)
    eps = shift_over_noise(p1 * d, n1 * b * p2r)
    return wrap(eps, p1_row_l1, n1_row_maxabs, scale1, sensitivity, p2r_maxabs)


def laplace_broadcast_epsilon_paper(
    *, p1_row_l1: Arrayish, n1_row_l2: Arrayish, scale1: Arrayish, sensitivity: Arrayish
) -> Arrayish:
    """The paper-style ε for element j of the M1 broadcast ``w~^t = P1 w^t + N1 r1^t`` under Laplace noise.

    Theorem 1's first formula with the global sensitivity and no code 2: ``‖P1^j‖₁Δ^w/(‖N1^j‖₂ b)``. Not a
    theorem of the paper, and wrong in general for the reason given in :func:`laplace_local_epsilon_paper`.
    """
    return laplace_local_epsilon_paper(
        p1_row_l1=p1_row_l1, n1_row_l2=n1_row_l2, scale1=scale1, sensitivity=sensitivity
    )


def laplace_broadcast_epsilon_sound(
    *, p1_row_l1: Arrayish, n1_row_maxabs: Arrayish, scale1: Arrayish, sensitivity: Arrayish
) -> Arrayish:
    """Sound pure ε for element j of the M1 broadcast under Laplace noise: ``‖P1^j‖₁Δ^w/(max_k|N1_jk| b)``.

    The argument of :func:`laplace_local_epsilon_sound` with the global sensitivity and no code 2.
    """
    return laplace_local_epsilon_sound(
        p1_row_l1=p1_row_l1, n1_row_maxabs=n1_row_maxabs, scale1=scale1, sensitivity=sensitivity
    )


@quiet
def laplace_global_epsilon_paper(
    *,
    p1_row_l1: Arrayish,
    p1_row_l2: Arrayish,
    n1_row_l2: Arrayish,
    scale1: Arrayish,
    scale2: Arrayish,
    p1l_spectral: Arrayish,
    n2_spectral: Arrayish,
    p2_m: Arrayish,
    sensitivity: Arrayish,
) -> Arrayish:
    """The paper's ε for element (j, m) of M2's ``W'`` under Laplace noise (Theorem 1, Eq. dpnoisewp).

    ``ε = ‖P1^j‖₁·Δ^w·|P2^m| / (‖N1^j‖₂ b1 + ‖P1^j‖₂‖P1L‖₂‖N2‖₂ b2)``. For a (ñ, p) table pass rows as
    ``(ñ, 1)`` and ``p2_m`` as ``(1, p)``.

    What it does NOT guarantee: like :func:`laplace_local_epsilon_paper` it treats sums of independent Laplace
    variables as one Laplace variable, and it adds the two noise scales although the ``R2`` term's scale is
    only bounded from above. Reported to reproduce the paper; :func:`laplace_global_epsilon_sound` is the
    guarantee.
    """
    p1a = as_array("p1_row_l1", p1_row_l1)
    p1b = as_array("p1_row_l2", p1_row_l2)
    n1 = as_array("n1_row_l2", n1_row_l2)
    b1 = as_array("scale1", scale1)
    b2 = as_array("scale2", scale2)
    p1l = as_array("p1l_spectral", p1l_spectral)
    n2 = as_array("n2_spectral", n2_spectral)
    p2 = np.abs(as_array("p2_m", p2_m, nonnegative=False))
    d = as_array("sensitivity", sensitivity)
    eps = shift_over_noise(p1a * d * p2, n1 * b1 + p1b * p1l * n2 * b2)
    return wrap(
        eps, p1_row_l1, p1_row_l2, n1_row_l2, scale1, scale2, p1l_spectral, n2_spectral, p2_m, sensitivity
    )


@quiet
def laplace_global_epsilon_sound(
    *,
    p1_row_l1: Arrayish,
    n1_row_maxabs: Arrayish,
    scale1: Arrayish,
    p2_m: Arrayish,
    sensitivity: Arrayish,
) -> Arrayish:
    """A sound pure ε for element (j, m) of M2's ``W'`` under Laplace noise.

    ``ε = ‖P1^j‖₁·Δ^w·|P2^m| / (max_k|N1_jk|·b1)``.

    Argument. ``W'_{j,m} = P1^j w P2^m + Σ_k N1_jk R1[k, m] + Σ_{l,q} (P1^j P1L)_l N2[q, m] R2[l, q]``: a sum
    of independent Laplace terms. Keep the single ``R1`` term with the largest coefficient ``max_k|N1_jk|``:
    with the signal it is a Laplace mechanism of scale ``max_k|N1_jk|·b1`` for a shift of at most
    ``|P2^m|·‖P1^j‖₁·Δ^w``; every other term, the whole ``R2`` part included, is independent noise added
    afterwards (post-processing). The ``R2`` coefficients ``(P1^j P1L)_l N2[q, m]`` are not known from norm
    summaries, which only bound them from above, so no sound closed form can credit them; dropping them is
    conservative (exact when the largest coefficient is an ``R1`` one). Scope: one element, one round.

    Args:
        p1_row_l1: ``‖P1^j‖₁``.
        n1_row_maxabs: ``max_k |N1_jk|``.
        scale1: Laplace scale of ``R1``.
        p2_m: ``|P2^m|``.
        sensitivity: ``Δ^w``.

    Returns:
        ε per (j, m) in the broadcast shape.
    """
    p1 = as_array("p1_row_l1", p1_row_l1)
    n1 = as_array("n1_row_maxabs", n1_row_maxabs)
    b1 = as_array("scale1", scale1)
    p2 = np.abs(as_array("p2_m", p2_m, nonnegative=False))
    d = as_array("sensitivity", sensitivity)
    eps = shift_over_noise(p1 * d * p2, n1 * b1)
    return wrap(eps, p1_row_l1, n1_row_maxabs, scale1, p2_m, sensitivity)
