"""The run's end-of-run tables as the driver prints them: the arms' figures with the meaning of each kind of
ε, and the in-run audit's (functions of the summary dict only, like :mod:`sifl_ray.runner.summary`).

Why a width: the table is read in a terminal, where a row longer than the window wraps and the columns
fall apart. It fits the terminal's width (:data:`DEFAULT_WIDTH` when there is none: a pipe, a log): short
headers explained in the notes below, the notes wrapped, columns that say nothing left out; every figure,
in full, is in ``summary.json``.
"""

from __future__ import annotations

import shutil
import textwrap
from typing import Any

from sifl_ray.runner.summary import arm_epsilons

#: The width when the output is not a terminal (a pipe, a file, a notebook).
DEFAULT_WIDTH = 100

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


def terminal_width() -> int:
    """The width to fit: the terminal's (``COLUMNS`` first, as a shell sets it), or :data:`DEFAULT_WIDTH`."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def summary_table(summary: dict[str, Any], width: int | None = None) -> str:
    """The end-of-run table with its notes, fitted to ``width`` columns (the terminal's by default): what
    the two kinds of ε mean (a SIFL arm's per-element, per-round figures; NbAFL's and DP-FedAvg's ε of the
    whole model, in their own column, so the two are never read as one), M2's round 0, and arms that ended
    at chance level."""
    width = width or terminal_width()
    eps = arm_epsilons(summary)
    rows = [arm_cells(arm, a, eps[arm]) for arm, a in summary["arms"].items()]
    table, shown = fit_table([h for h, _ in COLUMNS], rows, width, optional=OPTIONAL)
    notes = [*column_notes(shown), *table_notes(summary, eps)]
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


def fit_table(
    header: list[str],
    rows: list[list[str]],
    width: int,
    *,
    optional: tuple[str, ...] = (),
    drop_empty: bool = True,
) -> tuple[str, list[str]]:
    """``rows`` under ``header`` in columns, fitted to ``width`` where it can be: columns with nothing but
    ``—`` are left out (``drop_empty``; the first column stays), then the gap between columns narrows from
    two spaces to one, then the ``optional`` columns go, in their order. Returns the text and the headers
    shown."""
    keep = [i for i in range(len(header)) if i == 0 or not drop_empty or any(r[i] != "—" for r in rows)]

    def render(cols: list[int], gap: str) -> list[str]:
        widths = {i: max(len(header[i]), *(len(r[i]) for r in rows)) for i in cols}
        lines = [[header[i].ljust(widths[i]) for i in cols], ["-" * widths[i] for i in cols]]
        lines += [[r[i].ljust(widths[i]) for i in cols] for r in rows]
        return [gap.join(line).rstrip() for line in lines]

    drop = [header.index(h) for h in optional]
    for gap, dropped in [("  ", 0), (" ", 0), *((" ", k + 1) for k in range(len(drop)))]:
        cols = [i for i in keep if i not in drop[:dropped]]
        out = render(cols, gap)
        if max(map(len, out)) <= width:
            break
    return "\n".join(out), [header[i] for i in cols]


def column_notes(shown: list[str]) -> list[str]:
    """The meaning of the short headers shown (the ε columns' in :func:`table_notes`)."""
    said = [f"{h}: {what}" for h, what in COLUMNS if h in shown and what]
    hidden = [h for h in OPTIONAL if h not in shown]
    if hidden:
        said.append(f"{' and '.join(hidden)}: left out to fit the terminal")
    return ["; ".join(said) + "; every figure in full: summary.json"]


def wrap_note(note: str, width: int) -> str:
    """A note wrapped to ``width``, its continuation lines indented under its first."""
    return textwrap.fill(note, width, subsequent_indent="  ", break_on_hyphens=False)


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


def audit_table(summary: dict[str, Any], width: int = DEFAULT_WIDTH) -> str | None:
    """The in-run audit's table (``None`` without canaries): per arm and threat model, the ε the arm claims
    (the accountant's, whole run), the estimate with its interval, the lower bound, the largest bound these
    canaries could give, and the verdict."""
    header = ["arm", "threat model", "claimed ε", "estimate [CI]", "lower bound", "ceiling", "verdict"]
    compared = any("accuracy_without_canaries" in (a.get("audit") or {}) for a in summary["arms"].values())
    if compared:
        header.append("acc ± canaries")
    lines: list[list[str]] = []
    for arm, a in summary["arms"].items():
        audit = a.get("audit")
        if not audit:
            continue
        for model in ("final_model", "all_iterates", "uploads"):
            if model not in audit:
                continue
            row = audit[model]
            est = (
                "—"
                if row.get("estimate") is None
                else f"{row['estimate']:.3g} [{row['estimate_low']:.3g}, {row['estimate_high']:.3g}]"
            )
            lines.append(
                [
                    arm,
                    model.replace("_", " "),
                    "—" if row.get("claimed_epsilon") is None else f"{row['claimed_epsilon']:.3g}",
                    est,
                    f"{row['lower_bound']:.3g}",
                    f"{row['ceiling']:.3g}",
                    row["verdict"],
                    *(
                        [
                            f"{100 * audit['accuracy_with_canaries']:.1f}/"
                            f"{100 * audit['accuracy_without_canaries']:.1f}%"
                        ]
                        if compared
                        else []
                    ),
                ]
            )
    if not lines:
        return None
    table, shown = fit_table(header, lines, width, optional=("acc ± canaries", "ceiling"), drop_empty=False)
    first = next(a["audit"] for a in summary["arms"].values() if a.get("audit"))
    said = [
        f"in-run audit: {first['canaries']} canary clients per arm ({first['inserted']} inserted), "
        f"{first['nulls']} null directions; an estimate is not a bound, a lower bound is (at "
        "audit.confidence); ceiling: the largest lower bound these canaries could give"
    ]
    if "acc ± canaries" in shown:
        said.append("acc ± canaries: final accuracy with the canaries / without them (audit.compare)")
    hidden = [h for h in ("acc ± canaries", "ceiling") if h not in shown]
    if hidden:
        said.append(
            f"{' and '.join(hidden)}: left out to fit the terminal; in summary.json (arms.<arm>.audit)"
        )
    return "\n".join([*(wrap_note(n, width) for n in said), table])


def relation_name(relation: str | None) -> str | None:
    """The short name of a neighbour relation for the table: its words before a colon (``add/remove``,
    ``zero-out``), or the words in their parentheses (``record level``); the whole text is in summary.json."""
    if not relation:
        return None
    head = relation.split(":")[0].strip()
    if "(" in head and ")" in head:
        return head[head.index("(") + 1 : head.index(")")].strip()
    return head
