"""(f) The DP audit of every attacked arm: each release the arm makes, audited beside the ε it reports.

Built from the arm's own steps and parties, with neighbouring inputs as its guarantee defines them
(:func:`audit_arm`); the m1 arms' whole-upload audit is the suite's (it needs the primary design's keys),
the rest is here: central noise, secure aggregation, a plain client step, an M2 broadcast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.arms import arm_of
from sifl_ray.arms.dp_fedavg import CentralNoise
from sifl_ray.attacks.audit import AuditTest, audit_aggregator_step, audit_release
from sifl_ray.attacks.config import Design
from sifl_ray.attacks.design import design_coding
from sifl_ray.attacks.record import SmallTask, TaskEvaluator, platform_config, task_context
from sifl_ray.attacks.secure_audit import audit_secure_round, neighbour_relation, secure_round_release
from sifl_ray.coding.base import CODING_DTYPE
from sifl_ray.parties.aggregator import aggregator_from_state, make_aggregator_state
from sifl_ray.parties.messages import Partial
from sifl_ray.parties.server import Server, make_server
from sifl_ray.progress import Progress
from sifl_ray.seeding import derive_seed, torch_generator
from sifl_ray.specs import Coding, CodingSpec


@dataclass
class ArmAudit:
    """(f) for one release of one arm: the ε it reports beside the audit's lower bound on the ε that release
    really has. ``key`` names a release other than the arm's main one (``upload``: a masked upload)."""

    arm: str
    reported_epsilon: float  # inf: the arm claims no privacy for this release
    reported_scope: str
    release: str  # what was audited
    test: AuditTest
    key: str = ""

    @property
    def label(self) -> str:
        """``arm`` or ``arm_key``: the name of this audit in tables and the RESULT line."""
        return f"{self.arm}_{self.key}" if self.key else self.arm

    @property
    def violated(self) -> bool:
        """The audit refutes the claim (a bug for a DP mechanism; the expected outcome for a per-element ε
        read as a guarantee about the whole release)."""
        return self.test.epsilon_lower_bound > self.reported_epsilon

    @property
    def verdict(self) -> str:
        """``REFUTED``, ``not refuted``, ``untestable`` (the claim is at or above the test's ceiling) or ``no
        claim`` (:func:`sifl_ray.attacks.audit.verdict`): never "holds", which no lower bound can show."""
        return self.test.verdict(self.reported_epsilon)


#: Trials of a masked-upload audit: each is a fresh key agreement of its own, so it costs milliseconds.
MASKED_AUDIT_TRIALS = 2000


def audit_arm(
    task: SmallTask,
    cfg: DictConfig,
    arm: str,
    *,
    m1_whole: AuditTest | None,
    paper_eps: float | None,
) -> list[ArmAudit]:
    """(f) on each of ``arm``'s releases, built from the arm's own steps and parties, with neighbouring
    inputs as its guarantee defines them (empty where the suite has no audit for it).

    * central noise on the aggregate (DP-FedAvg's :class:`~sifl_ray.arms.dp_fedavg.CentralNoise`): one round
      of the aggregator step on populations with and without one client whose update is C, each client
      sampled at the arm's q (:func:`~sifl_ray.attacks.audit.audit_aggregator_step`); reported: the
      accountant's ε after ONE round (like with like: the whole run's ε is a composition);
    * secure aggregation: (i) one client's masked upload, fresh keys each trial, read by the aggregator as
      numbers; reported: 0 (the masks hide it perfectly from an aggregator that holds no share); (ii) the
      unmasked aggregate of a round with and without one client whose update is C (or, under the zero-out
      relation the arm declares, with its update 0), through the shipped client step, masking and
      aggregator step (:mod:`sifl_ray.attacks.secure_audit`); reported: the arm's ε after one round (none:
      ∞);
    * any other plain arm: its client step on local models that differ by Remark 3's sensitivity 2C/m
      (C its clip, m the smallest client), the whole upload projected on the difference; reported: the ε its
      privacy report states (none: ε = ∞);
    * M1 arms: the primary design's whole-upload audit with the keys (``m1_whole``, run by the suite);
      reported: the paper's per-element ε (``paper_eps``);
    * M2 arms: the broadcast W' of two neighbouring global models, through the platform's own server and
      aggregator roles with fresh noise each trial, read by a client (P2R then P1L); reported: the paper's
      per-element ε of that release (its ``epsilon_global``).
    """
    platform = platform_config(cfg, clients=task.clients, rounds=cfg.train.rounds)
    protocol = arm_of(platform, arm)
    kw = {
        "trials": int(cfg.audit.trials),
        "delta": float(cfg.audit.delta),
        "confidence": float(cfg.audit.confidence),
    }
    if protocol.coding.aggregator_encodes:  # M2: what its server's broadcast releases
        return [_audit_m2_broadcast(task, cfg, platform, arm, kw)]
    if protocol.coding.coded:  # M1: what one upload releases, keys known
        if m1_whole is None or paper_eps is None:
            return []
        scope = "per element of one upload (the paper's Theorem 1), worst element"
        return [ArmAudit(arm, paper_eps, scope, "the whole upload, keys known", m1_whole)]
    plain = _plain_arm(task, cfg, arm, protocol, platform, kw)
    if plain.steps.secagg is not None:
        return _audit_secure(task, cfg, plain)
    if isinstance(plain.steps.aggregator, CentralNoise):
        return [_audit_central_noise(task, cfg, plain)]
    return [_audit_client_step(task, cfg, plain)]


@dataclass(frozen=True)
class _PlainArm:
    """What every audit of an arm that does not immersion-code shares: its steps, the ε it reports for the
    run and for one round (with their scopes), its sampling rate, the audit's direction and the test's
    settings (``kw``: trials, δ, confidence)."""

    arm: str
    protocol: Any
    platform: DictConfig
    steps: Any
    report: dict[str, Any]
    reported: float
    scope: str
    one_round: float
    one_round_scope: str
    sample_rate: float
    direction: torch.Tensor
    zero: torch.Tensor
    kw: dict[str, Any]


def _plain_arm(
    task: SmallTask, cfg: DictConfig, arm: str, protocol: Any, platform: DictConfig, kw: dict[str, Any]
) -> _PlainArm:
    """The arm's steps and its privacy report read once, and the audit's random direction drawn."""
    ctx = task_context(task, platform, arm)
    steps, report = protocol.steps(ctx), protocol.privacy(ctx) or {}
    reported = float(report.get("epsilon", math.inf))
    scope = str(report.get("scope", "no privacy claimed"))
    # Like with like: a one-round audit is compared with the accountant's ε after ONE round (at the same
    # sampling rate), never with the whole run's composition, which one round cannot test.
    per_round = report.get("epsilon_per_round")
    one_round, one_round_scope = reported, scope
    if per_round:
        one_round = float(per_round[0])
        one_round_scope = (
            f"ONE round of {report.get('guarantee', scope)} (the accountant's ε after round 1; the whole "
            f"run's ε {reported:.3g} over {len(per_round)} rounds composes them and is not audited here)"
        )
    gen = torch_generator(cfg.seed, "attack", "audit", arm)
    direction = torch.randn(task.n, generator=gen, dtype=CODING_DTYPE)
    direction /= torch.linalg.vector_norm(direction)
    return _PlainArm(
        arm=arm,
        protocol=protocol,
        platform=platform,
        steps=steps,
        report=report,
        reported=reported,
        scope=scope,
        one_round=one_round,
        one_round_scope=one_round_scope,
        sample_rate=float(platform.clients.fraction),
        direction=direction,
        zero=torch.zeros(task.n, dtype=CODING_DTYPE),
        kw=kw,
    )


def _audit_secure(task: SmallTask, cfg: DictConfig, a: _PlainArm) -> list[ArmAudit]:
    """Secure aggregation: one round's unmasked aggregate through the shipped steps, and one client's
    masked upload as the aggregator reads it."""
    arm, kw, direction, zero = a.arm, a.kw, a.direction, a.zero
    clip = float(a.protocol.clip(a.platform) or cfg.audit.clip)
    upload = audit_release(
        _masked_upload(a.steps.secagg, cfg, arm),
        x0=zero,
        x1=direction * clip,
        **{**kw, "trials": min(kw["trials"], MASKED_AUDIT_TRIALS)},
    )
    hidden = (
        "one masked upload, seen by the aggregator alone (no share of its client's secrets): uniform in "
        "the ring whatever the update"
    )
    relation = neighbour_relation(a.report)
    shipped = {"num_clients": task.clients, "sample_rate": a.sample_rate, "sample_seed": int(cfg.seed)}
    if math.isinf(a.reported):  # no DP claimed: the exact sum, told apart by its projection
        weights = None if a.protocol.uniform_weights else [float(s) for s in task.sizes]
        mean = secure_round_release(a.steps, arm=arm, relation=relation, weights=weights, **shipped)
        share = weights[0] / float(sum(weights)) if weights else 1.0 / task.clients

        def release(x: torch.Tensor, trial: int) -> torch.Tensor | None:
            out = mean(x, trial)  # the target moves the mean by its share of the weight (q = 1)
            return None if out is None else out / share

        aggregate = audit_release(release, x0=zero, x1=direction * clip, exact=True, **kw)
    else:
        aggregate = audit_secure_round(
            a.steps,
            arm=arm,
            direction=direction,
            clip=clip,
            relation=relation,
            **shipped,
            **{**kw, "trials": min(kw["trials"], MASKED_AUDIT_TRIALS)},
        )
    return [
        ArmAudit(
            arm,
            a.one_round,
            f"{a.one_round_scope}; neighbours: {relation}",
            f"one round's unmasked aggregate through the shipped steps ({relation}: the target's update "
            "C, or the target absent / its update 0)",
            aggregate,
        ),
        ArmAudit(arm, 0.0, hidden, "one client's masked upload, fresh keys each trial", upload, "upload"),
    ]


def _audit_central_noise(task: SmallTask, cfg: DictConfig, a: _PlainArm) -> ArmAudit:
    """Central noise on the aggregate: one round of the arm's own aggregator step, add/remove one client."""
    step, clip = a.steps.aggregator, float(a.protocol.clip(a.platform) or 1.0)
    test = audit_aggregator_step(
        step,
        clip=clip,
        clients=max(1, task.clients - 1),
        shift=clip / step.expected_clients,
        arm=a.arm,
        sample_rate=a.sample_rate,
        sample_seed=int(cfg.seed),
        **a.kw,
    )
    what = "one round's noisy mean (aggregator step), add/remove one client"
    return ArmAudit(a.arm, a.one_round, a.one_round_scope, what, test)


def _audit_client_step(task: SmallTask, cfg: DictConfig, a: _PlainArm) -> ArmAudit:
    """Any other plain arm: its client step on local models that differ by Remark 3's sensitivity."""
    clip = float(a.protocol.clip(a.platform) or cfg.audit.clip)
    sensitivity = 2 * clip / int(task.sizes.min())  # Remark 3: one sample of the smallest client
    client, arm = a.steps.client, a.arm

    def release(x: torch.Tensor, trial: int) -> torch.Tensor:
        if client is None:
            return x
        return client(x, start=torch.zeros_like(x), arm=arm, client=0, t=trial)[0]

    sigma = getattr(client, "sigma", None)  # a Gaussian client step (NbAFL): the tail threshold is planned
    test = audit_release(
        release, x0=a.zero, x1=a.direction * sensitivity, noise_std=sigma, exact=client is None, **a.kw
    )
    return ArmAudit(arm, a.reported, a.scope, "one client's upload (client step)", test)


def _masked_upload(spec, cfg: DictConfig, arm: str):
    """``release(x, trial)``: client 0's masked input in a fresh two-client round of secure aggregation
    (its own keys, from the attack's key seed and the trial, or secure random), as the aggregator reads it:
    the ring element decoded as a fixed-point number. The platform's own roles, message by message."""
    from dataclasses import replace as with_

    # deferred: cryptography, which this module does not load otherwise
    from sifl_ray.parties.secure import AggregatorSecAgg, WorkerSecAgg

    def release(x: torch.Tensor, trial: int) -> torch.Tensor:
        key_seed = cfg.coding.key_seed
        seed = None if key_seed is None else derive_seed(int(key_seed), "audit", arm, "masks", trial)
        fresh = with_(spec, key_seed=seed, degree=None, threshold=None, min_survivors=0)  # two clients
        head, client = AggregatorSecAgg(fresh, arm), WorkerSecAgg(fresh, arm)
        public = head.open(trial, [0, 1])
        routed = head.route_keys(trial, [client.advertise(public, [0, 1])])
        inboxes = head.route_shares(trial, [client.share(trial, routed)])
        masked = client.mask(trial, 0, x.numpy(), inboxes)
        return torch.from_numpy(fresh.codec.decode(masked))

    return release


def _audit_m2_broadcast(
    task: SmallTask, cfg: DictConfig, platform: DictConfig, arm: str, kw: dict
) -> ArmAudit:
    """(f) on an M2 broadcast ``W' = P1 (P1L W'_a) + N1 R1`` of the global model, through the platform's own
    roles (keys from their factories, the primary design's coding): the server's M1 encoding with fresh
    ``r1``, the aggregator's π2 with fresh ``R2``, the M2 server's re-encoding with fresh ``R1``, read as
    every client reads it (the evaluator's decoding: strip code 2, then ``P1L``)."""
    design = Design.parse(cfg.primary)
    coded = platform_config(
        cfg, clients=task.clients, rounds=cfg.train.rounds, coding=design_coding(cfg, design)
    )
    spec = CodingSpec.from_config(coded)
    server, server_view = make_server(arm=arm, coding=Coding.M2, n=task.n, spec=spec)
    # the same server in its M1 role: a fresh M1 encoding of the model each trial (r1 of its own round)
    encoder = Server(coding=Coding.M1, key=server.key, noise=server.noise, noise_seed=server._noise_seed)
    state = make_aggregator_state(arm=arm, coding=Coding.M2, spec=spec)
    n_tilde = server.key.n_tilde
    aggregator = aggregator_from_state(coding=Coding.M2, spec=spec, state=state, bounds=(0, n_tilde), shard=0)
    reader = TaskEvaluator(
        model=task.model(),
        x_test=np.zeros((1, task.features)),
        y_test=np.zeros(1),
        batch_size=1,
        device=torch.device("cpu"),
    )
    reader.set_arm(arm, Coding.M2, server_view, aggregator.key.client_view())
    ctx = task_context(task, coded, arm, key_norms=server.key.norms(), agg_norms=aggregator.key.norms())
    report = arm_of(coded, arm).privacy(ctx) or {}

    def release(x: torch.Tensor, trial: int) -> torch.Tensor:
        first, second = 2 * trial, 2 * trial + 1  # distinct noise rounds for the two encodings
        w_tilde, _ = encoder.finish_round(first, encoder.initial_broadcast(x))
        upload = Partial(source=0, round=second, key_epoch=0, weighted_sum=w_tilde, weight=1.0, accepted=1)
        W_a, _ = aggregator.reduce(second, 0, [upload])
        W, _ = server.finish_round(second, W_a)
        return reader.decode(arm, W, Coding.M2)

    clip = float(platform.privacy.clip)
    sensitivity = (
        2 * clip / int(task.sizes.sum())
    )  # Remark 3's global sensitivity: one sample of all the data
    gen = torch_generator(cfg.seed, "attack", "audit", arm)
    direction = torch.randn(task.n, generator=gen, dtype=CODING_DTYPE)
    x1 = direction * (sensitivity / torch.linalg.vector_norm(direction))
    # 2 × trials releases through the platform's server and aggregator: most of the suite's time, so its
    # own progress (lines at most every 10 s off a terminal)
    with Progress(f"{arm}, the DP audit's releases", total=2 * kw["trials"], min_interval=10.0) as bar:

        def counted(x: torch.Tensor, trial: int) -> torch.Tensor:
            out = release(x, trial)
            bar.step()
            return out

        test = audit_release(counted, x0=torch.zeros(task.n, dtype=CODING_DTYPE), x1=x1, **kw)
    scope = "per element of one broadcast (the paper's Theorem 2, global release), worst element"
    what = "the whole broadcast W', read by a client (P2R, P1L)"
    return ArmAudit(arm, float(report.get("epsilon_global", math.nan)), scope, what, test)
