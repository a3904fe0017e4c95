"""What the driver records of a run, and where: each round's metrics, privacy releases and incidents
(TensorBoard, the driver's state that checkpoints keep, stderr), restores and resumes, and at the end
``summary.json``, the accountant's report and the plot. The figures themselves are
:mod:`~sifl_ray.runner.summary`'s pure functions.
"""

from __future__ import annotations

import copy
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sifl_ray.arms import arm_of
from sifl_ray.canvas import Drawing, Figures
from sifl_ray.clock.stage import Clock
from sifl_ray.config import to_yaml
from sifl_ray.faults import FaultJournal
from sifl_ray.logging import RunLogger
from sifl_ray.plots import (
    plot_accuracy,
    plot_accuracy_vs_epsilon,
    plot_accuracy_vs_time,
    plot_audit,
    summary_styles,
)
from sifl_ray.progress import progress_enabled
from sifl_ray.round import RoundResult
from sifl_ray.runner.audit_record import audit_round
from sifl_ray.runner.parties import say
from sifl_ray.runner.state import DriverState
from sifl_ray.runner.summary import (
    RunResult,
    arm_epsilons,
    end_of_run_messages,
    epsilon_metrics,
    realised_claims,
    record_text,
    result_line,
    round_incidents,
    round_line,
    run_name,
    summarise,
)
from sifl_ray.specs import Coding


class RoundLines:
    """A run's progress: one short line per round on stderr (:func:`~sifl_ray.runner.summary.round_line`),
    the same on a terminal and in a log, because each carries the round's accuracies. ``output.progress``
    turns it off, as ``SIFL_PROGRESS=0`` turns off every progress report (:mod:`sifl_ray.progress`)."""

    def __init__(self, total: int, enabled: bool):

        self.total = total
        self.enabled = enabled and progress_enabled()
        self.start = time.perf_counter()

    def update(self, t: int, accs: dict[str, float]) -> None:
        if not self.enabled:
            return
        print(round_line(t, self.total, time.perf_counter() - self.start, accs), file=sys.stderr, flush=True)


class Recorder:
    """Keeps the driver's records (:class:`~sifl_ray.runner.state.DriverState`) and writes them out."""

    def __init__(self, cfg: DictConfig, *, run_dir: Path, driver: DriverState, journal: FaultJournal):
        self.cfg, self.run_dir, self.driver, self.journal = cfg, Path(run_dir), driver, journal
        self.arms = list(driver.arms)
        self.logger: RunLogger | None = None
        self.audit: dict[str, dict[str, Any]] = {}  # arm → the in-run audit's latest figures
        self.clock: Clock | None = None  # the run's simulated clock (None: off)
        self.weakened: set[str] = set()  # arms whose noise fell short of the plan in some round (said once)
        self.draw_later = False  # the figures in a background thread (a session's run: canvas.Drawing)

    def open(self, *, purge_step: int | None, keep_replayed: bool = False) -> None:
        """(Re)open the TensorBoard writers; ``purge_step=t`` makes TensorBoard drop the steps ≥ t that an
        earlier writer left (a round replayed after a restore or a resume is then shown once), and, unless
        ``keep_replayed``, removes their scalars from the event files too (a resume: a reader of the raw
        files then counts each round once)."""
        if self.logger is not None:
            for writer in self.logger.writers.values():  # not close(): the run is not over
                writer.close()
        self.logger = RunLogger(
            self.run_dir,
            self.arms,
            config_yaml=to_yaml(self.cfg),
            hparams={arm: arm_hparams(self.cfg, arm) for arm in self.arms},
            tensorboard=self.cfg.output.tensorboard,
            purge_step=purge_step,
            drop_replayed=not keep_replayed,
        )
        self.logger.chart(audit=bool(self.cfg.audit.canaries), clock=self.clock is not None)

    def privacy(self, privacy: dict[str, dict[str, Any]]) -> None:
        """Each arm's privacy figures, once, at the start of a fresh run."""
        for arm, info in privacy.items():
            self.logger.log_text(arm, "privacy", record_text(info))

    def restored(self, record: dict[str, Any], *, event: str, step: int) -> None:
        """A restore (a party died) or a resume (the driver died): kept across rollbacks, journaled, shown."""
        self.driver.restored.append(record)
        self.journal.append({"event": event, **record})
        for arm in self.arms:
            self.logger.log_text(arm, "faults/restored", record_text(record), step)

    def round(
        self,
        arm: str,
        t: int,
        result: RoundResult,
        *,
        start: Coding,
        releases: Any,
        privacy: dict | None,
    ) -> float:
        """Keep round ``t`` of ``arm``: its privacy releases (``releases``: the arm's ArmReleases, or
        ``None``: ``privacy``'s fixed figures), metrics and incidents; return its test accuracy.
        ``start``: the coding of the broadcast the round started from
        (:attr:`~sifl_ray.round.ArmState.broadcast_coding`)."""
        metrics, driver = dict(result.metrics), self.driver
        if releases is not None:
            # An M2 round that starts from the server's M1 encoding (round 0, or after skipped rounds) is an
            # M1 round: see ArmReleases.
            released = releases.of_round(from_initial_broadcast=start is not releases.coding)
            driver.accountant.record(arm=arm, round=t, releases=released)
            metrics.update({f"privacy/epsilon_{r.release}": r.epsilon for r in released})
        else:
            metrics.update(epsilon_metrics(privacy, t))
            metrics.update(self._realised(arm, t, privacy, metrics))
        if result.audit is not None and arm in driver.audits:
            record, logged = audit_round(
                self.cfg, driver.audits, arm, t, result.audit, result.audit_uploads, privacy
            )
            self.audit[arm] = record
            metrics.update(logged)
        driver.wall[arm] += metrics["time/round"]
        self.logger.log_round(arm, t, metrics, per_element=releases is not None)
        driver.history[arm].append({"round": t, **metrics})
        if not result.skipped and result.accepted == 0:  # released all the same: the guarantee's every_round
            say(
                f"round {t} {arm}: nobody took part; released the aggregator's noise on a zero sum, as its "
                "guarantee says"
            )
        got = round_incidents(arm, t, result)
        if got is not None:
            driver.dropped[arm].append(got.entry)
            self.logger.log_text(arm, "faults", record_text(got.entry), t)
            driver.incidents.extend(got.incidents)
            for message in got.messages:
                say(message)
        return metrics["test_accuracy"]

    def _realised(
        self, arm: str, t: int, privacy: dict | None, metrics: dict[str, float]
    ) -> dict[str, float]:
        """The ε of the noise that arrived (:meth:`~sifl_ray.arms.Arm.realised_privacy`), where a round
        carried less than planned: it replaces the cumulative ε where it is the weaker, said once per arm."""
        if not privacy:
            return {}
        got = arm_of(self.cfg, arm).realised_privacy(privacy, [*self.driver.history[arm], metrics])
        if not got:
            return got
        planned = metrics.get("privacy/epsilon_cumulative")
        if planned is not None and got["privacy/epsilon_realised"] > planned:
            got["privacy/epsilon_cumulative"] = got["privacy/epsilon_realised"]
        if arm not in self.weakened:
            self.weakened.add(arm)
            say(
                f"round {t} {arm}: its sum carried {got['privacy/shares_missing']:g} noise share(s) fewer "
                f"than the {privacy['num_noisers']} planned (clients dropped after the key agreement): the "
                f"noise that arrived gives ε = {got['privacy/epsilon_realised']:.4g} so far, and the run "
                "reports the ε of the noise that arrived (privacy/epsilon_realised)"
            )
        return got

    def finish(
        self,
        *,
        precision: dict[str, dict[str, Any]],
        privacy: dict[str, dict[str, Any]],
        coded_arms: list[str],
        chance_accuracy: float | None = None,
        **figures: Any,
    ) -> RunResult:
        """``summary.json`` (``figures``: :func:`~sifl_ray.runner.summary.summarise`'s other arguments;
        ``chance_accuracy``: a guess's, 1 / the classes, for the table to say when an arm learnt nothing),
        the end-of-run messages, the accountant's report (for ``coded_arms``), the plots."""
        cfg, driver = self.cfg, self.driver
        privacy, weakened = realised_claims(privacy, driver.history)
        summary = summarise(
            cfg,
            run_dir=self.run_dir,
            history=driver.history,
            wall=driver.wall,
            dropped=driver.dropped,
            privacy=privacy,
            precision=precision,
            accountant=driver.accountant.summary() if len(driver.accountant) else None,
            incidents=driver.incidents,
            journal=str(self.journal.path) if self.journal.path.exists() else None,
            restored=driver.restored,
            checkpoint_s=driver.checkpoint_s,
            **figures,
        )
        for arm, figures in self.audit.items():
            summary["arms"][arm]["audit"] = figures
        if self.clock is not None:
            summary["clock"] = self.clock.describe()
        summary["chance_accuracy"] = chance_accuracy
        for message in [*end_of_run_messages(summary, precision), *weakened]:
            say(message)
        self.logger.write_summary(summary)
        if len(driver.accountant):
            report = driver.accountant.report()
            for arm in coded_arms:
                self.logger.log_text(arm, "privacy/accountant", report, cfg.train.rounds - 1)
        drawing = None
        if cfg.output.plot:
            # the thread draws from its own copy: the caller may add to the summary (the canaries' compare)
            figures_of = (summary, driver.history)
            if self.draw_later:
                figures_of = copy.deepcopy(figures_of)
            label = str(self.run_dir)
            drawing = Drawing(self.figures(*figures_of), background=self.draw_later, label=label)
        self.logger.close(results=results_markdown(summary))
        line = result_line(summary)
        return RunResult(self.run_dir, summary, history=driver.history, result_line=line, drawing=drawing)

    def figures(self, summary: dict[str, Any], history: dict[str, list[dict[str, float]]]) -> Figures:
        """The run's figures (:mod:`sifl_ray.plots`), one job each: accuracy per round, against ε, the
        audit's and the simulated clock's where the run has them (each job pickles: the helpers draw them
        side by side, :class:`~sifl_ray.canvas.Figures`)."""
        cfg, folder, name = self.cfg, self.run_dir, run_name(self.cfg)
        epsilons = arm_epsilons(summary)
        styles = summary_styles(summary, epsilons)
        against_epsilon = f"{name}: final accuracy against ε"
        jobs = [
            partial(plot_accuracy, folder, history, styles, f"{name}: test accuracy"),
            partial(plot_accuracy_vs_epsilon, folder, summary, epsilons, styles, against_epsilon),
            partial(plot_audit, folder, summary, f"{name}: the in-run audit against the claimed ε"),
        ]
        if self.clock is not None:
            title = f"{name}: test accuracy against the simulated clock"
            target = cfg.clock.target_accuracy
            jobs.append(partial(plot_accuracy_vs_time, folder, history, styles, title, target))
        return Figures(folder, jobs)


def arm_hparams(cfg: DictConfig, arm: str) -> dict[str, Any]:
    """The settings TensorBoard's HParams tab shows for ``arm`` (five: the tab's default; every other
    setting is in the first arm's config text): the scenario, the model, optimizer and learning rate, and
    the arm's coding (``plain``, ``m1``, ``m2``). The arm itself is the session's name."""
    return {
        "scenario": str(cfg.scenario),
        "train.model": str(cfg.train.model),
        "train.optimizer": str(cfg.train.optimizer),
        "train.lr": float(cfg.train.lr),
        "coding": arm_of(cfg, arm).coding.value,
    }


def results_markdown(summary: dict[str, Any]) -> str:
    """Every arm's final figures side by side, as a Markdown table (TensorBoard's text tab, first arm's run):
    accuracy, its difference to fl, loss, the deviation from fl, and the ε figures with their δ (a whole
    model's ε covers the rounds its scope in ``summary.json`` says)."""
    eps = arm_epsilons(summary)

    def fmt(x: float | None, spec: str) -> str:
        return "—" if x is None else format(x, spec)

    lines = [
        "| arm | final test accuracy | Δ vs fl (pp) | final test loss | max deviation from fl "
        "| ε per element (SIFL, worst round) | ε whole model | δ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in summary["arms"].items():
        delta = (a.get("privacy") or {}).get("delta")
        lines.append(
            f"| {arm} | {100 * a['final_accuracy']:.2f} % | {fmt(a['delta_vs_fl_pp'], '+.2f')} "
            f"| {fmt(a['final_test_loss'], '.4g')} | {fmt(a['max_deviation'], '.2e')} "
            f"| {fmt(eps[arm]['per_element'], '.3g')} | {fmt(eps[arm]['whole'], '.3g')} | {fmt(delta, 'g')} |"
        )
    return "\n".join(lines)
