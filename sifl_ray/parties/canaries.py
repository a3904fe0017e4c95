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

    def rows(self, d: int) -> torch.Tensor:
        """The audit directions (canaries', then nulls') for readings of ``d`` entries, each of norm 1,
        drawn once per length (a coded arm reads ñ entries, a plain one n)."""
        if self._rows is None or self._rows.shape[1] != d:
            self._rows = torch.from_numpy(canary_directions(d=d, k=self.directions, seed=self.seed, clip=1.0))
        return self._rows

    def sightings(self) -> Sightings | None:
        """The round's aggregator's view, to which each accepted upload's reading is added; ``None`` when
        this worker scores none (no directions)."""
        return Sightings(self) if self.directions else None


#: The bytes of readings scored together (at most :data:`BLOCK_READINGS` of them): one product of the
#: directions' matrix with a block of readings instead of one pass over the whole matrix per upload, which
#: at a few thousand canaries is hundreds of MB read for every upload.
BLOCK_BYTES = 32 * 2**20
BLOCK_READINGS = 256


class Sightings:
    """The aggregator's best sighting of each audit direction in one round: the largest cosine over the
    uploads it read, of what it reads of each (:func:`aggregator_reading`) with every direction. The readings
    are copied into a block as they come (an upload may live in a buffer the next client reuses) and scored a
    block at a time; a zero reading scores 0 with every direction."""

    def __init__(self, audit: WorkerAudit) -> None:
        self._audit = audit
        self._block: torch.Tensor | None = None  # readings × entries, float64
        self._used = 0
        self._best: torch.Tensor | None = None

    def add(self, reading: torch.Tensor) -> None:
        """Score ``reading`` (any dtype or device) with the round's others."""
        flat = reading.detach().reshape(-1)
        if self._block is not None and self._block.shape[1] != flat.numel():
            self._score()  # another length: the block so far is scored with its own directions
            self._block = None
        if self._block is None:
            size = max(1, min(BLOCK_READINGS, BLOCK_BYTES // (8 * flat.numel())))
            self._block = torch.empty(size, flat.numel(), dtype=CODING_DTYPE)
        self._block[self._used].copy_(flat)  # to the CPU, in float64
        self._used += 1
        if self._used == self._block.shape[0]:
            self._score()

    def best(self) -> torch.Tensor | None:
        """The largest cosine per direction over every reading added (``None``: none was)."""
        self._score()
        return self._best

    def _score(self) -> None:
        if not self._used:
            return
        assert self._block is not None
        readings = self._block[: self._used]
        norms = torch.linalg.vector_norm(readings, dim=1)
        dots = self._audit.rows(readings.shape[1]) @ readings.T
        cos = torch.where(norms > 0, dots / torch.where(norms > 0, norms, 1.0), 0.0)
        top = cos.amax(dim=1)
        self._best = top if self._best is None else torch.maximum(self._best, top)
        self._used = 0


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
