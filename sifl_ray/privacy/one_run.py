"""Privacy audited inside one run: canary clients and the ε lower bounds they give (docs/method.md "Auditing
inside the run").

The canaries are k extra clients whose upload is a fixed secret direction ``c_j`` of norm C (the clip),
each inserted with probability ½. Three figures read them:

* **the estimate** (Andrew et al., ICLR 2024): :mod:`sifl_ray.privacy.estimate`;
* **Steinke's lower bound** (Steinke, Nasr, Jagielski, "Privacy auditing with one (1) training run",
  NeurIPS 2023): the auditor guesses inclusion for the canaries it is surest of; the number of correct
  guesses, by their main theorem, refutes (ε, δ)-DP for every ε below :func:`epsilon_lower_bound` at the
  chosen confidence. k canaries can never refute more than :func:`lower_bound_ceiling`;
* **the f-DP lower bound** (Mahloujifar, Melis, Chaudhuri 2024): :mod:`sifl_ray.privacy.fdp_audit`, which
  refutes the Gaussian trade-off of a claim, far higher with the same canaries.

:func:`audit_bounds` takes both bounds under one union (β split between them), so that both hold together
at the stated confidence and the report can take the larger one that speaks to the claim.

Everything here is pure: NumPy and SciPy on arrays the run hands over. The run's wiring (which clients are
canaries, where their uploads enter, which release is scored) lives elsewhere. The directions and the
inclusion bits are secrets (whoever knows them knows which canaries are in), so they come from the auditor's
secret seeds through :func:`sifl_ray.seeding.noise_generator`: the directions from one seed (the scoring
parties hold it), the inclusion bits from another that no scoring party holds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from sifl_ray.privacy.canary_draws import canary_directions, cosines, inclusion_draws
from sifl_ray.privacy.fdp_audit import fdp_ceiling, fdp_lower_bound

__all__ = [
    "AuditBounds",
    "EpsilonLowerBound",
    "audit_bounds",
    "audit_p_value",
    "canary_directions",
    "cosines",
    "epsilon_lower_bound",
    "inclusion_draws",
    "lower_bound_ceiling",
]

#: Guesses per side, as fractions of k, among which :func:`epsilon_lower_bound` picks (union bound over them).
GUESS_FRACTIONS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.25, 0.50)


# ------------------------------------------------------------------------------------------------------------
# The lower bound (Steinke, Nasr, Jagielski 2023).


@dataclass(frozen=True)
class EpsilonLowerBound:
    """An ε that the run refutes at ``confidence``: the mechanism is not (ε', δ)-DP for any ε' < bound.

    Attributes:
        bound: the lower bound (0 when nothing is refuted).
        guesses: guesses made on each side (top g guessed in, bottom g guessed out: 2g guesses in all), for
            the choice that gave the bound.
        correct: correct guesses among those 2g.
        ceiling: the largest bound these k canaries can give (:func:`lower_bound_ceiling`).
        delta: δ of the refuted (ε, δ).
    """

    bound: float
    guesses: int
    correct: int
    ceiling: float
    delta: float


def audit_p_value(*, m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Steinke et al.'s bound on ``P[v or more correct of r guesses]`` under (ε, δ)-DP (their main theorem, as
    the p-value of their Appendix D computes it), with m canaries each included with probability ½.

    With ``q = e^ε/(1+e^ε)`` (the accuracy of ε-randomised response) and ``f(u) = P[Binom(r, q) ≥ u]``:
    ``p = f(v) + 2mδ · max_{1≤i≤v} (f(v−i) − f(v)) / i``, capped at 1. With δ = 0 it is the binomial tail
    alone: the guesses are no better than r coins of bias q.
    """
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    q = float(special.expit(epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    steps = np.arange(1, v + 1)
    below = np.cumsum(stats.binom.pmf(v - steps, r, q))  # P[v−i ≤ Binom(r, q) < v], i = 1..v
    return min(tail + 2 * m * delta * float(np.max(below / steps)), 1.0)


_EPS_GRID_STEP = 0.05
_EPS_GRID_END = 60.0  # expit(60) rounds to 1 in float64: every p-value is 1 from there on


@functools.lru_cache(maxsize=4096)
def _refuted_epsilon(*, m: int, r: int, v: int, delta: float, beta: float) -> float:
    """The first ε at which the p-value rises above β (0 if it starts above).

    Kept per process for each set of its five numbers (a pure function of them): an audited run asks for the
    same ceilings every round, and a grid scan of p-values costs up to a few hundred binomial tails (0.02 s
    for a ceiling at k = 100, 0.07 s at k = 1,000).

    Every ε' below the returned ε has ``p(ε') ≤ β``, so (ε', δ)-DP is refuted for all of them. Taking the
    *first* crossing, not any root, keeps the claim valid even where p is not monotone in ε (the δ term
    need not be): if the mechanism is (ε₀, δ)-DP with ε₀ below the bound, then ``p(ε₀, v_obs) ≤ β``, and
    the smallest such v has probability at most its p-value ≤ β. The crossing is located on a grid of
    step 0.05, then refined by Brent's method inside the grid cell.
    """
    p = lambda e: audit_p_value(m=m, r=r, v=v, epsilon=e, delta=delta)  # noqa: E731
    if p(0.0) > beta:
        return 0.0
    grid = np.arange(_EPS_GRID_STEP, _EPS_GRID_END + _EPS_GRID_STEP, _EPS_GRID_STEP)
    prev = 0.0
    for e in grid:
        if p(float(e)) > beta:
            return float(optimize.brentq(lambda x: p(x) - beta, prev, float(e), xtol=1e-9))
        prev = float(e)
    return prev


def _guess_sizes(k: int, guesses: int | Sequence[int] | None) -> tuple[int, ...]:
    if k < 2:
        raise ValueError(f"need k >= 2 canaries (one guess each way), got {k}")
    if guesses is None:
        return tuple(max(1, int(f * k)) for f in GUESS_FRACTIONS)
    sizes = (guesses,) if isinstance(guesses, int | np.integer) else tuple(guesses)
    if not sizes or any(int(g) != g or not 1 <= g <= k // 2 for g in sizes):
        raise ValueError(f"guesses must be integers in [1, k//2] = [1, {k // 2}] per side, got {guesses!r}")
    return tuple(int(g) for g in sizes)


def _check_level(delta: float, confidence: float) -> None:
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def lower_bound_ceiling(
    *, k: int, delta: float, confidence: float = 0.95, guesses: int | Sequence[int] | None = None
) -> float:
    """The largest lower bound k canaries can give: every guess right, under the same choice of guess sizes
    and the same union bound as :func:`epsilon_lower_bound`.

    A claimed ε above the ceiling cannot be refuted by k canaries whatever the run does; a report should say
    "untestable with k canaries" rather than "audited". For pure ε the ceiling is ``logit(β^{1/r})``, about
    ``log(r / log(1/β))``: it grows with r = 2g only logarithmically. It rises over even k; an odd k's last
    canary is never guessed (2g ≤ k − 1) yet counts in the theorem's ``2kδ`` term, so it sits a hair below
    k − 1's (1e-4 in ε at k ≤ 40, δ = 1e-5): use an even number of canaries.
    """
    _check_level(delta, confidence)
    sizes = _guess_sizes(int(k), guesses)
    beta = (1 - confidence) / len(sizes)
    return max(_refuted_epsilon(m=int(k), r=2 * g, v=2 * g, delta=delta, beta=beta) for g in sizes)


def epsilon_lower_bound(
    *,
    scores: np.ndarray,
    included: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    guesses: int | Sequence[int] | None = None,
) -> EpsilonLowerBound:
    """Steinke, Nasr and Jagielski's one-run ε lower bound (NeurIPS 2023: main theorem, Appendix D).

    The auditor ranks the k canaries by score (higher: more likely inserted), guesses "inserted" for the top
    g and "not inserted" for the bottom g, and abstains on the rest. With r = 2g guesses and v correct, the
    bound is the largest ε whose (ε, δ)-DP makes v correct guesses unlikely: every ε below it has
    :func:`audit_p_value` ≤ β = 1 − confidence. This is their theorem in its (ε, δ) form, with m = k (every
    canary's inclusion is randomised); the search takes the first ε where the p-value crosses β
    (:func:`_refuted_epsilon`). Ties in score are broken by canary index, which is independent of the
    inclusion bits, so the theorem's guesses stay a function of the release alone.

    ``guesses=None`` tries g = 1%, 5%, 10%, 25% and 50% of k per side (at least 1) and reports the best,
    each tested at β/5 (a union bound over the five, kept at five even where small k maps two fractions to
    the same g). An int fixes g (tested at β); a sequence tries each at β/len.

    Args:
        scores: one score per canary (e.g. its cosine with the release's change).
        included: the inclusion bits of :func:`inclusion_draws`.
        delta: δ of the refuted (ε, δ); the theorem adds ``2kδ·(…)`` to the p-value, so it needs kδ ≪ β.
        confidence: probability that the bound is below the true ε.
        guesses: g per side (module docstring above).
    """
    _check_level(delta, confidence)
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included)
    if scores.ndim != 1 or included.shape != scores.shape or not np.all(np.isfinite(scores)):
        raise ValueError(
            f"need 1-D finite scores and inclusion bits of one shape, got {scores.shape}, {included.shape}"
        )
    if included.dtype != bool:
        raise TypeError(f"included must be a boolean array, got {included.dtype}")
    k = scores.size
    sizes = _guess_sizes(k, guesses)
    beta = (1 - confidence) / len(sizes)
    ranked = included[np.argsort(-scores, kind="stable")]
    best = (-1.0, 0, 0)
    for g in sizes:
        correct = int(ranked[:g].sum() + (~ranked[k - g :]).sum())
        bound = _refuted_epsilon(m=k, r=2 * g, v=correct, delta=delta, beta=beta)
        if bound > best[0]:
            best = (bound, g, correct)
    return EpsilonLowerBound(
        bound=best[0],
        guesses=best[1],
        correct=best[2],
        ceiling=lower_bound_ceiling(k=k, delta=delta, confidence=confidence, guesses=guesses),
        delta=float(delta),
    )


# ------------------------------------------------------------------------------------------------------------
# Both bounds under one union.

#: The share of β = 1 − confidence given to the f-DP bound; Steinke's gets the rest. The f-DP bound refutes
#: far more from the same canaries wherever it applies (a Gaussian claim), so it gets most of it: at k = 1000
#: and 95 % its ceiling is 8.2 and Steinke's 4.9 (each at its share).
FDP_SHARE = 0.75


@dataclass(frozen=True)
class AuditBounds:
    """Steinke's and the f-DP lower bound of one set of scores, each at its share of β: with probability at
    least ``confidence`` both hold together (a union bound).

    Attributes:
        steinke: refutes (ε, δ)-DP for every ε below it (any mechanism).
        fdp: refutes, for every ε below it, that the mechanism is as private as the Gaussian mechanism with
            (ε, δ) (its trade-off curve): a refutation of the claim only where the claim is that Gaussian.
        steinke_ceiling, fdp_ceiling: the largest each can give with these k canaries.
        guesses, correct: Steinke's guesses per side and correct guesses (of 2·guesses) that gave its bound.
        confidence: of both together.
    """

    steinke: float
    fdp: float
    steinke_ceiling: float
    fdp_ceiling: float
    guesses: int
    correct: int
    confidence: float

    def bound(self, *, gaussian: bool) -> float:
        """The run's lower bound on a claim: the larger of the two, the f-DP one only for a claim whose
        trade-off is Gaussian (``gaussian``)."""
        return max(self.steinke, self.fdp) if gaussian else self.steinke

    def ceiling(self, *, gaussian: bool) -> float:
        """The largest :meth:`bound` these canaries can give."""
        return max(self.steinke_ceiling, self.fdp_ceiling) if gaussian else self.steinke_ceiling


def audit_bounds(
    *, scores: np.ndarray, included: np.ndarray, delta: float, confidence: float = 0.95
) -> AuditBounds:
    """Both one-run bounds of ``scores`` (one per canary) with the inclusion bits: Steinke's at confidence
    ``1 − (1 − FDP_SHARE)·β`` and the f-DP one at ``1 − FDP_SHARE·β``, β = 1 − ``confidence``."""
    _check_level(delta, confidence)
    beta = 1 - confidence
    steinke_level, fdp_level = 1 - (1 - FDP_SHARE) * beta, 1 - FDP_SHARE * beta
    steinke = epsilon_lower_bound(scores=scores, included=included, delta=delta, confidence=steinke_level)
    included = np.asarray(included, dtype=bool)
    fdp, fdp_top = 0.0, 0.0  # every canary on one side (or δ = 0): nothing to tell apart
    if included.any() and not included.all() and delta > 0:
        fdp = fdp_lower_bound(scores=scores, included=included, delta=delta, confidence=fdp_level)[0]
        inserted = int(included.sum())
        fdp_top = fdp_ceiling(k=int(included.size), delta=delta, confidence=fdp_level, inserted=inserted)
    return AuditBounds(
        steinke=steinke.bound,
        fdp=fdp,
        steinke_ceiling=steinke.ceiling,
        fdp_ceiling=fdp_top,
        guesses=steinke.guesses,
        correct=steinke.correct,
        confidence=float(confidence),
    )
