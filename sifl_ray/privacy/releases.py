"""Which formula applies to which release of a SIFL round: the worst-element ε of each (paper §5).

The math lives in :mod:`sifl_ray.privacy.formulas`; this module picks the formula for each release, feeds it
the key's norm summaries (:class:`KeyNorms`, :class:`AggregatorNorms`), takes the worst element and says in
words which formula gave it. Nothing here holds key material; the results are scalars. The history of these
figures over a run is :class:`sifl_ray.privacy.accountant.SiflAccountant`'s.

Releases (docs/method.md "SIFL M1", "SIFL M2"):

* ``local``: a client's upload ``w~_i`` (seen by the aggregator), in M1 and M2;
* ``broadcast``: M1's encoded global model ``w~^t = P1 w^t + N1 r1^t`` (seen by the clients);
* ``global``: M2's ``W' = P1 Wbar + N1 R1`` (seen by the clients).

Not covered, because the paper has no theorem for them: the server's view ``P1L W'_a`` in M2
(docs/method.md "Attacks", "M2, the server": it reveals the global model up to a scalar) and the aggregator's
``W'_a``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from sifl_ray.coding.base import AggregatorNorms, KeyNorms, NoiseDistribution, NoiseSpec
from sifl_ray.privacy import formulas as F
from sifl_ray.privacy.arrays import Arrayish
from sifl_ray.specs import Coding

#: Which of a SIFL round's releases an ε is about: a name (the channel itself, sender to receiver, is
#: :class:`sifl_ray.arms.base.Release`).
ReleaseName = Literal["local", "broadcast", "global"]

RELEASES: tuple[ReleaseName, ...] = ("local", "broadcast", "global")
SCOPE = "per-element, per-round"

CAVEAT = (
    "These are per-element, per-round guarantees, as the paper states them (its Problem 3): each ε bounds "
    "what ONE coordinate of ONE release in ONE round reveals about one client's data. They say nothing about "
    "the whole released vector: once the keys are known the signal (in col(P1)) and the noise (in col(N1)) "
    "are separable, so the vector release has no finite ε at all (docs/method.md 'Attacks': whole-vector "
    "release, noise-free differences, noise removal, M2 server). They say nothing about many rounds either: "
    "no composition is applied. They rest on Remark 3's sensitivity 2C/|D_i| (NbAFL's model of local "
    "training; clipping alone only gives 2C), and so are CONDITIONAL on every client model satisfying "
    "||w_i|| <= C: the clients enforce it by clipping to C (privacy.clip), and summary.json counts the "
    "clipped models (clipped). Each ε is against an observer WITHOUT key 1: the clients hold "
    "P1L (and P2R in M2) and decode the broadcasts exactly, so against them the broadcast protects nothing. "
    "Against the aggregator, ONE upload's element is what the ε covers: it sees every upload of a round, and "
    "they share one noise draw, so the difference of two uploads is noise-free element by element."
)

#: What each release is and who sees it, in the words the summary and the report print.
WHAT: dict[ReleaseName, str] = {
    "local": "client upload w~_i, seen by the aggregator",
    "broadcast": "M1 encoded global model w~ = P1 w + N1 r1 (ε against an observer without key 1; the "
    "clients hold P1L and decode it)",
    "global": "M2 encoded global model W' = P1 Wbar + N1 R1 (ε against an observer without key 1; the "
    "clients hold P1L and P2R and decode it)",
}


@dataclass(frozen=True)
class ReleaseEpsilon:
    """The worst-element ε of one release, computed from norm summaries (no arrays, no key material).

    Attributes:
        release: ``"local"``, ``"broadcast"`` or ``"global"``.
        mechanism: the server noise family (``"gaussian"`` or ``"laplace"``).
        delta: δ of the guarantee (0 for Laplace: pure ε-DP).
        epsilon: the sound worst-element ε: the guarantee.
        epsilon_paper: the paper's formula for the same release, reported beside it (equal for Gaussian
            uploads and M1 broadcasts, where the paper's formula is sound).
        worst_row: j attaining ``epsilon``.
        worst_column: m attaining ``epsilon`` for ``W'`` (``None`` for vectors).
        worst_row_paper: j attaining ``epsilon_paper``.
        worst_column_paper: m attaining ``epsilon_paper`` (``None`` for vectors).
        sensitivity: the Δ used (Remark 3).
        norms_exact: whether the key norms were exact (``False``: conservative bounds).
        note: which formulas were used and why, in words.
    """

    release: ReleaseName
    mechanism: NoiseDistribution
    delta: float
    epsilon: float
    epsilon_paper: float
    worst_row: int
    worst_column: int | None
    worst_row_paper: int
    worst_column_paper: int | None
    sensitivity: float
    norms_exact: bool
    note: str


def _np(x: torch.Tensor | np.ndarray | float) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _worst(eps: Arrayish) -> tuple[float, int, int | None]:
    value = F.worst_element(eps)
    index = F.worst_element_index(eps)
    return value, index[0], (index[1] if len(index) > 1 else None)


def smallest_local_size(local_size: int | Sequence[int]) -> int:
    """The smallest ``|D_i|``, which gives the worst-case local sensitivity ``2C/|D_i|``."""
    sizes = [int(local_size)] if isinstance(local_size, int | np.integer) else [int(s) for s in local_size]
    if not sizes:
        raise ValueError("local_size is empty: give |D_i| of every client (or the smallest one)")
    return min(sizes)


@dataclass(frozen=True)
class _Round:
    """What every release of one round shares: the key's row norms, the server noise and δ."""

    key_norms: KeyNorms
    noise1: NoiseSpec
    delta: float
    gaussian: bool
    p1_l2: np.ndarray
    p1_l1: np.ndarray
    n1_l2: np.ndarray
    n1_max: np.ndarray

    @property
    def scale1(self) -> float:
        return float(self.noise1.scale)

    def release(
        self,
        name: ReleaseName,
        sound: Arrayish,
        paper: Arrayish,
        sensitivity: float,
        note: str,
        norms_exact: bool | None = None,
    ) -> ReleaseEpsilon:
        """The worst elements of the sound and the paper's tables, with the note that says how."""
        exact = bool(self.key_norms.exact) if norms_exact is None else norms_exact
        norms_note = f" Key norms: {'exact' if exact else 'conservative bounds'}"
        norms_note += f" ({self.key_norms.note})." if self.key_norms.note else "."
        eps, j, m = _worst(sound)
        eps_p, jp, mp = _worst(paper)
        return ReleaseEpsilon(
            release=name,
            mechanism=self.noise1.distribution,
            delta=float(self.delta) if self.gaussian else 0.0,
            epsilon=eps,
            epsilon_paper=eps_p,
            worst_row=j,
            worst_column=m,
            worst_row_paper=jp,
            worst_column_paper=mp,
            sensitivity=sensitivity,
            norms_exact=exact,
            note=note + norms_note,
        )


def release_epsilons(
    *,
    key_norms: KeyNorms,
    noise1: NoiseSpec,
    clip: float,
    local_size: int | Sequence[int],
    total_size: int,
    delta: float,
    coding: Coding,
    agg_norms: AggregatorNorms | None = None,
    noise2: NoiseSpec | None = None,
) -> tuple[ReleaseEpsilon, ...]:
    """Worst-element ε of every release of one SIFL round (Theorems 1 and 2, Remark 3).

    M1 gives ``local`` and ``broadcast``; M2 gives ``local`` and ``global``. The mechanism is the family of
    the server noise ``noise1``. For Laplace, δ is 0 (pure DP) and ``delta`` is unused.

    Args:
        key_norms: row norms of the server key (exact or conservative bounds).
        noise1: the server's noise law (``r1``, ``R1``).
        clip: clipping threshold C.
        local_size: ``|D_i|`` of each client, or one size; the smallest gives the worst-case sensitivity.
        total_size: ``|D|``.
        delta: δ in (0, 1) for Gaussian noise.
        coding: ``Coding.M1`` or ``Coding.M2`` (plain FL has no coding noise to account).
        agg_norms: aggregator-key norms (required in M2).
        noise2: the aggregator's noise law (``R2``; required in M2).

    Returns:
        One :class:`ReleaseEpsilon` per release of the coding.
    """
    if not coding.coded:
        raise ValueError(
            f"coding must be M1 or M2, got {coding.scheme}; plain FL has no coding noise to account"
        )
    if coding.aggregator_encodes and (agg_norms is None or noise2 is None):
        raise ValueError(
            "coding M2 needs agg_norms and noise2: the client's noise is N1 R1 P2R and W' carries R2 noise, "
            "so ε cannot be computed without the aggregator key's norms and noise law"
        )
    if noise1.distribution not in ("gaussian", "laplace"):
        raise ValueError(f"unknown noise distribution {noise1.distribution!r}; expected gaussian or laplace")
    gaussian = noise1.distribution == "gaussian"
    d_local = float(F.local_sensitivity(clip=clip, local_size=smallest_local_size(local_size)))
    d_global = float(F.global_sensitivity(clip=clip, total_size=total_size))
    if gaussian:
        F.gaussian_tail_inverse(delta=delta)  # validate δ up front, with its explanatory message
    rnd = _Round(
        key_norms=key_norms,
        noise1=noise1,
        delta=delta,
        gaussian=gaussian,
        p1_l2=_np(key_norms.p1_row_l2),
        p1_l1=_np(key_norms.p1_row_l1),
        n1_l2=_np(key_norms.n1_row_l2),
        n1_max=_np(key_norms.n1_row_maxabs),
    )
    # 1. The client upload w~_i (M1: noise N1 r1; M2: noise N1 R1 P2R).
    upload = _upload_release(rnd, d_local, agg_norms if coding.aggregator_encodes else None)
    # 2. What the clients receive: M1's w~^t, or M2's W'.
    if not coding.aggregator_encodes:
        return (upload, _m1_broadcast_release(rnd, d_global))
    if agg_norms is None or noise2 is None:  # unreachable (checked above); narrows the types
        raise ValueError("coding M2 needs agg_norms and noise2")
    return (upload, _m2_broadcast_release(rnd, d_global, agg_norms, noise2))


def _upload_release(rnd: _Round, d_local: float, agg_norms: AggregatorNorms | None) -> ReleaseEpsilon:
    """A client's upload: Theorem 2's first inequality, or Theorem 1 beside the sound Laplace bound.

    ``agg_norms`` is given in M2 only, where the upload's noise ``N1 R1 P2R`` carries ``P2R``."""
    if agg_norms is not None:
        p = max(int(agg_norms.p2_abs.numel()), 1)
        p2r_l2 = float(agg_norms.p2r_l2)
        # max_m |P2R_m| is not in AggregatorNorms; ‖P2R‖₂/√p is a rigorous lower bound on it.
        p2r_maxabs = p2r_l2 / math.sqrt(p)
    else:
        p, p2r_l2, p2r_maxabs = 1, 1.0, 1.0
    b1 = rnd.scale1
    if rnd.gaussian:
        eps = F.gaussian_local_epsilon(
            p1_row_l2=rnd.p1_l2,
            n1_row_l2=rnd.n1_l2,
            sigma1=b1,
            sensitivity=d_local,
            delta=rnd.delta,
            p2r_l2=p2r_l2,
        )
        return rnd.release("local", eps, eps, d_local, "Theorem 2, first inequality (sound as stated).")
    sound = F.laplace_local_epsilon_sound(
        p1_row_l1=rnd.p1_l1, n1_row_maxabs=rnd.n1_max, scale1=b1, sensitivity=d_local, p2r_maxabs=p2r_maxabs
    )
    paper = F.laplace_local_epsilon_paper(
        p1_row_l1=rnd.p1_l1, n1_row_l2=rnd.n1_l2, scale1=b1, sensitivity=d_local, p2r_l2=p2r_l2
    )
    note = (
        "Sound: largest single Laplace coefficient, the rest post-processing. Paper: Theorem 1, which "
        "treats a sum of Laplace variables as Laplace (too small in general)."
    )
    if agg_norms is not None:
        note += f" max|P2R_m| bounded below by ||P2R||_2/sqrt(p), p = {p}."
    return rnd.release("local", sound, paper, d_local, note)


def _m1_broadcast_release(rnd: _Round, d_global: float) -> ReleaseEpsilon:
    """M1's broadcast ``w~^t``: Theorem 2's argument with ``Δ^w``, or the Laplace pair."""
    b1 = rnd.scale1
    if rnd.gaussian:
        eps = F.gaussian_broadcast_epsilon(
            p1_row_l2=rnd.p1_l2, n1_row_l2=rnd.n1_l2, sigma1=b1, sensitivity=d_global, delta=rnd.delta
        )
        return rnd.release(
            "broadcast", eps, eps, d_global, "Theorem 2's argument with Delta^w and no code 2 (sound)."
        )
    sound = F.laplace_broadcast_epsilon_sound(
        p1_row_l1=rnd.p1_l1, n1_row_maxabs=rnd.n1_max, scale1=b1, sensitivity=d_global
    )
    paper = F.laplace_broadcast_epsilon_paper(
        p1_row_l1=rnd.p1_l1, n1_row_l2=rnd.n1_l2, scale1=b1, sensitivity=d_global
    )
    return rnd.release(
        "broadcast",
        sound,
        paper,
        d_global,
        "Sound: largest single Laplace coefficient. Paper-style: Theorem 1 with Delta^w.",
    )


#: Index of a row-norm vector as a column of an (ñ, p) table.
_ROWS = (slice(None), None)


def _m2_broadcast_release(
    rnd: _Round, d_global: float, agg_norms: AggregatorNorms, noise2: NoiseSpec
) -> ReleaseEpsilon:
    """M2's broadcast ``W'`` (ñ×p): Theorem 2's second inequality, or Theorem 1's, beside the sound bound."""
    p2 = _np(agg_norms.p2_abs).reshape(1, -1)
    if p2.size == 0:
        raise ValueError("agg_norms.p2_abs is empty: M2 needs |P2^m| for m = 1..p")
    same_family = noise2.distribution == rnd.noise1.distribution
    b2 = float(noise2.scale) if same_family else 0.0
    mixed = (
        ""
        if same_family
        else " The noise families differ; the paper's formula has no such case, so its R2 term is dropped."
    )
    if rnd.gaussian:
        sound, paper, note, global_exact = _m2_gaussian(rnd, d_global, agg_norms, p2, b2)
    else:
        sound, paper, note = _m2_laplace(rnd, d_global, agg_norms, p2, b2)
        global_exact = bool(rnd.key_norms.exact)
    return rnd.release("global", sound, paper, d_global, note + mixed, norms_exact=global_exact)


def _m2_gaussian(
    rnd: _Round, d_global: float, agg_norms: AggregatorNorms, p2: np.ndarray, b2: float
) -> tuple[Arrayish, Arrayish, str, bool]:
    """Gaussian ``W'``: the sound ε (R1 and R2 in quadrature where their norms are known), the paper's, the
    note, and whether the norms behind the sound figure are exact."""
    key_norms, rows, exact = rnd.key_norms, _ROWS, bool(rnd.key_norms.exact)
    # The R2 term needs ‖P1^j P1L‖₂ and ‖N2[:, m]‖₂; without them (empty arrays) it is not credited.
    p1p1l = _np(key_norms.p1p1l_row_l2)
    n2_col = _np(agg_norms.n2_col_l2).reshape(1, -1)
    credit_r2 = p1p1l.size == rnd.p1_l2.size and n2_col.size == p2.size and b2 > 0
    sound = F.gaussian_global_epsilon_sound(
        p1_row_l2=rnd.p1_l2[rows],
        n1_row_l2=rnd.n1_l2[rows],
        sigma1=rnd.scale1,
        p2_m=p2,
        sensitivity=d_global,
        delta=rnd.delta,
        p1p1l_row_l2=p1p1l[rows] if credit_r2 else 0.0,
        n2_col_l2=n2_col if credit_r2 else 0.0,
        sigma2=b2 if credit_r2 else 0.0,
    )
    paper = F.gaussian_global_epsilon(
        p1_row_l2=rnd.p1_l2[rows],
        n1_row_l2=rnd.n1_l2[rows],
        sigma1=rnd.scale1,
        sigma2=b2,
        n2_spectral=float(agg_norms.n2_spectral),
        p2_m=p2,
        sensitivity=d_global,
        delta=rnd.delta,
        p1l_spectral=float(key_norms.p1l_spectral),
    )
    if credit_r2:
        exact = exact and bool(key_norms.p1p1l_exact)
        sound_how = (
            "Sound: Theorem 2's argument with the exact std of the element, the R1 and R2 noises in "
            "quadrature: s = sqrt((||N1^j|| s1)^2 + (||P1^j P1L|| ||N2[:, m]|| s2)^2)"
            + ("." if key_norms.p1p1l_exact else ", ||P1^j P1L|| bounded below.")
        )
    else:
        sound_how = (
            "Sound: Theorem 2's argument on the R1 noise alone (R2 not credited: "
            + ("no Gaussian R2 noise" if b2 == 0 else "no ||P1^j P1L|| or ||N2[:, m]|| given")
            + "; R2 is independent, so dropping it is post-processing)."
        )
    note = (
        sound_how + " Paper: Theorem 2's second inequality as docs/method.md states it, which adds the "
        "R1 and R2 stds linearly with ||P1^j|| ||P1L|| ||N2|| (overestimates the std: not a guarantee)."
    )
    return sound, paper, note, exact


def _m2_laplace(
    rnd: _Round, d_global: float, agg_norms: AggregatorNorms, p2: np.ndarray, b2: float
) -> tuple[Arrayish, Arrayish, str]:
    """Laplace ``W'``: the sound ε (the largest single R1 coefficient), the paper's, and the note."""
    rows = _ROWS
    sound = F.laplace_global_epsilon_sound(
        p1_row_l1=rnd.p1_l1[rows],
        n1_row_maxabs=rnd.n1_max[rows],
        scale1=rnd.scale1,
        p2_m=p2,
        sensitivity=d_global,
    )
    paper = F.laplace_global_epsilon_paper(
        p1_row_l1=rnd.p1_l1[rows],
        p1_row_l2=rnd.p1_l2[rows],
        n1_row_l2=rnd.n1_l2[rows],
        scale1=rnd.scale1,
        scale2=b2,
        n2_spectral=float(agg_norms.n2_spectral),
        p2_m=p2,
        sensitivity=d_global,
        p1l_spectral=float(rnd.key_norms.p1l_spectral),
    )
    note = (
        "Sound: largest single R1 Laplace coefficient, everything else (R2 included) post-processing. "
        "Paper: Theorem 1, Eq. dpnoisewp (treats sums of Laplace variables as Laplace)."
    )
    return sound, paper, note


@dataclass(frozen=True)
class ArmReleases:
    """The releases of every round of one SIFL arm whose keys stay fixed for the run.

    M2 does not start as M2. Its round 0 starts from the server's M1 encoding ``w~^0 = P1 w^0 + N1 r1^0``
    (docs/method.md "SIFL M2"; the client strips code 2 only from a two-column ``W'``), so the round-0 uploads
    carry ``N1 r1^0``, whose std has no ``‖P2R‖₂`` factor, and what the clients received is M1's
    ``broadcast``, not ``global``. Crediting that round with M2's noise would under-report its local ε by
    ``‖P2R‖₂``. A later round starts from the same encoding when every round before it was skipped (no update
    accepted: the broadcast is reused), so the choice is made per round by the caller, who knows.

    Attributes:
        coding: the arm's.
        coded: the releases of a round that starts from the coding's own broadcast (every round of M1).
        initial: the releases of a round that starts from the server's initial M1 encoding.
    """

    coding: Coding
    coded: tuple[ReleaseEpsilon, ...]
    initial: tuple[ReleaseEpsilon, ...]

    def of_round(self, *, from_initial_broadcast: bool) -> tuple[ReleaseEpsilon, ...]:
        """The releases of a round, given whether its clients start from the initial M1 encoding."""
        return self.initial if from_initial_broadcast else self.coded


def arm_release_epsilons(
    *,
    key_norms: KeyNorms,
    noise1: NoiseSpec,
    clip: float,
    local_size: int | Sequence[int],
    total_size: int,
    delta: float,
    coding: Coding,
    agg_norms: AggregatorNorms | None = None,
    noise2: NoiseSpec | None = None,
) -> ArmReleases:
    """:func:`release_epsilons` for the rounds of an arm: M2's from its own broadcast, and M1's for a round
    that starts from the server's initial encoding (see :class:`ArmReleases`). Same arguments."""
    common: dict[str, Any] = {
        "key_norms": key_norms,
        "noise1": noise1,
        "clip": clip,
        "local_size": local_size,
        "total_size": total_size,
        "delta": delta,
    }
    initial = release_epsilons(coding=Coding.M1, **common)
    if not coding.aggregator_encodes:
        return ArmReleases(coding=coding, coded=initial, initial=initial)
    coded = release_epsilons(coding=coding, agg_norms=agg_norms, noise2=noise2, **common)
    return ArmReleases(coding=coding, coded=coded, initial=initial)
