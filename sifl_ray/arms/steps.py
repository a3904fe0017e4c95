"""Steps that compose: ``chain(clip(C), top_k(0.1), gaussian(σ, seeds))`` is one client step.

A step is a small picklable function of a party's vector and its context returning the vector it hands on
and its metrics, a mapping of names to numbers (``{"clipped": 1.0}``). Each party has its own context
(:mod:`sifl_ray.arms.base`): the client's (``start``: the round's global model; ``arm``, ``client``,
``t``), an aggregator shard's (``arm``, ``t``, ``shard``, ``bounds``, ``weight``, ``seed``) and the
server's (``previous``: the global model before the round; ``arm``, ``t``). As optax builds an optimizer
from small transforms, a party's mechanism is a :func:`chain` of steps, never a new class for each
combination. The built-in arms' client steps are ``clip(C)`` (``fl``, SIFL),
``chain(clip(C), gaussian(σ, seeds))`` (NbAFL), ``chain(to_update(), clip(C))`` (DP-FedAvg, secure
aggregation) and ``chain(to_update(), clip(C), noise_share(z, C, t, seeds))`` (distributed DP-FedAvg);
their aggregator steps DP-FedAvg's :class:`~sifl_ray.arms.dp_fedavg.CentralNoise` and distributed DP's
``fixed_denominator(qN)``; their server step ``add_update()``.

The metrics are logged under the arm by the party that ran the step: a client step's are averaged over the
round's clients as ``client/<name>`` (``client/clipped``: the fraction of clients clipped; a top-k step's
``client/sparsity``), and ``clipped`` is also counted in ``clients/clipped``, the figure the end-of-run
clipping warning reads; an aggregator step's are averaged over the shards as ``aggregator/<name>``
(``aggregator/noise_std``); a server step's are ``server/<name>`` (``server/clipped``).

torch is imported inside the calls: the arms' modules are read by the configuration validator, which must
stay free of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, overload

if TYPE_CHECKING:
    import torch

    from sifl_ray.arms.base import AggregatorStep, ClientStep, ServerStep


@dataclass(frozen=True)
class Chain:
    """Steps of one party run one after the other, each on the previous one's output, all with the
    party's context; the metrics of all of them (a name two steps report is summed). Built by
    :func:`chain`."""

    steps: tuple[Any, ...]

    def __call__(self, value: torch.Tensor, **context: Any) -> tuple[torch.Tensor, dict[str, float]]:
        metrics: dict[str, float] = {}
        for step in self.steps:
            value, got = step(value, **context)
            for name, number in got.items():
                metrics[name] = metrics.get(name, 0.0) + float(number)
        return value, metrics


@overload
def chain(*steps: ClientStep) -> ClientStep: ...
@overload
def chain(*steps: AggregatorStep) -> AggregatorStep: ...
@overload
def chain(*steps: ServerStep) -> ServerStep: ...
def chain(*steps: Any) -> Any:
    """One step that runs ``steps`` (all of one party) in order (a chain inside a chain is flattened; one
    step is itself)."""
    flat: list[Any] = []
    for step in steps:
        flat.extend(step.steps if isinstance(step, Chain) else (step,))
    out: Any = flat[0] if len(flat) == 1 else Chain(tuple(flat))
    return out


def for_canaries(step: ClientStep | None) -> ClientStep | None:
    """The client step the in-run audit's canaries run: ``step`` less every step with a true
    ``round_noise_share`` (a client's share of noise that the round's sum must carry in full, as
    :class:`NoiseShare`). The real clients' shares already carry all the noise the deployed arm adds; a
    canary adding one more would audit a noisier mechanism than the one deployed (docs/method.md "Auditing
    inside the run"). A client's own noise that protects its upload by itself (:class:`Gaussian`) stays.
    ``None``: nothing left to run."""
    if step is None:
        return None
    steps = step.steps if isinstance(step, Chain) else (step,)
    kept = [s for s in steps if not getattr(s, "round_noise_share", False)]
    return chain(*kept) if kept else None


@dataclass(frozen=True)
class Clip:
    """Scale the vector in place to ``‖v‖₂ ≤ C`` (the platform's one rule,
    :func:`sifl_ray.privacy.clipping.clip_norm_`): the local model, the ball every SIFL ε assumes, or after
    :func:`to_update` the update, DP-FedAvg's sensitivity. Metric ``clipped``: 1 where it had to scale.
    It reads no context, so any party can run it (a server clipping the average update before it adds it:
    ``chain(clip(C), add_update())``)."""

    clip: float

    def __call__(self, w: torch.Tensor, **context: Any) -> tuple[torch.Tensor, dict[str, float]]:
        # deferred: numpy, omegaconf, torch, which this module does not load otherwise
        from sifl_ray.privacy.clipping import clip_norm_

        return w, {"clipped": float(clip_norm_(w, self.clip))}


def clip(radius: float) -> Clip:
    """:class:`Clip` to ``‖v‖₂ ≤ radius``."""
    return Clip(float(radius))


@dataclass(frozen=True)
class ToUpdate:
    """Upload the update ``w_i − w^t`` instead of the model (in ``start``'s dtype, float64): what DP-FedAvg
    clips and the server adds back."""

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return w.to(start.dtype) - start, {}


def to_update() -> ToUpdate:
    """:class:`ToUpdate`."""
    return ToUpdate()


@dataclass(frozen=True)
class Gaussian:
    """Add ``N(0, σ² I)`` from the client's own secret stream (NbAFL's noise). The stream is
    :class:`~sifl_ray.party_seeds.ClientNoiseSeeds`' (made in the worker, never the run seed, which would let
    anyone holding the configuration subtract the noise), drawn on the CPU, so one seed gives one upload on
    any device; always ``n`` normals, whatever σ."""

    sigma: float
    seeds: Any = field(compare=False)  # sifl_ray.party_seeds.ClientNoiseSeeds

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor | None = None, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        import torch

        # deferred: numpy, omegaconf, torch, which this module does not load otherwise
        from sifl_ray.coding.base import CODING_DTYPE

        out = w.to(CODING_DTYPE).cpu()
        noise = torch.randn(out.shape, generator=self.seeds.generator(arm, client, t), dtype=torch.float64)
        return out.add_(noise, alpha=self.sigma).to(w.device), {}


def gaussian(sigma: float, seeds: Any) -> Gaussian:
    """:class:`Gaussian` noise of std ``sigma`` from ``seeds`` (a :class:`~sifl_ray.party_seeds.
    ClientNoiseSeeds`).

    Raises:
        ValueError: ``sigma`` is not a finite number ≥ 0.
    """
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    return Gaussian(sigma, seeds)


@dataclass(frozen=True)
class NoiseShare:
    """Distributed DP: add this client's share ``N(0, (zC)²/t)`` of the round's noise to its clipped update,
    from its own secret stream (as :class:`Gaussian`), so that a sum over t clients carries ``N(0, (zC)²)``
    (:func:`sifl_ray.privacy.dp_fedavg.distributed_noise_std`). A share of the round's noise
    (``round_noise_share``): the in-run audit's canaries leave it out (:func:`for_canaries`)."""

    round_noise_share: ClassVar[bool] = True
    noise_multiplier: float
    clip: float
    num_noisers: int
    seeds: Any = field(compare=False)  # sifl_ray.party_seeds.ClientNoiseSeeds

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor | None = None, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        # deferred: dp_accounting, numpy, omegaconf, torch, which this module does not load otherwise
        from sifl_ray.privacy.dp_fedavg import add_distributed_noise_

        noisy = w.cpu()  # the client's noise stream is a CPU generator (the same draws on any device)
        add_distributed_noise_(
            noisy,
            noise_multiplier=self.noise_multiplier,
            clip=self.clip,
            num_noisers=self.num_noisers,
            generator=self.seeds.generator(arm, client, t),
        )
        return noisy.to(w.device), {}


def noise_share(noise_multiplier: float, clip: float, num_noisers: int, seeds: Any) -> NoiseShare:
    """:class:`NoiseShare` of ``t = num_noisers`` shares of ``N(0, (zC)²)``."""
    return NoiseShare(float(noise_multiplier), float(clip), int(num_noisers), seeds)


@dataclass(frozen=True)
class FixedDenominator:
    """Aggregator step: the mean over the k clients in the round (``weight``, their number under equal
    weights) rescaled to the fixed denominator m = qN the DP-FedAvg accountant assumes, ``Σ Δ_i / m``: one
    client then moves the mean by at most C/m, whoever else was sampled."""

    expected_clients: float

    def __call__(
        self, average: torch.Tensor, *, weight: float, **context: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return average * (weight / self.expected_clients), {}


def fixed_denominator(expected_clients: float) -> FixedDenominator:
    """:class:`FixedDenominator` m = ``expected_clients`` (qN)."""
    return FixedDenominator(float(expected_clients))


@dataclass(frozen=True)
class AddUpdate:
    """Server step: the new global model is the previous one (``previous``) plus the average update."""

    def __call__(
        self, average: torch.Tensor, *, previous: torch.Tensor, **context: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return previous + average, {}


def add_update() -> AddUpdate:
    """:class:`AddUpdate`."""
    return AddUpdate()


def party_metrics(party: str, metrics: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The round's ``<party>/<name>`` metrics of an aggregator's or the server's step: each metric's mean
    over the calls that reported it (the aggregator's shards; the server's one call).

    Args:
        party: ``aggregator`` or ``server``.
        metrics: what each call of the step returned.
    """
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for got in metrics:
        for name, value in got.items():
            total[name] = total.get(name, 0.0) + float(value)
            count[name] = count.get(name, 0) + 1
    return {f"{party}/{name}": value / count[name] for name, value in total.items()}


def client_metrics(sums: Iterable[tuple[Mapping[str, float], int]]) -> dict[str, float]:
    """The round's ``client/<name>`` metrics: each step metric's mean over the clients that ran the step.

    Args:
        sums: per worker, the sum of each metric over its clients and how many clients ran the step.
    """
    total: dict[str, float] = {}
    count = 0
    for metrics, clients in sums:
        count += clients
        for name, value in metrics.items():
            total[name] = total.get(name, 0.0) + value
    return {f"client/{name}": value / count for name, value in total.items()} if count else {}
