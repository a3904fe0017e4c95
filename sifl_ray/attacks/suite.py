"""The attack suite: record what each party of an arm saw, attack it, score the attacks against the truth.

The transcripts come from the platform's own parties (:mod:`sifl_ray.attacks.record`): every arm of
``cfg.arms`` is played on a small model through the shipped server, aggregator and client roles on the
in-process backend, with keys the server and aggregator hosts make, and every channel recorded (uploads,
broadcasts, the server's inputs). No second implementation of the protocol exists here. What is attacked
depends on the arm's coding:

* ``m1`` arms (``sifl_m1``): every key design of ``cfg.designs`` under every registered attack
  (:mod:`sifl_ray.attacks.registry`, :func:`sifl_ray.attacks.design.evaluate_design`), and the DP audit (f)
  on the primary design;
* ``m2`` arms (``sifl_m2``): the M2 server's estimate of the global model (e)
  (:func:`sifl_ray.attacks.m2.evaluate_m2`);
* ``plain`` arms (``fl``, ``nbafl``, ``dp_fedavg``, an arm of your own): the aggregator's direct view, each
  upload read as what the client trained, its model or its update
  (:func:`sifl_ray.attacks.plain.evaluate_plain`);
* every arm: the DP audit (f) of its own release beside the ε it reports
  (:func:`sifl_ray.attacks.arm_audit.audit_arm`).

Threat models. docs/method.md "Parties": the aggregator sees only the encoded local models (the uploads), the
server only aggregated encoded models. Every figure labelled :data:`~sifl_ray.attacks.registry.AGGREGATOR`
uses the uploads alone. Figures that also use the broadcasts are labelled
:data:`~sifl_ray.attacks.registry.AGGREGATOR_BROADCASTS`: the method's aggregator does not see them, an
eavesdropper on the server → client channel or a colluding client does. The RESULT line's
``projection_error`` is uploads-only.

Seeds stay in memory. ``seed`` reproduces data, initial model and minibatches (beside a transcript: the
plain models of a SIFL arm); ``coding.key_seed`` reproduces every key and, through the parties' seeds
(:mod:`sifl_ray.keys`), every noise draw. :func:`public_config` drops both from what is written out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from sifl_ray.arms import arm_instances, get_arm
from sifl_ray.attacks.arm_audit import ArmAudit, audit_arm
from sifl_ray.attacks.audit import AuditTest, audit_upload_release
from sifl_ray.attacks.config import Design, read_keys
from sifl_ray.attacks.design import DesignResult, evaluate_design
from sifl_ray.attacks.m2 import M2Result, evaluate_m2
from sifl_ray.attacks.plain import PlainResult, evaluate_plain
from sifl_ray.attacks.record import GroundTruth, SmallTask, make_task, platform_config
from sifl_ray.attacks.registry import AGGREGATOR_BROADCASTS
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.device import single_threaded
from sifl_ray.privacy import local_sensitivity
from sifl_ray.seeding import torch_generator
from sifl_ray.specs import Coding


def attacked_arms(cfg: DictConfig) -> dict[str, Coding]:
    """The arm instances of ``cfg.arms`` (``nbafl`` runs as ``nbafl_eps1``, ...) → their coding."""
    platform = platform_config(cfg, clients=cfg.clients.num_clients, rounds=cfg.train.rounds)
    return {name: get_arm(kind).coding for name, kind in arm_instances(platform).items()}


#: The noise-removal figures that use the uploads alone (the method's aggregator): the RESULT line's best.
UPLOADS_ONLY_REMOVAL = ("projection", "regression")

#: Configuration fields never written out: ``seed`` reproduces the data, the initial model and the
#: minibatches (beside a transcript: the plain models), ``coding.key_seed`` every key and the parties' noise.
REDACTED_FIELDS = ("seed", "coding.key_seed")


def public_config(cfg: DictConfig) -> dict[str, Any]:
    """The configuration as written to JSON, markdown and TensorBoard: :data:`REDACTED_FIELDS` removed, and
    a ``keys`` line saying what kind of keys were used (without any seed)."""
    data = read_keys(cfg)  # the keys the suite reads, none it ignored
    reproducible = cfg.coding.key_seed is not None
    for name in REDACTED_FIELDS:
        *path, leaf = name.split(".")
        section = data
        for part in path:
            section = section[part]
        section.pop(leaf)
    data["keys"] = (
        "reproducible simulation keys derived from a fixed seed (not secret; the seed is not written out)"
        if reproducible
        else "256 secure random bits per key"
    )
    data["redacted"] = (
        "the run seed (data, initial model, minibatches) and the key seed (keys, noise): either, beside the "
        "transcripts, would give back the plain models or the keys"
    )
    return data


@dataclass
class SuiteResult:
    """Everything one ``sifl attack`` measured: per key design, the M2 attacks, the audits; what the report,
    result.json and TensorBoard are written from."""

    config: dict[str, Any]
    designs: list[DesignResult]
    m2: list[M2Result]
    audit_whole: AuditTest | None
    audit_single: AuditTest | None
    audit_design: str
    audit_sensitivity: float
    primary: str
    seconds: float
    arms: dict[str, str] = field(default_factory=dict)  # arm instance → what was attacked
    plain: list[PlainResult] = field(default_factory=list)
    audits: list[ArmAudit] = field(default_factory=list)  # (f) for every attacked arm that has one

    def primary_result(self) -> DesignResult | None:
        """The primary design's result (``None`` when no m1 arm was attacked)."""
        return next((d for d in self.designs if d.design == self.primary), None)

    def headline(self) -> dict[str, float | int | None]:
        """The RESULT line's figures (see :func:`sifl_ray.attacks.report.result_line`).

        ``projection_error`` is the best noise removal from the uploads alone (orthogonal projection or
        regression), the method's aggregator; the telescoped regression needs the broadcasts and is reported
        apart (:meth:`broadcast_headline`). ``diff_noise_ratio`` (last, uploads only): the noise in the
        elements of same-round differences over the noise in one upload (:mod:`.element_noise`). Figures of
        an arm that was not attacked are ``None``.
        """
        d = self.primary_result()
        m2_round1 = [r.corr_per_round[min(r.corr_per_round)] for r in self.m2]
        removal = [] if d is None else [d.figures[k].value for k in UPLOADS_ONLY_REMOVAL]
        removal = [v for v in removal if v is not None]
        return {
            "full_rank_round": None if d is None else d.figures["difference_rank"].value,
            "projection_error": min(removal) if removal else None,
            "m2_server_corr": min(m2_round1) if m2_round1 else None,
            "audit_eps_lb": self.audit_whole.epsilon_lower_bound if self.audit_whole else None,
            "paper_eps": None if d is None else d.epsilon_paper,
            "diff_noise_ratio": None if d is None else d.figures["difference_noise"].value,
        }

    def broadcast_headline(self) -> dict[str, float | str | None]:
        """The primary design's noise removal with the broadcasts too (not on the RESULT line)."""
        d = self.primary_result()
        tele = None if d is None else d.figures["telescoped"].value
        return {"threat_model": AGGREGATOR_BROADCASTS, "telescoped_error": tele}


#: What the suite does to an arm of each coding (``SuiteResult.arms``): each coding has attacks of its own.
ATTACKED_AS = {
    Coding.M1: "aggregator attacks (a)-(d) under every key design, DP audit (f) on the primary",
    Coding.M2: "the M2 server's view (e), DP audit (f) of its broadcast",
    Coding.PLAIN: "the aggregator's direct view (each upload read as the client's model, or its update), "
    "the server's view of the aggregate, DP audit (f)",
}
#: ... and to a plain arm whose uploads travel masked (secure aggregation).
ATTACKED_AS_SECURE = (
    "the aggregator's direct view of the masked uploads, the server's view of the unmasked aggregate, DP "
    "audit (f) of both"
)


def suite_steps(cfg: DictConfig) -> int:
    """How many times :func:`run_suite` calls its ``log``: once per m1 arm and design (contrast designs
    included), per m2 arm attacked by its server, per plain arm, and per arm audited (the progress total)."""
    arms = attacked_arms(cfg)
    m1 = sum(1 for coding in arms.values() if coding is Coding.M1)
    m2 = sum(1 for coding in arms.values() if coding is Coding.M2) if cfg.m2.enabled else 0
    plain = sum(1 for coding in arms.values() if coding is Coding.PLAIN)
    return m1 * (len(cfg.designs) + len(cfg.contrast.designs)) + m2 + plain + len(arms)


def run_suite(
    cfg: DictConfig, *, transcript_dir: Path | None = None, log: Callable[[str], object] = print
) -> SuiteResult:
    """Attack every arm of ``cfg.arms``: m1 arms under every design of ``cfg`` (attacks (a)–(d), the audit
    (f)), m2 arms by their server (e), plain arms by the aggregator's direct view. ``log`` is told of each
    step done (:func:`suite_steps` of them)."""
    with single_threaded():
        return _run_suite(cfg, transcript_dir=transcript_dir, log=log)


def _run_suite(cfg: DictConfig, *, transcript_dir: Path | None, log: Callable[[str], object]) -> SuiteResult:
    tic = time.perf_counter()
    arms = attacked_arms(cfg)
    task = make_task(
        features=cfg.model.features,
        hidden=cfg.model.hidden,
        clients=cfg.clients.num_clients,
        samples_per_client=cfg.data.samples_per_client,
        teacher_scale=cfg.data.teacher_scale,
        seed=cfg.seed,
    )
    save_to = transcript_dir if transcript_dir is not None and cfg.transcript.save else None
    m1_arms = [a for a, coding in arms.items() if coding is Coding.M1]
    designs, truths = _attack_designs(task, cfg, m1_arms, save_to=save_to, log=log)
    m2 = _attack_m2(cfg, arms, transcript_dir=transcript_dir, log=log)
    plain = _attack_plain(task, cfg, arms, save_to=save_to, log=log)
    sensitivity, whole, single = _audit_primary(task, cfg, truths.get(cfg.primary))
    primary = next((d for d in designs if d.design == cfg.primary), None)
    audits = _audit_arms(task, cfg, arms, m1_arms, whole=whole, primary=primary, log=log)
    secure = {p.arm for p in plain if p.masked}
    return SuiteResult(
        config=public_config(cfg),
        designs=designs,
        m2=m2,
        audit_whole=whole,
        audit_single=single,
        audit_design=cfg.primary,
        audit_sensitivity=sensitivity,
        primary=cfg.primary,
        seconds=time.perf_counter() - tic,
        audits=audits,
        arms={
            arm: ATTACKED_AS_SECURE if arm in secure else ATTACKED_AS[coding] for arm, coding in arms.items()
        },
        plain=plain,
    )


def _attack_designs(
    task: SmallTask,
    cfg: DictConfig,
    m1_arms: list[str],
    *,
    save_to: Path | None,
    log: Callable[[str], object],
) -> tuple[list[DesignResult], dict[str, GroundTruth]]:
    """Every key design of every m1 arm, attacked on its transcript, then the contrast designs at moderate
    scales; the scorer's ground truth of each design by name (the primary audit reads one)."""
    designs: list[DesignResult] = []
    truths: dict[str, GroundTruth] = {}
    for arm in m1_arms:
        # The first m1 arm's designs keep their names (``primary`` names one of them); others are prefixed.
        prefix = "" if arm == m1_arms[0] else f"{arm}:"
        for name in cfg.designs:
            result, recorder, truths[prefix + name] = evaluate_design(task, cfg, Design.parse(name), arm=arm)
            result.design = prefix + name
            designs.append(result)
            if save_to is not None:
                recorder.save(save_to / f"{prefix.replace(':', '-')}{name}.npz")
            log(f"{arm}, design {result.design}: done in {result.seconds:.1f}s")

        quiet = OmegaConf.merge(
            cfg, {"coding": {"beta": cfg.contrast.beta, "noise": {"sigma1": cfg.contrast.noise_scale}}}
        )
        for name in cfg.contrast.designs:
            result, _, _ = evaluate_design(task, quiet, Design.parse(name), arm=arm)
            result.design = f"{prefix}{name}@moderate"
            designs.append(result)
            log(
                f"{arm}, design {result.design} (beta = {cfg.contrast.beta:g}, noise "
                f"{cfg.contrast.noise_scale:g}): done"
            )
    return designs, truths


def _attack_m2(
    cfg: DictConfig, arms: dict[str, Coding], *, transcript_dir: Path | None, log: Callable[[str], object]
) -> list[M2Result]:
    """The M2 server's attack on every m2 arm (when ``m2.enabled``)."""
    m2: list[M2Result] = []
    for arm in (a for a, coding in arms.items() if coding is Coding.M2 and cfg.m2.enabled):
        got = evaluate_m2(cfg, transcript_dir=transcript_dir, arm=arm)
        m2 += got
        log(f"{arm}, the M2 server attack: n = {got[0].n}, done")
    return m2


def _attack_plain(
    task: SmallTask,
    cfg: DictConfig,
    arms: dict[str, Coding],
    *,
    save_to: Path | None,
    log: Callable[[str], object],
) -> list[PlainResult]:
    """The aggregator's direct view of every arm that does not immersion-code its uploads."""
    plain: list[PlainResult] = []
    for arm in (a for a, coding in arms.items() if coding is Coding.PLAIN):
        result, recorder = evaluate_plain(task, cfg, arm)
        plain.append(result)
        if save_to is not None:
            recorder.save(save_to / f"{arm}.npz")
        log(f"{arm}, the aggregator's direct view: done in {result.seconds:.1f}s")
    return plain


def _audit_primary(
    task: SmallTask, cfg: DictConfig, truth: GroundTruth | None
) -> tuple[float, AuditTest | None, AuditTest | None]:
    """The upload audit of the primary design, keys known (:func:`audit_upload_release` at its last
    aggregate model), with Remark 3's sensitivity of the smallest client; no tests when the primary design
    was not played."""
    sensitivity = float(
        local_sensitivity(clip=cfg.audit.clip, local_size=min(int(x.shape[0]) for x in task.X))
    )
    if truth is None:
        return sensitivity, None, None
    last = max(truth.aggregate_models)
    whole, single = audit_upload_release(
        truth.keys[0],
        w0=torch.as_tensor(truth.aggregate_models[last]),
        sensitivity=sensitivity,
        noise=NoiseSpec(distribution=cfg.coding.noise.distribution, scale=cfg.coding.noise.sigma1),
        trials=cfg.audit.trials,
        generator=torch_generator(cfg.seed, "attack", "audit"),
        delta=cfg.audit.delta,
        confidence=cfg.audit.confidence,
    )
    return sensitivity, whole, single


def _audit_arms(
    task: SmallTask,
    cfg: DictConfig,
    arms: dict[str, Coding],
    m1_arms: list[str],
    *,
    whole: AuditTest | None,
    primary: DesignResult | None,
    log: Callable[[str], object],
) -> list[ArmAudit]:
    """The DP audit of every arm (:func:`audit_arm`); the first m1 arm's reuses the primary design's
    whole-vector test and is compared with its paper ε."""
    audits: list[ArmAudit] = []
    for arm in arms:
        first_m1 = bool(m1_arms) and arm == m1_arms[0]  # the primary design's audit is the first m1 arm's
        got = audit_arm(
            task,
            cfg,
            arm,
            m1_whole=whole if first_m1 else None,
            paper_eps=primary.epsilon_paper if primary is not None and first_m1 else None,
        )
        audits += got
        said = [
            f"{a.label}, the DP audit: eps >= {a.test.epsilon_lower_bound:.3g} "
            f"(reported {a.reported_epsilon:.3g})"
            for a in got
        ]
        log("; ".join(said) or f"{arm}, the DP audit: none (the suite has no audit for this arm)")
    return audits
