"""What an arm is: one object that says what each party does in a round, what it releases, and what it claims.

A round of every arm has the same skeleton (:func:`sifl_ray.round.run_round`): the server broadcasts, each
client trains from the broadcast and uploads, each client worker sums its clients' uploads, the aggregator
averages (weights renormalised over the accepted uploads), the server turns the average into the next
broadcast. An arm fills that skeleton in two ways:

- **its coding** (:attr:`Arm.coding`, a :class:`~sifl_ray.specs.Coding`): ``PLAIN`` (no code), ``M1`` (key 1:
  the server encodes, the clients decode and re-encode) or ``M2`` (key 1 and key 2: the aggregator encodes
  the average again, the server never decodes it). The coded steps are the parties' own
  (:mod:`sifl_ray.parties`), because they hold the keys.
- **its masking** (:attr:`Arm.secure_aggregation`): a plain arm's uploads can travel masked under secure
  aggregation instead of in the clear (the client workers mask, the aggregator unmasks only the sum).
- **its steps**, small picklable objects each party runs on plain vectors around the coding:

  - :class:`ClientStep`, in the client worker, on each client's local model before it is encoded and
    uploaded, a :func:`~sifl_ray.arms.steps.chain` of small steps (clip; clip and add the client's own
    noise; take the update, clip it, add a noise share; ...) returning the upload and its metrics;
  - :class:`AggregatorStep`, in each aggregator shard, on the shard's average (unmasked, under secure
    aggregation) before code 2 (the fixed-denominator mean; central noise; ...), returning it and its
    metrics;
  - :class:`ServerStep`, in the server, from the average to the new global model before it is encoded
    again (adding the average update; a server learning rate, ...), returning it and its metrics. Only where
    the server holds a plain model: never in ``m2``.

  All three are chains of the same kind (:func:`~sifl_ray.arms.steps.chain`); each party's metrics are
  logged under the arm as ``client/<name>``, ``aggregator/<name>`` and ``server/<name>``.

What each party releases to whom (:meth:`Arm.releases`) is read by the transcript recorder of the attack
suite, and the privacy report (:meth:`Arm.privacy`) by the summary and TensorBoard, so neither branches on
an arm's name. To add an arm: subclass :class:`Arm` in one module and register an instance
(:func:`sifl_ray.arms.register_arm`); docs/extending.md, "To add an arm".

Nothing here imports torch: the configuration validator reads the registry, and validation stays free of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from sifl_ray.specs import Coding

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from sifl_ray.party_seeds import ClientNoiseSeeds


class ClientStep(Protocol):
    """The client's step on its local model ``w`` (float64, on the worker's device) before upload.

    ``start`` is the round's global model the client trained from (read-only: an update is ``w − start``).
    Returns the vector to upload (it may be ``w`` changed in place) and its metrics, name → number
    (``{"clipped": 1.0}``; each is averaged over the round's clients as ``client/<name>``, and ``clipped``
    counted in ``clients/clipped``). Steps compose: :func:`sifl_ray.arms.steps.chain`. Runs in the client
    worker; any secret it draws on (a noise seed) must be made there, never sent by the driver (see
    :class:`sifl_ray.party_seeds.ClientNoiseSeeds`).
    """

    def __call__(
        self, w: torch.Tensor, /, *, start: torch.Tensor, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, Mapping[str, float]]: ...


class AggregatorStep(Protocol):
    """An aggregator shard's step on its average (rows ``bounds`` of the, possibly encoded, vector) before
    code 2. Runs once per shard and round; it must act row by row or know its rows (``bounds``). ``weight``
    is the total weight the average divided by (the accepted clients' |D_i|, or their number under uniform
    weights): every shard of a round has the same. Returns the shard's new average and its metrics, name →
    number (``{"noise_std": 0.01}``; each is averaged over the shards as ``aggregator/<name>``). Steps
    compose: :func:`sifl_ray.arms.steps.chain`.

    ``seed`` is the aggregator's secret for its step (256 bits from the aggregator's key file, ``None`` when
    called outside an aggregator): noise drawn from it is the same when a respawned aggregator replays the
    round, as docs/method.md "A replay reproduces, never redraws" requires.

    In an arm whose guarantee releases every round (:attr:`Arm.every_round`) the step also runs when no
    update was accepted, on a zero average (``weight`` 0), and must noise it: central noise must be released
    even then, or the unchanged model tells everyone that nobody took part (docs/method.md "Every round
    releases a noised output"). The set-up tries it once on a zero sum (:mod:`sifl_ray.arms.conformance`)."""

    def __call__(
        self,
        average: torch.Tensor,
        /,
        *,
        arm: str,
        t: int,
        shard: int,
        bounds: tuple[int, int],
        weight: float,
        seed: bytes | None = None,
    ) -> tuple[torch.Tensor, Mapping[str, float]]: ...


class ServerStep(Protocol):
    """The server's step from the clients' average to the new global model (plain float64 vectors), before
    the server encodes it again; ``previous`` is the global model the round started from (read-only: the
    average of updates is added to it). Returns the new model and its metrics, name → number (each logged
    as ``server/<name>``). Steps compose: :func:`sifl_ray.arms.steps.chain`. It is handed no secret, so it
    draws no noise: noise from the run seed, which anyone holding the configuration knows, would protect
    nothing (:mod:`sifl_ray.party_seeds`)."""

    def __call__(
        self, average: torch.Tensor, /, *, previous: torch.Tensor, arm: str, t: int
    ) -> tuple[torch.Tensor, Mapping[str, float]]: ...


#: What a plain upload carries, by :attr:`Arm.uploads`, in the words of an arm's releases.
UPLOADS: Mapping[str, str] = MappingProxyType(
    {"model": "the local model w_i", "update": "the update w_i - w^t"}
)


@dataclass(frozen=True)
class Release:
    """One channel of a round: what ``sender`` hands ``receiver``, in words a reader can check."""

    sender: str  # client | aggregator | server
    receiver: str  # aggregator | server | clients
    name: str  # upload | aggregate | broadcast (the transcript recorder's channel)
    content: str


@dataclass(frozen=True)
class ArmContext:
    """What an arm may read when it is set up for a run (the driver's view: no key, no data).

    Attributes:
        cfg: the validated run configuration.
        arm: this instance's name (``nbafl_eps5``).
        n: the model's parameter count.
        local_size: the smallest client data set (sensitivities are per client); total_size: all of them;
            largest_size: the largest (bounds any client's FedAvg weight).
        key_norms, agg_norms: public norms of key 1 and key 2 (coded arms; ``None`` otherwise).
        key_dir: the run's key folder, where each party keeps its secrets (``None``: checkpointing is off).
            A step that draws a party's noise passes it on, so that the party's seed outlives its process.
    """

    cfg: Any
    arm: str
    n: int
    local_size: int
    total_size: int
    key_norms: Any = None
    agg_norms: Any = None
    largest_size: int = 0
    key_dir: str | None = None


@dataclass(frozen=True)
class PartySteps:
    """An arm's steps for one run, handed to the parties that run them (``None``: nothing to do).

    ``secagg``: the public parameters of the secure aggregation the clients and the aggregator run
    around the steps (:class:`~sifl_ray.privacy.secagg.spec.SecAggSpec`): after its client step each client
    masks its upload, and the aggregator unmasks only the sum before its step. ``None``: uploads travel as
    the arm's coding leaves them.
    """

    client: ClientStep | None = None
    aggregator: AggregatorStep | None = None
    server: ServerStep | None = None
    secagg: Any = None


class Arm:
    """Base class of an arm: override what differs from plain FedAvg.

    Class attributes:
        kind: the name under which the arm is registered and listed in ``arms``.
        coding: :class:`~sifl_ray.specs.Coding` ``PLAIN``, ``M1`` or ``M2`` (see the module docstring).
        clip_key: the configuration key of the clip radius C its figures assume (``None``: no clipping).
        summary: one line for ``sifl describe`` and the README.
        paired_with: the arm whose global model this one's must equal up to round-off, by its name in
            ``arms`` (the SIFL arms and ``secagg``: ``fl``; ``None``: none): the runner plays that arm
            first in each round, the evaluator reports ``max_deviation`` from its model each round, and the
            run checks it against the bounds (:mod:`sifl_ray.arms.pairing`).
        uniform_weights: average the uploads with equal weights instead of FedAvg's |D_i| (a DP mean: the
            weights then reveal nothing and one client moves the sum by at most its clip).
        secure_aggregation: the uploads are masked so that the aggregator learns only their sum.
        settings: the configuration sections the arm owns, name → dataclass (``{"nbafl": NbaflConfig}``):
            registered with the arm, validated like every built-in section (a field's ``rule``, from
            :func:`sifl_ray.config.setting`, is its range or choice), read as ``ctx.cfg.<name>.<key>``.
            Arms that share a mechanism share its section (``dp_fedavg_secagg`` reads ``dp_fedavg``).
    """

    kind: ClassVar[str] = ""
    coding: ClassVar[Coding] = Coding.PLAIN
    clip_key: ClassVar[str | None] = None
    summary: ClassVar[str] = ""
    paired_with: ClassVar[str | None] = None
    uniform_weights: ClassVar[bool] = False
    #: its uploads travel masked under secure aggregation (:mod:`sifl_ray.parties.secure`): its steps then
    #: carry a :class:`~sifl_ray.privacy.secagg.spec.SecAggSpec` (``PartySteps.secagg``); plain coding only
    secure_aggregation: ClassVar[bool] = False
    settings: ClassVar[Mapping[str, type]] = MappingProxyType({})
    clips: ClassVar[str] = "models to ‖w_i‖"  # what its clip bounds, as the end-of-run message says it
    #: what a client's (plain) upload carries: its ``model`` w_i, or its ``update`` w_i − w^t (a key of
    #: :data:`UPLOADS`): the releases inherited from :class:`Arm` say it, and the attack suite scores the
    #: aggregator's reading of an upload against the one or the other
    uploads: ClassVar[str] = "model"
    #: the arm every other arm's final accuracy is compared with (the summary's ``delta_vs_fl_pp``): plain
    #: FedAvg; the first listed arm that declares it is the run's (:func:`sifl_ray.arms.pairing.baseline_arm`)
    baseline: ClassVar[bool] = False
    #: the matplotlib colour map of its family in the run's figures (:mod:`sifl_ray.plots`): arms that declare
    #: the same map are one family, shaded in the order of their ε (the SIFL modes); ``None``: a spare map of
    #: its own
    colormap: ClassVar[str | None] = None
    #: the label of its clients' noise streams (:class:`~sifl_ray.party_seeds.ClientNoiseSeeds`): with each
    #: client's secret seed, which already depends on the arm's name, it derives the noise a client step
    #: draws from :meth:`client_noise_seeds`; changing it changes every draw
    noise_stream: ClassVar[str] = "client-noise"
    #: its guarantee is stated under the zero-out relation (a client's update replaced by 0, participation
    #: public) rather than add/remove: the in-run audit then gives a left-out canary a zero update
    zero_out: ClassVar[bool] = False
    #: its guarantee releases every round, a round in which nobody took part too: the aggregator's step then
    #: runs on a zero sum and must noise it (central DP amplified by a secret sample); ``False``: such a
    #: round releases nothing new, the model stays as it was (which tells that nobody took part). Checked at
    #: set-up (:mod:`sifl_ray.arms.conformance`)
    every_round: ClassVar[bool] = False

    def instances(self, cfg: DictConfig) -> list[str]:
        """The arms this kind runs as in ``cfg`` (one, its kind, unless it sweeps a parameter)."""
        return [self.kind]

    def problems(self, cfg: DictConfig) -> list[str]:
        """Configuration problems only this arm has (each with its key, expectation and fix)."""
        return []

    def steps(self, ctx: ArmContext) -> PartySteps:
        """The steps every party runs for instance ``ctx.arm`` (plain FedAvg: none)."""
        return PartySteps()

    def releases(self) -> tuple[Release, ...]:
        """What each party releases to whom in one round: plain FedAvg's channels, the upload what the arm
        declares it uploads (:attr:`uploads`). An arm whose steps change what travels says so here."""
        return plain_releases(UPLOADS[self.uploads])

    def privacy(self, ctx: ArmContext) -> dict[str, Any] | None:
        """The privacy figures as the mechanism states them (``None``: it claims none). JSON-safe; keys
        ``epsilon_local`` / ``epsilon_broadcast`` / ``epsilon_global`` become TensorBoard metrics."""
        return None

    def realised_privacy(
        self, privacy: Mapping[str, Any], rounds: Sequence[Mapping[str, float]]
    ) -> dict[str, float]:
        """What the privacy that actually arrived gives, after ``rounds`` (the arm's recorded rounds, the one
        just played last; ``privacy``: its report): metrics beside the planned figures, such as
        ``privacy/epsilon_realised`` where a round carried less noise than planned. ``{}``: the planned
        figures hold whoever took part (the default: central noise, or none)."""
        return {}

    def client_noise_seeds(self, ctx: ArmContext) -> ClientNoiseSeeds:
        """Its clients' secret noise seeds for a run (under :attr:`noise_stream`), for a client step that adds
        noise (:func:`~sifl_ray.arms.steps.gaussian`, :func:`~sifl_ray.arms.steps.noise_share`): made in each
        client's worker, kept in ``ctx.key_dir``, never sent by the driver."""
        # deferred: numpy, which this module does not load otherwise
        from sifl_ray.party_seeds import ClientNoiseSeeds

        return ClientNoiseSeeds(
            key_seed=ctx.cfg.coding.key_seed, key_dir=ctx.key_dir, stream=self.noise_stream
        )

    def clip(self, cfg: DictConfig) -> float | None:
        """The clip radius C of ``clip_key`` (``None``: the arm does not clip)."""
        if self.clip_key is None:
            return None
        section, key = self.clip_key.split(".")
        return float(cfg[section][key])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, coding={self.coding.value!r})"


def plain_releases(upload: str) -> tuple[Release, ...]:
    """Plain FedAvg's channels (``upload`` says what a client's upload is under the arm's client step)."""
    return (
        Release("client", "aggregator", "upload", upload),
        Release("aggregator", "server", "aggregate", "the weighted average of the uploads"),
        Release("server", "clients", "broadcast", "the global model w^t"),
    )
