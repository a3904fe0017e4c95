"""The in-run audit of one arm: canary clients scored against null directions, round by round.

docs/method.md "Auditing inside the run". ``k`` canary clients upload a fixed random direction ``c_j`` (at the
arm's clip norm) instead of a trained model; each is inserted with probability ½ from the auditor's secret
stream (:func:`~sifl_ray.privacy.canary_draws.inclusion_draws`), and an inserted canary is sampled like any
client.
The evaluator (simulation only) measures, every round, the inner product of the released model's change
``Δ_t = w^{t+1} − w^t`` with every canary direction and with ``m`` null directions that were never inserted,
and the driver keeps this record (checkpointed with its state, so a replay or a resume rebuilds it):

* **final model** (what anyone sees at the end): ``⟨w^t − w^0, c⟩ = Σ_s ⟨Δ_s, c⟩``, a sum over rounds. The
  common factor ``1/‖w^t − w^0‖`` of the cosine is the same for every direction, and both estimators below
  are invariant under it, so the sum is the cosine statistic;
* **uploads** (what the aggregator receives of each client): the largest cosine, over the rounds and the
  uploads, of its reading of an upload with c (the clipped update it sees in the clear; a masked input
  read as ring numbers; a SIFL upload decoded with one colluding client's ``P1L``, which every client
  holds), measured by the client workers;
* **all iterates** (every released global model): ``Σ_s cos(Δ_s, c)`` over the rounds so far, each round
  normalised by its own change: the matched filter of an adversary who sees every iterate and whose noise
  is the same every round (Andrew et al. take the maximum over rounds instead, which suits a canary that
  takes part in few rounds; at q = 1 it threw away most of the signal: estimates 1.9 and 4.0 against an
  accountant's 5 and 10, where this sum gives figures beside the final model's).

From each statistic two figures, named for what they are: the ε **estimate** (Andrew et al. 2024: a
Gaussian fitted to the inserted canaries and one to the nulls, the ε of telling them apart, with the
interval of a parametric bootstrap over that fit: :mod:`sifl_ray.privacy.estimate`) and the ε **lower
bound**, the larger of Steinke, Nasr and Jagielski's (2023) and, for a claim whose trade-off is Gaussian,
Mahloujifar, Melis and Chaudhuri's f-DP bound (2024), both under one union at the configured confidence
(:func:`~sifl_ray.privacy.one_run.audit_bounds`), with the largest bound the k canaries could ever give
(``ceiling``).

This module is pure (numpy); it never sees a model, only the inner products the evaluator measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sifl_ray.privacy.canary_draws import inclusion_draws

THREAT_MODELS = {
    "final_model": "the final model (what anyone sees at the end)",
    "all_iterates": "every released global model (each round's change)",
    "uploads": "every upload as the aggregator reads it (in the clear, masked read as numbers, or encoded "
    "and decoded with one colluding client's P1L); the aggregator also sees the aggregate, so its view is at "
    "least as revealing as all iterates'",
}


def verdict(*, claimed: float | None, lower_bound: float, ceiling: float) -> str:
    """What one run's lower bound says of a claimed ε: ``refuted`` (the bound is above the claim), ``not
    refuted`` (the claim is below the ceiling, and the bound did not reach it), ``untestable`` (the claim is
    at or above the largest bound these canaries could give: this run could never refute it), ``no claim``
    (the arm claims no finite ε)."""
    if claimed is None or not math.isfinite(claimed):
        return "no claim"
    if lower_bound > claimed:
        return "refuted"
    return "untestable" if claimed >= ceiling else "not refuted"


@dataclass
class CanaryAudit:
    """The driver's record of one arm's canaries: which were inserted, and each statistic so far.

    Args:
        k: canaries; m: null directions (never inserted); seed: the auditor's inclusion seed (the secret the
            inclusion bits derive from: the driver's alone, never a scoring party's).
    """

    k: int
    m: int
    seed: bytes
    sums: np.ndarray | None = None  # (k + m,) Σ_s ⟨Δ_s, direction⟩: the final-model statistic
    cos_sums: np.ndarray | None = None  # (k + m,) Σ_s cos(Δ_s, direction): the all-iterates statistic
    upload_max: np.ndarray | None = None  # (k + m,) the aggregator's largest upload cosine (None: not read)

    def __post_init__(self) -> None:
        self.included = inclusion_draws(k=self.k, seed=self.seed)
        if self.sums is None or self.cos_sums is None:
            self.reset()

    def reset(self) -> None:
        """Back to before round 0 (a rollback to the start)."""
        self.sums = np.zeros(self.k + self.m)
        self.cos_sums = np.zeros(self.k + self.m)
        self.upload_max = None

    def observe(self, dots: Any, norm: float) -> None:
        """Round t's inner products ``⟨Δ_t, d⟩`` with the unit directions (canaries first, then the nulls)
        and ``‖Δ_t‖`` (0: the model did not move, every cosine is 0)."""
        dots = np.asarray(dots, dtype=np.float64)
        if dots.shape != (self.k + self.m,):
            raise ValueError(f"expected {self.k + self.m} inner products, got shape {dots.shape}")
        self.sums += dots
        if norm > 0:
            self.cos_sums += dots / norm

    def observe_uploads(self, largest: Any) -> None:
        """Round t's largest cosine of the aggregator's reading of an upload with each direction."""
        largest = np.asarray(largest, dtype=np.float64)
        if largest.shape != (self.k + self.m,):
            raise ValueError(f"expected {self.k + self.m} cosines, got shape {largest.shape}")
        self.upload_max = largest if self.upload_max is None else np.maximum(self.upload_max, largest)

    def statistic(self, threat_model: str) -> np.ndarray | None:
        stats = {"final_model": self.sums, "all_iterates": self.cos_sums, "uploads": self.upload_max}
        return stats[threat_model]

    def figures(
        self,
        *,
        delta: float,
        confidence: float,
        claims: dict[str, float | None],
        t: int,
        gaussian: bool = False,
        interval: bool = True,
    ) -> dict[str, Any]:
        """Per threat model: the estimate (with its interval when ``interval``), both lower bounds and the
        one that speaks to the claim, their ceilings and the verdict on the ε the arm claims against that
        threat model (``claims``; missing or ``None``: no claim). ``gaussian``: the claim is that of a
        Gaussian mechanism (its trade-off curve), which the f-DP bound tests. ``confidence``: of each
        threat model's two bounds together. The bootstrap is seeded by the round, so a replayed round gives
        the same figures."""
        # deferred: scipy, which a run that audits nothing never needs
        from sifl_ray.privacy.one_run import audit_bounds

        out: dict[str, Any] = {}
        for model in THREAT_MODELS:
            scores = self.statistic(model)
            if scores is None:  # the uploads' view, before any upload was read
                continue
            canary, null = scores[: self.k], scores[self.k :]
            row: dict[str, Any] = {}
            row.update(self._estimate(canary[self.included], null, delta, confidence, t, interval))
            bounds = audit_bounds(scores=canary, included=self.included, delta=delta, confidence=confidence)
            claimed = claims.get(model)
            bound, ceiling = bounds.bound(gaussian=gaussian), bounds.ceiling(gaussian=gaussian)
            row.update(
                lower_bound=bound,
                ceiling=ceiling,
                steinke_bound=bounds.steinke,
                steinke_ceiling=bounds.steinke_ceiling,
                fdp_bound=bounds.fdp,
                fdp_ceiling=bounds.fdp_ceiling,
                fdp_applies=bool(gaussian),
                guesses=bounds.guesses,
                correct=bounds.correct,
                confidence=float(confidence),
                claimed_epsilon=claimed,
                verdict=verdict(claimed=claimed, lower_bound=bound, ceiling=ceiling),
            )
            out[model] = row
        return out

    @staticmethod
    def _estimate(
        inserted: np.ndarray, null: np.ndarray, delta: float, confidence: float, t: int, interval: bool
    ) -> dict[str, Any]:
        """The estimate's figures, when both samples have a spread (none while the model has not moved)."""
        if inserted.size < 2 or null.size < 2 or np.ptp(null) == 0 or np.ptp(inserted) == 0:
            return {}
        # deferred: scipy, which a run that audits nothing never needs
        from sifl_ray.privacy.estimate import epsilon_estimate

        est = epsilon_estimate(
            canary_cosines=inserted,
            null_cosines=null,
            delta=delta,
            confidence=confidence,
            rng_seed=t,
            resamples=1000 if interval else 1,
        )
        row = dict(
            estimate=est.estimate, gdp_estimate=est.gdp_estimate, mu=est.mu, spread_ratio=est.spread_ratio
        )
        if interval:
            row.update(estimate_low=est.low, estimate_high=est.high)
        return row

    def state_dict(self) -> dict[str, Any]:
        uploads = None if self.upload_max is None else self.upload_max.tolist()
        return {"sums": self.sums.tolist(), "cos_sums": self.cos_sums.tolist(), "upload_max": uploads}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sums = np.asarray(state["sums"], dtype=np.float64)
        self.cos_sums = np.asarray(state["cos_sums"], dtype=np.float64)
        uploads = state.get("upload_max")
        self.upload_max = None if uploads is None else np.asarray(uploads, dtype=np.float64)
