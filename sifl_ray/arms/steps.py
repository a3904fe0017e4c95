"""Client steps the built-in arms share (picklable: they travel to the client workers with the arm's set-up).

torch is imported inside the calls: the arms' modules are read by the configuration validator, which must
stay free of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ClipModel:
    """Clip the local model to ``‖w_i‖₂ ≤ C`` in place (the ball every SIFL ε assumes, ``privacy.clip``)."""

    clip: float

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor | None = None, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, bool]:
        from sifl_ray.privacy.clipping import clip_norm_

        return w, clip_norm_(w, self.clip)


@dataclass(frozen=True)
class ClipAndNoise:
    """NbAFL's client mechanism: clip to ``‖w_i‖₂ ≤ C``, add ``N(0, σ² I)`` from the client's own secret
    stream (:class:`~sifl_ray.party_seeds.ClientNoiseSeeds`: made in the worker, never the run seed,
    which would let anyone holding the configuration subtract the noise)."""

    clip: float
    sigma: float
    seeds: Any = field(compare=False)  # sifl_ray.party_seeds.ClientNoiseSeeds

    def __call__(
        self, w: torch.Tensor, *, start: torch.Tensor | None = None, arm: str, client: int, t: int
    ) -> tuple[torch.Tensor, bool]:
        import torch

        from sifl_ray.coding.base import CODING_DTYPE
        from sifl_ray.privacy.nbafl import privatize_upload

        clipped = bool(torch.linalg.vector_norm(w) > self.clip)
        out = privatize_upload(
            w.to(CODING_DTYPE).cpu(),
            clip=self.clip,
            sigma=self.sigma,
            generator=self.seeds.generator(arm, client, t),
        )
        return out.to(w.device), clipped
