"""The SIFL privacy accountant: per-round, per-release worst-element ε, kept as history (paper §5).

Which formula applies to which release is :mod:`sifl_ray.privacy.releases`; this module keeps the figures
of a run as a history that can be queried, summarised, reported and checkpointed, and describes a
configuration's figures for ``sifl describe``. Nothing here holds key material: the accountant stores only
scalars (worst-element ε, the index that attains it, δ, flags).

M2's round 0 is an M1 round (``local`` and ``broadcast``, M1's noise): its clients start from the server's
M1 encoding ``w~^0`` (see :class:`~sifl_ray.privacy.releases.ArmReleases`).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np

from sifl_ray.coding.base import AggregatorNorms, KeyNorms, NoiseDistribution, NoiseSpec
from sifl_ray.privacy import formulas as F
from sifl_ray.privacy.releases import (
    CAVEAT,
    RELEASES,
    SCOPE,
    WHAT,
    ArmReleases,
    ReleaseEpsilon,
    ReleaseName,
    arm_release_epsilons,
    release_epsilons,
    smallest_local_size,
)
from sifl_ray.specs import Coding

__all__ = [
    "CAVEAT",
    "RELEASES",
    "SCOPE",
    "STATE_FORMAT",
    "ArmReleases",
    "Bound",
    "ReleaseEpsilon",
    "ReleaseName",
    "ReleaseRecord",
    "SiflAccountant",
    "arm_release_epsilons",
    "describe_release_epsilons",
    "release_epsilons",
]

Bound = Literal["sound", "paper"]
STATE_FORMAT = "sifl_ray.privacy.SiflAccountant/1"


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
        "what": WHAT[rel.release],
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
            "local": _json_float(F.local_sensitivity(clip=clip, local_size=smallest_local_size(local_size))),
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
                    "what": WHAT[release],
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
                lines.append(f"  {release} ({WHAT[release]}), round {rec.round}, {rec.mechanism}, {delta}:")
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
