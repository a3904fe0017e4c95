"""What the driver records of a run, and where: each round's metrics, privacy releases and incidents
(TensorBoard, the driver's state that checkpoints keep, stderr), restores and resumes, and at the end
``summary.json``, the accountant's report and the plot. The figures themselves are
:mod:`~sifl_ray.runner.summary`'s pure functions.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sifl_ray.arms import arm_of
from sifl_ray.config import to_yaml
from sifl_ray.faults import FaultJournal
from sifl_ray.logging import RunLogger
from sifl_ray.plots import plot_accuracy, plot_accuracy_vs_epsilon, plot_audit, summary_styles
from sifl_ray.progress import progress_enabled
from sifl_ray.round import RoundResult
from sifl_ray.runner.parties import say
from sifl_ray.runner.state import DriverState
from sifl_ray.runner.summary import (
    RunResult,
    arm_epsilons,
    end_of_run_messages,
    epsilon_metrics,
    record_text,
    result_line,
    round_incidents,
    round_line,
    summarise,
)
from sifl_ray.specs import Coding

#: The in-run audit's figures logged each round (TensorBoard's ``audit/<threat model>/<name>``), named for
#: what they are: each round's bound is the bound the run would report had it stopped there, one test per
#: round, so the largest of them over the rounds is no bound.
AUDIT_TAGS = {
    "estimate": "epsilon_estimate",
    "estimate_low": "epsilon_estimate_low",
    "estimate_high": "epsilon_estimate_high",
    "lower_bound": "epsilon_lower_bound_if_stopped_here",
}


def audit_confidence(cfg: DictConfig, arms: int) -> float:
    """The confidence of each threat model's bounds: ``audit.confidence``, or with ``audit.correction=
    bonferroni`` that of the whole table (every arm's three threat models, ``3 · arms`` tests) shared out
    evenly, so that every lower bound of the run holds together at ``audit.confidence``."""
    beta = 1 - float(cfg.audit.confidence)
    tests = 3 * max(arms, 1) if str(cfg.audit.correction) == "bonferroni" else 1
    return 1 - beta / tests


def audit_family(cfg: DictConfig, arms: int) -> dict[str, Any]:
    """What the audit table's lower bounds hold together: each at its confidence, and all ``3 · arms`` of
    them at once (Bonferroni's inequality: at least 1 − the sum of their chances to fail)."""
    tests = 3 * max(arms, 1)
    each = audit_confidence(cfg, arms)
    return {
        "correction": str(cfg.audit.correction),
        "tests": tests,
        "each": each,
        "together": max(0.0, 1 - tests * (1 - each)),
    }


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

    def open(self, *, purge_step: int | None) -> None:
        """(Re)open the TensorBoard writers; ``purge_step=t`` makes TensorBoard drop the steps ≥ t that an
        earlier writer left (a round replayed after a restore or a resume is then logged once)."""
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
        )
        self.logger.chart(audit=bool(self.cfg.audit.canaries))

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
        if result.audit is not None and arm in driver.audits:
            metrics.update(self._audit(arm, t, result.audit, result.audit_uploads, privacy, metrics))
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

    def _audit(
        self,
        arm: str,
        t: int,
        measured: dict,
        uploads: list[float] | None,
        privacy: dict | None,
        metrics: dict[str, float],
    ) -> dict[str, float]:
        """The in-run audit after round ``t``: the canaries' scores so far, the estimate and the lower
        bound per threat model, each beside the ε the arm claims against it after this round (the
        accountant's cumulative ε where it has one). A record-level or per-element ε (NbAFL, SIFL) is no
        claim about one whole client, which is what a canary is; the aggregator's view is claimed only by
        an arm whose report says it covers the aggregator."""
        audit = self.driver.audits[arm]
        audit.observe(measured["dots"], measured["norm"])
        if uploads is not None:
            audit.observe_uploads(uploads)
        info = privacy or {}
        claimed = metrics.get("privacy/epsilon_cumulative", info.get("epsilon"))
        relation = str(info.get("neighbour_relation", ""))
        if not relation.startswith(("add/remove", "zero-out")):
            claimed = None  # a record-level or per-element ε: the canaries test one whole client
        claims = {
            "final_model": claimed,
            "all_iterates": claimed,
            "uploads": claimed if info.get("aggregator_covered") else None,
        }
        delta = float(info.get("delta", self.cfg.privacy.delta))
        confidence = audit_confidence(self.cfg, len(self.driver.audits))
        figures = audit.figures(
            delta=delta,
            confidence=confidence,
            claims=claims,
            t=t,
            gaussian=info.get("tradeoff") == "gaussian",
            interval=t == int(self.cfg.train.rounds) - 1,  # the bootstrap: the run's last figures only
        )
        self.audit[arm] = {
            "canaries": audit.k,
            "inserted": int(audit.included.sum()),
            "nulls": audit.m,
            "delta": delta,
            "claimed_epsilon": claimed,
            "family": audit_family(self.cfg, len(self.driver.audits)),
            **figures,
        }
        out = {}
        for model, row in figures.items():
            for key, name in AUDIT_TAGS.items():
                if row.get(key) is not None:
                    out[f"audit/{model}/{name}"] = float(row[key])
        return out

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
        summary["chance_accuracy"] = chance_accuracy
        for message in end_of_run_messages(summary, precision):
            say(message)
        self.logger.write_summary(summary)
        if len(driver.accountant):
            report = driver.accountant.report()
            for arm in coded_arms:
                self.logger.log_text(arm, "privacy/accountant", report, cfg.train.rounds - 1)
        if cfg.output.plot:
            epsilons = arm_epsilons(summary)
            styles = summary_styles(summary, epsilons)
            plot_accuracy(self.run_dir, driver.history, styles, f"{cfg.scenario}: test accuracy")
            title = f"{cfg.scenario}: final accuracy against ε"
            plot_accuracy_vs_epsilon(self.run_dir, summary, epsilons, styles, title)
            plot_audit(self.run_dir, summary, f"{cfg.scenario}: the in-run audit against the claimed ε")
        self.logger.close(results=results_markdown(summary))
        return RunResult(self.run_dir, summary, history=driver.history, result_line=result_line(summary))


def arm_hparams(cfg: DictConfig, arm: str) -> dict[str, Any]:
    """The settings TensorBoard's HParams tab shows for ``arm`` (five: the tab's default; every other
    setting is in ``tb/_run``'s config text): the scenario, the model, optimizer and learning rate, and
    the arm's coding (``plain``, ``m1``, ``m2``). The arm itself is the session's name."""
    return {
        "scenario": str(cfg.scenario),
        "train.model": str(cfg.train.model),
        "train.optimizer": str(cfg.train.optimizer),
        "train.lr": float(cfg.train.lr),
        "coding": arm_of(cfg, arm).coding.value,
    }


def results_markdown(summary: dict[str, Any]) -> str:
    """Every arm's final figures side by side, as a Markdown table (TensorBoard's text tab, ``tb/_run``):
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
