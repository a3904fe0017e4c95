"""The in-run audit's record of one round: the canaries' scores folded into the driver's record, and the
figures against the ε the arm claims (docs/method.md "Auditing inside the run"); what TensorBoard logs of
them, named for what they are; and what the table's bounds hold together."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from sifl_ray.privacy.canaries import CanaryAudit

#: The in-run audit's figures logged each round (TensorBoard's ``audit/<threat model>/<name>``), named for
#: what they are: each round's bound is the bound the run would report had it stopped there, one test per
#: round, so the largest of them over the rounds is no bound.
AUDIT_TAGS = {
    "estimate": "epsilon_estimate",
    "estimate_low": "epsilon_estimate_low",
    "estimate_high": "epsilon_estimate_high",
    "lower_bound": "epsilon_lower_bound_if_stopped_here",
}


def audit_confidence(cfg: DictConfig, arms: int) -> float:
    """The confidence of each threat model's bounds: ``audit.confidence``, or with ``audit.correction=
    bonferroni`` that of the whole table (every arm's three threat models, ``3 · arms`` tests) shared out
    evenly, so that every lower bound of the run holds together at ``audit.confidence``."""
    beta = 1 - float(cfg.audit.confidence)
    tests = 3 * max(arms, 1) if str(cfg.audit.correction) == "bonferroni" else 1
    return 1 - beta / tests


def audit_family(cfg: DictConfig, arms: int) -> dict[str, Any]:
    """What the audit table's lower bounds hold together: each at its confidence, and all ``3 · arms`` of
    them at once (Bonferroni's inequality: at least 1 − the sum of their chances to fail)."""
    tests = 3 * max(arms, 1)
    each = audit_confidence(cfg, arms)
    return {
        "correction": str(cfg.audit.correction),
        "tests": tests,
        "each": each,
        "together": max(0.0, 1 - tests * (1 - each)),
    }


def audit_claims(privacy: dict[str, Any] | None) -> dict[str, float | None]:
    """The ε the arm claims against each threat model: the whole run's, which the figures of the last
    round (the ones the record keeps) are read against. A record-level or per-element ε (NbAFL, SIFL) is no
    claim about one whole client, which is what a canary is; the aggregator's view is claimed only by an arm
    whose report says it covers the aggregator."""
    info = privacy or {}
    claimed = info.get("epsilon")
    if not str(info.get("neighbour_relation", "")).startswith(("add/remove", "zero-out")):
        claimed = None  # a record-level or per-element ε: the canaries test one whole client
    return {
        "final_model": claimed,
        "all_iterates": claimed,
        "uploads": claimed if info.get("aggregator_covered") else None,
    }


def audit_round(
    cfg: DictConfig,
    audits: dict[str, CanaryAudit],
    arm: str,
    t: int,
    measured: dict[str, Any],
    uploads: list[float] | None,
    privacy: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Round ``t`` of ``arm``'s audit: its scores (``measured``: the evaluator's inner products and the
    change's norm; ``uploads``: the aggregator's best cosines) folded into the arm's record, then the
    arm's audit as ``summary.json`` keeps it and the round's TensorBoard figures. The figures are at the
    arm's δ (its privacy report's, else ``privacy.delta``); the bootstrap's interval is drawn in the last
    round only."""
    audit = audits[arm]
    audit.observe(measured["dots"], measured["norm"])
    if uploads is not None:
        audit.observe_uploads(uploads)
    info = privacy or {}
    claims = audit_claims(privacy)
    delta = float(info.get("delta", cfg.privacy.delta))
    figures = audit.figures(
        delta=delta,
        confidence=audit_confidence(cfg, len(audits)),
        claims=claims,
        t=t,
        gaussian=info.get("tradeoff") == "gaussian",
        interval=t == int(cfg.train.rounds) - 1,
    )
    record = {
        "canaries": audit.k,
        "inserted": int(audit.included.sum()),
        "nulls": audit.m,
        "delta": delta,
        "claimed_epsilon": claims["final_model"],
        "family": audit_family(cfg, len(audits)),
        **figures,
    }
    logged = {
        f"audit/{model}/{name}": float(row[key])
        for model, row in figures.items()
        for key, name in AUDIT_TAGS.items()
        if row.get(key) is not None
    }
    return record, logged
