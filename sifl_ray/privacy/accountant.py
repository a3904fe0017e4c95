"""The SIFL privacy accountant: per-round, per-release worst-element ε, kept as history (paper §5).

The math lives in :mod:`sifl_ray.privacy.formulas`; this module only decides which formula applies to which
release, takes the worst element, and keeps a history that can be queried, summarised, reported and
checkpointed. Nothing here holds key material: the accountant receives norm summaries (:class:`KeyNorms`,
:class:`AggregatorNorms`) and stores only scalars (worst-element ε, the index that attains it, δ, flags).

Releases (docs/method.md "SIFL M1", "SIFL M2"):

* ``local``: a client's upload ``w~_i`` (seen by the aggregator), in M1 and M2;
* ``broadcast``: M1's encoded global model ``w~^t = P1 w^t + N1 r1^t`` (seen by the clients);
* ``global``: M2's ``W' = P1 Wbar + N1 R1`` (seen by the clients).

M2's round 0 is an M1 round (``local`` and ``broadcast``, M1's noise): its clients start from the server's
M1 encoding ``w~^0`` (see :class:`ArmReleases`).

Not covered, because the paper has no theorem for them: the server's view ``P1L W'_a`` in M2
(docs/method.md "Attacks", "M2, the server": it reveals the global model up to a scalar) and the aggregator's
``W'_a``.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np
import torch

from sifl_ray.coding.base import AggregatorNorms, KeyNorms, NoiseDistribution, NoiseSpec
from sifl_ray.privacy import formulas as F
from sifl_ray.specs import Coding

#: Which of a SIFL round's releases an ε is about: a name (the channel itself, sender to receiver, is
#: :class:`sifl_ray.arms.base.Release`).
ReleaseName = Literal["local", "broadcast", "global"]
Bound = Literal["sound", "paper"]

RELEASES: tuple[ReleaseName, ...] = ("local", "broadcast", "global")
SCOPE = "per-element, per-round"
STATE_FORMAT = "sifl_ray.privacy.SiflAccountant/1"

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

_WHAT: dict[ReleaseName, str] = {
    "local": "client upload w~_i, seen by the aggregator",
    "broadcast": "M1 encoded global model w~ = P1 w + N1 r1 (ε against an observer without key 1; the "
    "clients hold P1L and decode it)",
    "global": "M2 encoded global model W' = P1 Wbar + N1 R1 (ε against an observer without key 1; the "
    "clients hold P1L and P2R and decode it)",
}


# ------------------------------------------------------------------------------------------------------------
# Pure part: which formula for which release.


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


def _worst(eps: np.ndarray) -> tuple[float, int, int | None]:
    value = F.worst_element(eps)
    index = F.worst_element_index(eps)
    return value, index[0], (index[1] if len(index) > 1 else None)


def _min_size(local_size: int | Sequence[int]) -> int:
    sizes = [int(local_size)] if isinstance(local_size, int | np.integer) else [int(s) for s in local_size]
    if not sizes:
        raise ValueError("local_size is empty: give |D_i| of every client (or the smallest one)")
    return min(sizes)


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
    d_local = float(F.local_sensitivity(clip=clip, local_size=_min_size(local_size)))
    d_global = float(F.global_sensitivity(clip=clip, total_size=total_size))
    if gaussian:
        F.gaussian_tail_inverse(delta=delta)  # validate δ up front, with its explanatory message
    rel_delta = float(delta) if gaussian else 0.0
    b1 = float(noise1.scale)

    p1_l2 = _np(key_norms.p1_row_l2)
    p1_l1 = _np(key_norms.p1_row_l1)
    n1_l2 = _np(key_norms.n1_row_l2)
    n1_max = _np(key_norms.n1_row_maxabs)
    exact = bool(key_norms.exact)
    out: list[ReleaseEpsilon] = []

    def add(
        release: ReleaseName,
        sound: np.ndarray,
        paper: np.ndarray,
        sensitivity: float,
        note: str,
        norms_exact: bool = exact,
    ) -> None:
        norms_note = f" Key norms: {'exact' if norms_exact else 'conservative bounds'}"
        norms_note += f" ({key_norms.note})." if key_norms.note else "."
        eps, j, m = _worst(sound)
        eps_p, jp, mp = _worst(paper)
        out.append(
            ReleaseEpsilon(
                release=release,
                mechanism=noise1.distribution,
                delta=rel_delta,
                epsilon=eps,
                epsilon_paper=eps_p,
                worst_row=j,
                worst_column=m,
                worst_row_paper=jp,
                worst_column_paper=mp,
                sensitivity=sensitivity,
                norms_exact=norms_exact,
                note=note + norms_note,
            )
        )

    # 1. The client upload w~_i (M1: noise N1 r1; M2: noise N1 R1 P2R).
    if agg_norms is not None and coding.aggregator_encodes:
        p = max(int(agg_norms.p2_abs.numel()), 1)
        p2r_l2 = float(agg_norms.p2r_l2)
        # max_m |P2R_m| is not in AggregatorNorms; ‖P2R‖₂/√p is a rigorous lower bound on it.
        p2r_maxabs = p2r_l2 / math.sqrt(p)
    else:
        p, p2r_l2, p2r_maxabs = 1, 1.0, 1.0
    if gaussian:
        eps = F.gaussian_local_epsilon(
            p1_row_l2=p1_l2, n1_row_l2=n1_l2, sigma1=b1, sensitivity=d_local, delta=delta, p2r_l2=p2r_l2
        )
        add("local", eps, eps, d_local, "Theorem 2, first inequality (sound as stated).")
    else:
        sound = F.laplace_local_epsilon_sound(
            p1_row_l1=p1_l1, n1_row_maxabs=n1_max, scale1=b1, sensitivity=d_local, p2r_maxabs=p2r_maxabs
        )
        paper = F.laplace_local_epsilon_paper(
            p1_row_l1=p1_l1, n1_row_l2=n1_l2, scale1=b1, sensitivity=d_local, p2r_l2=p2r_l2
        )
        note = (
            "Sound: largest single Laplace coefficient, the rest post-processing. Paper: Theorem 1, which "
            "treats a sum of Laplace variables as Laplace (too small in general)."
        )
        if coding.aggregator_encodes:
            note += f" max|P2R_m| bounded below by ||P2R||_2/sqrt(p), p = {p}."
        add("local", sound, paper, d_local, note)

    # 2. What the clients receive: M1's w~^t, or M2's W'.
    if not coding.aggregator_encodes:
        if gaussian:
            eps = F.gaussian_broadcast_epsilon(
                p1_row_l2=p1_l2, n1_row_l2=n1_l2, sigma1=b1, sensitivity=d_global, delta=delta
            )
            add("broadcast", eps, eps, d_global, "Theorem 2's argument with Delta^w and no code 2 (sound).")
        else:
            sound = F.laplace_broadcast_epsilon_sound(
                p1_row_l1=p1_l1, n1_row_maxabs=n1_max, scale1=b1, sensitivity=d_global
            )
            paper = F.laplace_broadcast_epsilon_paper(
                p1_row_l1=p1_l1, n1_row_l2=n1_l2, scale1=b1, sensitivity=d_global
            )
            add(
                "broadcast",
                sound,
                paper,
                d_global,
                "Sound: largest single Laplace coefficient. Paper-style: Theorem 1 with Delta^w.",
            )
        return tuple(out)

    if agg_norms is None or noise2 is None:  # unreachable (checked above); narrows the types
        raise ValueError("coding M2 needs agg_norms and noise2")
    p2 = _np(agg_norms.p2_abs).reshape(1, -1)
    if p2.size == 0:
        raise ValueError("agg_norms.p2_abs is empty: M2 needs |P2^m| for m = 1..p")
    rows = (slice(None), None)
    same_family = noise2.distribution == noise1.distribution
    b2 = float(noise2.scale) if same_family else 0.0
    mixed = (
        ""
        if same_family
        else " The noise families differ; the paper's formula has no such case, so its R2 term is dropped."
    )
    p1l = float(key_norms.p1l_spectral)
    global_exact = exact
    if gaussian:
        # The R2 term needs ‖P1^j P1L‖₂ and ‖N2[:, m]‖₂; without them (empty arrays) it is not credited.
        p1p1l = _np(key_norms.p1p1l_row_l2)
        n2_col = _np(agg_norms.n2_col_l2).reshape(1, -1)
        credit_r2 = p1p1l.size == p1_l2.size and n2_col.size == p2.size and b2 > 0
        sound = F.gaussian_global_epsilon_sound(
            p1_row_l2=p1_l2[rows],
            n1_row_l2=n1_l2[rows],
            sigma1=b1,
            p2_m=p2,
            sensitivity=d_global,
            delta=delta,
            p1p1l_row_l2=p1p1l[rows] if credit_r2 else 0.0,
            n2_col_l2=n2_col if credit_r2 else 0.0,
            sigma2=b2 if credit_r2 else 0.0,
        )
        paper = F.gaussian_global_epsilon(
            p1_row_l2=p1_l2[rows],
            n1_row_l2=n1_l2[rows],
            sigma1=b1,
            sigma2=b2,
            n2_spectral=float(agg_norms.n2_spectral),
            p2_m=p2,
            sensitivity=d_global,
            delta=delta,
            p1l_spectral=p1l,
        )
        if credit_r2:
            global_exact = exact and bool(key_norms.p1p1l_exact)
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
    else:
        sound = F.laplace_global_epsilon_sound(
            p1_row_l1=p1_l1[rows], n1_row_maxabs=n1_max[rows], scale1=b1, p2_m=p2, sensitivity=d_global
        )
        paper = F.laplace_global_epsilon_paper(
            p1_row_l1=p1_l1[rows],
            p1_row_l2=p1_l2[rows],
            n1_row_l2=n1_l2[rows],
            scale1=b1,
            scale2=b2,
            n2_spectral=float(agg_norms.n2_spectral),
            p2_m=p2,
            sensitivity=d_global,
            p1l_spectral=p1l,
        )
        note = (
            "Sound: largest single R1 Laplace coefficient, everything else (R2 included) post-processing. "
            "Paper: Theorem 1, Eq. dpnoisewp (treats sums of Laplace variables as Laplace)."
        )
    add("global", sound, paper, d_global, note + mixed, norms_exact=global_exact)
    return tuple(out)


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
    common = {
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


def _json_float(x: float) -> float | str:
    """Finite floats as they are; ±inf and NaN as strings, so ``json.dumps(..., allow_nan=False)`` works."""
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _from_json_float(x: float | str) -> float:
    return float(x)


def _release_dict(rel: ReleaseEpsilon) -> dict[str, Any]:
    return {
        "what": _WHAT[rel.release],
        "mechanism": rel.mechanism,
        "delta": _json_float(rel.delta),
        "epsilon": _json_float(rel.epsilon),
        "epsilon_paper": _json_float(rel.epsilon_paper),
        "worst_row": rel.worst_row,
        "worst_column": rel.worst_column,
        "worst_row_paper": rel.worst_row_paper,
        "worst_column_paper": rel.worst_column_paper,
        "sensitivity": _json_float(rel.sensitivity),
        "norms_exact": rel.norms_exact,
        "scope": SCOPE,
        "note": rel.note,
    }


def describe_release_epsilons(
    *,
    key_norms: KeyNorms,
    agg_norms: AggregatorNorms | None,
    noise1: NoiseSpec,
    noise2: NoiseSpec | None,
    clip: float,
    local_size: int | Sequence[int],
    total_size: int,
    delta: float,
    coding: Coding,
) -> dict[str, Any]:
    """The per-release ε of a configuration, paper and sound, as a JSON-safe dict (for ``sifl describe``).

    ``"epsilon"`` is the sound worst-element figure (the guarantee); ``"epsilon_paper"`` is the paper's
    formula. Infinite values are the string ``"inf"`` (zero noise: no guarantee).
    """
    rels = release_epsilons(
        key_norms=key_norms,
        agg_norms=agg_norms,
        noise1=noise1,
        noise2=noise2,
        clip=clip,
        local_size=local_size,
        total_size=total_size,
        delta=delta,
        coding=coding,
    )
    return {
        "mode": coding.value,  # the description's key and value as they always were
        "scope": SCOPE,
        "sensitivity": {
            "local": _json_float(F.local_sensitivity(clip=clip, local_size=_min_size(local_size))),
            "global": _json_float(F.global_sensitivity(clip=clip, total_size=total_size)),
        },
        "norms_exact": bool(key_norms.exact),
        "norms_note": key_norms.note,
        "releases": {rel.release: _release_dict(rel) for rel in rels},
        "caveat": CAVEAT,
    }


# ------------------------------------------------------------------------------------------------------------
# The accountant: history only.


@dataclass(frozen=True)
class ReleaseRecord:
    """One release of one round of one arm, as the accountant stores it (scalars only)."""

    arm: str
    round: int
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

    @classmethod
    def from_release(cls, *, arm: str, round: int, release: ReleaseEpsilon) -> ReleaseRecord:
        return cls(arm=arm, round=round, **asdict(release))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (infinite ε as ``"inf"``)."""
        out = asdict(self)
        for key in ("delta", "epsilon", "epsilon_paper", "sensitivity"):
            out[key] = _json_float(out[key])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseRecord:
        names = {f.name for f in fields(cls)}
        missing, unknown = names - data.keys(), data.keys() - names
        if missing or unknown:
            raise ValueError(
                f"not an accountant record: missing fields {sorted(missing)}, "
                f"unknown fields {sorted(unknown)}"
            )
        values = dict(data)
        for key in ("delta", "epsilon", "epsilon_paper", "sensitivity"):
            values[key] = _from_json_float(values[key])
        values["round"] = int(values["round"])
        return cls(**values)


def _fmt_eps(x: float) -> str:
    if math.isinf(x):
        return "inf (no guarantee: zero noise against a nonzero signal)"
    return f"{x:.4g}"


class SiflAccountant:
    """Keeps the per-round, per-release worst-element ε of every SIFL arm (paper §5).

    It is a history, not a composer: each figure is a per-element, per-round guarantee as the paper states
    it, and no query adds rounds up (see :data:`CAVEAT`). The state holds scalars only, never key material
    or row-norm arrays, so it may be written into any checkpoint or log.

    Example::

        acc = SiflAccountant()
        acc.record_round(arm="sifl_m2", round=t, key_norms=server_key.norms(), agg_norms=agg_key.norms(),
                         noise1=server_noise, noise2=agg_noise, clip=1000.0, local_size=sizes,
                         total_size=sum(sizes), delta=1e-5, coding=Coding.M2)
        acc.epsilon(release="global", arm="sifl_m2")
    """

    def __init__(self) -> None:
        self._records: list[ReleaseRecord] = []

    def __len__(self) -> int:
        return len(self._records)

    def record(
        self, *, arm: str, round: int, releases: Iterable[ReleaseEpsilon]
    ) -> tuple[ReleaseRecord, ...]:
        """Store already computed releases for ``(arm, round)``.

        Useful when the key does not change between rounds: compute :func:`release_epsilons` once per key and
        record it every round.

        Raises:
            ValueError: if a release of that arm and round is already recorded (one record per release per
                round keeps ``epsilon(round=...)`` unambiguous).
        """
        if not isinstance(round, int | np.integer) or round < 0:
            raise ValueError(f"round must be a non-negative integer, got {round!r}")
        new = [ReleaseRecord.from_release(arm=str(arm), round=int(round), release=r) for r in releases]
        seen = {(r.arm, r.round, r.release) for r in self._records}
        for rec in new:
            key = (rec.arm, rec.round, rec.release)
            if key in seen:
                raise ValueError(
                    f"release {rec.release!r} of arm {rec.arm!r} in round {rec.round} is already recorded; "
                    "record each round once (after a resume, load_state_dict first and continue from the "
                    "next round)"
                )
            seen.add(key)
        self._records.extend(new)
        return tuple(new)

    def record_round(
        self,
        *,
        arm: str,
        round: int,
        key_norms: KeyNorms,
        noise1: NoiseSpec,
        clip: float,
        local_size: int | Sequence[int],
        total_size: int,
        delta: float,
        coding: Coding,
        agg_norms: AggregatorNorms | None = None,
        noise2: NoiseSpec | None = None,
    ) -> tuple[ReleaseRecord, ...]:
        """Compute (:func:`release_epsilons`) and store the releases of one round of one arm."""
        rels = release_epsilons(
            key_norms=key_norms,
            agg_norms=agg_norms,
            noise1=noise1,
            noise2=noise2,
            clip=clip,
            local_size=local_size,
            total_size=total_size,
            delta=delta,
            coding=coding,
        )
        return self.record(arm=arm, round=round, releases=rels)

    def _select(self, *, release: ReleaseName, arm: str, round: int | None) -> ReleaseRecord:
        if release not in RELEASES:
            raise ValueError(f"release must be one of {RELEASES}, got {release!r}")
        matches = [r for r in self._records if r.arm == arm and r.release == release]
        if round is not None:
            matches = [r for r in matches if r.round == round]
        if not matches:
            where = "" if round is None else f" in round {round}"
            known = sorted({(r.arm, r.release) for r in self._records})
            raise KeyError(
                f"no {release!r} release of arm {arm!r} recorded{where}; "
                f"recorded (arm, release) pairs: {known}. "
                "M1 has 'local' and 'broadcast', M2 has 'local' and 'global'."
            )
        return max(matches, key=lambda r: r.round)

    def epsilon(
        self, *, release: ReleaseName, arm: str, round: int | None = None, bound: Bound = "sound"
    ) -> float:
        """Worst-element ε of a release: the latest round, or ``round``.

        Args:
            release: ``"local"``, ``"broadcast"`` or ``"global"``.
            arm: the arm name used when recording.
            round: a round number; ``None`` for the latest recorded.
            bound: ``"sound"`` (the guarantee, default) or ``"paper"`` (the paper's formula).

        Returns:
            A per-element, per-round ε (``inf`` when there is no noise): never a bound on the whole vector
            or on several rounds.
        """
        if bound not in ("sound", "paper"):
            raise ValueError(f"bound must be 'sound' or 'paper', got {bound!r}")
        rec = self._select(release=release, arm=arm, round=round)
        return rec.epsilon if bound == "sound" else rec.epsilon_paper

    def history(
        self, *, arm: str | None = None, release: ReleaseName | None = None
    ) -> tuple[ReleaseRecord, ...]:
        """All records in the order they were made, optionally filtered by arm and release."""
        return tuple(
            r
            for r in self._records
            if (arm is None or r.arm == arm) and (release is None or r.release == release)
        )

    def summary(self) -> dict[str, Any]:
        """Latest figures per arm and release, JSON-safe (``json.dumps(..., allow_nan=False)`` works).

        ``largest_per_round_epsilon`` is the worst single round seen; it is not a composed bound.
        """
        arms: dict[str, dict[str, Any]] = {}
        for arm in dict.fromkeys(r.arm for r in self._records):
            per_release: dict[str, Any] = {}
            for release in RELEASES:
                recs = [r for r in self._records if r.arm == arm and r.release == release]
                if not recs:
                    continue
                last = max(recs, key=lambda r: r.round)
                per_release[release] = {
                    "what": _WHAT[release],
                    "round": last.round,
                    "rounds_recorded": len(recs),
                    "mechanism": last.mechanism,
                    "delta": _json_float(last.delta),
                    "epsilon": _json_float(last.epsilon),
                    "epsilon_paper": _json_float(last.epsilon_paper),
                    "largest_per_round_epsilon": _json_float(max(r.epsilon for r in recs)),
                    "worst_row": last.worst_row,
                    "worst_column": last.worst_column,
                    "norms_exact": all(r.norms_exact for r in recs),
                    "scope": SCOPE,
                    "note": last.note,
                    "caveat": CAVEAT,
                }
            arms[arm] = per_release
        return {"scope": SCOPE, "caveat": CAVEAT, "arms": arms}

    def report(self) -> str:
        """Plain-text report of the latest figures, with what they do and do not mean."""
        lines = [
            "Differential privacy of SIFL (paper §5): per-element, per-round guarantees.",
            *textwrap.wrap(CAVEAT, width=100),
            *textwrap.wrap(
                "The 'sound' ε is the guarantee; the paper's formula is shown beside it, and where the two "
                "differ the paper's is not a guarantee (see sifl_ray.privacy.formulas).",
                width=100,
            ),
        ]
        summary = self.summary()["arms"]
        if not summary:
            lines.append("No releases recorded.")
        for arm, per_release in summary.items():
            lines.append("")
            lines.append(f"arm {arm}:")
            for release, row in per_release.items():
                rec = self._select(release=release, arm=arm, round=row["round"])
                where = f"j={rec.worst_row}" + ("" if rec.worst_column is None else f", m={rec.worst_column}")
                delta = "pure (delta = 0)" if rec.delta == 0 else f"delta = {rec.delta:.3g}"
                lines.append(f"  {release} ({_WHAT[release]}), round {rec.round}, {rec.mechanism}, {delta}:")
                lines.append(
                    f"    epsilon = {_fmt_eps(rec.epsilon)} per element per round (worst element {where}); "
                    f"paper's formula: {_fmt_eps(rec.epsilon_paper)}"
                )
                largest = max(r.epsilon for r in self.history(arm=arm, release=release))
                lines.append(
                    f"    key norms {'exact' if rec.norms_exact else 'bounded conservatively'}; "
                    f"largest over {row['rounds_recorded']} recorded round(s): {_fmt_eps(largest)} "
                    "(not composed)"
                )
        lines.append("")
        lines += textwrap.wrap(
            "The whole released vector has no finite ε once the keys are known; measure what an adversary "
            "recovers with the attacks (docs/method.md 'Attacks'), not with these numbers.",
            width=100,
        )
        return "\n".join(lines)

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: the records (scalars only; no key material, no row-norm arrays)."""
        return {"format": STATE_FORMAT, "records": [r.to_dict() for r in self._records]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the history with ``state`` (from :meth:`state_dict`)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"not a SiflAccountant state (format {STATE_FORMAT!r} expected, found {found!r})"
            )
        self._records = [ReleaseRecord.from_dict(d) for d in state["records"]]
