"""The run's figures (PNG): accuracy per round and against the simulated clock, final accuracy against ε,
the in-run audit.

Up to fifteen arms and more must stay readable: one colour map per mechanism family, the one its arms
declare (:attr:`~sifl_ray.arms.Arm.colormap`: the SIFL modes share one; an arm that declares none gets a
spare map of its own), one shade per arm of a family in the order of its ε (light: strong privacy), line
style and marker cycling within the family so that no two arms share a (colour, style); the legend outside
the axes; integer rounds; curves that coincide said in the caption, since one hides the other. Per-element ε
(SIFL) and whole-model ε (NbAFL, DP-FedAvg) are different figures and get different panels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sifl_ray import canvas
from sifl_ray.arms import ARMS

_SPARE_COLORMAPS = ("Reds", "BuGn", "Oranges", "GnBu", "YlGn", "PuBu")
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P")
#: Curves whose accuracies differ by at most this much (percentage points) every round are said to coincide.
COINCIDE_PP = 0.1


@dataclass(frozen=True)
class ArmStyle:
    """How one arm is drawn: its family's colour in the arm's shade, a line style and a marker."""

    color: tuple[float, float, float, float]
    linestyle: str
    marker: str


def family(kind: str) -> str | None:
    """The colour map of arm kind ``kind``'s family, as its arm declares it (``None``: it declares none, or
    it is not registered in this process)."""
    arm = ARMS.get(kind)
    return None if arm is None else arm.colormap


def arm_styles(arms: dict[str, tuple[str | None, str, float | None]]) -> dict[str, ArmStyle]:
    """A distinct (colour, line style, marker) per arm.

    Args:
        arms: arm → (its family's colour map, ``None`` for a spare one; its kind; its ε or ``None`` for
            none). The arms of one colour map are a family, and so are the arms of one kind without one; the
            arms of a family are shaded in the order of their ε, light to dark (no ε: darkest), and take the
            line styles and markers in turn.
    """
    from matplotlib import colormaps

    families: dict[str, list[str]] = {}
    declared: dict[str, str | None] = {}
    for arm, (cmap_name, kind, _) in arms.items():
        fam = cmap_name or kind
        families.setdefault(fam, []).append(arm)
        declared[fam] = cmap_name
    taken = {name for name in declared.values() if name}
    spares = [name for name in _SPARE_COLORMAPS if name not in taken]
    spare = iter(spares * (1 + len(families) // max(1, len(spares))))
    styles = {}
    for fam, members in families.items():
        cmap = colormaps[declared[fam] or next(spare)]
        eps = {a: arms[a][2] for a in members}
        members = sorted(members, key=lambda a: (eps[a] is None, eps[a] or 0.0, a))
        k = len(members)
        shades = [0.7] if k == 1 else [0.4 + 0.55 * i / (k - 1) for i in range(k)]
        for i, (arm, shade) in enumerate(zip(members, shades, strict=True)):
            color = tuple(float(c) for c in cmap(shade))
            styles[arm] = ArmStyle(color, _LINESTYLES[i % len(_LINESTYLES)], _MARKERS[i % len(_MARKERS)])
    return {arm: styles[arm] for arm in arms}


def summary_styles(
    summary: dict[str, Any], epsilons: dict[str, dict[str, float | None]]
) -> dict[str, ArmStyle]:
    """:func:`arm_styles` for a run's arms (``epsilons``: :func:`~sifl_ray.runner.summary.arm_epsilons`)."""
    arms = {}
    for arm, a in summary["arms"].items():
        e = epsilons.get(arm, {})
        eps = e.get("whole") if e.get("whole") is not None else e.get("per_element")
        kind = str(a.get("kind", arm))
        arms[arm] = (family(kind), kind, eps)
    return arm_styles(arms)


def coinciding(curves: dict[str, list[float]], tolerance: float = COINCIDE_PP) -> list[list[str]]:
    """Groups of curves (in ``curves``' order) that stay within ``tolerance`` of one another at every point
    (linked pairwise: a group is a connected set); only groups of two or more."""
    names = list(curves)
    group = {name: i for i, name in enumerate(names)}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ya, yb = curves[a], curves[b]
            if len(ya) == len(yb) and all(abs(x - y) <= tolerance for x, y in zip(ya, yb, strict=True)):
                old, new = group[b], group[a]
                for name in names:
                    if group[name] == old:
                        group[name] = new
    out: dict[int, list[str]] = {}
    for name in names:
        out.setdefault(group[name], []).append(name)
    return [members for members in out.values() if len(members) > 1]


def coincide_caption(groups: list[list[str]], what: str) -> str | None:
    """``"fl and secagg coincide (…)"`` for each group; ``None`` when no curves coincide."""
    if not groups:
        return None
    said = [(", ".join(g[:-1]) + " and " + g[-1]) + " coincide" for g in groups]
    return "; ".join(said) + f" ({what} within {COINCIDE_PP:g} pp: the lines lie on one another)"


def _caption(fig: Any, caption: str | None) -> None:
    """The caption under the axes (``fig.texts``: tests read it there)."""
    if caption:
        fig.text(0.01, -0.01, caption, ha="left", va="top", fontsize=9, wrap=True)


def _legend_outside(ax: Any, handles: list[Any] | None = None, labels: list[str] | None = None) -> None:
    """The legend to the right of ``ax``, outside it: with fifteen arms inside it would hide curves."""
    count = len(labels) if labels is not None else len(ax.get_legend_handles_labels()[1])
    ax.legend(
        *(() if handles is None else (handles, labels)),
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        ncol=1 if count <= 20 else 2,
        frameon=False,
    )


def plot_accuracy(
    run_dir: Path, history: dict[str, list[dict[str, float]]], styles: dict[str, ArmStyle], title: str
) -> Path:
    """``accuracy.png`` (:func:`accuracy_figure`)."""
    return canvas.save(accuracy_figure(history, styles, title), Path(run_dir) / "accuracy.png")


def accuracy_figure(
    history: dict[str, list[dict[str, float]]], styles: dict[str, ArmStyle], title: str
) -> Any:
    """Test accuracy per round (rounds from 0, as TensorBoard's steps), every arm in its
    :class:`ArmStyle`, the legend outside the axes, coinciding curves said under them."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = canvas.subplots((8, 4.8))
    curves = {arm: [100 * r["test_accuracy"] for r in rows] for arm, rows in history.items()}
    for arm, rows in history.items():
        style = styles[arm]
        ax.plot(
            [r["round"] for r in rows],
            curves[arm],
            linestyle=style.linestyle,
            marker=style.marker,
            markersize=3.5,
            color=style.color,
            label=arm,
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    _caption(fig, coincide_caption(coinciding(curves), "test accuracy of every round"))
    return fig


def plot_accuracy_vs_time(
    run_dir: Path,
    history: dict[str, list[dict[str, float]]],
    styles: dict[str, ArmStyle],
    title: str,
    target: float | None = None,
) -> Path:
    """``accuracy_vs_time.png`` (:func:`accuracy_vs_time_figure`)."""
    fig = accuracy_vs_time_figure(history, styles, title, target)
    return canvas.save(fig, Path(run_dir) / "accuracy_vs_time.png")


def accuracy_vs_time_figure(
    history: dict[str, list[dict[str, float]]],
    styles: dict[str, ArmStyle],
    title: str,
    target: float | None = None,
    ax: Any = None,
) -> Any:
    """Test accuracy against the simulated clock (``clock/elapsed_s``: each point a round's end), every arm
    in its :class:`ArmStyle`; ``target`` (an accuracy) drawn as a line, where each arm crosses it marked.
    Minutes on the axis once the longest run passes ten. Drawn into ``ax`` when given (a study's panel);
    returns the figure."""
    fig = None
    if ax is None:
        fig, ax = canvas.subplots((8, 4.8))
    longest = max((r["clock/elapsed_s"] for rows in history.values() for r in rows), default=0.0)
    scale, unit = (60.0, "min") if longest > 600 else (1.0, "s")
    for arm, rows in history.items():
        style = styles[arm]
        x = [r["clock/elapsed_s"] / scale for r in rows]
        y = [100 * r["test_accuracy"] for r in rows]
        ax.plot(
            x, y, linestyle=style.linestyle, marker=style.marker, markersize=3, color=style.color, label=arm
        )
        crossed = next((xi for xi, yi in zip(x, y, strict=True) if yi >= 100 * (target or 2.0)), None)
        if crossed is not None:
            ax.axvline(crossed, color=style.color, linewidth=0.8, alpha=0.6)
    if target is not None:
        ax.axhline(100 * target, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlim(left=0)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if fig is not None:
        _legend_outside(ax)
        goal = (
            ""
            if target is None
            else f"; dotted: the target {100 * target:g} %, a vertical line where an arm reaches it"
        )
        _caption(fig, f"each point is the end of a round on the simulated clock (docs/clock.md){goal}")
    return fig if fig is not None else ax.figure


def accuracy_vs_time_panels(
    panels: dict[str, tuple[dict[str, list[dict[str, float]]], dict[str, ArmStyle], float | None]], title: str
) -> Any:
    """One :func:`accuracy_vs_time_figure` panel per condition (name → the run's history, its styles and
    its target accuracy), on one accuracy axis, the legend once (a study of several runs)."""
    count = len(panels)
    fig, axes = canvas.subplots((6.2 * count + 1.5, 4.8), 1, count, sharey=True, squeeze=False)
    for ax, (name, (history, styles, target)) in zip(axes[0], panels.items(), strict=True):
        accuracy_vs_time_figure(history, styles, name, target, ax=ax)
    _legend_outside(axes[0][-1])
    fig.suptitle(title)
    return fig


def save_figure(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` (its format by the suffix, PNG by default) with what lies outside its axes,
    making the folder if need be."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return canvas.save(fig, Path(path))


def plot_accuracy_vs_epsilon(
    run_dir: Path,
    summary: dict[str, Any],
    epsilons: dict[str, dict[str, float | None]],
    styles: dict[str, ArmStyle],
    title: str,
) -> Path | None:
    """``accuracy_vs_epsilon.png`` (:func:`accuracy_vs_epsilon_figure`; ``None``: no arm has an ε)."""
    fig = accuracy_vs_epsilon_figure(summary, epsilons, styles, title)
    return None if fig is None else canvas.save(fig, Path(run_dir) / "accuracy_vs_epsilon.png")


def accuracy_vs_epsilon_figure(
    summary: dict[str, Any],
    epsilons: dict[str, dict[str, float | None]],
    styles: dict[str, ArmStyle],
    title: str,
) -> Any:
    """Final accuracy against ε (log axis), one marker per arm, one line per kind swept over ε. Two
    panels, never one axis: the ε of the whole model (NbAFL, DP-FedAvg: the usual
    (ε, δ)-DP of everything released about a client, over the rounds its scope says) and SIFL's per-element
    ε (one coordinate of one release, worst round). Arms without ε (fl, secagg) are horizontal lines
    (ε = ∞) on both. ``None`` when no arm has an ε."""
    arms = summary["arms"]
    panels = {
        "whole": "ε of the whole model (NbAFL, DP-FedAvg: all coordinates, all rounds)",
        "per_element": "ε per element (SIFL: one coordinate, one release, worst round)",
    }
    points: dict[str, dict[str, list[tuple[float, float, str]]]] = {p: {} for p in panels}
    for arm, e in epsilons.items():
        scope = "whole" if e["whole"] is not None else "per_element"
        eps = e[scope]
        if eps is not None and eps > 0:
            kind = str(arms[arm].get("kind", arm))  # a kind's arms are one mechanism swept over ε
            points[scope].setdefault(kind, []).append((float(eps), 100 * arms[arm]["final_accuracy"], arm))
    drawn = [p for p in panels if points[p]]
    if not drawn:
        return None
    no_eps = [a for a, e in epsilons.items() if all(v is None for v in e.values())]
    fig, axes = canvas.subplots((5.5 * len(drawn) + 1, 4.6), 1, len(drawn), sharey=True, squeeze=False)
    deltas = sorted(
        {float(d) for a in arms.values() if (d := (a.get("privacy") or {}).get("delta")) is not None}
    )
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes[0], drawn, strict=True):
        for pts in points[panel].values():
            pts.sort()
            if len(pts) > 1:  # the kind's darkest shade joins its arms
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=styles[pts[-1][2]].color, lw=1)
            for eps, accuracy, arm in pts:
                s = styles[arm]
                (handles[arm],) = ax.plot(
                    [eps],
                    [accuracy],
                    s.marker,
                    color=s.color,
                    markeredgecolor="black",
                    markersize=7,
                    label=arm,
                )
        for i, arm in enumerate(no_eps):  # one dash each: lines at one accuracy stay apart
            accuracy = 100 * arms[arm]["final_accuracy"]
            dash = _LINESTYLES[i % len(_LINESTYLES)]
            handles[f"{arm} (ε = ∞)"] = ax.axhline(accuracy, linestyle=dash, color=styles[arm].color, lw=1.5)
        ax.set_xscale("log")
        _decade_limits(ax, [p[0] for pts in points[panel].values() for p in pts])
        ax.set_xlabel(panels[panel], fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("final test accuracy (%)")
    _legend_outside(axes[0][-1], list(handles.values()), list(handles))
    fig.suptitle(title + (f" (δ = {', '.join(f'{d:g}' for d in deltas)})" if deltas else ""))
    flat = {arm: [100 * arms[arm]["final_accuracy"]] for arm in no_eps}
    caption = coincide_caption(coinciding(flat), "final test accuracy")
    if len(drawn) == 2:
        note = "The two panels' ε are different figures: compare arms within a panel, never across."
        caption = note if caption is None else f"{caption}. {note}"
    fig.tight_layout()
    _caption(fig, caption)
    return fig


SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_ten(value: float, _position: object = None) -> str:
    r"""A log axis's tick label as plain text: ``10⁻⁴``, ``1``, ``10¹``; a value between decades as ``%g``;
    nothing for a value ≤ 0 (none stands on a log axis). Why: matplotlib's own labels are TeX
    (``$\mathdefault{10^{-4}}$``), and the first one a process draws loads the TeX parser and its fonts,
    0.1 s of the run's end (0.08–0.14 s against 0.16–0.25 s for a one-axis figure, 2026-11-29); the same
    label in Unicode superscripts reads the same and costs nothing."""
    if not value > 0 or not math.isfinite(value):
        return ""
    exponent = round(math.log10(value))
    if not math.isclose(value, 10.0**exponent, rel_tol=1e-9):
        return f"{value:g}"
    return "1" if exponent == 0 else "10" + str(exponent).translate(SUPERSCRIPT)


def _powers_of_ten(axis: Any) -> None:
    """``axis`` (a log axis) labelled at its decades in plain text (:func:`power_of_ten`), its minor ticks
    unlabelled."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(power_of_ten))
    axis.set_minor_formatter(NullFormatter())


def _decade_limits(ax: Any, values: list[float]) -> None:
    """A log axis from the decade below the smallest value to the decade above the largest, labelled at the
    decades only. Why: values less than a decade apart (the quickstart's two SIFL ε, 4.6e-4 and 5.9e-4)
    make matplotlib label its minor ticks, whose long labels then overlap."""
    from matplotlib.ticker import LogLocator

    low = math.floor(math.log10(min(values)))
    high = max(math.ceil(math.log10(max(values))), low + 1)
    ax.set_xlim(10.0**low / 1.5, 10.0**high * 1.5)
    ax.xaxis.set_major_locator(LogLocator(base=10.0))
    _powers_of_ten(ax.xaxis)


def _audit_point(ax: Any, x: float, row: dict[str, Any], lo: float, top: float, color: Any, arm: str) -> None:
    """One arm's estimate (with its interval) and lower bound at claim ``x``, inside ``[lo, top]``: an
    infinite estimate (the canaries told apart exactly, as the aggregator reads them in the clear) is an
    upward triangle at the top (the panel says "∞" once)."""
    if row.get("estimate") is not None:
        if not math.isfinite(row["estimate"]):
            ax.plot([x], [top / 1.5], "^", color=color, markersize=8, label=arm)
        else:  # the interval as a segment: a bootstrap's interval can lie above its estimate
            low, high = (min(max(row[k], lo), top / 1.5) for k in ("estimate_low", "estimate_high"))
            ax.vlines(x, low, high, color=color, linewidth=1.2)
            ax.plot([x], [max(row["estimate"], lo)], "o", color=color, label=arm)
    ax.plot([x], [min(max(row["lower_bound"], lo), top / 1.5)], "v", color=color, markersize=8)


def plot_audit(run_dir: Path, summary: dict[str, Any], title: str) -> Path | None:
    """``audit.png``: each audited arm's ε estimate (with its interval) and lower bound against the ε it
    claims (the accountant's, whole run), log axes, one marker per arm, the diagonal drawn (a lower bound
    above it refutes the claim; an estimate far below it says the accounting is loose for this run, or the
    canaries weak). Arms that claim no finite ε stand at the right edge, marked "no claim". One panel per
    threat model. ``None`` when no arm was audited."""
    import matplotlib

    audited = {arm: a["audit"] for arm, a in summary["arms"].items() if a.get("audit")}
    if not audited:
        return None
    claims = [
        row["claimed_epsilon"]
        for a in audited.values()
        for row in a.values()
        if isinstance(row, dict) and row.get("claimed_epsilon")
    ]
    lo = min([*claims, 0.5]) / 2
    edge = max([*claims, 2.0]) * 4  # where the arms without a claim stand
    models = [m for m in ("final_model", "all_iterates", "uploads") if any(m in a for a in audited.values())]
    fig, axes = canvas.subplots((5.5 * len(models), 4.6), 1, len(models), sharey=True, squeeze=False)
    axes = axes[0]
    colors = matplotlib.colormaps["tab20"].colors
    highs = [
        value
        for a in audited.values()
        for row in a.values()
        if isinstance(row, dict) and "lower_bound" in row
        for value in (row.get("estimate_high") or 0.0, row["lower_bound"])
        if math.isfinite(value)  # an infinite estimate (canaries read exactly) is drawn at the top
    ]
    top = max([*highs, edge]) * 2  # every panel shares this axis: the largest figure of any stays on it
    for ax, model in zip(axes, models, strict=True):
        for i, (arm, a) in enumerate(audited.items()):
            if model not in a:
                continue
            row, color = a[model], colors[i % len(colors)]
            x = row.get("claimed_epsilon") or edge
            x *= 1 + 0.04 * (i % 5 - 2)  # arms with the same claim side by side
            _audit_point(ax, x, row, lo, top, color, arm)
        if any(not math.isfinite(a[model].get("estimate") or 0.0) for a in audited.values() if model in a):
            ax.text(lo * 1.3, top / 1.5, "▲ at the top: estimate ∞", va="center", fontsize=8, color="0.35")
        ax.plot([lo, edge / 1.6], [lo, edge / 1.6], "k--", linewidth=1, label="ε measured = ε claimed")
        ceiling = next(a[model]["ceiling"] for a in audited.values() if model in a)
        ax.axhline(ceiling, color="gray", linestyle=":", label=f"lower bound's ceiling ({ceiling:.2g})")
        ax.axvspan(edge / 1.6, edge * 1.5, color="0.93", zorder=0)
        ax.text(edge, lo * 1.15, "no\nclaim", ha="center", va="bottom", fontsize=8, color="0.35")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _powers_of_ten(ax.xaxis)
        _powers_of_ten(ax.yaxis)
        ax.set_xlim(lo, edge * 1.5)
        ax.set_ylim(lo, top)
        ax.set_title(f"{model.replace('_', ' ')}: ● estimate (interval)  ▼ lower bound", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("ε measured in this run")
    fig.supxlabel("ε the arm claims (its accountant, whole run)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    path = Path(run_dir) / "audit.png"
    return canvas.save(fig, path, bbox_inches=None)  # tight_layout has placed the legend already
