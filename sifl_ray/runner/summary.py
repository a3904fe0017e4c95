"""What a run reports, as functions of data only: the summary dict, the RESULT line, and the text of the
driver's messages (a round's incidents, the end-of-run warnings); the tables are :mod:`sifl_ray.runner.table`.

Nothing here holds an actor, a backend or a file: :class:`~sifl_ray.runner.Simulation` gathers the
figures and passes them in, and tests can call every function on a hand-made dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from sifl_ray.arms import arm_of
from sifl_ray.clock.report import arm_clock, clock_dropped
from sifl_ray.round import RoundResult

if TYPE_CHECKING:
    from sifl_ray.canvas import Drawing


@dataclass
class RunResult:
    """What a run returns to its caller (the CLI, :func:`sifl_ray.simulate`, tests): the run folder, the
    summary, every arm's per-round history and the RESULT line, and its figures (``None``: none drawn;
    ``drawing.wait()`` gives their paths once written)."""

    run_dir: Path
    summary: dict[str, Any]
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    result_line: str = ""
    drawing: Drawing | None = None


@dataclass(frozen=True)
class RoundIncidents:
    """What went wrong in one round of one arm, as the driver keeps it and says it.

    Attributes:
        entry: the arm's ``dropped`` record of the round (``summary.json``, TensorBoard ``faults``).
        incidents: one line per event for ``summary.json``'s ``faults.incidents``.
        messages: what the driver prints on stderr.
    """

    entry: dict[str, Any]
    incidents: list[dict[str, Any]]
    messages: list[str]


def run_name(cfg: DictConfig) -> str:
    """The run's name: ``output.name``, else the scenario's; it names the run folder and the RESULT tag, so
    that runs of one scenario with different settings can be told apart."""
    return str(cfg.output.name or cfg.scenario)


def record_text(record: dict) -> str:
    """A record as a Markdown list (TensorBoard text: privacy figures, faults, restores)."""
    return "\n".join(f"- **{k}**: {v}" for k, v in record.items())


def flat_hparams(cfg: DictConfig) -> dict[str, Any]:
    """The configuration as TensorBoard hparams (``section.key``: scalar), without the key seed."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}{k}.", v) if isinstance(v, dict) else walk(f"{prefix}{k}", v)
        elif isinstance(node, int | float | str | bool):
            flat[prefix.rstrip(".")] = node

    walk("", OmegaConf.to_container(cfg))
    flat.pop("coding.key_seed", None)
    return flat


def epsilon_metrics(info: dict[str, Any] | None, t: int | None = None) -> dict[str, float]:
    """The round-``t`` ε metrics of an arm without an accountant record (its privacy description's): its
    fixed figures, and ``privacy/epsilon_cumulative`` where the report has the ε after each round
    (``epsilon_per_round``: an accountant's composition over rounds 0..t)."""
    if not info:
        return {}
    out = {}
    for key in ("epsilon_local", "epsilon_broadcast", "epsilon_global"):
        if info.get(key) is not None:
            out[f"privacy/{key}"] = float(info[key])
    per_round = info.get("epsilon_per_round")
    if per_round and t is not None and 0 <= t < len(per_round):
        out["privacy/epsilon_cumulative"] = float(per_round[t])
    return out


def realised_claims(
    privacy: dict[str, dict[str, Any]], history: dict[str, list[dict[str, float]]]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each arm's privacy report with the ε its realised noise gives where that is weaker than the planned
    one (``epsilon`` becomes it, ``epsilon_planned`` keeps the plan), and a warning for each such arm."""
    out, messages = dict(privacy), []
    for arm, info in privacy.items():
        realised = [
            r["privacy/epsilon_realised"] for r in history.get(arm, []) if "privacy/epsilon_realised" in r
        ]
        if not realised:
            continue
        final, planned = realised[-1], info.get("epsilon")
        claim = {**info, "epsilon_realised": final}
        if planned is not None and final > planned:
            claim.update(epsilon=final, epsilon_planned=planned)
            messages.append(
                f"{arm}: fewer noise shares arrived than planned, so the claim is weaker: ε = {final:.4g}, "
                f"not the planned {planned:.4g} (δ = {info.get('delta')}); summary.json reports the realised "
                "one (arms.<arm>.privacy.epsilon, epsilon_planned beside it)"
            )
        out[arm] = claim
    return out, messages


def round_incidents(arm: str, t: int, result: RoundResult) -> RoundIncidents | None:
    """The incidents of round ``t`` of ``arm`` (``None``: nothing went wrong)."""
    if not (result.rejected or result.dropped or result.retried or result.skipped):
        return None
    entry: dict[str, Any] = {"round": t, "rejected": {str(k): v for k, v in result.rejected.items()}}
    if result.dropped:
        entry["dropped"] = result.dropped
    if result.retried:
        entry["retried"] = result.retried
    if result.skipped:
        entry["skipped"] = (result.skip_reason or "no update was accepted") + (
            ": the model is released unchanged, so anyone who sees it can tell that no update was averaged "
            "in (an arm with central noise never skips: it releases the noise on a zero sum)"
        )
    incidents = [
        {"round": t, "arm": arm, "what": f"client {c} upload rejected: {why}", "action": "dropped"}
        for c, why in sorted(result.rejected.items())
    ]
    messages = []
    if result.skipped and not result.skip_reason:
        messages.append(
            f"round {t} {arm}: skipped, no update was accepted: the model is released unchanged, which shows "
            "that nobody's update was averaged in (the arm's guarantee releases nothing in such a round)"
        )
    if result.skip_reason:
        incidents.append({"round": t, "arm": arm, "what": result.skip_reason, "action": "round skipped"})
        messages.append(
            f"round {t} {arm}: skipped, the model is released unchanged (this shows that the round's "
            "clients could not be unmasked, i.e. who took part: public under a zero-out guarantee): "
            f"{result.skip_reason}"
        )
    for d in result.dropped:
        incidents.append(
            {
                "round": t,
                "arm": arm,
                "what": f"worker {d['worker']}: {d['reason']}",
                "action": f"dropped clients {d['clients']}",
            }
        )
        messages.append(
            f"round {t} {arm}: dropped worker {d['worker']} (clients {d['clients']}): {d['reason']}"
        )
    for r in result.retried:
        incidents.append(
            {
                "round": t,
                "arm": arm,
                "what": f"worker {r['worker']}: {r['reason']}",
                "action": f"retried (attempt {r['attempt']})",
            }
        )
    if result.rejected:
        messages.append(
            f"round {t} {arm}: rejected {len(result.rejected)} upload(s): "
            + "; ".join(f"client {c}: {w}" for c, w in sorted(result.rejected.items()))
        )
    return RoundIncidents(entry, incidents, messages)


def summarise(
    cfg: DictConfig,
    *,
    run_dir: Path,
    n: int,
    num_workers: int,
    backend: str,
    history: dict[str, list[dict[str, float]]],
    wall: dict[str, float],
    dropped: dict[str, list[dict]],
    privacy: dict[str, dict[str, Any]],
    precision: dict[str, dict[str, Any]],
    accountant: dict[str, Any] | None,
    injected: list[dict],
    incidents: list[dict],
    journal: str | None,
    restored: list[dict],
    checkpoint_dir: str,
    checkpoint_s: list[float],
    placement: dict[str, Any] | None = None,
    startup: dict[str, float | None] | None = None,
    partition: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``summary.json``: per arm (in ``history``'s order) the final figures, timings and incidents; the
    run's sizes, precision claims, privacy scope, faults, restores and checkpoints.

    Args:
        accountant: the accountant's summary (``None``: it recorded nothing).
        injected: the configured faults, described; ``journal``: the fault journal's path if written.
        checkpoint_dir: where checkpoints go (reported only when ``checkpoint.every`` is set).
        placement: the node of every party (Ray; ``None`` in-process).
        startup: where the run's start went (:meth:`~sifl_ray.runner.Simulation.startup`).
        partition: every client's size and label histogram (:func:`sifl_ray.data.partition.partition_report`).
    """
    fl_final = history["fl"][-1]["test_accuracy"] if "fl" in history else None
    arms = {
        arm: _arm_summary(cfg, arm, rows, fl_final, wall, dropped, privacy, precision, history)
        for arm, rows in history.items()
    }
    estimate = max((p["deviation_estimate"] for p in precision.values()), default=None)
    round_bound = max(
        (p["round_bound"] for p in precision.values() if p.get("round_bound") is not None),
        default=None,
    )
    return {
        "scenario": cfg.scenario,
        "name": run_name(cfg),
        "run_dir": str(run_dir),
        "n": n,
        "n_tilde": n + cfg.coding.n_extra,
        "n_prime": (n + cfg.coding.n_extra) * cfg.coding.p,
        "num_clients": cfg.clients.num_clients,
        "num_workers": num_workers,
        "rounds": cfg.train.rounds,
        "backend": backend,
        "placement": placement,
        "startup": startup,
        "partition": partition,
        "deviation_estimate": estimate,
        "round_bound": round_bound,
        "evaluator": EVALUATOR,
        "privacy_scope": PRIVACY_SCOPE,
        "accountant": accountant,
        "faults": {
            "worker_policy": cfg.faults.worker_policy,
            "straggler_policy": cfg.faults.straggler_policy,
            "deadline_s": cfg.faults.deadline_s,
            "injected": injected,
            "incidents": incidents,
            "journal": journal,
        },
        "restored": restored,
        "checkpoint": {
            "every": cfg.checkpoint.every,
            "dir": checkpoint_dir if cfg.checkpoint.every else None,
            "median_s": float(np.median(checkpoint_s)) if checkpoint_s else None,
        },
        "arms": arms,
    }


#: Who decodes the models the summary's accuracies are measured on.
EVALUATOR = "simulation device holding both decoding keys; no real deployment has it"

#: Where each arm's ε says what it covers.
PRIVACY_SCOPE = (
    "each arm's ε says its scope, neighbour relation and threat model in "
    "arms.<arm>.privacy (scope, neighbour_relation, threat_model): SIFL's are per-element, per-round "
    "guarantees as the paper states them and say nothing about the whole vector or about many rounds; "
    "DP-FedAvg's and NbAFL's cover the whole vector over all rounds (see docs/privacy.md, Threat model)."
)


def _arm_summary(
    cfg: DictConfig,
    arm: str,
    rows: list[dict[str, float]],
    fl_final: float | None,
    wall: dict[str, float],
    dropped: dict[str, list[dict]],
    privacy: dict[str, dict[str, Any]],
    precision: dict[str, dict[str, Any]],
    history: dict[str, list[dict[str, float]]],
) -> dict[str, Any]:
    """One arm's part of ``summary.json``: its final figures, precision claims, privacy report, timings,
    rounds, incidents and clipping."""
    protocol = arm_of(cfg, arm)
    final = rows[-1]["test_accuracy"]
    devs = [r["max_deviation"] for r in rows if "max_deviation" in r]
    # the clock drops each arm's clients by its own message sizes: a deviation between arms that lost other
    # clients measures who took part, not the coding, and is kept apart
    unpaired = bool(devs) and any(
        clock_dropped(h) for h in (rows, history.get(protocol.paired_with or "", []))
    )
    unpaired_devs, devs = (devs, []) if unpaired else ([], devs)
    arm_precision = precision.get(arm, {})
    estimate = arm_precision.get("deviation_estimate")
    out = {
        "final_accuracy": final,
        "final_test_loss": rows[-1]["test_loss"],
        "delta_vs_fl_pp": None if fl_final is None or arm == "fl" else 100 * (final - fl_final),
        "max_deviation": max(devs) if devs else None,
        # an estimate (trajectories can amplify); the rigorous claim is the per-round bound
        "deviation_estimate": estimate,
        "within_estimate": None if not devs or estimate is None else bool(max(devs) <= estimate),
        "round_bound": arm_precision.get("round_bound"),
        "round_bound_confidence": arm_precision.get("round_bound_confidence"),
        # which operation of the round the bound charges most (a place to look when it is large)
        "round_bound_terms": arm_precision.get("round_bound_terms"),
        "privacy": privacy.get(arm, {}),
        "wall_s": wall[arm],
        "timings_median_s": {
            k[5:]: float(np.median([r[k] for r in rows])) for k in rows[0] if k.startswith("time/")
        },
        "object_store_bytes_per_round": float(np.median([r["bytes/object_store"] for r in rows])),
        "rounds": [{k: v for k, v in r.items()} for r in rows],
        "dropped": dropped[arm],
        "clients_dropped": int(sum(r.get("clients/dropped", 0) for r in rows)),
        "clients_rejected": int(sum(r.get("clients/rejected", 0) for r in rows)),
        "clipped": int(sum(r.get("clients/clipped", 0) for r in rows)),
        "clip": protocol.clip(cfg),
        "kind": protocol.kind,
        "clip_key": protocol.clip_key,
        "clips": protocol.clips,
    }
    if any("secagg/quantisation_bound" in r for r in rows):
        out["secure_aggregation"] = secure_aggregation_summary(rows)
    if all("clock/elapsed_s" in r for r in rows):
        out["clock"] = arm_clock(rows, cfg.clock.target_accuracy)
    if unpaired_devs:
        out["max_deviation_unpaired"] = max(unpaired_devs)
        out["unpaired"] = (
            f"the clock dropped clients in {arm} or in {protocol.paired_with}: their models differ by who "
            "took part as well as by the coding, so no deviation is reported as the coding's"
        )
    return out


def secure_aggregation_summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    """A secure arm's protocol over the run: its quantisation error measured (by the simulation-only
    evaluator) against the ring's bound, in the mean update's units, and its costs per round (medians)."""
    measured = [r["secagg/quantisation_error"] for r in rows if "secagg/quantisation_error" in r]
    bounds = [r["secagg/quantisation_bound"] for r in rows if "secagg/quantisation_bound" in r]
    pairs = [
        (r["secagg/quantisation_error"], r["secagg/quantisation_bound"])
        for r in rows
        if "secagg/quantisation_error" in r and "secagg/quantisation_bound" in r
    ]

    def median(key: str) -> float | None:
        got = [r[key] for r in rows if key in r]
        return float(np.median(got)) if got else None

    return {
        "quantisation_error_max": max(measured) if measured else None,
        "quantisation_bound_max": max(bounds) if bounds else None,
        "within_bound": all(e <= b for e, b in pairs) if pairs else None,
        "bytes_per_client_per_round": median("secagg/bytes_per_client"),
        "client_s_per_round": median("secagg/client_s"),
        "server_s_per_round": median("secagg/server_s"),
        "messages_per_round": median("secagg/messages"),
        "clients_recovered": int(sum(r.get("secagg/recovered", 0) for r in rows)),
        "clients_unanswered": int(sum(r.get("secagg/unanswered", 0) for r in rows)),
        "coordinates_clipped": int(sum(r.get("secagg/clipped_coordinates", 0) for r in rows)),
    }


def end_of_run_messages(summary: dict[str, Any], precision: dict[str, dict[str, Any]]) -> list[str]:
    """What the driver says after the last round: a deviation beyond its estimate, clipped client models."""
    messages = []
    for arm, a in summary["arms"].items():
        if a["within_estimate"] is False:
            per_round = precision[arm]["estimate_per_round"]
            messages.append(
                f"{arm}: the deviation from fl ({a['max_deviation']:.2e}) exceeds the additive estimate "
                f"({a['deviation_estimate']:.2e} = {per_round:.2e} per round × {summary['rounds']} "
                "rounds): local training amplified the coding error from round to round, or this CPU "
                "rounded less kindly than the estimate assumes. Neither is a failure of the coding: the "
                "rigorous per-round bound is round_bound in summary.json"
            )
    for arm, a in summary["arms"].items():
        secure = a.get("secure_aggregation") or {}
        if secure.get("within_bound") is False:
            messages.append(
                f"{arm}: the ring's quantisation error ({secure['quantisation_error_max']:.2e}) exceeded its "
                f"bound ({secure['quantisation_bound_max']:.2e}): a bug in the fixed-point codec or the "
                "unmasking; the aggregate of those rounds is not what the clients uploaded"
            )
        if secure.get("coordinates_clipped"):
            messages.append(
                f"{arm}: the fixed-point codec clipped {secure['coordinates_clipped']} coordinates of the "
                "uploads to the ring's range (secagg.clip, or secagg.noise_margin under distributed noise)"
            )
    clipped = [arm for arm, a in summary["arms"].items() if a["clipped"]]
    for arm in clipped:
        a = summary["arms"][arm]
        uploads = int(sum(r["clients/accepted"] for r in a["rounds"]))
        # an arm whose client step clips without naming its C in the configuration says only that
        bound = "C" if a.get("clip") is None else f"C = {a['clip']:g} ({a['clip_key']}; "
        bound += "" if a.get("clip") is None else f"{uploads} uploads accepted)"
        messages.append(f"{arm}: clipped {a['clipped']} client {a.get('clips', 'models to ‖w_i‖')} ≤ {bound}")
    if clipped:  # the caveat once, whatever the number of arms that clipped (dp_compare has 12)
        who, whose = (clipped[0], "its") if len(clipped) == 1 else (f"the {len(clipped)} arms above", "their")
        messages.append(
            f"clipping: the ε figures of {who} hold for clipped uploads only, and the clipping "
            f"shapes {whose} accuracy"
        )
    return messages


def round_line(t: int, total: int, elapsed: float, accuracies: dict[str, float], *, width: int = 110) -> str:
    """The run's progress line after round ``t`` (numbered from 0, as TensorBoard's steps and the
    checkpoints are), at most ``width`` characters: the count of rounds done, the elapsed seconds and the
    test accuracy of as many arms as fit, in the run's order (fl first), then the range of the others.

    Why short: a run's log gets one per round, and 15 arms printed in full made it 300 characters wide;
    every figure of every round is in TensorBoard and summary.json.
    """
    head = f"round {t} ({t + 1}/{total} done) {elapsed:.1f}s |"
    shown = [f"{arm} {100 * acc:.1f}%" for arm, acc in accuracies.items()]
    values = [100 * acc for acc in accuracies.values()]
    for k in range(len(shown), -1, -1):
        rest = values[k:]
        more = f" +{len(rest)} arms {min(rest):.1f}-{max(rest):.1f}%" if rest else ""
        line = " ".join([head, *shown[:k]]) + more
        if len(line) <= width:
            return line
    return line[:width]


def result_line(summary: dict[str, Any]) -> str:
    """The one-line result: ``RESULT <name> <arm>=<acc> ... max_dev_<arm>=<x> ...
    eps_per_element_<arm>=<ε> (SIFL) ... eps_<arm>=<ε> (NbAFL, DP-FedAvg) ... dev_estimate=<e> round_bound=<b>
    run_dir=<p>``.

    ``<name>`` is ``output.name``, or the scenario's where none is set (:func:`run_name`).
    ``dev_estimate`` is the additive estimate of the paired deviation (an estimate: training can amplify);
    ``round_bound`` the rigorous float64 bound on one round's coding error (the worst SIFL arm).
    """
    parts = [f"RESULT {summary.get('name') or summary['scenario']}"]
    parts += [f"{arm}={a['final_accuracy']:.4f}" for arm, a in summary["arms"].items()]
    parts += [
        f"max_dev_{arm}={a['max_deviation']:.3e}"
        for arm, a in summary["arms"].items()
        if a["max_deviation"] is not None
    ]
    # each arm's ε, named for its scope: SIFL's per element and round, the others' for the whole vector
    for arm, e in arm_epsilons(summary).items():
        if e["per_element"] is not None:
            parts.append(f"eps_per_element_{arm}={e['per_element']:.3g}")
        if e["whole"] is not None:
            parts.append(f"eps_{arm}={e['whole']:.3g}")
    for arm, a in summary["arms"].items():  # the in-run audit: estimate and lower bound per threat model
        for model, short in (("final_model", "final"), ("all_iterates", "iter"), ("uploads", "upl")):
            row = (a.get("audit") or {}).get(model)
            if row is None:
                continue
            if row.get("estimate") is not None:
                parts.append(f"est_{short}_{arm}={row['estimate']:.3g}")
            parts.append(f"lb_{short}_{arm}={row['lower_bound']:.3g}")
    for key in ("dev_estimate", "round_bound"):
        value = summary.get("deviation_estimate" if key == "dev_estimate" else key)
        parts.append(f"{key}={value:.3e}" if value is not None else f"{key}=none")
    parts.append(f"run_dir={summary['run_dir']}")
    return " ".join(parts)


def arm_epsilons(summary: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Each arm's ε figures, named for what they are: ``per_element`` (SIFL: the largest per-round figure of
    a client's upload the accountant recorded, M2's round 0 included), ``global`` (SIFL: the largest
    per-round figure of the arm's own global-model release: M1's broadcast, M2's global model; M2's round
    0, an M1 broadcast, is ``global_round0``), ``whole`` (a mechanism that states one ε for the whole
    vector: NbAFL, DP-FedAvg; its scope is in its privacy report). ``None`` where an arm has no such
    figure."""
    recorded = (summary.get("accountant") or {}).get("arms", {})

    def largest(arm: str, release: str) -> float | None:
        row = recorded.get(arm, {}).get(release)
        return None if row is None else float(row["largest_per_round_epsilon"])

    def own_global(arm: str) -> str:
        return "global" if "global" in recorded.get(arm, {}) else "broadcast"

    return {
        arm: {
            "per_element": largest(arm, "local"),
            "global": largest(arm, own_global(arm)),
            "global_round0": largest(arm, "broadcast") if own_global(arm) == "global" else None,
            "whole": None if arm in recorded else (a["privacy"] or {}).get("epsilon"),
        }
        for arm, a in summary["arms"].items()
    }
