"""The in-run audit's canary clients (``audit.canaries`` = k > 0): who they are, which worker hosts each,
whether each is inserted, and in which rounds each takes part.

The canaries are k clients after the population (ids N … N + k − 1), hosted round-robin by the workers.
The auditor's secret splits in two one-way derivations (:func:`auditor_seeds`): the seed of the directions,
which the scoring parties hold (the evaluator scores the release, the workers the aggregator's view), and
the seed of the inclusion bits, which only the driver (the auditor) holds: a worker is told only whether
each canary it hosts is inserted, which it must know to upload it. Each canary is inserted or not from
that seed, the same in every arm (:func:`~sifl_ray.privacy.canary_draws.inclusion_draws`), and the driver
keeps each arm's record of the scores (:class:`~sifl_ray.privacy.canaries.CanaryAudit`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import DictConfig

from sifl_ray.config import ConfigError
from sifl_ray.privacy.canary_draws import inclusion_draws
from sifl_ray.seeding import derive_bytes, numpy_generator

#: the most memory the in-run audit's directions may take in one process (they are held, not regenerated)
AUDIT_BYTES = 1 << 30


@dataclass(frozen=True)
class CanaryPlan:
    """The canaries of a run (none when ``ids`` is empty).

    Attributes:
        ids: the canaries' client ids, after the population.
        included: whether each is inserted (the auditor's secret draws).
        owner: the worker hosting each canary, by id.
        seed: the auditor's inclusion seed (``None`` without canaries): the driver's alone.
        workers: what the client workers and the evaluator are told (:attr:`PartyPool.audit`), or ``None``.
    """

    ids: list[int] = field(default_factory=list)
    included: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    owner: dict[int, int] = field(default_factory=dict)
    seed: bytes | None = None
    workers: dict[str, Any] | None = None

    def taking_part(self, t: int, *, sampler_seed: bytes, fraction: float, zero_out: bool) -> list[int]:
        """The canaries that take part in round ``t``: sampled like any client, from the sampler's own
        stream. An inserted canary takes part when sampled; one left out takes no part, except in an arm
        whose guarantee is zero-out (``zero_out``), where the neighbour of a client's update is the same
        client uploading 0: there the canary takes part and uploads no change (its worker knows which)."""
        if not self.ids:
            return []
        draws = numpy_generator(sampler_seed, "canaries", t).random(len(self.ids))
        return [c for j, c in enumerate(self.ids) if (self.included[j] or zero_out) and draws[j] < fraction]


def auditor_seeds(auditor: bytes) -> tuple[bytes, bytes]:
    """The seed of the canaries' directions (handed to the scoring parties) and that of their inclusion bits
    (the driver's alone), both derived one way from the auditor's secret: holding the first tells nothing of
    the second."""
    return derive_bytes(auditor, "canary", "directions"), derive_bytes(auditor, "canary", "inclusion")


def plan_canaries(
    cfg: DictConfig, *, n: int, num_workers: int, sizes: np.ndarray, auditor_seed: Callable[[], bytes]
) -> CanaryPlan:
    """The run's canaries, or an empty plan without ``audit.canaries``.

    ``auditor_seed`` is asked only when there are canaries, after their memory is checked.

    Raises:
        ConfigError: the audit's directions would take more than :data:`AUDIT_BYTES` in one process.
    """
    k, m = int(cfg.audit.canaries), int(cfg.audit.nulls)
    first = int(cfg.clients.num_clients)
    ids = [first + j for j in range(k)]
    if not k:
        return CanaryPlan(ids=ids)
    held = (k + m) * n * 8  # the audit directions, float64, in the evaluator and in every worker
    if held > AUDIT_BYTES:
        raise ConfigError(
            [
                f"audit.canaries, audit.nulls: {k} + {m} directions of this model's {n:,} "
                f"parameters take {held / 2**30:.1f} GiB in the evaluator and in every worker (at most "
                f"{AUDIT_BYTES / 2**30:g} GiB); lower them, e.g. audit.nulls="
                f"{max(2, AUDIT_BYTES // (8 * n) - k)}"
            ]
        )
    directions, inclusion = auditor_seeds(auditor_seed())
    included = inclusion_draws(k=k, seed=inclusion)
    owner: dict[int, int] = {}
    # per worker: each canary it hosts, its index j and whether it is inserted (nothing of the others)
    hosted: dict[int, dict[int, tuple[int, bool]]] = {}
    for j, c in enumerate(ids):
        owner[c] = j % num_workers
        hosted.setdefault(j % num_workers, {})[c] = (j, bool(included[j]))
    workers = {
        "seed": directions,
        "hosted": hosted,
        "weight": float(np.mean(sizes)),  # a typical |D_i|: public, like the partition's sizes
        "canaries": k,
        "nulls": m,
        "n": n,
    }
    return CanaryPlan(ids, included, owner, inclusion, workers)
