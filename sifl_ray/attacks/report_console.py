"""The attack suite's console summary: the arms attacked, one line per key design, the plain arms, M2 and
the audit, in fixed-width columns (the full report is :func:`sifl_ray.attacks.report.markdown`)."""

from __future__ import annotations

from typing import Any

from sifl_ray.attacks.registry import AGGREGATOR, figure_specs
from sifl_ray.attacks.report import ceilings, fmt
from sifl_ray.attacks.suite import SuiteResult


def summary_table(result: SuiteResult) -> str:
    """A compact console summary: the arms attacked, one line per design, then the plain arms, M2 and the
    audit."""
    lines = ["arms attacked:", *(f"  {arm}: {how}" for arm, how in result.arms.items())]
    if result.designs:
        lines += _design_table(result)
    for p in result.plain:
        kind = "secure aggregation" if p.masked else "plain"
        lines.append(
            f"{p.arm} ({kind}; {AGGREGATOR}): each upload read as what the client trained (its model, or its "
            f"update), relative error max {fmt(p.error)}, median {fmt(p.median_error)}, median |corr| "
            f"{fmt(p.correlation)} (chance {fmt(p.correlation_chance)}) over {p.rounds} rounds; the "
            f"server's aggregate vs the clients' FedAvg: {fmt(p.server_error)} (an upload is: {p.upload})"
        )
    for m in result.m2:
        corr = ", ".join(f"round {t}: {v:.6f}" for t, v in sorted(m.corr_per_round.items()))
        lines.append(f"M2 server ({m.arm}), n = {m.n}, R2 scale {m.noise2_scale:g}: |corr(w_hat, w)| {corr}")
    if result.audit_whole is not None and result.audit_single is not None:
        lines.append(
            f"audit ({result.audit_design}, keys known): whole vector eps >= "
            f"{result.audit_whole.epsilon_lower_bound:.3g}, one coordinate eps >= "
            f"{result.audit_single.epsilon_lower_bound:.3g} (ceiling {ceilings(result.audit_single)}: "
            f"{result.audit_single.verdict(result.primary_result().epsilon_paper)}); per-element eps (paper) "
            f"{result.primary_result().epsilon_paper:.3g}"
        )
    if result.audits:
        lines += _audit_table(result)
    return "\n".join(lines)


def _audit_table(result: SuiteResult) -> list[str]:
    """(f) side by side: every arm's reported ε, the audit's lower bound on its release, and the verdict."""
    width = max([18, *(len(a.label) for a in result.audits)])
    head = (
        f"{'arm':{width}s} {'reported eps':>12s} {'audit eps >=':>12s} {'ceiling':>15s}  verdict; what was "
        "audited; its scope"
    )
    lines = [
        "DP audit of every arm (Clopper-Pearson lower bound; the auditor knows the keys; ceiling: the most "
        "the test can show, trials / threshold; a claim at or above it is untestable):",
        head,
    ]
    lines.append("-" * len(head))
    for a in result.audits:
        lines.append(
            f"{a.label:{width}s} {fmt(a.reported_epsilon):>12s} {fmt(a.test.epsilon_lower_bound):>12s} "
            f"{ceilings(a.test):>15s}  {a.verdict}; {a.release}; {a.reported_scope}"
        )
    return lines


def _console_cell(x: Any) -> str:
    """A console table's cell: as the report writes it, but ``never`` for a figure not reached, which
    keeps the columns 10 characters wide."""
    return "never" if x is None else fmt(x)


def _design_table(result: SuiteResult) -> list[str]:
    """One line per design, one column per figure of the registry (its declared column name), then the
    paper's per-element ε; below, what each column measures and against whom."""
    arms = sorted({d.arm for d in result.designs})
    specs = figure_specs()
    names = list(result.designs[0].figures)
    width = max(22, *(len(d.design) for d in result.designs))
    columns = " ".join(f"{specs[k].column:>10s}" for k in names)
    head = f"{'design':{width}s} {columns} {'eps paper':>10s}"
    lines = [f"key designs of {', '.join(arms)}:", head, "-" * len(head)]
    for d in result.designs:
        values = " ".join(f"{_console_cell(d.figures[k].value):>10s}" for k in names)
        lines.append(f"{d.design:{width}s} {values} {fmt(d.epsilon_paper):>10s}")
    lines.append("columns (never: the attack did not get there in the rounds played):")
    lines += [f"  {specs[k].column:10s} {specs[k].attack} [{specs[k].threat_model}]" for k in names]
    return lines
