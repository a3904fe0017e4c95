"""The in-run audit's end-of-run table, with what each of its figures means where it is printed (a function of
the summary dict only, like :mod:`sifl_ray.runner.summary`): docs/method.md "Auditing inside the run"."""

from __future__ import annotations

from typing import Any

from sifl_ray.runner.columns import DEFAULT_WIDTH, fit_table, wrap_note

THREAT_MODELS = ("final_model", "all_iterates", "uploads")

#: The column of a run that compared its accuracy with and without canaries (``audit.compare``).
COMPARED = "acc ± canaries"


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def audit_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Per arm and threat model: the ε the arm claims, the estimate with its interval, the lower bound that
    speaks to the claim, Steinke's and the f-DP bound, their ceilings, the verdict (and the accuracy with and
    without canaries, when the run compared them)."""
    compared = any("accuracy_without_canaries" in (a.get("audit") or {}) for a in summary["arms"].values())
    lines = []
    for arm, a in summary["arms"].items():
        audit = a.get("audit") or {}
        for model in THREAT_MODELS:
            row = audit.get(model)
            if row is None:
                continue
            est = _fmt(row.get("estimate"))
            if row.get("estimate_low") is not None:
                est += f" [{row['estimate_low']:.3g}, {row['estimate_high']:.3g}]"
            fdp = _fmt(row.get("fdp_bound")) + ("" if row.get("fdp_applies") else " (n/a)")
            line = [
                arm,
                model.replace("_", " "),
                _fmt(row.get("claimed_epsilon")),
                est,
                _fmt(row["lower_bound"]),
                f"{_fmt(row.get('steinke_bound'))} | {fdp}",
                f"{_fmt(row.get('steinke_ceiling'))} | {_fmt(row.get('fdp_ceiling'))}",
                row["verdict"],
            ]
            if compared:
                with_, without = audit["accuracy_with_canaries"], audit["accuracy_without_canaries"]
                line.append(f"{100 * with_:.1f}/{100 * without:.1f}%")
            lines.append(line)
    return lines


def audit_table(summary: dict[str, Any], width: int = DEFAULT_WIDTH) -> str | None:
    """The in-run audit's table (``None`` without canaries) under the lines that say what its figures are:
    the estimate and its interval, which bound speaks to which claim, and what the table's bounds hold
    together (its family-wise level); fitted to ``width`` as the end-of-run table is."""
    rows = audit_rows(summary)
    if not rows:
        return None
    header = [
        "arm",
        "threat model",
        "claimed ε",
        "estimate [interval]",
        "lower bound",
        "Steinke | f-DP",
        "ceilings",
        "verdict",
    ]
    if len(rows[0]) > len(header):
        header.append(COMPARED)
    table, shown = fit_table(header, rows, width, optional=(COMPARED, "ceilings"), drop_empty=False)
    first = next(a["audit"] for a in summary["arms"].values() if a.get("audit"))
    said = audit_notes(first, tests=len(rows))
    if COMPARED in shown:
        said.append(f"{COMPARED}: final accuracy with the canaries / without them (audit.compare)")
    hidden = [h for h in (COMPARED, "ceilings") if h not in shown]
    if hidden:
        said.append(
            f"{' and '.join(hidden)}: left out to fit the terminal; in summary.json (arms.<arm>.audit)"
        )
    return "\n".join([*(wrap_note(n, width) for n in said), table])


def audit_notes(first: dict[str, Any], *, tests: int) -> list[str]:
    """The lines above the audit table (``first``: an arm's audit record, for the run's numbers)."""
    family = first.get("family") or {}
    each = float(family.get("each", next(r["confidence"] for r in _models(first))))
    level = f"{100 * each:.4g} %"
    together = max(0.0, 1 - tests * (1 - each))
    if family.get("correction") == "bonferroni":
        family_line = (
            f"audit.correction=bonferroni: each bound at {level}, so that all {tests} of the table hold "
            f"together with probability ≥ {100 * together:.4g} %"
        )
    else:
        family_line = (
            f"each of the table's {tests} lower bounds holds with probability ≥ {level}; all of "
            f"them together only with ≥ {100 * together:.3g} % (Bonferroni); audit.correction=bonferroni "
            f"makes that {level} for all together"
        )
    return [
        f"in-run audit: {first['canaries']} canary clients per arm ({first['inserted']} inserted), "
        f"{first['nulls']} null directions; an estimate is not a bound, a lower bound is",
        "estimate: Andrew et al.'s fit of one Gaussian to the canaries' scores and one to the nulls'; "
        f"[interval]: {level} of the estimates those fitted Gaussians give on fresh canaries and nulls (a "
        "parametric bootstrap): how far the estimate moves with the draw of scores, not a confidence "
        "interval for ε; the estimate can lie above the claim (docs/privacy-audit.md)",
        "lower bound: Steinke et al.'s (refutes (ε, δ)-DP, any claim), or the f-DP bound (Mahloujifar "
        "et al.: refutes the Gaussian mechanism with that (ε, δ)) where the claim is a Gaussian "
        "mechanism's, the larger of the two; both hold together (a union bound); n/a: the claim is not "
        "Gaussian",
        family_line,
    ]


def _models(audit: dict[str, Any]) -> list[dict[str, Any]]:
    return [audit[m] for m in THREAT_MODELS if m in audit]
