"""Typed handles of the parties: the driver's only way to call the server, an aggregator shard, a client
worker or the evaluator.

Why: a remote call written as ``backend.call(handle, "finish_round", ...)`` and read back by position
(``outs[k][-2]``) hides the protocol from every tool and reader. Here each party's remote calls are methods,
named once, and a call that returns several values returns a small record naming them. Each method is the
one place where its name is spelled as a string (``tests/test_handles.py`` checks that no other module of
the package does), so a rename is one edit and a type checker follows a round from
:func:`~sifl_ray.round.run_round` into a role.

Results stay references (ObjectRefs on Ray, :class:`~sifl_ray.sequential.LocalRef` in-process): a method
submits and returns at once, so the parties keep working in parallel while the driver submits the next
call, and the driver never holds a parameter vector. What the driver does read (metrics, reports) has a
typed shape here (:class:`ServerInfo`, :class:`ShardInfo`, :class:`PlanInfo`, :class:`UnmaskCosts`), read
with :func:`collect`, which names the party when it is gone.

A handle wraps a backend and the raw handle that :meth:`~sifl_ray.backend.Backend.spawn` returned; it is
made where it is used and costs nothing to make, so a party replaced during a round (a respawned worker) is
called through a fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict

from sifl_ray.backend import Backend
from sifl_ray.errors import SiflError

if TYPE_CHECKING:
    from sifl_ray.roles.client import ArmSetup
    from sifl_ray.roles.secure import SecAggSpec
    from sifl_ray.specs import Coding, CodingSpec

Ref = Any
"""A reference to a party's result: an ObjectRef on Ray, a resolved stand-in in-process."""


class PartyLost(SiflError, RuntimeError):
    """The server, an aggregator shard or the evaluator died during a round."""

    def __init__(self, party: str, index: int, *, arm: str, round: int, error: BaseException) -> None:
        self.party, self.index, self.arm, self.round = party, index, arm, round
        name = party if party != "aggregator" else f"aggregator shard {index}"
        super().__init__(f"the {name} died in round {round} of {arm} ({type(error).__name__})")


def collect(backend: Backend, ref: Ref, party: str, index: int, *, arm: str, t: int) -> Any:
    """``backend.get(ref)``, naming the party when the call failed because that party is gone."""
    try:
        return backend.get(ref)
    except Exception as err:
        if backend.is_lost(err):
            raise PartyLost(party, index, arm=arm, round=t, error=err) from err
        raise


class Supervisor(Protocol):
    """What a round asks of the runner when a worker fails (and where the runner injects faults)."""

    def replace_worker(self, k: int, *, arm: str, t: int, reason: str) -> float:
        """Kill worker ``k`` if it still runs and put a fresh one with the same clients in its place;
        return the seconds it took."""
        ...

    def after_submit(self, stage: str, *, arm: str, t: int) -> None:
        """Called after step 2 (``"train"``) and step 3 (``"reduce"``) were submitted (fault injection)."""
        ...


@dataclass
class Parties:
    """The raw handles of every party, shared by all arms (wrap one in its handle class to call it)."""

    server: Any
    aggregators: list[Any]  # one per shard: an actor hosting several shards is there several times
    workers: list[Any]
    evaluator: Any


# ------------------------------------------------------------------------------------------------------------
# What the driver reads back (the values behind the refs, as :func:`collect` returns them).


class ServerInfo(TypedDict):
    """What the server's step 4 cost, and the metrics of the arm's server step (empty: no step)."""

    decode_s: float
    encode_s: float
    step_metrics: dict[str, float]


class ShardInfo(TypedDict):
    """What one aggregator shard's step 3 did: the partials it refused (worker → why; the round reduces
    again without them), the weight it averaged, what that cost, and the metrics of the arm's aggregator
    step on its rows (empty: no step)."""

    aggregate_s: float
    encode_s: float
    weight: float
    rejected: dict[int, str]
    stale_partials: list[int]
    accepted: int
    step_metrics: dict[str, float]
    secagg_scale: NotRequired[float]  # secure arms: the decoded sum times this is the mean
    secagg_bound: NotRequired[float]  # secure arms: the quantisation bound, in the mean's units


class PlanInfo(TypedDict, total=False):
    """What SecAgg's server reports after rebuilding the masks: why the round cannot be unmasked
    (``error``), its cost, and the sizes of the round's client sets (roster, U1–U4)."""

    error: str | None
    server_s: float
    server_bytes: int
    server_messages: int
    roster: int
    advertised: int
    shared: int
    survivors: int
    responders: int


class UnmaskCosts(TypedDict):
    """What the protocol cost one worker's clients over a secure round, summed over them
    (:class:`sifl_ray.roles.secure.ClientCosts`)."""

    clients: int
    bytes_sent: int
    bytes_received: int
    messages: int
    compute_s: float
    sent_by: dict[str, int]


# ------------------------------------------------------------------------------------------------------------
# Calls that return several values: their refs, by name.


@dataclass(frozen=True)
class Finished:
    """The server's step 4: the next broadcast (``π1(w^{t+1})``; ``W'`` in M2) and a :class:`ServerInfo`."""

    broadcast: Ref
    info: Ref


@dataclass(frozen=True)
class Reduced:
    """One shard's step 3: its aggregate (to the server), a :class:`ShardInfo`, and under secure
    aggregation the decoded sum of its rows (to the evaluator only; ``None`` otherwise)."""

    aggregate: Ref
    info: Ref
    summed: Ref | None = None


@dataclass(frozen=True)
class Trained:
    """One worker's step 2: one partial sum per aggregator shard, its report (a
    :class:`~sifl_ray.roles.messages.WorkerReport`), and under secure aggregation the exact float64 sum of
    its clients' inputs (the evaluator's instrument; ``None`` otherwise)."""

    partials: list[Ref]
    report: Ref
    exact: Ref | None = None


@dataclass(frozen=True)
class Step:
    """A step of SecAgg's server: its result, and its status (``None``, or why the round cannot go on)."""

    result: Ref
    error: Ref


@dataclass(frozen=True)
class Planned:
    """SecAgg's server after the survivors answered: the masks left in the sum, and a :class:`PlanInfo`."""

    plan: Ref
    info: Ref


@dataclass(frozen=True)
class Unmasked:
    """A worker's answer to the unmasking request: its survivors' shares, and an :class:`UnmaskCosts`."""

    responses: Ref
    costs: Ref


# ------------------------------------------------------------------------------------------------------------
# The handles.


@dataclass(frozen=True)
class PartyHandle:
    """What every party answers: where it runs."""

    backend: Backend
    raw: Any  # what Backend.spawn returned

    def placement(self) -> Ref:
        """Where the party runs and what it holds (:func:`actors.process.placement`)."""
        return self.backend.call(self.raw, "placement")

    def node(self) -> Ref:
        """The Ray node the party runs on (:func:`actors.process.node_id`)."""
        return self.backend.call(self.raw, "node")


@dataclass(frozen=True)
class KeyHolderHandle(PartyHandle):
    """What the server and the aggregator both answer, as the holders of an arm's keys and of a step: the
    view of its key the clients get, the key's norms and round-off constants (the precision figures), and
    the arm's step (:class:`~sifl_ray.arms.PartySteps`)."""

    def client_view(self, arm: str) -> Ref:
        return self.backend.call(self.raw, "client_view", arm)

    def key_norms(self, arm: str) -> Ref:
        return self.backend.call(self.raw, "key_norms", arm)

    def roundoff(self, arm: str) -> Ref:
        return self.backend.call(self.raw, "roundoff", arm)

    def set_step(self, arm: str, step: object) -> Ref:
        return self.backend.call(self.raw, "set_step", arm, step)


@dataclass(frozen=True)
class ServerHandle(KeyHolderHandle):
    """The server (:class:`actors.server.ServerActor`): key 1, step 4, and the broadcasts' checkpoints."""

    def setup_arm(
        self, arm: str, *, coding: Coding, n: int, spec: CodingSpec, run_seed: int, key_path: str | None
    ) -> Ref:
        """Make the arm's key 1 (saved to ``key_path``); the ref is the clients' view of it."""
        return self.backend.call(
            self.raw, "setup_arm", arm, coding=coding, n=n, spec=spec, run_seed=run_seed, key_path=key_path
        )

    def restore_arm(
        self, arm: str, *, coding: Coding, n: int, spec: CodingSpec, run_seed: int, key_path: str | None
    ) -> Ref:
        """Take the arm's key 1 back from the server's own key file."""
        return self.backend.call(
            self.raw, "restore_arm", arm, coding=coding, n=n, spec=spec, run_seed=run_seed, key_path=key_path
        )

    def initial_broadcast(self, arm: str, w0: Ref) -> Ref:
        return self.backend.call(self.raw, "initial_broadcast", arm, w0)

    def finish_round(
        self, arm: str, t: int, shards: Sequence[Ref], *, previous: Ref | None = None
    ) -> Finished:
        """Step 4 on the shards' aggregates; ``previous``: the round's broadcast, for an arm's server step."""
        extra = {} if previous is None else {"previous": previous}
        broadcast, info = self.backend.call(self.raw, "finish_round", arm, t, *shards, num_returns=2, **extra)
        return Finished(broadcast=broadcast, info=info)

    def save_broadcasts(self, path: str, t: int, arms: list[str], broadcasts: Sequence[Ref]) -> Ref:
        """Checkpoint every arm's next broadcast; the ref is the file's SHA-256."""
        return self.backend.call(self.raw, "save_broadcasts", path, t, arms, *broadcasts)

    def load_broadcasts(self, path: str, sha256: str | None, arms: list[str]) -> Ref:
        """Read and check a checkpoint's broadcasts; the ref is its round."""
        return self.backend.call(self.raw, "load_broadcasts", path, sha256, arms)

    def loaded_broadcast(self, arm: str) -> Ref:
        return self.backend.call(self.raw, "loaded_broadcast", arm)


@dataclass(frozen=True)
class AggregatorHandle(KeyHolderHandle):
    """An aggregator actor (:class:`actors.aggregator.AggregatorActor`), through the shard a call names;
    the host of shard 0 also plays SecAgg's server."""

    def create_key(
        self, arm: str, *, coding: Coding, spec: CodingSpec, run_seed: int, key_path: str | None
    ) -> Ref:
        """The aggregator's secrets of ``arm`` (they travel by ref to the other shards, never the driver)."""
        return self.backend.call(
            self.raw, "create_key", arm, coding=coding, spec=spec, run_seed=run_seed, key_path=key_path
        )

    def setup_arm(
        self, arm: str, *, coding: Coding, spec: CodingSpec, state: Ref, bounds: tuple[int, int], shard: int
    ) -> Ref:
        return self.backend.call(
            self.raw, "setup_arm", arm, coding=coding, spec=spec, state=state, bounds=bounds, shard=shard
        )

    def restore_arm(
        self,
        arm: str,
        *,
        coding: Coding,
        spec: CodingSpec,
        key_path: str | None,
        bounds: tuple[int, int],
        shard: int,
    ) -> Ref:
        return self.backend.call(
            self.raw,
            "restore_arm",
            arm,
            coding=coding,
            spec=spec,
            key_path=key_path,
            bounds=bounds,
            shard=shard,
        )

    def set_secagg(self, arm: str, spec: SecAggSpec) -> Ref:
        return self.backend.call(self.raw, "set_secagg", arm, spec)

    def reduce(
        self,
        arm: str,
        t: int,
        key_epoch: int,
        partials: Sequence[Ref],
        *,
        shard: int,
        plan: Ref | None = None,
    ) -> Reduced:
        """Step 3 on ``shard``; ``plan``: the masks left in a secure arm's sum (the shard unmasks first)."""
        if plan is None:
            aggregate, info = self.backend.call(
                self.raw, "reduce", arm, t, key_epoch, *partials, num_returns=2, shard=shard
            )
            return Reduced(aggregate=aggregate, info=info)
        aggregate, info, summed = self.backend.call(
            self.raw, "reduce", arm, t, key_epoch, *partials, plan=plan, shard=shard, num_returns=3
        )
        return Reduced(aggregate=aggregate, info=info, summed=summed)

    def check_masked(self, arm: str, t: int, key_epoch: int, partials: Sequence[Ref], *, shard: int) -> Ref:
        """Step 3a of a secure arm: the ref is ``{worker: why}`` for the masked partials the shard refuses."""
        return self.backend.call(self.raw, "check_masked", arm, t, key_epoch, *partials, shard=shard)

    def secagg_open(self, arm: str, t: int, roster: list[int]) -> Step:
        result, error = self.backend.call(self.raw, "secagg_open", arm, t, roster, num_returns=2)
        return Step(result=result, error=error)

    def secagg_route_keys(self, arm: str, t: int, keys: Sequence[Ref]) -> Step:
        result, error = self.backend.call(self.raw, "secagg_route_keys", arm, t, *keys, num_returns=2)
        return Step(result=result, error=error)

    def secagg_route_shares(self, arm: str, t: int, outboxes: Sequence[Ref]) -> Step:
        result, error = self.backend.call(self.raw, "secagg_route_shares", arm, t, *outboxes, num_returns=2)
        return Step(result=result, error=error)

    def secagg_announce(self, arm: str, t: int, partials: Sequence[Ref]) -> Step:
        """Step 2's end: U3, the clients whose masked inputs are in ``partials``."""
        result, error = self.backend.call(self.raw, "secagg_announce", arm, t, *partials, num_returns=2)
        return Step(result=result, error=error)

    def secagg_plan(self, arm: str, t: int, responses: Sequence[Ref]) -> Planned:
        plan, info = self.backend.call(self.raw, "secagg_plan", arm, t, *responses, num_returns=2)
        return Planned(plan=plan, info=info)


@dataclass(frozen=True)
class WorkerHandle(PartyHandle):
    """A client worker (:class:`actors.client_worker.ClientWorkerActor`): the virtual clients it hosts."""

    def set_faults(self, events: list[dict[str, Any]]) -> Ref:
        return self.backend.call(self.raw, "set_faults", events)

    def set_canaries(self, seed: bytes, canaries: dict[int, int], weight: float, directions: int) -> Ref:
        return self.backend.call(self.raw, "set_canaries", seed, canaries, weight, directions)

    def set_arm(self, arm: str, setup: ArmSetup, server_view: Ref, aggregator_view: Ref) -> Ref:
        return self.backend.call(self.raw, "set_arm", arm, setup, server_view, aggregator_view)

    def train_round(
        self,
        arm: str,
        t: int,
        broadcast: Ref,
        coding: Coding,
        clients: list[int],
        bounds: list[tuple[int, int]],
        *,
        attempt: int = 0,
        inboxes: Ref | None = None,
    ) -> Trained:
        """Step 2 for ``clients`` from ``broadcast`` (in ``coding``, its own: see
        :attr:`~sifl_ray.round.ArmState.broadcast_coding`); ``attempt`` > 0: a retry; ``inboxes``: a secure
        round's routed shares."""
        extra: dict[str, Any] = {"attempt": attempt} if attempt else {}
        if inboxes is not None:
            extra["inboxes"] = inboxes
        shards = len(bounds)
        refs = self.backend.call(
            self.raw,
            "train_round",
            arm,
            t,
            broadcast,
            coding,
            clients,
            bounds,
            num_returns=shards + (1 if inboxes is None else 2),
            **extra,
        )
        exact = None if inboxes is None else refs[shards]
        return Trained(partials=list(refs[:shards]), report=refs[-1], exact=exact)

    def secagg_advertise(self, arm: str, public: Ref, clients: list[int]) -> Ref:
        return self.backend.call(self.raw, "secagg_advertise", arm, public, clients)

    def secagg_share(self, arm: str, t: int, routed: Ref) -> Ref:
        return self.backend.call(self.raw, "secagg_share", arm, t, routed)

    def secagg_unmask(self, arm: str, t: int, survivors: Ref) -> Unmasked:
        responses, costs = self.backend.call(self.raw, "secagg_unmask", arm, t, survivors, num_returns=2)
        return Unmasked(responses=responses, costs=costs)

    def set_vectorise(self, on: bool) -> Ref:
        """Train the clients together or one at a time from now on (``train.vectorise``): the benches
        compare the two on one set of actors."""
        return self.backend.call(self.raw, "set_vectorise", on)

    def memory(self) -> Ref:
        """The worker's peak memory on its device so far (:func:`actors.process.memory`)."""
        return self.backend.call(self.raw, "memory")


@dataclass(frozen=True)
class EvaluatorHandle(PartyHandle):
    """The evaluator (:class:`actors.evaluator.EvaluatorActor`): a simulation device that decodes."""

    def set_arm(
        self, arm: str, coding: Coding, server_view: Ref, aggregator_view: Ref, *, paired: bool | None = None
    ) -> Ref:
        extra = {} if paired is None else {"paired": paired}
        return self.backend.call(self.raw, "set_arm", arm, coding, server_view, aggregator_view, **extra)

    def set_audit(self, seed: bytes, canaries: int, nulls: int, n: int) -> Ref:
        return self.backend.call(self.raw, "set_audit", seed, canaries, nulls, n)

    def decode(self, arm: str, broadcast: Ref, coding: Coding) -> Ref:
        """The plain global model behind ``broadcast``, in ``coding`` (simulation only)."""
        return self.backend.call(self.raw, "decode", arm, broadcast, coding)

    def evaluate(
        self,
        arm: str,
        t: int,
        broadcast: Ref,
        coding: Coding,
        *,
        previous: Ref | None = None,
        previous_coding: Coding | None = None,
    ) -> Ref:
        """Test metrics of the decoded ``broadcast`` (in ``coding``); ``previous`` (in ``previous_coding``):
        score the round's change (the audit)."""
        extra = {} if previous is None else {"previous": previous, "previous_coding": previous_coding}
        return self.backend.call(self.raw, "evaluate", arm, t, broadcast, coding, **extra)

    def sum_error(
        self, arm: str, t: int, num_shards: int, summed: Sequence[Ref], exact: Sequence[Ref]
    ) -> Ref:
        """A secure round's quantisation error: the shards' decoded sums against the workers' exact ones."""
        return self.backend.call(self.raw, "sum_error", arm, t, num_shards, *summed, *exact)
