"""Client steps that compose: ``chain(clip(C), top_k(0.1), gaussian(σ, seeds))`` is one client step.

A client step is a small picklable function of the client's vector and its context (``start``: the round's
global model; ``arm``, ``client``, ``t``) returning the vector to upload and its metrics, a mapping of
names to numbers (``{"clipped": 1.0}``). As optax builds an optimizer from small transforms, an arm's
client mechanism is a :func:`chain` of steps, never a new class for each combination (STYLE habit 14): the
built-in arms are ``clip(C)`` (``fl``, SIFL), ``chain(clip(C), gaussian(σ, seeds))`` (NbAFL),
``chain(to_update(), clip(C))`` (DP-FedAvg, secure aggregation) and ``chain(to_update(), clip(C),
noise_share(z, C, t, seeds))`` (distributed DP-FedAvg).

Each metric a step returns is averaged over the round's clients and logged under the arm as
``client/<name>`` (``client/clipped``: the fraction of clients clipped; a top-k step's ``client/sparsity``);
``clipped`` is also counted in ``clients/clipped``, the figure the end-of-run clipping warning reads.

torch is imported inside the calls: the arms' modules are read by the configuration validator, which must
stay free of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from sifl_ray.arms.base import ClientStep


@dataclass(frozen=True)
class Chain:
    """Client steps run one after the other, each on the previous one's output; the metrics of all of them
    (a name two steps report is summed). Built by :func:`chain`."""

    steps: tuple[ClientStep, ...]

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        metrics: dict[str, float] = {}
        for step in self.steps:
            w, got = step(w, start=start, arm=arm, client=client, t=t)
            for name, value in got.items():
                metrics[name] = metrics.get(name, 0.0) + float(value)
        return w, metrics


def chain(*steps: ClientStep) -> ClientStep:
    """One client step that runs ``steps`` in order (a chain inside a chain is flattened; one step is
    itself)."""
    flat: list[ClientStep] = []
    for step in steps:
        flat.extend(step.steps if isinstance(step, Chain) else (step,))
    return flat[0] if len(flat) == 1 else Chain(tuple(flat))


@dataclass(frozen=True)
class Clip:
    """Scale the vector in place to ``‖v‖₂ ≤ C`` (the platform's one rule,
    :func:`sifl_ray.privacy.clipping.clip_norm_`): the local model, the ball every SIFL ε assumes, or after
    :func:`to_update` the update, DP-FedAvg's sensitivity. Metric ``clipped``: 1 where it had to scale."""

    clip: float

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor | None = None, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
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
    (:func:`sifl_ray.privacy.dp_fedavg.distributed_noise_std`)."""

    noise_multiplier: float
    clip: float
    num_noisers: int
    seeds: Any = field(compare=False)  # sifl_ray.party_seeds.ClientNoiseSeeds

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor | None = None, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
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
