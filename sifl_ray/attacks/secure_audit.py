"""(f) on a secure-aggregation arm's aggregate, through the steps a run ships.

Why not a re-implementation: the privacy of distributed DP depends on who adds a noise share, and a copy of
the round that keeps the target's share under both hypotheses cannot see the defect docs/method.md names ("the
variance counts the clients"). So each trial is a whole round of the platform's own parties:

1. the round's clients are drawn as a run draws them (:func:`sifl_ray.data.sampling.sample_clients`,
   Poisson at the arm's q): the target is in the round with probability q;
2. every client in the round runs the arm's client step, the chain
   ``chain(clipped_update(C), noise_share(z, C, t, seeds))`` (:func:`sifl_ray.arms.dp_fedavg.clipped_update`,
   :func:`sifl_ray.arms.steps.noise_share`: clip, then add its noise share from its own stream) on its
   update, 0 for all but the target;
3. the SecAgg parties of :mod:`~sifl_ray.parties.secure` mask the uploads (keys, shares, masks: a fresh
   protocol
   run each round), the aggregator announces the survivors, rebuilds the masks left in the sum and
   :meth:`~sifl_ray.parties.aggregator.Aggregator.reduce_masked` unmasks, decodes and runs the arm's
   aggregator
   step.

The neighbours are those of the relation the arm's privacy report declares (``neighbour_relation``;
add/remove when it says none): under **add/remove** the target is absent from the other population, and so is
its noise share; under **zero-out** it takes part (when sampled) with its update replaced by 0, adding its
share. A round with fewer clients than the arm's threshold is refused, as in a run, and releases nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from sifl_ray.attacks.audit import AuditTest, audit_gaussian_release
from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec
from sifl_ray.data.sampling import sample_clients
from sifl_ray.parties.aggregator import Aggregator
from sifl_ray.parties.messages import MaskedPartial
from sifl_ray.specs import Coding

ADD_REMOVE, ZERO_OUT = "add/remove", "zero-out"
RELATIONS = (ADD_REMOVE, ZERO_OUT)


def neighbour_relation(report: dict | None) -> str:
    """The relation an arm's privacy report declares (``neighbour_relation``: its name, then after a colon
    the words that explain it), add/remove by default."""
    relation = str((report or {}).get("neighbour_relation", ADD_REMOVE)).split(":")[0].strip()
    if relation not in RELATIONS:
        raise ValueError(f"neighbour_relation: expected one of {RELATIONS}, got {relation!r}")
    return relation


def secure_round_release(
    steps,
    *,
    arm: str,
    num_clients: int,
    relation: str,
    sample_rate: float = 1.0,
    sample_seed: int = 0,
    weights=None,
):
    """``release(x, trial)``: the aggregate of one round (round index ``trial``) of ``num_clients`` clients
    (client 0 the target, whose update is ``x`` under hypothesis 1) through the arm's shipped steps (module
    docstring), or ``None`` when the round is refused. Hypothesis 0 is recognised by ``x`` being all zero:
    under add/remove the target is then left out of the population (``num_clients − 1`` others), under
    zero-out it stays in with update 0. ``weights``: each client's FedAvg weight |D_i| (``None``: uniform,
    DP-FedAvg's), as a client worker weighs its upload before masking."""
    # deferred: cryptography, which this module does not load otherwise
    from sifl_ray.parties.secure import AggregatorSecAgg, WorkerSecAgg

    # deferred: cryptography, which this module does not load otherwise
    from sifl_ray.privacy.secagg import SecAggError

    # deferred: cryptography, which this module does not load otherwise
    from sifl_ray.privacy.secagg.ring import ring_reduce_

    if relation not in RELATIONS:
        raise ValueError(f"relation: expected one of {RELATIONS}, got {relation!r}")
    spec = steps.secagg
    sampling = "poisson" if sample_rate < 1 else "fixed"

    def weight(c: int) -> float:
        return 1.0 if weights is None else float(weights[c])

    def release(x: torch.Tensor, trial: int) -> torch.Tensor | None:
        n = x.numel()
        absent = relation == ADD_REMOVE and not bool(x.abs().max() > 0)
        drawn = sample_clients(num_clients, sample_rate, trial, sample_seed, sampling)
        roster = [int(c) for c in drawn if not (absent and c == 0)]
        head, worker = AggregatorSecAgg(spec, arm), WorkerSecAgg(spec, arm)
        try:
            public = head.open(trial, roster)
        except SecAggError:
            return None  # too few clients for the arm's threshold: the round is not run
        routed = head.route_keys(trial, [worker.advertise(public, roster)])
        inboxes = head.route_shares(trial, [worker.share(trial, routed)])
        ring, ids = np.zeros(n, dtype=np.uint64), []
        zero = torch.zeros(n, dtype=CODING_DTYPE)
        for c in roster:
            upload = (x if c == 0 else zero).clone()
            if steps.client is not None:
                upload, _ = steps.client(upload, start=zero, arm=arm, client=c, t=trial)
            x_c = upload.to(CODING_DTYPE).numpy() * (weight(c) / spec.weight_ref)
            np.add(ring, worker.mask(trial, c, x_c, inboxes), out=ring)
            ids.append(worker.index(trial, c))
        ring_reduce_(ring, spec.codec.ring_bits)
        partial = MaskedPartial(
            source=0,
            round=trial,
            key_epoch=0,
            masked_sum=ring,
            weight=float(sum(weight(c) for c in roster)),
            accepted=len(ids),
            clients=tuple(ids),
        )
        survivors = head.announce(trial, ids)
        responses, _ = worker.unmask(trial, survivors)
        plan = head.plan(trial, [responses])
        aggregator = Aggregator(
            coding=Coding.PLAIN,
            key=None,
            noise=NoiseSpec("gaussian", 0.0),
            noise_seed=b"\0" * 32,
            bounds=(0, n),
        )
        mean, _, _ = aggregator.reduce_masked(
            trial, [partial], plan=plan, spec=spec, step=steps.aggregator, arm=arm
        )
        return mean

    return release


def audit_secure_round(
    steps,
    *,
    arm: str,
    direction: torch.Tensor,
    clip: float,
    num_clients: int,
    relation: str,
    trials: int,
    delta: float,
    confidence: float = 0.95,
    calibration: int | None = None,
    sample_rate: float = 1.0,
    sample_seed: int = 0,
) -> AuditTest:
    """One round's unmasked aggregate of a secure arm under ``relation``, the target's update ``clip`` along
    the unit vector ``direction`` (the most one client moves the sum), through
    :func:`secure_round_release`, tested by :func:`~sifl_ray.attacks.audit.audit_gaussian_release` (its
    likelihood ratio sees a variance that counts the clients as well as the shift). ``calibration`` rounds
    per hypothesis fit the test (default: a quarter of ``trials``, at least 50). Compare the bound with ONE
    round's ε at this sampling rate."""
    x1 = direction.to(CODING_DTYPE) * clip
    release = secure_round_release(
        steps,
        arm=arm,
        num_clients=num_clients,
        relation=relation,
        sample_rate=sample_rate,
        sample_seed=sample_seed,
    )
    q = "" if sample_rate >= 1 else f", target sampled with q = {sample_rate:g}"
    return audit_gaussian_release(
        release,
        x0=torch.zeros_like(x1),
        x1=x1,
        trials=trials,
        calibration=max(50, trials // 4) if calibration is None else calibration,
        delta=delta,
        confidence=confidence,
        name=f"one round's unmasked aggregate ({relation}{q}), likelihood ratio of fitted Gaussians",
    )
