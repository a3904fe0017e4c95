"""Writing the attack suite's results: JSON, a markdown report, TensorBoard text, and the RESULT lines (the
console summary is :mod:`sifl_ray.attacks.report_console`).

What goes out. Figures measured against the plain models, the per-element ε of the accountant printed beside
them (labelled per-element: it is not a guarantee on the vector), descriptions of what was recorded, and the
configuration without its seeds (:func:`sifl_ray.attacks.suite.public_config`: the run seed would give back
the plain models beside a transcript, the key seed the keys). No key material: the keys stay in memory with
the scorer; the audit's use of the keys is stated as its threat model. Every figure names its threat model;
those that use the broadcasts say so (the aggregator of docs/method.md "Parties" sees only the uploads).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from sifl_ray.attacks.registry import AGGREGATOR, AGGREGATOR_BROADCASTS, Figure, figure_specs
from sifl_ray.attacks.suite import SuiteResult

PER_ELEMENT_NOTE = (
    "The per-element ε is the paper's guarantee for ONE coordinate of ONE upload in ONE round; it is printed "
    "beside each figure for comparison and is not a guarantee on the vector, from which the attacks recover "
    "the figures shown."
)


def fmt(x: Any) -> str:
    """A figure as the report and the console write it (``not reached`` for ``None``)."""
    if x is None:
        return "not reached"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 or x == 0 else f"{x:.2e}"
    return str(x)


def _jsonable(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def to_json(result: SuiteResult) -> dict[str, Any]:
    """The whole result as JSON-safe data (non-finite floats as strings)."""
    data = _jsonable(result)
    data["headline"] = _jsonable(result.headline())
    data["headline_with_broadcasts"] = _jsonable(result.broadcast_headline())
    data["per_element_note"] = PER_ELEMENT_NOTE
    for got, a in zip(data.get("audits", []), result.audits, strict=True):
        got["verdict"] = a.verdict
        got["test"]["ceiling"] = _jsonable(a.test.ceiling)
    return data


def result_line(result: SuiteResult) -> str:
    """``RESULT attacks full_rank_round=<r> projection_error=<x> m2_server_corr=<c> audit_eps_lb=<e>
    paper_eps=<e> diff_noise_ratio=<d>`` for the primary design.

    ``full_rank_round``: rounds until the aggregator knows ``col(P1)`` (``none``: never within a key epoch).
    ``projection_error``: the noise-removal attack (b) at the last round from the uploads alone (the method's
    aggregator), the better of orthogonal projection and regression, as a relative error up to the unknown
    map. The telescoped regression needs the broadcasts too; it is in the report and the JSON
    (``headline_with_broadcasts``), not here.
    ``m2_server_corr``: the M2 server's ``|corr(ŵ, w)|`` in round 1 (worst over the R2 noise scales).
    ``audit_eps_lb``: the audit's empirical ε lower bound for the whole upload, keys known.
    ``paper_eps``: the paper's per-element ε of that upload (worst element).
    ``diff_noise_ratio``: RMS of the noise in the elements of same-round differences ``w~_i − w~_k`` over
    its RMS in one upload (uploads only): round-off, so the per-element ε does not hold against the
    aggregator. Last, so that the fields before it keep their positions.
    """
    h = result.headline()

    def g(x: Any, digits: int = 3) -> str:
        if x is None:
            return "none"
        return str(x) if isinstance(x, int) else f"{x:.{digits}g}"

    return (
        f"RESULT attacks full_rank_round={g(h['full_rank_round'])} "
        f"projection_error={g(h['projection_error'])} "
        f"m2_server_corr={g(h['m2_server_corr'], 6)} audit_eps_lb={g(h['audit_eps_lb'])} "
        f"paper_eps={g(h['paper_eps'])} diff_noise_ratio={g(h['diff_noise_ratio'])}"
    )


def audit_result_line(result: SuiteResult) -> str | None:
    """``RESULT audit <arm>_eps=<reported> <arm>_audit_lb=<measured> ...`` for every audited arm (``None``
    when no arm was audited). A DP mechanism's lower bound must stay at or below its reported ε; SIFL's
    per-element ε is not a bound on the whole upload, and the audit shows it."""
    if not result.audits:
        return None
    parts = ["RESULT audit"]
    for a in result.audits:
        parts += [
            f"{a.label}_eps={a.reported_epsilon:.3g}",
            f"{a.label}_audit_lb={a.test.epsilon_lower_bound:.3g}",
        ]
    return " ".join(parts)


def _cell(text: str) -> str:
    """A markdown table cell: the norms' bars would otherwise split the cell."""
    return text.replace("|", "\\|")


def _row(threat: str, attack: str, figure: str, value: Any, eps_paper: float, eps_sound: float) -> str:
    cells = [threat, attack, figure, fmt(value), fmt(eps_paper), fmt(eps_sound)]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def markdown(result: SuiteResult) -> str:
    """The report: one line per (design, attack) with threat model, attack, figure and per-element ε."""
    cfg = result.config
    lines = [
        f"# Attack suite: {cfg['scenario']}",
        "",
        "What an adversary actually recovers from what the arms release, measured on a small model played "
        "through the platform's own parties (server and aggregator actors, the client role, run_round, on "
        "the in-process backend; keys made by the server and aggregator), every channel recorded "
        "(docs/method.md 'Attacks the design must be judged against'). Every figure is scored against the "
        "plain models the clients trained, taken by a simulation-only tap, which no party of a real "
        "deployment holds.",
        "",
        f"- Arms attacked: {arms_attacked(result)}.",
        f"- Model: n = {_task_n(result)} parameters; "
        f"{cfg['clients']['num_clients']} clients, {cfg['train']['rounds']} rounds, "
        f"K = {cfg['train']['local_steps']} local SGD steps (fused client).",
        f"- Key scales: alpha = {cfg['coding']['alpha']:g}, beta = {cfg['coding']['beta']:g}, "
        f"{cfg['coding']['noise']['distribution']} noise of scale {cfg['coding']['noise']['sigma1']:g}; all "
        "coding in float64.",
        f"- Keys: {cfg['keys']}. No key material is written here (the scorer and the audit hold the keys in "
        "memory only), nor the run seed (beside the transcripts it would give back the plain models).",
        f"- Threat models. **{AGGREGATOR}**: the uploads only, as docs/method.md 'Parties' has it (the "
        f"aggregator sees only encoded local models). **{AGGREGATOR_BROADCASTS}**: the uploads and the "
        "server's broadcasts w~^t, which the method's aggregator does not see; every client receives them, "
        "so one colluding client or anyone on that channel has them.",
        f"- {PER_ELEMENT_NOTE}",
        "- Recovered models are scored up to the one unknown linear map A = U^T P1 of the adversary's basis "
        "U "
        "(the scorer computes A from the key; the adversary would get it from n known pairs or one colluding "
        "client): max over the round's uploads of ||A^-1 c_i - w_i|| / ||w_i||.",
        f"- Run time: {result.seconds:.1f} s.",
        "",
    ]
    h, hb = result.headline(), result.broadcast_headline()
    m2_corr = "n/a" if h["m2_server_corr"] is None else f"{h['m2_server_corr']:.6f}"
    if result.primary_result() is not None:
        lines += _headline(result, h, hb, m2_corr)
    if result.designs:
        lines += _designs(result)
    if result.plain:
        lines += _plain(result)
    if result.m2:
        lines += _m2(result)
    if result.audit_whole is not None and result.audit_single is not None:
        lines += _audit(result)
    if result.audits:
        lines += _audits(result)
    lines.append(result_line(result))
    return "\n".join(lines) + "\n"


def _task_n(result: SuiteResult) -> str:
    for got in (*result.designs, *result.plain):
        return str(got.n)
    return "n/a"


def arms_attacked(result: SuiteResult) -> str:
    """Which arms were attacked, and how (one phrase each)."""
    return "; ".join(f"{arm}: {how}" for arm, how in result.arms.items()) or "none"


def _headline(result: SuiteResult, h: dict, hb: dict, m2_corr: str) -> list[str]:
    return [
        f"## Headline (design {result.primary})",
        "",
        f"- {AGGREGATOR}: col(P1) known after {fmt(h['full_rank_round'])} rounds; best noise removal "
        f"from the uploads alone (projection or regression), max relative error "
        f"{fmt(h['projection_error'])} (the RESULT line's projection_error).",
        f"- {AGGREGATOR}, per element: the noise in element j of a same-round difference w~_i - w~_k is "
        f"{fmt(h['diff_noise_ratio'])} times the noise in one upload (RMS over elements and rounds; "
        f"uploads of two different rounds: "
        f"{fmt(result.primary_result().figures['difference_noise_control'].value)}, sqrt(2) expected). "
        f"The per-element ε {fmt(h['paper_eps'])} covers one upload; the aggregator holds every "
        "difference P1 (w_i - w_k) without noise, so against it the per-element ε does not hold "
        "(the RESULT line's diff_noise_ratio).",
        f"- {hb['threat_model']}: noise removal by the telescoped regression, max relative error "
        f"{fmt(hb['telescoped_error'])} (not on the RESULT line).",
        f"- M2 server: |corr(w_hat, w)| {m2_corr} in round 1; DP audit (keys known): "
        f"whole-vector ε ≥ {fmt(h['audit_eps_lb'])}; the paper's per-element ε {fmt(h['paper_eps'])}.",
        "",
    ]


def _designs(result: SuiteResult) -> list[str]:
    specs = figure_specs()
    lines = ["## The attacks", ""]
    lines += [
        f"- **{specs[k].attack}** ({specs[k].threat_model}). {specs[k].explanation}"
        for k in result.designs[0].figures
    ]
    lines.append("")
    for d in result.designs:
        rekey = f", new key every {d.rekey_every} rounds" if d.rekey_every else ", fixed key"
        scales = f"alpha = {d.alpha:g}, beta = {d.beta:g}, noise scale {d.noise_scale:g}"
        lines += [
            f"## Design {d.design} (arm {d.arm}): {d.backend} backend, {d.left_inverse} left inverse{rekey}; "
            f"{scales}",
            "",
            f"Key layout: {d.layout}. Transcript: {d.transcript}. The legitimate decoder's own relative "
            f"round-off on a fresh encoding: {fmt(d.key_holder_decode_error)}.",
            "",
            "| threat model | attack | figure | value | per-element ε (paper) | per-element ε (sound) |",
            "|---|---|---|---|---|---|",
        ]
        for f in d.figures.values():
            lines.append(_row(f.threat_model, f.attack, f.figure, f.value, d.epsilon_paper, d.epsilon_sound))
        lines += ["", "Details:", ""]
        lines += [f"- {f.attack}: {f.note}" for f in d.figures.values() if f.note]
        lines.append("")
    return lines


def _plain(result: SuiteResult) -> list[str]:
    lines = [
        "## Plain and secure-aggregation arms: the aggregator's direct view, the server's view",
        "",
        "A plain arm's upload is the client's model or update (under NbAFL plus the client's own "
        "noise, under DP-FedAvg clipped); under secure aggregation it is masked: a uniform element of "
        "the ring, which the aggregator can only read as numbers. The aggregator's figures read each "
        "upload as what the client trained: the relative error max over clients and rounds of "
        "||upload_i - w_i|| / ||w_i||, and the median |corr(upload_i, w_i)| over the coordinates "
        "(chance: 0.6745/sqrt(n), the median for an upload independent of the model). The server's "
        "figure is the median over rounds of the relative error of what it received against the FedAvg "
        "of what the clients uploaded before masking.",
        "",
        "| arm | what an upload is | aggregator: max relative error | median | median abs. correlation "
        "(chance) | server: relative error of the aggregate | rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in result.plain:
        cells = [
            p.arm,
            p.upload,
            fmt(p.error),
            fmt(p.median_error),
            f"{fmt(p.correlation)} ({fmt(p.correlation_chance)})",
            fmt(p.server_error),
            str(p.rounds),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append("")
    return lines


def _m2(result: SuiteResult) -> list[str]:
    lines = [
        "## M2: the server's view",
        "",
        "| threat model | attack | figure | value | per-element ε (paper) | per-element ε (sound) |",
        "|---|---|---|---|---|---|",
    ]
    for m in result.m2:
        first = min(m.corr_per_round)
        lines.append(
            _row(
                f"server in M2 (honest-but-curious), arm {m.arm}",
                f"(e) smallest right singular vector of P1L W'_a (n = {m.n}, p = {m.p}, R2 scale "
                f"{m.noise2_scale:g})",
                f"|corr(w_hat, w)| in round {first} (later rounds: "
                + ", ".join(f"{v:.6f}" for t, v in sorted(m.corr_per_round.items()) if t != first)
                + ")",
                f"{m.corr_per_round[first]:.6f}",
                math.nan,
                math.nan,
            )
        )
        lines += [
            "",
            "The paper's theorems do not cover this view (the server's P1L W'_a); the per-element columns "
            "are "
            "n/a. The correlation stays at about 1 - 1/n whatever the noise scale.",
            "",
        ]
    return lines


def _audit(result: SuiteResult) -> list[str]:
    cfg = result.config
    primary = result.primary_result()
    return [
        f"## DP audit (design {result.audit_design})",
        "",
        "Threat model: an auditor granted the server key (what the colluding client or the subspace "
        "attacks "
        "deliver). Neighbouring models w0 and w0 + Δ with ||Δ||_2 = Remark 3's sensitivity "
        f"{result.audit_sensitivity:.3g}; threshold fixed in advance; δ = {cfg['audit']['delta']:g}. "
        "Each ε lower bound uses the upper end of a two-sided Clopper–Pearson interval for the false "
        f"positive rate and the lower end of one for the true positive rate, each at "
        f"{cfg['audit']['confidence']:g}: each end fails with probability at most "
        f"{(1 - cfg['audit']['confidence']) / 2:g}, so the bound holds with probability at least "
        f"{cfg['audit']['confidence']:g} (union bound).",
        "",
        "| test | trials per hypothesis | false positives | true positives | empirical ε lower bound | "
        "ceiling (trials / threshold) | per-element ε (paper) | verdict | threshold |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    a.name,
                    str(a.trials),
                    str(a.false_positives),
                    str(a.true_positives),
                    fmt(a.epsilon_lower_bound),
                    ceilings(a),
                    fmt(primary.epsilon_paper),
                    a.verdict(primary.epsilon_paper),
                    a.threshold,
                )
            )
            + " |"
            for a in (result.audit_whole, result.audit_single)
        ),
        "",
        "The whole-vector bound is limited only by the number of trials: the two hypotheses never overlap "
        "(the vector release has no finite ε). The single-coordinate test is what the per-element ε covers; "
        f"{CEILING_NOTE}",
        "",
    ]


CEILING_NOTE = (
    "a lower bound can refute a claim, never confirm it: 'not refuted' says the test could have shown more "
    "than the claim and did not; 'untestable' says the claim is at or above the most the test could show "
    "(its ceiling: the bound of a perfect outcome at its trials and confidence, and for a threshold on a "
    "known distribution the bound of its rates with unlimited trials), so the test says nothing about it."
)


def ceilings(a) -> str:
    """``trials ceiling / threshold ceiling`` of an :class:`~sifl_ray.attacks.audit.AuditTest`."""
    tc = "n/a" if a.threshold_ceiling is None else fmt(a.threshold_ceiling)
    return f"{fmt(a.trials_ceiling)} / {tc}"


def _audits(result: SuiteResult) -> list[str]:
    """(f) on every arm, as Markdown: the threat model and release of each line, its reported ε beside the
    audit's lower bound."""
    lines = [
        "## DP audit of every arm",
        "",
        "Each line audits one release of one arm: neighbouring inputs as the arm's guarantee defines them, "
        "the test fixed in advance, Clopper–Pearson at the configured confidence. A lower bound above the "
        "reported ε refutes it (for a DP mechanism that is a bug; for SIFL's per-element ε read as a bound "
        "on the whole release it is the expected outcome). A one-round audit is compared with the ε of one "
        f"round, never with the whole run's. {CEILING_NOTE[0].upper()}{CEILING_NOTE[1:]}",
        "",
        "| arm | release audited (threat model) | reported ε | audit ε ≥ | ceiling (trials / threshold) | "
        "verdict | test | scope of the reported ε |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in result.audits:
        cells = [
            a.label,
            a.release,
            fmt(a.reported_epsilon),
            fmt(a.test.epsilon_lower_bound),
            ceilings(a.test),
            a.verdict,
            f"{a.test.trials} trials; {a.test.threshold}",
            a.reported_scope,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append("")
    return lines


def _scalar_series(f: Figure) -> list[tuple[int, float]]:
    return [
        (t, float(v)) for t, v in sorted(f.per_round.items()) if v is not None and math.isfinite(float(v))
    ]


def write_tensorboard(result: SuiteResult, logdir: Path, report_md: str) -> None:
    """The report as TensorBoard text (``attack/report``), one text per design, and per-round scalars."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir))
    try:
        writer.add_text("attack/report", report_md)
        writer.add_text("attack/result", result_line(result))
        for d in result.designs:
            table = [
                "| threat model | attack | figure | value | per-element ε (paper) |",
                "|---|---|---|---|---|",
            ]
            table += [
                "| "
                + " | ".join(_cell(c) for c in (f.threat_model, f.attack, f.figure, fmt(f.value)))
                + f" | {fmt(d.epsilon_paper)} |"
                for f in d.figures.values()
            ]
            writer.add_text(f"attack/{d.design}", "\n".join(table))
            for name, f in d.figures.items():
                for t, v in _scalar_series(f):
                    writer.add_scalar(f"attack/{d.design}/{name}", v, t)
        for m in result.m2:
            for t, v in sorted(m.corr_per_round.items()):
                writer.add_scalar(f"attack/m2_server_corr/R2_scale_{m.noise2_scale:g}", v, t)
        for p in result.plain:
            for t, v in sorted(p.per_round.items()):
                writer.add_scalar(f"attack/{p.arm}/direct_view", v, t)
    finally:
        writer.close()


def write_all(result: SuiteResult, out_dir: Path) -> dict[str, Path]:
    """Write ``result.json``, ``report.md`` and TensorBoard files under ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "result.json",
        "markdown": out_dir / "report.md",
        "tensorboard": out_dir / "tb",
    }
    paths["json"].write_text(json.dumps(to_json(result), indent=2, allow_nan=False) + "\n")
    md = markdown(result)
    paths["markdown"].write_text(md)
    write_tensorboard(result, paths["tensorboard"], md)
    return paths
