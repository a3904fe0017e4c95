"""A client's upload as a pipeline: train → client step → encode → check → accumulate.

Each client a worker hosts goes through the same stages in a round (:meth:`ClientWorker.train_round
<sifl_ray.parties.workers.ClientWorker.train_round>`):

1. **train** from the round's start (:class:`RoundStart`: the broadcast decoded once per round), one client
   at a time or all together (:mod:`sifl_ray.optim.vectorised`); a canary client does not train;
2. **client step**: the arm's :class:`~sifl_ray.arms.ClientStep` on the local model (clip, noise, ...);
3. **encode** with the clients' view of key 1 (coded arms; plain arms upload the model as it is);
4. **check**: nothing non-finite, mis-shaped or mis-stamped is added (:mod:`sifl_ray.parties.checks`);
5. **accumulate** into the worker's partial sums: in the clear (:class:`PlainSum`) or masked in a ring
   under secure aggregation (:class:`~sifl_ray.parties.secure.MaskedSum`), both with the same interface.

Where no stage needs a client's model on its own (no client step but the clip of the local model, no tap,
a plain arm or the shortcut below) and a chunk's clients each take one step of SGD or Momentum, the stages
run a chunk at a time (:func:`add_sums`): training gives the chunk's sum directly
(:meth:`~sifl_ray.optim.vectorised.ClientRound.summed`) and a bound on each client's norm, under which the
clip leaves every model as it is; the sum's finiteness checks every client's at once, and it is added as
one term (:meth:`PlainSum.add_summed`). A chunk whose sum is not finite goes through the stages one client
at a time, to find whose upload it is, and so does the rest of the round where a clip might bind.

What exists only in simulation sits beside the pipeline as taps, never on its path: the fault hook (what a
client really sends in a drill), the transcript recorder (what the aggregator receives) and the in-run
audit (:mod:`sifl_ray.parties.canaries`).

Fused uploads are affine in the local model, ``w~ + P1 (w_K − w_0)``, so when no tap needs each encoded
upload the worker sums ``|D_i| (w_K,i − w_0)`` and applies ``P1`` once per round (the *shortcut*): the same
sum as adding the individual encodings, with fewer rounding errors and one transform instead of one per
client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from sifl_ray.coding.base import CODING_DTYPE, ClientServerKey
from sifl_ray.parties.messages import Partial, WorkerReport

if TYPE_CHECKING:
    from sifl_ray.device import HostStaging
    from sifl_ray.optim.vectorised import ClientRound


@dataclass(frozen=True)
class RoundStart:
    """What every client of a round starts from, made once per round from the broadcast.

    Attributes:
        w0: the plain global model (float64, decoded with the clients' view of key 1 for a coded arm).
        start: ``w0`` in the model's dtype (every client starts from it: cast once, not once per client).
        coded: the key view that decodes and encodes, and the round's encoded start ``w~`` (``None``: a
            plain arm).
        length: the length of an upload (n, or ñ for a coded arm).
    """

    w0: torch.Tensor
    start: torch.Tensor
    coded: tuple[ClientServerKey, torch.Tensor] | None
    length: int


@dataclass
class Local:
    """One client's result through the pipeline's first three stages.

    Attributes:
        size: its FedAvg weight; ``loss``: its mean training loss (0 for a canary).
        model: its local model after the client step (float64), where the pipeline has it in the clear
            (plain arms, the shortcut, canaries); ``None`` when the training form encoded it directly.
        upload: what it sends (the model, or its encoding).
    """

    client: int
    size: float
    loss: float
    model: torch.Tensor | None
    upload: torch.Tensor


class Accumulator(Protocol):
    """Stage 5: a worker's running sum of its clients' uploads for one round."""

    shortcut: bool
    """It sums the local models' changes and encodes once (see the module docstring): the training form
    must then hand it the local model, not an encoded upload."""

    def add(self, local: Local, report: WorkerReport) -> str | None:
        """Add ``local``'s upload (weighted by its size); return why it was refused (``None``: added)."""
        ...

    def sent(self, local: Local) -> torch.Tensor:
        """What the aggregator receives of ``local``, as numbers (the recorder's and the audit's reading)."""
        ...


def all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of ``x`` is finite, as ``torch.isfinite(x).all()`` decides it.

    A sum is finite only if every term is (inf and nan propagate through addition), so one reduction
    settles the usual case; only a non-finite sum (a non-finite entry, or finite entries whose sum
    overflows) pays for the elementwise test, an order of magnitude slower on a large vector and, before
    this test, the largest per-client cost of a worker after the training steps themselves.
    """
    return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())


def count_step(report: WorkerReport, metrics: Mapping[str, float]) -> None:
    """One client's step metrics into the worker's report: ``clipped`` counted in ``clients/clipped``, each
    summed for the round's ``client/<name>`` mean (:func:`sifl_ray.arms.steps.client_metrics`)."""
    report.clipped += bool(metrics.get("clipped"))
    report.stepped += 1
    for name, value in metrics.items():
        report.step_metrics[name] = report.step_metrics.get(name, 0.0) + float(value)


#: How far below the clip radius C a client's bound on ``‖w_K,i‖`` must lie for its chunk to be summed.
#: Why a margin: the loop's float32 model and its float64 norm are within round-off of the exact norm the
#: bound holds (relative errors near 10⁻⁶ for float32 training), and 10⁻³ of C leaves no case where the
#: loop would clip a model the sum took unclipped.
CLIP_MARGIN = 1e-3


def add_sums(
    together: ClientRound,
    size: Callable[[int], float],
    radius: float | None,
    start: RoundStart,
    total: Accumulator,
    report: WorkerReport,
) -> set[int]:
    """Stages 1–5 a chunk at a time (the module docstring), for a worker whose caller has made sure that
    nothing needs a client's model on its own but the clip to ``radius`` (``None``: no clip): the chunks
    whose sum ``total`` took, their clients counted in ``report`` (``size``: a client's FedAvg weight).
    Returns those clients; the others go through the stages one at a time, and so does the rest of the
    round once a clip might bind (its chunks would then be summed for nothing)."""
    if not isinstance(total, PlainSum) or (start.coded is not None and not total.shortcut):
        return set()
    tic, added = time.perf_counter(), set()
    for i, members in enumerate(together.chunks):
        sizes = [size(c) for c in members]
        out = together.summed(i, sizes)
        if out is None:
            continue
        change, losses, reach = out
        if radius is not None and float(reach.max()) > radius * (1 - CLIP_MARGIN):
            break
        if not total.add_summed(sum(sizes), change):
            continue
        for client, weight, loss in zip(members, sizes, losses, strict=True):
            report.accept(client, weight, loss)
            if radius is not None:  # what the clip step says of a model it left alone
                count_step(report, {"clipped": 0.0})
        added.update(members)
    report.train_s += time.perf_counter() - tic
    return added


class PlainSum:
    """Stage 5 in the clear: ``Σ_i |D_i| · upload_i`` over the accepted clients, rows of every shard.

    With the shortcut (``shortcut``: a coded arm whose fused uploads nobody needs one by one) it sums the
    local models' changes ``|D_i| (w_K,i − w_0)`` and encodes once, at :meth:`partials`.
    """

    def __init__(self, start: RoundStart, *, shortcut: bool, device: torch.device) -> None:
        self.start, self.shortcut = start, shortcut
        self.sum = torch.zeros(start.length, dtype=CODING_DTYPE, device=device)
        self.delta = torch.zeros_like(start.w0) if shortcut else None
        self._change = torch.empty_like(start.w0) if shortcut else None  # one client's w_K − w_0
        self._base: torch.Tensor | None = None  # a summed chunk's start term (add_summed)

    def add(self, local: Local, report: WorkerReport) -> str | None:
        if self.delta is not None:
            assert self._change is not None and local.model is not None
            self.delta.add_(torch.sub(local.model, self.start.w0, out=self._change), alpha=local.size)
        else:
            self.sum.add_(local.upload.to(CODING_DTYPE), alpha=local.size)
        return None

    def add_summed(self, weight: float, change: torch.Tensor) -> bool:
        """A chunk of clients added as one term, where no client's model was formed
        (:meth:`~sifl_ray.optim.vectorised.ClientRound.summed`): ``weight`` = Σ|D_i| and ``change`` =
        Σ|D_i| (w_K,i − start), so their uploads' sum is ``weight · start + change``, or for the
        shortcut ``weight · (start − w_0) + change``.

        A sum is finite only if every term is (:func:`all_finite`), and a client's upload is finite
        exactly where its gradient is, so a finite ``change`` passes every client's check; ``False``
        (nothing added) when it is not, and the worker then checks the chunk's clients one by one.
        """
        if not all_finite(change):
            return False
        if self._base is None:  # once a round: where every client started (w_0 in the model's dtype)
            base = self.start.start.to(CODING_DTYPE)
            self._base = base - self.start.w0 if self.delta is not None else base
        (self.sum if self.delta is None else self.delta).add_(self._base, alpha=weight).add_(change)
        return True

    def sent(self, local: Local) -> torch.Tensor:
        return local.upload

    def partials(
        self,
        source: int,
        t: int,
        bounds: Sequence[tuple[int, int]],
        *,
        key_epoch: int,
        report: WorkerReport,
        host: HostStaging,
    ) -> list[Partial]:
        """One partial per aggregator shard (rows ``bounds``); the shortcut encodes its sum first:
        ``Σ|D_i| w~_i = w~ Σ|D_i| + P1 Σ|D_i| (w_K,i − w_0)``."""
        acc = self.sum
        if self.delta is not None and report.weight > 0:
            assert self.start.coded is not None
            tic = time.perf_counter()
            view, w_tilde = self.start.coded
            acc = w_tilde * report.weight + view.apply_P1(self.delta)
            report.encode_s += time.perf_counter() - tic
        acc = host.to_host(acc)  # out to the object store: the partials below are copies of it
        report.bytes_out = acc.numel() * acc.element_size()
        return [
            Partial(
                source=source,
                round=t,
                key_epoch=key_epoch,
                weighted_sum=acc[a:b].clone(),
                weight=report.weight,
                accepted=len(report.accepted),
            )
            for a, b in bounds
        ]
