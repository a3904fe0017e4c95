"""The aggregator: averages encoded uploads (FedAvg weights) and, in M2, applies key 2 (π2).

docs/method.md "Parties": the aggregator sees only encoded local models. Its work is split in two halves:
adding up (validate each client's upload and add it to a running weighted sum: this half runs at the leaves
of a summation tree, inside the client workers, and needs no key) and :meth:`Aggregator.reduce` (one shard
of the encoded vector: add the partials, divide by the total weight, encode with π2 in M2). Weights are
renormalised over the accepted uploads, so they sum to one: SIFL's exact decoding needs that.

:class:`AggregatorHost` is the aggregator's process: it hosts one or several shards of every arm
(``ray.aggregator_actors`` says how many processes share the ``ray.num_shards`` shards), and the host of
shard 0 also plays SecAgg's server for a secure arm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch

from sifl_ray.arms.base import AggregatorStep
from sifl_ray.checkpoint import CheckpointError, load_party_key, save_party_key
from sifl_ray.coding import make_aggregator_key
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, AggregatorNorms, NoiseSpec
from sifl_ray.errors import SiflError
from sifl_ray.parties.checks import check_masked_partial, check_partial
from sifl_ray.parties.handle import returns
from sifl_ray.parties.messages import (
    MaskedPartial,
    MaskedReduced,
    Partial,
    PlanInfo,
    Planned,
    Reduced,
    ShardInfo,
    Step,
)
from sifl_ray.parties.process import Host, placement, prepare_process
from sifl_ray.parties.server import coding_noise
from sifl_ray.party_seeds import party_seed
from sifl_ray.seeding import derive_bytes, noise_generator
from sifl_ray.specs import Coding, CodingSpec

if TYPE_CHECKING:  # imported where a secure arm is set up: ``cryptography`` costs ~13 MiB in each process
    from sifl_ray.parties.secure import AggregatorSecAgg, RoundPublic
    from sifl_ray.privacy.secagg import MaskPlan, PublicKeys, UnmaskResponse
    from sifl_ray.privacy.secagg.spec import SecAggSpec

T = TypeVar("T")


class ReleaseError(SiflError, RuntimeError):
    """A release the arm's guarantee does not cover was about to be made (and was not)."""


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
        step: AggregatorStep | None = None,
        arm: str = "",
        every_round: bool = False,
    ) -> Reduced:
        """Steps 3a–3b: ``w~_a = Σ_i (|D_i| / Σ|D|) w~_i`` over this shard, then the arm's ``step`` on it (if
        any); M2: ``W'_a = w~_a P2 + R2 N2``.

        Partials that fail :func:`~sifl_ray.parties.checks.check_partial` (or come twice from one source)
        are left out and listed in ``info["rejected"]``; the caller must then reduce every shard again
        without those sources, so that all shards average the same set of workers (see
        :func:`sifl_ray.round.run_round`). Nothing usable: the aggregate is ``None``, unless the arm's
        guarantee releases every round (``every_round``: central noise), when the step runs on a zero
        average and must change it.

        Raises:
            ReleaseError: the guarantee releases every round, and the step left an empty round's zero sum
                unchanged (or there is no step): nothing is released.
        """
        start = time.perf_counter()
        usable, rejected, stale = self._usable(t, key_epoch, partials)
        total = sum(p.weight for p in usable)
        info = ShardInfo(
            aggregate_s=0.0,
            encode_s=0.0,
            weight=total,
            rejected=rejected,
            stale_partials=stale,
            accepted=0,
            step_metrics={},
        )
        if total <= 0 and not every_round:
            return Reduced(None, info)
        acc = torch.zeros(self.bounds[1] - self.bounds[0], dtype=CODING_DTYPE)
        for p in usable:
            acc.add_(p.weighted_sum)
        if total > 0:
            acc.div_(total)
        # A guarantee that releases every round (central noise) runs the step on the zero sum when nobody's
        # update arrived: a round released without noise would tell everyone that nobody took part.
        if step is not None:
            acc, info["step_metrics"] = self._step(step, acc, arm=arm, t=t, weight=total)
        if total <= 0 and (step is None or not bool(torch.any(acc != 0))):
            raise ReleaseError(
                f"{arm} round {t}: its guarantee releases a noised output every round, but nobody took part "
                "and its aggregator step left the zero sum unchanged; refusing to release the unchanged model"
            )
        info["aggregate_s"] = time.perf_counter() - start
        if self.coding.aggregator_encodes:
            assert self.key is not None
            gen = noise_generator(self._noise_seed, "aggregator", "R2", key_epoch, t, self.shard)
            R2 = self.noise.sample((acc.shape[0], self.key.p - 1), gen)
            acc = self.key.encode(acc, R2)
            info["encode_s"] = time.perf_counter() - start - info["aggregate_s"]
        info["accepted"] = sum(p.accepted for p in usable)
        return Reduced(acc, info)

    def _usable(
        self, t: int, key_epoch: int, partials: list[Partial]
    ) -> tuple[list[Partial], dict[int, str], list[int]]:
        """The partials this shard may add (sorted by source: float addition is not associative, so a fixed
        order makes the sum independent of the order in which partials arrive, and a Ray run equal to an
        in-process run), the refused ones (source → why), and the sources of stale ones."""
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
        usable = sorted(
            (p for p in partials if isinstance(p, Partial) and p.source not in rejected and p.weight > 0),
            key=lambda p: p.source,
        )
        return usable, rejected, stale

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
    ) -> MaskedReduced:
        """Step 3d of a secure arm on this shard's rows: add the masked partials in the ring, remove the
        masks the plan names (:func:`sifl_ray.parties.secure.unmask_rows`), decode, turn the sum
        ``Σ (weight_i/weight_ref)·u_i`` into the weighted mean, then the arm's step.

        Returns the shard's aggregate, its info, and the decoded sum (for the evaluator's measurement of
        the quantisation error: simulation only, never the server's).
        """
        # deferred: cryptography, which this module does not load otherwise
        from sifl_ray.parties.secure import unmask_rows

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
        info = ShardInfo(
            aggregate_s=time.perf_counter() - start - encode_s,
            encode_s=encode_s,
            weight=total,
            rejected={},
            stale_partials=[],
            accepted=sum(p.accepted for p in usable),
            step_metrics=step_metrics,
            # the mean is the decoded sum times this; the quantisation bound is in the mean's units
            secagg_scale=spec.weight_ref / total,
            secagg_bound=spec.sum_bound(sum(p.accepted for p in usable)) * spec.weight_ref / total,
        )
        return MaskedReduced(acc, info, summed)


def make_aggregator_state(*, arm: str, coding: Coding, spec: CodingSpec) -> dict[str, bytes]:
    """The aggregator's secrets of ``arm``, made by the host of shard 0, kept in its key file and shared with
    the other shards by reference: key 2's seed (M2 only) and the seed of its step's noise (every arm:
    DP-FedAvg's central noise). Both live in the key file so that a respawned aggregator replaying a round
    draws the same noise (docs/method.md "A replay reproduces, never redraws"): two independent draws on
    one sum would let whoever sees both releases average the noise down."""
    state = {"step_seed": party_seed(spec.key_seed, arm, "aggregator-dp-noise")}
    if coding.aggregator_encodes:
        state["seed"] = party_seed(spec.key_seed, arm, "aggregator")
    return state


def aggregator_from_state(
    *, coding: Coding, spec: CodingSpec, state: dict[str, bytes] | None, bounds: tuple[int, int], shard: int
) -> Aggregator:
    """An aggregator shard rebuilt from its own key state (its key file, or shard 0's hand-out): M2's key 2
    and noise seed reach the aggregator only."""
    key = None
    noise_seed = b""
    if coding.aggregator_encodes:
        assert state is not None
        key = make_aggregator_key(p=spec.p, gamma=spec.gamma, eta=spec.eta, seed=state["seed"])
        noise_seed = derive_bytes(state["seed"], "noise")
    return Aggregator(
        coding=coding,
        key=key,
        noise=coding_noise(spec, spec.sigma2),
        noise_seed=noise_seed,
        step_seed=(state or {}).get("step_seed"),
        bounds=bounds,
        shard=shard,
    )


class AggregatorHost(Host):
    """The aggregator's process, or part of it: the shards set up here (``shard``: the one a call means when
    it names none). The host of shard 0 creates the aggregator's secrets (and saves them to its key file);
    the other shards receive them by reference, or read that file on a restore (the driver never reads
    either).

    Several shards in one process reduce one after the other, each with its own rows and noise stream, so
    the numbers depend on ``ray.num_shards`` only, never on how many processes host the shards.
    """

    def __init__(self, shard: int = 0) -> None:
        prepare_process()
        self.shard = shard
        self.roles: dict[str, dict[int, Aggregator]] = {}  # arm → shard → its role
        self.steps: dict[str, AggregatorStep] = {}  # arm → its aggregator step, if any
        self.secagg: dict[str, SecAggSpec] = {}  # arm → its secure aggregation's public parameters
        self.secagg_rounds: dict[str, AggregatorSecAgg] = {}  # host of shard 0: SecAgg's server, per arm

    def create_key(
        self, arm: str, *, coding: Coding, spec: CodingSpec, key_path: str | None = None
    ) -> dict[str, bytes]:
        """The aggregator's secrets of ``arm`` (key 2 in M2, its step's noise seed), saved to its key file."""
        state = make_aggregator_state(arm=arm, coding=coding, spec=spec)
        if key_path is not None:
            save_party_key(key_path, party="aggregator", arm=arm, mode=coding.value, state=state)
        return state

    def setup_arm(
        self,
        arm: str,
        *,
        coding: Coding,
        spec: CodingSpec,
        state: dict[str, bytes] | None,
        bounds: tuple[int, int],
        shard: int | None = None,
    ) -> None:
        shard = self.shard if shard is None else shard
        self.roles.setdefault(arm, {})[shard] = aggregator_from_state(
            coding=coding, spec=spec, state=state, bounds=bounds, shard=shard
        )

    def restore_arm(
        self,
        arm: str,
        *,
        coding: Coding,
        spec: CodingSpec,
        key_path: str | None,
        bounds: tuple[int, int],
        shard: int | None = None,
    ) -> None:
        """Take the aggregator's secrets back from its own key file (a restarted shard, or a resume): key 2
        in M2, and in every arm the seed of its step's noise, so that a replayed round draws the noise it
        drew the first time."""
        if key_path is None:
            raise CheckpointError(
                f"arm {arm}: the aggregator's key file is unknown; its secrets cannot be restored"
            )
        saved = load_party_key(key_path, party="aggregator", arm=arm)
        if saved.get("mode") != coding.value:  # the key file stores the coding's value as its "mode"
            raise CheckpointError(
                f"{key_path}: a key for coding {saved.get('mode')}, expected {coding.value}"
            )
        self.setup_arm(arm, coding=coding, spec=spec, state=saved["state"], bounds=bounds, shard=shard)

    def _key(self, arm: str) -> AggregatorKey | None:
        """Key 2 of ``arm`` (every shard of this host holds the same one; ``None`` unless M2)."""
        return next(iter(self.roles[arm].values())).key

    def client_view(self, arm: str) -> AggregatorKey | None:
        key = self._key(arm)
        return None if key is None else key.client_view()

    def key_norms(self, arm: str) -> AggregatorNorms | None:
        key = self._key(arm)
        return None if key is None else key.norms()

    def roundoff(self, arm: str) -> Any:
        """Key 2's float64 error constants (public scalars; see :mod:`sifl_ray.coding.roundoff`)."""
        key = self._key(arm)
        return None if key is None else cast(Any, key).roundoff()

    def set_step(self, arm: str, step: AggregatorStep) -> None:
        """The arm's aggregator step (kept apart from key 2: a restored key finds it here)."""
        self.steps[arm] = step

    def set_secagg(self, arm: str, spec: SecAggSpec) -> None:
        """The arm's secure aggregation (public parameters; kept apart from keys, like the steps)."""
        # deferred: cryptography, which this module does not load otherwise
        from sifl_ray.parties.secure import AggregatorSecAgg

        self.secagg[arm] = spec
        self.secagg_rounds[arm] = AggregatorSecAgg(spec, arm)

    @returns(Reduced)
    def reduce(
        self,
        arm: str,
        t: int,
        key_epoch: int,
        *partials: Partial,
        shard: int | None = None,
        every_round: bool = False,
    ) -> Reduced:
        """Step 3 on one shard (``every_round``: the arm's guarantee releases a round nobody took part in)."""
        role = self.roles[arm][self.shard if shard is None else shard]
        step = self.steps.get(arm)
        return role.reduce(t, key_epoch, list(partials), step=step, arm=arm, every_round=every_round)

    # Secure aggregation: the host of shard 0 plays SecAgg's server; every shard checks and unmasks its own
    # rows. Each step of SecAgg's server returns its result and a status (None, or why the round cannot go
    # on: it then reveals nothing, and the driver skips it).
    def check_masked(
        self, arm: str, t: int, key_epoch: int, *partials: MaskedPartial, shard: int | None = None
    ) -> dict[int, str]:
        """Step 3a: the masked partials this shard refuses (worker → why)."""
        role = self.roles[arm][self.shard if shard is None else shard]
        return role.check_masked(t, key_epoch, list(partials))

    @returns(MaskedReduced)
    def reduce_masked(
        self, arm: str, t: int, *partials: MaskedPartial, plan: MaskPlan, shard: int | None = None
    ) -> MaskedReduced:
        """Step 3d on one shard: remove the masks ``plan`` names, decode, average, the arm's step."""
        role = self.roles[arm][self.shard if shard is None else shard]
        step = self.steps.get(arm)
        return role.reduce_masked(t, list(partials), plan=plan, spec=self.secagg[arm], step=step, arm=arm)

    @returns(Step)
    def secagg_open(self, arm: str, t: int, roster: list[int]) -> Step[RoundPublic]:
        return _secagg_step(lambda: self.secagg_rounds[arm].open(t, roster))

    @returns(Step)
    def secagg_route_keys(
        self, arm: str, t: int, *keys: dict[int, PublicKeys]
    ) -> Step[dict[int, dict[int, PublicKeys]]]:
        return _secagg_step(lambda: self.secagg_rounds[arm].route_keys(t, keys))

    @returns(Step)
    def secagg_route_shares(
        self, arm: str, t: int, *outboxes: dict[int, dict[int, bytes]]
    ) -> Step[dict[int, dict[int, bytes]]]:
        return _secagg_step(lambda: self.secagg_rounds[arm].route_shares(t, outboxes))

    @returns(Step)
    def secagg_announce(self, arm: str, t: int, *partials: MaskedPartial) -> Step[frozenset[int]]:
        """Step 2's end: U3, the clients whose masked inputs are in ``partials``."""
        survivors = {c for p in partials for c in p.clients}
        return _secagg_step(lambda: self.secagg_rounds[arm].announce(t, survivors))

    @returns(Planned)
    def secagg_plan(self, arm: str, t: int, *responses: dict[int, UnmaskResponse]) -> Planned:
        """The masks left in the sum, and what the round cost SecAgg's server (``error``: the round cannot
        be unmasked, and reveals nothing)."""
        # deferred: cryptography, which this module does not load otherwise
        from sifl_ray.privacy.secagg import SecAggError

        rounds = self.secagg_rounds[arm]
        try:
            plan, error = rounds.plan(t, responses), None
        except SecAggError as err:
            plan, error = None, str(err)
        stats = rounds.stats()
        info = PlanInfo(
            error=error,
            server_s=stats.compute_s,
            server_bytes=stats.bytes_sent + stats.bytes_received,
            server_messages=stats.messages_sent,
            mask_terms=0 if plan is None else len(plan.terms),
            **rounds.round_sets(),  # type: ignore[typeddict-item]
        )
        return Planned(plan, info)

    def placement(self) -> dict[str, Any]:
        """Where this host runs (the CPU: :mod:`sifl_ray.device` says why) and what it holds."""
        keys = [role.key for shards in self.roles.values() for role in shards.values()]
        return placement(torch.device("cpu"), keys)


def _secagg_step(step: Callable[[], T]) -> Step[T]:
    """A step of SecAgg's server: its result, or why the round cannot go on."""
    # deferred: cryptography, which this module does not load otherwise
    from sifl_ray.privacy.secagg import SecAggError

    try:
        return Step(step(), None)
    except SecAggError as err:
        return Step(None, str(err))
