"""Run outputs: TensorBoard event files, ``summary.json``, the accuracy plot, the final table.

One TensorBoard writer per arm (``<run_dir>/tb/<arm>/``) with the *same* tag names for every arm, so that
TensorBoard overlays the arms on one chart per metric; the resolved configuration goes in as text and the
scalar hyperparameters as hparams. Nothing written here may contain key material: callers pass metrics.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _finite(x: Any) -> Any:
    """JSON has no NaN or inf: NaN becomes null (e.g. the train loss of a round that accepted no update),
    ±inf the strings "inf"/"-inf". Applied through the whole tree: ``json.dumps`` writes floats itself and
    never hands them to a ``default`` hook."""
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


class RunLogger:
    """Writes one run's outputs under ``run_dir``."""

    def __init__(
        self,
        run_dir: Path,
        arms: list[str],
        *,
        config_yaml: str,
        hparams: dict[str, Any],
        tensorboard: bool = True,
        purge_step: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.arms = arms
        self.writers: dict[str, Any] = {}
        self.hparams = {k: v for k, v in hparams.items() if isinstance(v, int | float | str | bool)}
        self.final: dict[str, float] = {}  # latest test accuracy per arm: the hparams metrics at close()
        self.config_yaml = config_yaml
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            for arm in arms:
                self.writers[arm] = SummaryWriter(str(self.run_dir / "tb" / arm), purge_step=purge_step)
        atomic_write_text(self.run_dir / "config.yaml", config_yaml)

    def log_round(self, arm: str, t: int, metrics: dict[str, float]) -> None:
        writer = self.writers.get(arm)
        if writer is None:
            return
        if "test_accuracy" in metrics:
            self.final[arm] = float(metrics["test_accuracy"])
        for tag, value in metrics.items():
            if isinstance(value, int | float) and math.isfinite(float(value)):
                writer.add_scalar(tag, float(value), t)
        writer.flush()

    def chart_audit(self) -> None:
        """TensorBoard's Custom Scalars tab: one chart per threat model with the accountant's ε and the
        in-run audit's estimate and lower bound, so that a reader sees the claim and what the run measured
        on the same axes (every arm's curves, as runs)."""
        writer = next(iter(self.writers.values()), None)
        if writer is None:
            return
        tags = {
            # regular expressions: anchored, or the estimate's interval ends (``..._low``) would match too
            model: [
                "^privacy/epsilon_cumulative$",
                f"^audit/{model}/epsilon_estimate$",
                f"^audit/{model}/epsilon_lower_bound$",
            ]
            for model in ("final_model", "all_iterates", "uploads")
        }
        writer.add_custom_scalars(
            {
                "privacy: the accountant's ε and the in-run audit": {
                    f"{model.replace('_', ' ')}: claimed ε, estimate, lower bound": ["Multiline", names]
                    for model, names in tags.items()
                }
            }
        )
        writer.flush()

    def log_text(self, arm: str, tag: str, text: str, t: int = 0) -> None:
        writer = self.writers.get(arm)
        if writer is not None:
            writer.add_text(tag, text, t)
            writer.flush()

    def close(self) -> None:
        """Flush the arms' writers and record the run (configuration text, hparams with final accuracies)."""
        for writer in self.writers.values():
            writer.close()
        if self.writers and self.final:
            from torch.utils.tensorboard import SummaryWriter

            top = SummaryWriter(str(self.run_dir / "tb" / "_run"))
            top.add_text("config", "```yaml\n" + self.config_yaml + "\n```", 0)
            metrics = {f"final_accuracy/{arm}": acc for arm, acc in self.final.items()}
            top.add_hparams(self.hparams, metrics, run_name=".")
            top.close()

    def write_summary(self, summary: dict[str, Any]) -> Path:
        return write_summary(self.run_dir, summary)

    def plot(self, history: dict[str, list[dict[str, float]]], title: str) -> Path | None:
        """Accuracy vs round for every arm (PNG)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        styles = ["-", "--", ":", "-."]
        for i, (arm, rows) in enumerate(history.items()):
            xs = [r["round"] + 1 for r in rows]
            ys = [100 * r["test_accuracy"] for r in rows]
            ax.plot(xs, ys, styles[i % len(styles)], marker="o", markersize=3, label=arm)
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        path = self.run_dir / "accuracy.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def plot_accuracy_vs_epsilon(
    run_dir: Path, summary: dict[str, Any], epsilons: dict[str, dict[str, float | None]], title: str
) -> Path | None:
    """``accuracy_vs_epsilon.png``: final accuracy against ε (log axis), one marker per arm, one line per
    kind swept over ε (NbAFL, DP-FedAvg: ε of the whole vector over the run); SIFL arms at their per-element
    ε (worst round), drawn hollow because that ε is a different, per-element figure; arms without ε (fl) as
    a horizontal line (ε = ∞). ``None`` when no arm has an ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = summary["arms"]
    points: dict[str, list[tuple[float, float, str]]] = {}
    for arm, e in epsilons.items():
        eps = e["whole"] if e["whole"] is not None else e["per_element"]
        if eps is not None and eps > 0:
            points.setdefault(arms[arm].get("kind", arm), []).append(
                (float(eps), 100 * arms[arm]["final_accuracy"], "whole" if e["whole"] is not None else "elem")
            )
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = "osD^v<>p*h"
    for i, (kind, pts) in enumerate(sorted(points.items())):
        pts.sort()
        hollow = all(p[2] == "elem" for p in pts)
        label = f"{kind} (per-element ε, worst round)" if hollow else f"{kind} (ε of the whole run)"
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            "-" if len(pts) > 1 else "",
            marker=markers[i % len(markers)],
            markerfacecolor="none" if hollow else None,
            label=label,
        )
    styles = ["--", ":", "-."]
    no_eps = [a for a, e in epsilons.items() if all(v is None for v in e.values())]
    for i, arm in enumerate(no_eps):
        accuracy = 100 * arms[arm]["final_accuracy"]
        ax.axhline(accuracy, linestyle=styles[i % 3], color="gray", label=f"{arm} (ε = ∞)")
    ax.set_xscale("log")
    ax.set_xlabel("ε (δ in summary.json; scope per arm: see the legend)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    path = Path(run_dir) / "accuracy_vs_epsilon.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """``summary.json``, written atomically (non-finite numbers as strings: strict JSON)."""
    path = Path(run_dir) / "summary.json"
    atomic_write_text(path, json.dumps(_finite(summary), indent=2, allow_nan=False))
    return path


def plot_audit(run_dir: Path, summary: dict[str, Any], title: str) -> Path | None:
    """``audit.png``: each audited arm's ε estimate (with its interval) and lower bound against the ε it
    claims (the accountant's, whole run), log axes, one marker per arm, the diagonal drawn (a lower bound
    above it refutes the claim; an estimate far below it says the accounting is loose for this run, or the
    canaries weak). Arms that claim no finite ε stand at the right edge, marked "no claim". One panel per
    threat model. ``None`` when no arm was audited."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.6), sharey=True, squeeze=False)
    axes = axes[0]
    colors = plt.get_cmap("tab20").colors
    highs = [
        max(row.get("estimate_high") or 0.0, row["lower_bound"])
        for a in audited.values()
        for row in a.values()
        if isinstance(row, dict) and "lower_bound" in row
    ]
    top = max([*highs, edge]) * 2  # every panel shares this axis: the largest figure of any stays on it
    for ax, model in zip(axes, models, strict=True):
        for i, (arm, a) in enumerate(audited.items()):
            if model not in a:
                continue
            row, color = a[model], colors[i % len(colors)]
            x = row.get("claimed_epsilon") or edge
            x *= 1 + 0.04 * (i % 5 - 2)  # arms with the same claim side by side
            if row.get("estimate") is not None:
                est = max(row["estimate"], lo)
                err = [[est - max(row["estimate_low"], lo)], [max(row["estimate_high"], lo) - est]]
                ax.errorbar([x], [est], yerr=err, fmt="o", color=color, capsize=3, label=f"{arm}")
            ax.plot([x], [max(row["lower_bound"], lo)], "v", color=color, markersize=8)
        ax.plot([lo, edge / 1.6], [lo, edge / 1.6], "k--", linewidth=1, label="ε measured = ε claimed")
        ceiling = next(a[model]["ceiling"] for a in audited.values() if model in a)
        ax.axhline(ceiling, color="gray", linestyle=":", label=f"lower bound's ceiling ({ceiling:.2g})")
        ax.axvspan(edge / 1.6, edge * 1.5, color="0.93", zorder=0)
        ax.text(edge, lo * 1.15, "no\nclaim", ha="center", va="bottom", fontsize=8, color="0.35")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, edge * 1.5)
        ax.set_ylim(lo, top)
        ax.set_title(f"{model.replace('_', ' ')}: ● estimate (CI)  ▼ lower bound", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("ε measured in this run")
    fig.supxlabel("ε the arm claims (its accountant, whole run)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    path = Path(run_dir) / "audit.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def format_table(rows: list[dict[str, Any]]) -> str:
    """The end-of-run table: arm, final accuracy, Δ vs fl, max deviation, the ε figures (per element for
    SIFL, whole vector for NbAFL and DP-FedAvg), the neighbour relation they are stated under, wall time."""
    header = [
        "arm",
        "final acc",
        "Δ vs fl (pp)",
        "max dev",
        "ε local (per-element, worst round)",
        "ε global (worst round)",
        "ε whole vector (scope: summary.json)",
        "relation",
        "wall s",
    ]
    lines = [header]
    for r in rows:
        lines.append(
            [
                r["arm"],
                f"{100 * r['final_accuracy']:.2f}%",
                "—" if r.get("delta_vs_fl_pp") is None else f"{r['delta_vs_fl_pp']:+.2f}",
                "—" if r.get("max_deviation") is None else f"{r['max_deviation']:.2e}",
                "—" if r.get("epsilon_local") is None else f"{r['epsilon_local']:.3g}",
                "—" if r.get("epsilon_global") is None else f"{r['epsilon_global']:.3g}",
                "—" if r.get("epsilon_whole") is None else f"{r['epsilon_whole']:.3g}",
                r.get("relation") or "—",
                f"{r['wall_s']:.1f}",
            ]
        )
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(header))]
    out = []
    for j, row in enumerate(lines):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
