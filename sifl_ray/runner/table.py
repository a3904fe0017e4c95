"""The run's end-of-run tables as the driver prints them: the arms' figures with the meaning of each kind of
ε, and the in-run audit's (functions of the summary dict only, like :mod:`sifl_ray.runner.summary`)."""

from __future__ import annotations

from typing import Any

from sifl_ray.logging import format_table
from sifl_ray.runner.audit_table import audit_table
from sifl_ray.runner.summary import arm_epsilons


def summary_table(summary: dict[str, Any]) -> str:
    """The end-of-run table with its notes: what the two kinds of ε mean (a SIFL arm's per-element,
    per-round figures; NbAFL's and DP-FedAvg's ε of the whole model, in their own column, so the two are
    never read as one), M2's round 0, and arms that ended at chance accuracy."""
    eps = arm_epsilons(summary)
    rows = [
        {
            "arm": arm,
            "final_accuracy": a["final_accuracy"],
            "delta_vs_fl_pp": a["delta_vs_fl_pp"],
            "max_deviation": a["max_deviation"],
            "epsilon_local": eps[arm]["per_element"],
            "epsilon_global": eps[arm]["global"],
            "epsilon_whole": eps[arm]["whole"],
            "delta": (a["privacy"] or {}).get("delta"),
            # the neighbour relation the arm's ε is stated under (its first words; the rest in summary.json)
            "relation": relation_name((a["privacy"] or {}).get("neighbour_relation")),
            "wall_s": a["wall_s"],
        }
        for arm, a in summary["arms"].items()
    ]
    notes = table_notes(summary, eps)
    table = format_table(rows) + ("\n" + "\n".join(notes) if notes else "")
    audited = audit_table(summary)
    return table if audited is None else f"{table}\n\n{audited}"


def table_notes(summary: dict[str, Any], eps: dict[str, dict[str, float | None]]) -> list[str]:
    """The lines under the table: the ε columns' meaning (for the kinds of ε the run has), M2's round 0,
    and the arms whose final accuracy is a guess's (a scale demo's few rounds, or noise that drowned the
    model)."""
    notes = []
    if any(e["per_element"] is not None for e in eps.values()):
        notes.append(
            "ε per element (SIFL, worst round): what one coordinate of one release in one round tells "
            "about one record; it bounds neither the whole model nor many rounds (upload: what the "
            "aggregator sees of a client; global model: what the clients receive)"
        )
    if any(e["whole"] is not None for e in eps.values()):
        notes.append(
            "ε whole model (NbAFL, DP-FedAvg): the usual (ε, δ) guarantee on everything the arm releases "
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
                "(the global-model column is the M2 rounds' worst)"
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
