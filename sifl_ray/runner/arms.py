"""Setting up an arm: every party's part of it (keys, the arm's steps), and what the driver keeps about it
(the float64 precision claims, the privacy figures, the releases the accountant records each round).

What an arm does is its :class:`~sifl_ray.arms.Arm` object's to say; this module only hands each party its
part, so it names no arm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from omegaconf import DictConfig

from sifl_ray.aggregation import PlainAggregation, SecureAggregation
from sifl_ray.arms import ArmContext, arm_of, reference_of
from sifl_ray.arms.conformance import amplification_problems, release_problems
from sifl_ray.arms.sifl_figures import arm_precision, arm_round_bound
from sifl_ray.backends import Backend
from sifl_ray.clock.stage import Clock
from sifl_ray.config import ConfigError
from sifl_ray.parties.aggregator import AggregatorHost
from sifl_ray.parties.handle import Handle
from sifl_ray.parties.server import ServerHost
from sifl_ray.parties.workers import ArmSetup
from sifl_ray.round import ArmState
from sifl_ray.runner.parties import PartyPool, say
from sifl_ray.runner.state import Checkpoints, arm_shape
from sifl_ray.specs import Coding, CodingSpec

#: What a run with ``coding.key_seed`` says of its privacy report (summary.json, TensorBoard, the table).
KEY_SEED_SECRETS = (
    "derived from coding.key_seed, which config.yaml holds: the sample, the aggregator's and the "
    "clients' noise, the keys and the canaries of this run are known to whoever reads config.yaml, and "
    "against them no ε of this report holds (the noise can be subtracted, the sample is known); a "
    "reproducible simulation, never a deployment (leave coding.key_seed unset for secrets drawn from the "
    "operating system)"
)


@dataclass
class PreparedArm:
    """One arm, set up: what the driver keeps of it.

    Attributes:
        state: what the driver keeps between rounds (the reference to the next broadcast).
        setup: what every client worker was told (coding, client form, the arm's client step).
        precision: the float64 claims (coded arms only; ``None`` for plain arms).
        privacy: the arm's privacy report (:meth:`~sifl_ray.arms.Arm.privacy`; ``None``: it claims none).
        releases: what the accountant records each round (arms with an accountant record only).
    """

    state: ArmState
    setup: ArmSetup
    precision: dict[str, Any] | None = None
    privacy: dict[str, Any] | None = None
    releases: Any = None


class PartyHost(Protocol):
    """Who hands the parties their part of an arm: the runner's :class:`PartyPool` (which keeps each part, to
    set up a replacement) and the attack recorder's task parties."""

    backend: Backend
    server: Handle[ServerHost]
    aggregators: list[Handle[AggregatorHost]]

    def hand_steps(self, arm: str, steps: Any, *, shards: int) -> list[Any]: ...

    def hand_arm(
        self, arm: str, *, setup: ArmSetup, views: tuple[Any, Any], paired: str | None
    ) -> list[Any]: ...


def hand_out_arm(
    host: PartyHost,
    cfg: DictConfig,
    arm: str,
    *,
    spec: CodingSpec,
    steps: Any,
    w0: torch.Tensor,
    epoch: int = 0,
    key_path: Callable[[str], str | None] | None = None,
    restored: ArmState | None = None,
) -> tuple[ArmState, ArmSetup]:
    """Every party's part of ``arm``, the one set-up the runner and the attack recorder share: the server's
    key 1 and the aggregator's secrets (made in their own actors from ``spec``; ``restored``: already
    taken back from their key files), the arm's steps, each worker's and the evaluator's set-up, and the
    first broadcast (which encodes ``w0``; ``restored``: the checkpoint's).

    Args:
        steps: the arm's :class:`~sifl_ray.arms.PartySteps` (the recorder wraps the client step in a tap).
        epoch: the key epoch (a re-keying attack design sets the arm up again with a fresh key).
        key_path: ``key_path(party)``, the file the party keeps its secrets in (``None``: none kept).

    Returns:
        The driver's :class:`~sifl_ray.round.ArmState` and the workers' set-up.
    """
    backend, server = host.backend, host.server
    protocol = arm_of(cfg, arm)
    n = int(w0.numel())
    coding, n_tilde, bounds = arm_shape(cfg, arm, n)
    shards = host.aggregators[: len(bounds)]
    if not coding.server_holds_model and steps.server is not None:
        raise ValueError(
            f"arm {arm}: its server step needs a plain model, and an M2 server never holds one (code 2 stays "
            "on); give the arm coding m1 or plain, or move the step to the clients or the aggregator"
        )
    problems = release_problems(protocol, steps, name=arm, rows=bounds[0][1] - bounds[0][0])
    if problems:  # what a round releases is the guarantee's: refused before any party is asked anything
        raise ConfigError(problems)
    state = ArmState(
        arm,
        coding,
        n_tilde,
        bounds,
        key_epoch=epoch,
        server_step=steps.server is not None,
        aggregation=PlainAggregation if steps.secagg is None else SecureAggregation,
        every_round=protocol.every_round,  # the guarantee's, never a step's
        audit=bool(cfg.audit.canaries),
    )
    if restored is None:  # fresh keys, each made and kept by its party
        server_view, done = make_keys(host, arm, coding, n, bounds, spec, key_path or (lambda party: None))
    else:  # taken back from the parties' own key files (Checkpoints.restore_keys)
        server_view, done = host.server.call(ServerHost.client_view, arm), []
    backend.get_all([*done, *host.hand_steps(arm, steps, shards=len(bounds))])
    agg_view = shards[0].call(AggregatorHost.client_view, arm)
    setup = ArmSetup(
        coding=coding,
        client_form=str(cfg.coding.client_form),
        key_epoch=epoch,
        step=steps.client,
        uniform_weights=protocol.uniform_weights,
        secagg=steps.secagg,
        canary_norm=canary_norm(cfg, protocol) if cfg.audit.canaries else None,
        uploads=protocol.uploads,
        # zero-out (the arm's relation): a canary left out uploads no change instead of staying away
        canary_zero_out=protocol.zero_out,
    )
    views = (server_view, agg_view)
    done = host.hand_arm(arm, setup=setup, views=views, paired=reference_of(cfg, arm))
    if restored is None:
        state.broadcast = server.call(ServerHost.initial_broadcast, arm, backend.put(w0))
    else:
        # from the checkpoint, with its coding (see Checkpoints.load_broadcasts)
        state.broadcast, state.broadcast_coding = restored.broadcast, restored.broadcast_coding
    backend.get_all(done)
    return state, setup


def make_keys(
    host: PartyHost,
    arm: str,
    coding: Coding,
    n: int,
    bounds: list[tuple[int, int]],
    spec: CodingSpec,
    key_path: Callable[[str], str | None],
) -> tuple[Any, list[Any]]:
    """The server makes key 1 and the host of aggregator shard 0 the aggregator's secrets, each in its own
    process, from ``spec`` (and keeps them in its key file, ``key_path(party)``); shard 0's secrets reach
    the other shards by reference, never the driver. Returns the ref of the clients' view of key 1 and the
    refs of the shards' set-ups."""
    server_view = host.server.call(
        ServerHost.setup_arm, arm, coding=coding, n=n, spec=spec, key_path=key_path("server")
    )
    shards = host.aggregators[: len(bounds)]
    secrets = shards[0].call(
        AggregatorHost.create_key, arm, coding=coding, spec=spec, key_path=key_path("aggregator")
    )
    done = [
        a.call(
            AggregatorHost.setup_arm, arm, coding=coding, spec=spec, state=secrets, bounds=bounds[s], shard=s
        )
        for s, a in enumerate(shards)
    ]
    return server_view, done


def setup_arm(
    cfg: DictConfig,
    pool: PartyPool,
    checkpoints: Checkpoints,
    arm: str,
    *,
    w0: torch.Tensor,
    sizes: np.ndarray,
    clients_per_worker: int,
    restored: ArmState | None = None,
    clock: Clock | None = None,
) -> PreparedArm:
    """Give every party its part of ``arm`` (:func:`hand_out_arm`: fresh keys, or with ``restored``, the
    arm's state taken back from a checkpoint, the keys already taken back from their files by
    :meth:`Checkpoints.restore_keys`), then what the driver keeps: the precision claims and the privacy
    report.

    Args:
        w0: the initial model (the first broadcast encodes it); ``sizes``: every client's data set size.
        clients_per_worker: the most clients one worker sums (for the round's rounding bound).
        clock: the run's simulated clock, put around the arm's aggregation (``None``: no clock).

    Raises:
        PrecisionError: float64 cannot carry this configuration (before any party is asked anything).
    """
    backend = pool.backend
    n = int(w0.numel())
    protocol = arm_of(cfg, arm)
    coding = protocol.coding
    local = {"local_size": int(sizes.min()), "total_size": int(sizes.sum()), "largest_size": int(sizes.max())}
    local["key_dir"] = checkpoints.kept_key_dir()
    ctx = ArmContext(cfg=cfg, arm=arm, n=n, **local)
    steps = protocol.steps(ctx)
    precision = None
    if coding.coded:
        # Refuse (or warn) before any work if float64 cannot carry this configuration
        # (docs/method.md "Precision").
        precision = arm_precision(cfg, coding=coding, n=n, w_max=float(w0.abs().max()))
    state, setup = hand_out_arm(
        pool,
        cfg,
        arm,
        spec=checkpoints.coding_spec,
        steps=steps,
        w0=w0,
        key_path=lambda party: checkpoints.key_path(party, arm),
        restored=restored,
    )
    if clock is not None:
        clock.attach(state, n=n, secagg=steps.secagg)
    out = PreparedArm(state=state, setup=setup, precision=precision)
    if coding.coded:
        server, aggregator = pool.server, pool.aggregators[0]
        norms = server.call(ServerHost.key_norms, arm), aggregator.call(AggregatorHost.key_norms, arm)
        roundoffs = server.call(ServerHost.roundoff, arm), aggregator.call(AggregatorHost.roundoff, arm)
        key_norms, agg_norms = backend.get(norms[0]), backend.get(norms[1])
        key_ro, agg_ro = backend.get(roundoffs[0]), backend.get(roundoffs[1])
        bound = arm_round_bound(
            cfg,
            coding=coding,
            n=n,
            key_roundoff=key_ro,
            aggregator_roundoff=agg_ro,
            clients_per_worker=clients_per_worker,
            workers=len(pool.workers),
            initial_norm=float(torch.linalg.vector_norm(w0)),
        )
        out.precision.update(bound or {"round_bound": None})
        ctx = ArmContext(cfg=cfg, arm=arm, n=n, key_norms=key_norms, agg_norms=agg_norms, **local)
    out.privacy, out.releases = privacy_report(cfg, protocol, ctx)
    return out


def privacy_report(cfg: DictConfig, protocol: Any, ctx: ArmContext) -> tuple[dict | None, Any]:
    """The arm's privacy report and its accountant's releases, checked: an ε amplified by sampling that the
    arm's release cannot carry is refused (:func:`amplification_problems`), a run whose secrets derive from
    ``coding.key_seed`` says so, and accountants that disagree are said on the console."""
    report = protocol.privacy(ctx)
    problems = amplification_problems(protocol, report, name=ctx.arm)
    if problems:
        raise ConfigError(problems)
    if report is not None and cfg.coding.key_seed is not None:
        report["secrets"] = KEY_SEED_SECRETS
    check = (report or {}).get("accountant_cross_check") or {}
    if check.get("disagree"):
        say(
            f"{ctx.arm}: the accountants disagree: RDP ε = {check['rdp']:.4g}, PLD ε = {check['pld']:.4g}: "
            + str(check["reason"])
        )
    record = getattr(protocol, "accountant_releases", None)
    return report, (record(ctx) if record is not None else None)


def canary_norm(cfg: DictConfig, protocol: Any) -> float:
    """The norm of ``protocol``'s canary uploads. A DP mean (clipped updates, equal weights: one client
    moves the sum by at most C) gets canaries on its clip sphere, the largest update a client may send
    (Andrew et al.); every other arm bounds no client's influence and gets ``audit.norm``, the same in
    each, so that arms paired with fl stay paired with it."""
    clip = protocol.clip(cfg)
    if protocol.uploads == "update" and protocol.uniform_weights and clip is not None:
        return float(clip)
    return float(cfg.audit.norm)
