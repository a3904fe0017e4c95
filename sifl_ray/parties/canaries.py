"""The in-run audit at a client worker (simulation only: the auditor's instrument, never a protocol step).

Two things, both beside the upload pipeline (:mod:`sifl_ray.parties.upload`), neither on its path:

* **canary clients**: clients with no data that never train; each "trains" to the round's start plus its
  direction ``c_j`` (:func:`~sifl_ray.privacy.canary_draws.canary_directions`, from the seed of the
  directions) at the arm's canary norm, and its model then goes through the arm's client step and coding
  like any client's, less the steps that add a share of the round's noise
  (:func:`~sifl_ray.arms.steps.for_canaries`: the real clients' shares already carry the noise the deployed
  arm adds). The worker is told whether each canary it hosts is inserted, never the seed those bits derive
  from;
* **the aggregator's view**: for every upload the worker accepts, the cosine of what the aggregator reads
  of it with every audit direction, the largest per direction kept for the round (all the driver needs:
  the aggregator's best sighting).
"""

from __future__ import annotations

import torch

from sifl_ray.coding.base import CODING_DTYPE
from sifl_ray.parties.upload import Accumulator, Local, PlainSum, RoundStart
from sifl_ray.privacy.canary_draws import canary_directions


class WorkerAudit:
    """The auditor's part at one worker: its canary clients (client id → canary index ``j`` and whether it is
    inserted), their FedAvg weight, and the audit directions the aggregator's view is scored against
    (``seed``: the seed of the directions)."""

    def __init__(
        self, seed: bytes, canaries: dict[int, tuple[int, bool]], weight: float, directions: int = 0
    ) -> None:
        self.canaries = {int(c): int(j) for c, (j, _) in canaries.items()}
        self.inserted = {int(c): bool(bit) for c, (_, bit) in canaries.items()}
        self.seed, self.weight = seed, float(weight)
        self.directions = int(directions)  # canaries + nulls: the aggregator's view is scored here
        self._units: dict[int, torch.Tensor] = {}
        self._rows: torch.Tensor | None = None

    def __contains__(self, client: object) -> bool:
        return client in self.canaries

    def split(self, clients: list[int]) -> tuple[list[int], list[int]]:
        """The round's real clients and its canaries (which have no data: never trained)."""
        canaries = sorted(c for c in clients if c in self.canaries)
        return [c for c in clients if c not in self.canaries], canaries

    def model(self, client: int, w0: torch.Tensor, norm: float) -> torch.Tensor:
        """The canary's "trained" model: the round's start plus its direction at ``norm`` (float64); a
        canary left out (only sampled under a zero-out arm) stays at the start: it uploads no change."""
        if not self.inserted[client]:
            return w0.to(CODING_DTYPE).clone()
        unit = self._units.get(client)
        if unit is None:
            row = canary_directions(d=w0.numel(), k=1, seed=self.seed, clip=1.0, first=self.canaries[client])
            unit = self._units[client] = torch.from_numpy(row[0])
        return w0.to(CODING_DTYPE) + norm * unit.to(w0.device)

    def sighting(self, best: torch.Tensor | None, reading: torch.Tensor) -> torch.Tensor | None:
        """The cosine of ``reading`` (what the aggregator reads of one upload: the update it sees in the
        clear, decodes with a colluding client's ``P1L``, or a masked input read as numbers) with every
        audit direction, folded into ``best`` (the round's largest so far per direction)."""
        if not self.directions:
            return best
        if self._rows is None or self._rows.shape[1] != reading.numel():
            rows = canary_directions(d=reading.numel(), k=self.directions, seed=self.seed, clip=1.0)
            self._rows = torch.from_numpy(rows)
        reading = reading.detach().to("cpu", CODING_DTYPE).reshape(-1)
        norm = float(torch.linalg.vector_norm(reading))
        cos = self._rows @ reading / norm if norm > 0 else torch.zeros(self.directions, dtype=CODING_DTYPE)
        return cos if best is None else torch.maximum(best, cos)


def aggregator_reading(uploads: str, start: RoundStart, local: Local, total: Accumulator) -> torch.Tensor:
    """What the aggregator reads of an accepted upload (the audit's view): a masked input as numbers, else the
    update (``uploads``: what a plain arm's upload carries, the ``model`` or its ``update``), decoded with a
    colluding client's ``P1L`` when it is coded."""
    if not isinstance(total, PlainSum):
        return total.sent(local)
    if total.shortcut:
        assert local.model is not None
        return local.model - start.w0
    if start.coded is not None:
        return start.coded[0].decode(local.upload.to(CODING_DTYPE)) - start.w0
    return local.upload - start.w0 if uploads == "model" else local.upload
