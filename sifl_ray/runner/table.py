"""The run's end-of-run tables as the driver prints them: the arms' figures with the meaning of each kind of
ε, and the in-run audit's (functions of the summary dict only, like :mod:`sifl_ray.runner.summary`).

Why a width: the table is read in a terminal, where a row longer than the window wraps and the columns
fall apart. It fits the terminal's width (:data:`DEFAULT_WIDTH` when there is none: a pipe, a log): short
headers explained in the notes below, the notes wrapped, columns that say nothing left out; every figure,
in full, is in ``summary.json``.
"""

from __future__ import annotations

from typing import Any

from sifl_ray.runner.audit_table import audit_table
from sifl_ray.runner.columns import fit_table, terminal_width, wrap_note
from sifl_ray.runner.summary import arm_epsilons

#: The columns of the end-of-run table: ``(header, what it holds)``, in order; ``what`` is said under the
#: table for the columns it shows.
COLUMNS = (
    ("arm", ""),
    ("acc", "final test accuracy"),
    ("Δ fl", "against fl, in percentage points"),
    ("max dev", "max |w_arm − w_fl| over the run"),
    ("ε upload", ""),
    ("ε global", ""),
    ("ε model", ""),
    ("δ", ""),
    ("relation", "the neighbour relation the arm's ε is stated under"),
    ("wall s", "the arm's wall time"),
)

#: Columns a narrow terminal does without, first to last (each said in summary.json).
OPTIONAL = ("wall s", "relation")


def summary_table(summary: dict[str, Any], width: int | None = None) -> str:
    """The end-of-run table with its notes, fitted to ``width`` columns (the terminal's by default): what
    the two kinds of ε mean (a SIFL arm's per-element, per-round figures; NbAFL's and DP-FedAvg's ε of the
    whole model, in their own column, so the two are never read as one), M2's round 0, and arms that ended
    at chance level."""
    width = width or terminal_width()
    eps = arm_epsilons(summary)
    rows = [arm_cells(arm, a, eps[arm]) for arm, a in summary["arms"].items()]
    header = [h for h, _ in COLUMNS]
    table, shown = fit_table(header, rows, width, optional=OPTIONAL)
    empty = {h for i, h in enumerate(header) if all(r[i] == "—" for r in rows)}
    notes = [*column_notes(shown, empty), *table_notes(summary, eps)]
    lines = [table, *(wrap_note(n, width) for n in notes)]
    audited = audit_table(summary, width)
    return "\n".join(lines) if audited is None else "\n".join(lines) + f"\n\n{audited}"


def arm_cells(arm: str, a: dict[str, Any], eps: dict[str, float | None]) -> list[str]:
    """One arm's row, in :data:`COLUMNS`' order (``—``: no such figure)."""

    def fmt(value: float | None, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    privacy = a["privacy"] or {}
    return [
        arm,
        f"{100 * a['final_accuracy']:.2f}%",
        fmt(a.get("delta_vs_fl_pp"), "+.2f"),
        fmt(a.get("max_deviation"), ".2e"),
        fmt(eps["per_element"], ".3g"),
        fmt(eps["global"], ".3g"),
        fmt(eps["whole"], ".3g"),
        fmt(privacy.get("delta"), "g"),
        relation_name(privacy.get("neighbour_relation")) or "—",
        f"{a['wall_s']:.1f}",
    ]


def column_notes(shown: list[str], empty: set[str]) -> list[str]:
    """The meaning of the short headers shown (the ε columns' in :func:`table_notes`), and which columns
    were left out to fit (not those left out for having nothing to say: ``empty``)."""
    said = [f"{h}: {what}" for h, what in COLUMNS if h in shown and what]
    hidden = [h for h in OPTIONAL if h not in shown and h not in empty]
    if hidden:
        said.append(f"{' and '.join(hidden)}: left out to fit the terminal")
    return ["; ".join(said) + "; every figure in full: summary.json"]


def table_notes(summary: dict[str, Any], eps: dict[str, dict[str, float | None]]) -> list[str]:
    """The lines under the table: the ε columns' meaning (for the kinds of ε the run has), M2's round 0,
    and the arms whose final accuracy is a guess's (a scale demo's few rounds, or noise that drowned the
    model)."""
    notes = []
    if any(e["per_element"] is not None for e in eps.values()):
        notes.append(
            "ε upload, ε global (SIFL, per element, worst round): what one coordinate of one release in one "
            "round tells about one record; it bounds neither the whole model nor many rounds (upload: what "
            "the aggregator sees of a client; global: the global model the clients receive)"
        )
    if any(e["whole"] is not None for e in eps.values()):
        notes.append(
            "ε model (NbAFL, DP-FedAvg): the usual (ε, δ) guarantee on everything the arm releases "
            "about a client, all coordinates together, over the rounds its scope says "
            "(arms.<arm>.privacy.scope in summary.json)"
        )
    derived = [arm for arm, a in summary["arms"].items() if (a.get("privacy") or {}).get("secrets")]
    if derived:
        notes.append(
            f"coding.key_seed is set: every secret of {', '.join(derived)} (the sample, the noise, the keys, "
            "the canaries) derives from it, and config.yaml holds it: against whoever reads config.yaml none "
            "of their ε holds (a reproducible simulation, never a deployment)"
        )
    for arm, e in eps.items():
        if e["global_round0"] is not None:
            notes.append(
                f"{arm}: round 0 is an M1 round; its broadcast's ε per element is {e['global_round0']:.3g} "
                "(ε global is the M2 rounds' worst)"
            )
    chance = summary.get("chance_accuracy")
    guessing = [a for a, row in summary["arms"].items() if chance and row["final_accuracy"] <= 1.5 * chance]
    if guessing and len(guessing) == len(summary["arms"]):
        notes.append(
            f"every arm ended at chance level ({100 * chance:.0f} % = a guess): expected in a scale demo "
            "(scale_1000: a few rounds at a small learning rate, to measure the platform at 1000 clients, "
            "not accuracy); for learning curves run quickstart or a paper_* scenario"
        )
    elif guessing:
        notes.append(
            f"{', '.join(guessing)}: final accuracy at chance level ({100 * chance:.0f} % = a guess): the "
            "noise, the clipping or the learning rate drowned the training"
        )
    return notes


def relation_name(relation: str | None) -> str | None:
    """The short name of a neighbour relation for the table: its words before a colon (``add/remove``,
    ``zero-out``), or the words in their parentheses (``record level``); the whole text is in summary.json."""
    if not relation:
        return None
    head = relation.split(":")[0].strip()
    if "(" in head and ")" in head:
        return head[head.index("(") + 1 : head.index(")")].strip()
    return head
