"""The evaluator: a simulation device that decodes each arm's global model to report test metrics.

No real deployment has such a party: it holds the decoding views of both keys (``P1L`` and ``P2R``), which
in a deployment only the clients hold. It exists so that a simulation can report test accuracy for every
arm and the deviation of each SIFL arm from the paired plain FedAvg run. It never sends what it decodes to
any other party, and its reports contain metrics only.

It computes where the configuration puts it (``ray.evaluator_gpus``: on the CPU by default); on a GPU the
test set is copied there once, and an evaluation reads its figures back once. Its host
(:class:`EvaluatorHost`) keeps the test set and a model in a process of its own, so that evaluating one arm
overlaps the next arm's training.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, ClientServerKey
from sifl_ray.device import on_device, resolve_device
from sifl_ray.models import load_flat_params_
from sifl_ray.optim.trainer import loss_values
from sifl_ray.parties.process import Host, initial_model, memory, pick_device, placement, prepare_process
from sifl_ray.privacy.canary_draws import canary_directions
from sifl_ray.specs import Coding, ModelSpec

SIMULATION_ONLY = "evaluator: simulation device holding both decoding keys; no real deployment has it"


class Evaluator(Host):
    """Tests the global model of each arm on the held-out set; under M2 it holds key 2's decoder, the party
    the paper lets see the model."""

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        x_test: np.ndarray,
        y_test: np.ndarray,
        batch_size: int,
        device: torch.device,
    ):
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        # The test set as it came (on Ray: the object store's shared pages, not a copy of its own), moved to
        # the evaluator's device once (a no-op on the CPU): no test batch crosses from the host per
        # evaluation. Ray's zero-copy arrays are read-only, which torch warns about: this role only reads.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.x = torch.from_numpy(np.asarray(x_test)).to(self.device)
            self.y = torch.from_numpy(np.asarray(y_test)).to(self.device)
        self.batch_size = batch_size
        self.views: dict[str, tuple[ClientServerKey | None, AggregatorKey | None]] = {}
        # a reference arm's model of its latest round (the paired deviation), and each arm's reference
        self.reference: dict[str, dict[int, torch.Tensor]] = {}
        self.paired: dict[str, str | None] = {}
        self.label = SIMULATION_ONLY
        self.dtype = next(self.model.parameters()).dtype
        self.directions: torch.Tensor | None = None  # in-run audit: unit canary directions, then the nulls

    def set_audit(self, seed: bytes, canaries: int, nulls: int, n: int) -> None:
        """Audit every arm with ``canaries`` canary directions and ``nulls`` directions never inserted
        (:func:`~sifl_ray.privacy.canary_draws.canary_directions` from the auditor's ``seed``: the nulls
        are the indices past the canaries). Held as one (k + m) × n float64 matrix: O((k + m)·n) memory and
        one product per evaluation."""
        rows = canary_directions(d=n, k=canaries + nulls, seed=seed, clip=1.0)
        self.directions = torch.from_numpy(rows).to(self.device)

    def set_arm(
        self,
        arm: str,
        coding: Coding,
        server_view: ClientServerKey | None,
        aggregator_view: AggregatorKey | None,
        *,
        paired: str | None = None,
    ) -> None:
        """``paired``: the arm whose model this arm's is measured against each round (the arm's declared
        reference, :func:`sifl_ray.arms.reference_of`; ``None``: no deviation is reported)."""
        self.views[arm] = (on_device(server_view, self.device), on_device(aggregator_view, self.device))
        self.paired[arm] = paired

    def plain_model(self, arm: str, broadcast: torch.Tensor, coding: Coding) -> torch.Tensor:
        """The plain global model behind ``broadcast`` (simulation only), on the host: what leaves a party
        is never a device tensor (unpickled in the driver, it would land on the driver's GPU)."""
        return self.decode(arm, broadcast.to(self.device), coding).cpu()

    def decode(self, arm: str, broadcast: torch.Tensor, coding: Coding) -> torch.Tensor:
        """The plain global model behind a broadcast of ``arm`` in ``coding`` (the broadcast's own: an M2
        arm's is M1 until its first aggregate)."""
        server_view, aggregator_view = self.views[arm]
        if not coding.coded:
            return broadcast.to(CODING_DTYPE)
        assert server_view is not None, f"{arm}: a coded arm's evaluator holds the clients' view of key 1"
        w_tilde = broadcast
        if coding.aggregator_encodes:  # code 2 on: strip it first
            assert aggregator_view is not None, f"{arm}: an M2 evaluator holds the clients' view of key 2"
            w_tilde = aggregator_view.strip(broadcast)
        return server_view.decode(w_tilde)

    @torch.no_grad()
    def evaluate(
        self,
        arm: str,
        t: int,
        broadcast: torch.Tensor,
        coding: Coding,
        previous: torch.Tensor | None = None,
        previous_coding: Coding | None = None,
    ) -> dict[str, float]:
        """Test accuracy and loss of the global model after round ``t``, and its deviation from its
        reference's (the reference's model of round ``t`` must be evaluated first: the runner plays each
        reference first, see :func:`sifl_ray.arms.play_order`).

        ``previous`` (the round's broadcast), when the run audits: ``audit`` holds the inner products of
        the released change ``Δ_t = w^{t+1} − w^t`` with every audit direction and ``‖Δ_t‖`` (what the
        driver's :class:`~sifl_ray.privacy.canaries.CanaryAudit` scores). ``coding`` and ``previous_coding``:
        each broadcast's own (:meth:`decode`)."""
        w = self.decode(arm, broadcast.to(self.device), coding)
        load_flat_params_(self.model, w)
        losses, hits = [], []  # per batch, on the device: read once at the end, not twice per batch
        for s in range(0, len(self.y), self.batch_size):
            xb = self.x[s : s + self.batch_size].to(self.device, self.dtype)
            yb = self.y[s : s + self.batch_size]
            logits = self.model(xb)
            losses.append(F.cross_entropy(logits, yb, reduction="sum"))
            hits.append((logits.argmax(1) == yb).sum())
        loss_sum = 0.0
        for value in loss_values(losses):  # summed in batch order on the host
            loss_sum += value
        correct = int(torch.stack(hits).sum()) if hits else 0
        out: dict[str, Any] = {
            "test_accuracy": correct / len(self.y),
            "test_loss": loss_sum / len(self.y),
            "finite": float(bool(torch.isfinite(w).all())),
        }
        if previous is not None and self.directions is not None:
            assert previous_coding is not None, f"{arm}: the previous broadcast comes with its coding"
            change = w - self.decode(arm, previous.to(self.device), previous_coding)
            out["audit"] = {
                "dots": (self.directions @ change).cpu().tolist(),
                "norm": float(torch.linalg.vector_norm(change)),
            }
        if arm in self.paired.values():  # a reference: keep its round's model for the arms paired with it
            self.reference[arm] = {t: w.detach().clone()}
        reference = self.reference.get(self.paired.get(arm) or "", {})
        if t in reference:
            out["max_deviation"] = float((w - reference[t]).abs().max())
        return out

    def sum_error(self, arm: str, t: int, num_shards: int, *vectors: torch.Tensor) -> float:
        """Secure aggregation, simulation only: ``max_j |decoded sum − exact sum|`` of round ``t``.

        ``vectors``: first the ``num_shards`` aggregator shards' decoded rows (in order), then each worker's
        float64 sum of what its clients encoded (after the codec's clip). Their difference is the ring's
        whole quantisation error, which :meth:`~sifl_ray.privacy.secagg.FixedPointCodec.sum_error_bound`
        bounds (plus the float64 rounding of the exact sums themselves). No deployment has these sums: the
        workers send them to this simulation device only.
        """
        decoded = torch.cat([v.to(CODING_DTYPE) for v in vectors[:num_shards]])
        exact = torch.stack([v.to(CODING_DTYPE) for v in vectors[num_shards:]]).sum(0)
        return float((decoded - exact).abs().max())


class EvaluatorHost(Evaluator):
    """The evaluator's process: the test set, and the configured model built from the run's seed."""

    def __init__(self, data: dict[str, Any], model: ModelSpec, seed: int, batch_size: int, threads: int = 1):
        prepare_process(threads)
        net = initial_model(model, seed)
        device, self.fallback = pick_device()
        super().__init__(
            model=net,
            x_test=np.asarray(data["x_test"]),
            y_test=np.asarray(data["y_test"]),
            batch_size=batch_size,
            device=device,
        )

    def placement(self) -> dict[str, Any]:
        """Where the evaluator runs and computes (:func:`~sifl_ray.parties.process.placement`)."""
        return placement(self.device, self.model, self.x, self.views, fallback=self.fallback)

    def memory(self) -> dict[str, Any]:
        return memory(self.device)
