"""Run outputs: TensorBoard event files, ``summary.json`` (the final table: :mod:`sifl_ray.runner.table`;
figures: :mod:`sifl_ray.plots`).

One TensorBoard writer per arm (``<run_dir>/tb/<arm>/``) with the *same* tag names for every arm, so that
TensorBoard overlays the arms on one chart per metric. TensorBoard sorts its groups by the tag's first word,
so the tags (:func:`tensorboard_tag`) lead with the results: ``eval/`` (accuracy, loss), ``precision/`` (the
deviation from fl), ``privacy/`` (ε per element and ε of the whole vector apart: they are different figures),
then ``system/`` (time, bytes, clients: bookkeeping). ``summary.json`` keeps the metrics' own names. A Custom
Scalars layout overlays the arms on the charts a reader compares; the HParams tab has one session per arm
(its settings, its final figures); the first arm's run also holds the resolved configuration and the final
results as text, and the HParams experiment (a run of its own would show, empty, in every list of runs).
An arm's run folder is its name, with the ε of a family of arms padded (``nbafl_eps05``, ``nbafl_eps10``)
so that TensorBoard, which sorts runs as text, lists them in the order of ε. Nothing written here may
contain key material: callers pass metrics.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
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


# ------------------------------------------------------------------------------------- TensorBoard's tags
#: The results' tags: first in TensorBoard's alphabetical order of groups (``audit/`` aside, which only a
#: run with canaries writes). ``max_deviation`` is the coding's error against fl: a precision figure.
RESULT_TAGS: dict[str, str] = {
    "test_accuracy": "eval/test_accuracy",
    "test_loss": "eval/test_loss",
    "train_loss": "eval/train_loss",
    "max_deviation": "precision/max_deviation_from_fl",
    "secagg/quantisation_error": "precision/secagg_quantisation_error",
    "secagg/quantisation_bound": "precision/secagg_quantisation_bound",
}
#: An arm's ε of the whole model vector (NbAFL's stated figure; DP-FedAvg's accountant after rounds 0..t).
EPSILON_WHOLE_VECTOR = "privacy/epsilon_whole_vector"
#: SIFL's per-element, per-round ε of one release (``local``, ``broadcast``, ``global``) follows this prefix.
EPSILON_PER_ELEMENT = "privacy/epsilon_per_element_"


def tensorboard_tag(metric: str, *, per_element: bool = False) -> str:
    """The TensorBoard tag of a round metric (its name in ``summary.json``'s rounds).

    Args:
        metric: e.g. ``test_accuracy``, ``time/round``, ``privacy/epsilon_local``.
        per_element: the arm's ``privacy/epsilon_*`` figures are the accountant's per-element, per-round
            ε (SIFL); otherwise they are the mechanism's ε of the whole vector (NbAFL, DP-FedAvg), and every
            one of them maps to :data:`EPSILON_WHOLE_VECTOR` (:func:`tensorboard_scalars` keeps one).
    """
    if metric in RESULT_TAGS:
        return RESULT_TAGS[metric]
    if metric.startswith("privacy/epsilon_"):
        release = metric.removeprefix("privacy/epsilon_")
        return EPSILON_PER_ELEMENT + release if per_element else EPSILON_WHOLE_VECTOR
    if metric.startswith("audit/"):
        return metric
    return f"system/{metric}"


def tensorboard_scalars(metrics: dict[str, Any], *, per_element: bool) -> dict[str, float]:
    """One round's metrics as TensorBoard scalars (tag → value; non-finite values left out: TensorBoard
    draws no NaN). An arm without per-element figures gets one whole-vector ε: the accountant's ε after
    this round where it composes rounds (``privacy/epsilon_cumulative``), else the largest it states."""
    out: dict[str, float] = {}
    whole: list[float] = []
    for metric, value in metrics.items():
        if not isinstance(value, int | float) or not math.isfinite(float(value)):
            continue
        tag = tensorboard_tag(metric, per_element=per_element)
        if tag == EPSILON_WHOLE_VECTOR:
            whole.append(float(value))
        else:
            out[tag] = float(value)
    cumulative = metrics.get("privacy/epsilon_cumulative")
    if cumulative is not None and not per_element and math.isfinite(float(cumulative)):
        out[EPSILON_WHOLE_VECTOR] = float(cumulative)
    elif whole:
        out[EPSILON_WHOLE_VECTOR] = max(whole)
    return out


#: Test accuracy against the simulated clock (:mod:`sifl_ray.clock`): its step is the simulated second at the
#: end of the round (its wall time too, so TensorBoard's "relative" axis shows the simulated hours).
TIME_TO_ACCURACY = "eval/test_accuracy_vs_simulated_s"


def results_layout(*, audit: bool, clock: bool = False) -> dict[str, dict[str, list]]:
    """TensorBoard's Custom Scalars layout: every arm on one chart for each figure a reader compares. The
    layout cannot set a log axis, so every chart is drawn linear; those whose values span decades (the
    deviation, ε, a diverging loss) say in their title that the chart's log-scale button shows them. With
    ``audit``, one chart per threat model with the arm's ε of the whole model (a claim against the canaries
    only where the audit's report says so: ``claimed_epsilon``) and the in-run audit's estimate and lower
    bound."""
    layout = {
        "results: every arm on one chart": {
            "test accuracy": ["Multiline", [f"^{RESULT_TAGS['test_accuracy']}$"]],
            "test loss (spans decades under noise: press log scale)": [
                "Multiline",
                [f"^{RESULT_TAGS['test_loss']}$"],
            ],
            "max deviation from fl (tiny: press log scale)": [
                "Multiline",
                [f"^{RESULT_TAGS['max_deviation']}$"],
            ],
            "ε of the whole model vector (NbAFL, DP-FedAvg; press log scale)": [
                "Multiline",
                [f"^{EPSILON_WHOLE_VECTOR}$"],
            ],
            "ε per element and round (SIFL; tiny: press log scale)": [
                "Multiline",
                [f"^{EPSILON_PER_ELEMENT}"],
            ],
            "wall time per round (s)": ["Multiline", ["^system/time/round$"]],
        }
    }
    if clock:
        layout["results: every arm on one chart"]["test accuracy against the simulated clock (step: s)"] = [
            "Multiline",
            [f"^{TIME_TO_ACCURACY}$"],
        ]
    if audit:
        # regular expressions: anchored, or the estimate's interval ends (``..._low``) would match too
        layout["privacy: the accountant's ε and the in-run audit"] = {
            f"{model.replace('_', ' ')}: ε of the whole model, estimate, lower bound had the run stopped at "
            "each round (one test per round: their largest is no bound)": [
                "Multiline",
                [
                    f"^{EPSILON_WHOLE_VECTOR}$",
                    f"^audit/{model}/epsilon_estimate$",
                    f"^audit/{model}/epsilon_lower_bound_if_stopped_here$",
                ],
            ]
            for model in ("final_model", "all_iterates", "uploads")
        }
    return layout


#: The HParams tab's metric columns (it shows five by default, in this order): each arm's last value.
HPARAM_METRICS: tuple[tuple[str, str], ...] = (
    (RESULT_TAGS["test_accuracy"], "final test accuracy"),
    (RESULT_TAGS["test_loss"], "final test loss"),
    (RESULT_TAGS["max_deviation"], "deviation from fl (last round)"),
    (EPSILON_WHOLE_VECTOR, "ε whole model (run)"),
    (EPSILON_PER_ELEMENT + "local", "ε per element (last round)"),
)


#: An arm named for its ε (``nbafl_eps5``, ``dp_fedavg_eps0p5``): its family, the ε's integer part, the rest.
_EPS_ARM = re.compile(r"^(?P<family>.+_eps)(?P<whole>\d+)(?P<rest>p\d+)?$")


def tensorboard_runs(arms: list[str]) -> dict[str, str]:
    """``arm → run folder`` under ``tb/``: the arm's name, with the integer part of the ε of arms of one
    family padded to the same width (``nbafl_eps1``, ``nbafl_eps10`` → ``nbafl_eps01``, ``nbafl_eps10``):
    TensorBoard sorts runs as text, which would put ε = 10 and 20 before ε = 5."""
    widths: dict[str, int] = {}
    for arm in arms:
        if m := _EPS_ARM.match(arm):
            widths[m["family"]] = max(widths.get(m["family"], 0), len(m["whole"]))
    folders = {}
    for arm in arms:
        m = _EPS_ARM.match(arm)
        folders[arm] = (
            arm if m is None else m["family"] + m["whole"].zfill(widths[m["family"]]) + (m["rest"] or "")
        )
    return folders


def drop_scalars_from(folder: Path, step: int) -> None:
    """Remove from the event files in ``folder`` the scalars of rounds ≥ ``step``: the rounds a restore or a
    resume plays again, which are then logged once in the files, not only in TensorBoard's view of them.

    Why not ``purge_step`` alone: it tells TensorBoard to hide the old events, but a reader of the raw
    files (tbparse, ``EventAccumulator``, a notebook) would still count those rounds twice. Text, the
    HParams session and the layout are kept (they are not per round). A file is rewritten through a
    temporary file and a rename, so a crash leaves it whole.
    """
    # deferred: TensorBoard's readers, which only a resumed or restored run needs
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    def replayed(raw: bytes) -> bool:
        event = event_pb2.Event.FromString(raw)
        values = event.summary.value
        return event.step >= step and bool(values) and all(v.HasField("simple_value") for v in values)

    for path in sorted(folder.glob("events.out.tfevents.*")):
        records = list(RawEventFileLoader(str(path)).Load())
        kept = [raw for raw in records if not replayed(raw)]
        if len(kept) == len(records):
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as fh:
            writer = RecordWriter(fh)
            for raw in kept:
                writer.write(raw)
            writer.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def wait_past_event_files(folders: list[Path]) -> None:
    """Wait, if need be, until the second after the newest event file in ``folders`` was created.

    Why: TensorBoard's readers (and ``EventAccumulator``) read a folder's event files in name order, and a
    name starts with the second the file was made, then the host, the process id and a counter. A writer
    opened again within the same second (a resume right after a crash, a restore in the same process) could
    sort before the file it continues, and its rounds would be read before the earlier ones. At most one
    second, and only when a run opens its writers again."""
    stamps = [
        int(part[3])
        for folder in folders
        for path in folder.glob("events.out.tfevents.*")
        if len(part := path.name.split(".")) > 3 and part[3].isdigit()
    ]
    if stamps:
        time.sleep(max(0.0, max(stamps) + 1 - time.time()))


class RunLogger:
    """Writes one run's outputs under ``run_dir``."""

    def __init__(
        self,
        run_dir: Path,
        arms: list[str],
        *,
        config_yaml: str,
        hparams: dict[str, dict[str, Any]],
        tensorboard: bool = True,
        purge_step: int | None = None,
        drop_replayed: bool = True,
    ):
        """``hparams``: per arm, the settings the HParams tab shows (name → str, float, int or bool; the
        same names for every arm). The tab shows the first five hparams by name (those whose values differ
        first): give it the few a reader compares, the whole configuration is the first arm's text.
        ``purge_step``: the rounds from there on are played again (a resume, a restore): TensorBoard hides
        what earlier writers logged of them, and with ``drop_replayed`` their scalars leave the files."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.arms = arms
        self.writers: dict[str, Any] = {}
        self.hparams = {
            arm: {k: v for k, v in values.items() if isinstance(v, int | float | str | bool)}
            for arm, values in hparams.items()
        }
        self.config_yaml = config_yaml
        self.folders = tensorboard_runs(arms)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            if purge_step is not None:
                wait_past_event_files([self.run_dir / "tb" / self.folders[arm] for arm in arms])
            for arm in arms:
                folder = self.run_dir / "tb" / self.folders[arm]
                if purge_step is not None and drop_replayed:
                    drop_scalars_from(folder, purge_step)
                self.writers[arm] = SummaryWriter(str(folder), purge_step=purge_step)
        atomic_write_text(self.run_dir / "config.yaml", config_yaml)

    def log_round(self, arm: str, t: int, metrics: dict[str, float], *, per_element: bool = False) -> None:
        """Round ``t`` of ``arm`` under :func:`tensorboard_tag`'s names (``per_element``: its ε figures are
        SIFL's per-element ones)."""
        writer = self.writers.get(arm)
        if writer is None:
            return
        for tag, value in tensorboard_scalars(metrics, per_element=per_element).items():
            writer.add_scalar(tag, value, t)
        elapsed = metrics.get("clock/elapsed_s")
        if elapsed is not None and math.isfinite(float(metrics["test_accuracy"])):
            step = round(float(elapsed))
            writer.add_scalar(
                TIME_TO_ACCURACY, float(metrics["test_accuracy"]), step, walltime=float(elapsed)
            )
        writer.flush()

    def chart(self, *, audit: bool, clock: bool = False) -> None:
        """TensorBoard's Custom Scalars tab (:func:`results_layout`), written once with the first arm's
        writer (TensorBoard merges the layouts of all runs; each chart draws every arm)."""
        writer = next(iter(self.writers.values()), None)
        if writer is None:
            return
        writer.add_custom_scalars(results_layout(audit=audit, clock=clock))
        writer.flush()

    def log_text(self, arm: str, tag: str, text: str, t: int = 0) -> None:
        writer = self.writers.get(arm)
        if writer is not None:
            writer.add_text(tag, text, t)
            writer.flush()

    def close(self, results: str | None = None) -> None:
        """Flush the arms' writers, each one an HParams session (its settings; its metrics are its own last
        scalars), and record the run in the first arm's: the configuration, the HParams experiment (which
        settings and metrics the tab shows; the plugin finds it in any run) and ``results`` (Markdown: the
        final figures of every arm, side by side)."""
        if not self.writers:
            return
        from tensorboard.plugins.hparams import summary_v2 as hp

        declared = self._hparams_declared()
        first = next(iter(self.writers.values()))
        first.add_text("config", "```yaml\n" + self.config_yaml + "\n```", 0)
        if results:
            first.add_text("eval/final_results", results, 0)
        if declared:
            metrics = [hp.Metric(tag, display_name=name) for tag, name in HPARAM_METRICS]
            first.file_writer.add_summary(hp.hparams_config_pb(hparams=declared, metrics=metrics))
        for arm, writer in self.writers.items():
            if self.hparams.get(arm):
                writer.file_writer.add_summary(hp.hparams_pb(self.hparams[arm], trial_id=arm))
            writer.close()

    def _hparams_declared(self) -> list[Any]:
        """The HParams experiment's settings: every name given, with the values the arms took."""
        from tensorboard.plugins.hparams import summary_v2 as hp

        values: dict[str, list[Any]] = {}
        for arm_values in self.hparams.values():
            for name, value in arm_values.items():
                values.setdefault(name, [])
                if value not in values[name]:
                    values[name].append(value)
        declared = []
        for name, seen in values.items():
            kinds = {type(v) for v in seen}
            # one type per domain: the plugin infers it from the values (mixed ones: no domain)
            domain = hp.Discrete(sorted(seen)) if len(kinds) == 1 else None
            declared.append(hp.HParam(name, domain))
        return declared

    def write_summary(self, summary: dict[str, Any]) -> Path:
        return write_summary(self.run_dir, summary)


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """``summary.json``, written atomically (non-finite numbers as strings: strict JSON)."""
    path = Path(run_dir) / "summary.json"
    atomic_write_text(path, json.dumps(_finite(summary), indent=2, allow_nan=False))
    return path
