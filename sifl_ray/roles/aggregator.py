"""The aggregator: averages encoded uploads (FedAvg weights) and, in M2, applies key 2 (π2).

SPEC "Parties": the aggregator sees only encoded local models. Its work is split in two pure halves:
``accumulate`` (validate each client's upload and add it to a running weighted sum: this half runs at the
leaves of a summation tree, inside the client workers, and needs no key) and :class:`Aggregator.reduce`
(one shard of the encoded vector: add the partials, divide by the total weight, encode with π2 in M2).
Weights are renormalised over the accepted uploads, so they sum to one: SIFL's exact decoding needs that.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sifl_ray.arms.base import AggregatorStep
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, NoiseSpec
from sifl_ray.roles.messages import MaskedPartial, Partial
from sifl_ray.seeding import noise_generator
from sifl_ray.specs import Coding

if TYPE_CHECKING:  # imported where a secure arm is set up: ``cryptography`` costs ~13 MiB in each process
    from sifl_ray.privacy.secagg import MaskPlan
    from sifl_ray.roles.secure import SecAggSpec


def check_upload(
    upload: object,
    *,
    shape: tuple[int, ...],
    round: int,
    stamped_round: int,
    key_epoch: int,
    stamped_epoch: int,
) -> str | None:
    """Why an upload must be rejected, or ``None`` if it may be averaged in.

    Nothing non-finite, mis-shaped, late or encoded under another key epoch is ever averaged in: one such
    vector would corrupt the global model of every client (and, in SIFL, the decoding of it).
    """
    if not isinstance(upload, torch.Tensor):
        return f"not a tensor ({type(upload).__name__})"
    if tuple(upload.shape) != tuple(shape):
        return f"wrong shape {tuple(upload.shape)}, expected {tuple(shape)}"
    if stamped_round != round:
        return f"stamped with round {stamped_round}, expected {round}"
    if stamped_epoch != key_epoch:
        return f"stamped with key epoch {stamped_epoch}, expected {key_epoch}"
    if not bool(torch.isfinite(upload).all()):
        return "non-finite values"
    return None


def check_partial(partial: object, *, round: int, key_epoch: int, length: int) -> str | None:
    """Why a worker's partial sum must be refused, or ``None``.

    The workers run the keyless leaves of the summation tree, so the aggregator checks what they hand it
    as it would check a client's upload: a worker that died half-way, went bad or replays an old round
    must not corrupt the average.
    """
    if not isinstance(partial, Partial):
        return f"not a partial sum ({type(partial).__name__})"
    if partial.round != round:
        return f"stamped with round {partial.round}, expected {round}"
    if partial.key_epoch != key_epoch:
        return f"stamped with key epoch {partial.key_epoch}, expected {key_epoch}"
    ws = partial.weighted_sum
    if not isinstance(ws, torch.Tensor) or tuple(ws.shape) != (length,):
        shape = tuple(ws.shape) if isinstance(ws, torch.Tensor) else type(ws).__name__
        return f"wrong shape {shape}, expected {(length,)}"
    if not (
        isinstance(partial.weight, int | float) and math.isfinite(partial.weight) and partial.weight >= 0
    ):
        return f"invalid weight {partial.weight!r}"
    if not bool(torch.isfinite(ws).all()):
        return "non-finite values"
    return None


def check_masked_partial(partial: object, *, round: int, key_epoch: int, length: int) -> str | None:
    """Why a worker's masked partial sum must be refused before unmasking, or ``None``.

    Only the stamps and the shape can be checked: the content is uniform in the ring until the masks are
    removed, so a worker that adds garbage is not caught by anyone (secure aggregation protects the inputs'
    secrecy, not their integrity). Refusals must come before the survivors are announced: once the masks of
    a set of clients are removed, leaving one of them out would spoil the sum.
    """
    if not isinstance(partial, MaskedPartial):
        return f"not a masked partial sum ({type(partial).__name__})"
    if partial.round != round:
        return f"stamped with round {partial.round}, expected {round}"
    if partial.key_epoch != key_epoch:
        return f"stamped with key epoch {partial.key_epoch}, expected {key_epoch}"
    ms = partial.masked_sum
    if not isinstance(ms, np.ndarray) or ms.dtype != np.uint64 or ms.shape != (length,):
        shape = getattr(ms, "shape", type(ms).__name__)
        return f"not a uint64 vector of shape {(length,)} (got {shape})"
    if not (
        isinstance(partial.weight, int | float) and math.isfinite(partial.weight) and partial.weight >= 0
    ):
        return f"invalid weight {partial.weight!r}"
    if len(set(partial.clients)) != len(partial.clients) or len(partial.clients) != partial.accepted:
        return "its client list does not match its count"
    return None


def shard_bounds(length: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal row ranges covering ``range(length)``."""
    num_shards = max(1, min(num_shards, length))
    step = math.ceil(length / num_shards)
    return [(s, min(s + step, length)) for s in range(0, length, step)]


class Aggregator:
    """Aggregator role for one arm and one shard of rows ``[start, stop)`` of the encoded vector.

    Args:
        coding: the arm's (:class:`~sifl_ray.specs.Coding`).
        key: key 2 (M2 only).
        noise: the law of ``R2``.
        noise_seed: secret seed of the aggregator's noise streams (Philox keyed by it,
            :func:`sifl_ray.seeding.noise_generator`): ``R2`` hides the average from the server, and a seed
            known to the server would let it subtract ``R2``.
        step_seed: the secret seed handed to the arm's step (DP-FedAvg's central noise), from the
            aggregator's key file: a respawned aggregator replaying a round draws the same noise.
        bounds: the shard's row range.
    """

    def __init__(
        self,
        *,
        coding: Coding,
        key: AggregatorKey | None,
        noise: NoiseSpec,
        noise_seed: bytes,
        bounds: tuple[int, int],
        shard: int = 0,
        step_seed: bytes | None = None,
    ):
        self.coding = coding
        self.key = key
        self.noise = noise
        self._noise_seed = noise_seed
        self._step_seed = step_seed
        self.bounds = bounds
        self.shard = shard

    def reduce(
        self,
        t: int,
        key_epoch: int,
        partials: list[Partial],
        *,
        allow_empty: bool = False,
        step: AggregatorStep | None = None,
        arm: str = "",
    ) -> tuple[torch.Tensor | None, dict[str, Any]]:
        """Steps 3a–3b: ``w~_a = Σ_i (|D_i| / Σ|D|) w~_i`` over this shard, then the arm's ``step`` on it (if
        any); M2: ``W'_a = w~_a P2 + R2 N2``.

        Partials that fail :func:`check_partial` (or come twice from one source) are left out and listed in
        ``info["rejected"]``; the caller must then reduce every shard again without those sources, so that
        all shards average the same set of workers (see :func:`sifl_ray.round.run_round`).

        Raises:
            RuntimeError: nothing usable reached this shard (unless ``allow_empty``: then the aggregate is
                ``None``).
        """
        start = time.perf_counter()
        length = self.bounds[1] - self.bounds[0]
        rejected: dict[int, str] = {}
        counts: dict[int, int] = {}
        for p in partials:
            source = getattr(p, "source", -1)
            counts[source] = counts.get(source, 0) + 1
            reason = check_partial(p, round=t, key_epoch=key_epoch, length=length)
            if reason is not None:
                rejected[source] = reason
        for source, n in counts.items():
            if n > 1:
                rejected[source] = f"{n} partial sums from one source"
        stale = [
            p.source
            for p in partials
            if isinstance(p, Partial) and (p.round != t or p.key_epoch != key_epoch)
        ]
        # Sorted by source: float addition is not associative, so a fixed order makes the sum independent
        # of the order in which partials arrive (and a Ray run equal to an in-process run).
        usable = sorted(
            (p for p in partials if isinstance(p, Partial) and p.source not in rejected and p.weight > 0),
            key=lambda p: p.source,
        )
        total = sum(p.weight for p in usable)
        info: dict[str, Any] = {
            "aggregate_s": 0.0,
            "encode_s": 0.0,
            "weight": total,
            "rejected": rejected,
            "stale_partials": stale,
            "step_metrics": {},
        }
        every_round = step is not None and getattr(step, "every_round", False)
        if total <= 0 and not every_round:
            if allow_empty:
                return None, {**info, "accepted": 0}
            raise RuntimeError(f"round {t}: no accepted client upload reached aggregator shard {self.shard}")
        acc = torch.zeros(self.bounds[1] - self.bounds[0], dtype=CODING_DTYPE)
        for p in usable:
            acc.add_(p.weighted_sum)
        if total > 0:
            acc.div_(total)
        # A step that must release every round (central noise) runs on the zero sum when nobody's update
        # arrived: a round released without noise would tell everyone that nobody took part.
        step_metrics: dict[str, float] = {}
        if step is not None:
            acc, step_metrics = self._step(step, acc, arm=arm, t=t, weight=total)
        aggregate_s = time.perf_counter() - start
        encode_s = 0.0
        if self.coding.aggregator_encodes:
            assert self.key is not None
            gen = noise_generator(self._noise_seed, "aggregator", "R2", key_epoch, t, self.shard)
            R2 = self.noise.sample((acc.shape[0], self.key.p - 1), gen)
            acc = self.key.encode(acc, R2)
            encode_s = time.perf_counter() - start - aggregate_s
        info.update(
            aggregate_s=aggregate_s,
            encode_s=encode_s,
            accepted=sum(p.accepted for p in usable),
            step_metrics=step_metrics,
        )
        return acc, info

    def _step(
        self, step: AggregatorStep, acc: torch.Tensor, *, arm: str, t: int, weight: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The arm's step on this shard's average, with the aggregator's secret seed from its key file; its
        metrics as numbers (the driver averages them over the shards as ``aggregator/<name>``)."""
        out, metrics = step(
            acc, arm=arm, t=t, shard=self.shard, bounds=self.bounds, weight=weight, seed=self._step_seed
        )
        return out, {name: float(value) for name, value in metrics.items()}

    def check_masked(self, t: int, key_epoch: int, partials: list[MaskedPartial]) -> dict[int, str]:
        """Step 3a of a secure arm: which workers' masked partials this shard refuses (source → why).
        Two partials from one source, or one client in two sources, are refused too."""
        length = self.bounds[1] - self.bounds[0]
        rejected: dict[int, str] = {}
        seen: dict[int, int] = {}
        for p in partials:
            source = getattr(p, "source", -1)
            if source in seen:
                rejected[source] = "2 partial sums from one source"
                continue
            seen[source] = 1
            reason = check_masked_partial(p, round=t, key_epoch=key_epoch, length=length)
            if reason is not None:
                rejected[source] = reason
        owner: dict[int, int] = {}
        for p in partials:
            if isinstance(p, MaskedPartial) and p.source not in rejected:
                for c in p.clients:
                    if c in owner and owner[c] != p.source:
                        rejected[p.source] = f"client {c} is also in the sum of worker {owner[c]}"
                    owner.setdefault(c, p.source)
        return rejected

    def reduce_masked(
        self,
        t: int,
        partials: list[MaskedPartial],
        *,
        plan: MaskPlan,
        spec: SecAggSpec,
        step: AggregatorStep | None = None,
        arm: str = "",
    ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """Step 3d of a secure arm on this shard's rows: add the masked partials in the ring, remove the
        masks the plan names (:func:`sifl_ray.roles.secure.unmask_rows`), decode, turn the sum
        ``Σ (weight_i/weight_ref)·u_i`` into the weighted mean, then the arm's step.

        Returns the shard's aggregate, its info, and the decoded sum (for the evaluator's measurement of
        the quantisation error: simulation only, never the server's).
        """
        from sifl_ray.roles.secure import unmask_rows

        start = time.perf_counter()
        usable = sorted(partials, key=lambda p: p.source)
        total = sum(p.weight for p in usable)
        decoded = unmask_rows([p.masked_sum for p in usable], plan, offset=self.bounds[0], codec=spec.codec)
        encode_s = time.perf_counter() - start  # removing masks and decoding: the coding's cost
        summed = torch.from_numpy(decoded)
        acc = summed * (spec.weight_ref / total)
        step_metrics: dict[str, float] = {}
        if step is not None:
            acc, step_metrics = self._step(step, acc, arm=arm, t=t, weight=total)
        info: dict[str, Any] = {
            "aggregate_s": time.perf_counter() - start - encode_s,
            "encode_s": encode_s,
            "weight": total,
            "rejected": {},
            "stale_partials": [],
            "accepted": sum(p.accepted for p in usable),
            "step_metrics": step_metrics,
            # the mean is the decoded sum times this; the quantisation bound is in the mean's units
            "secagg_scale": spec.weight_ref / total,
            "secagg_bound": spec.sum_bound(sum(p.accepted for p in usable)) * spec.weight_ref / total,
        }
        return acc, info, summed
