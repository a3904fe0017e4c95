"""The evaluator: a simulation device that decodes each arm's global model to report test metrics.

No real deployment has such a party: it holds the decoding views of both keys (``P1L`` and ``P2R``), which
in a deployment only the clients hold. It exists so that a simulation can report test accuracy for every
arm and the deviation of each SIFL arm from the paired plain FedAvg run. It never sends what it decodes to
any other party, and its reports contain metrics only.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F

from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, ClientServerKey
from sifl_ray.models import load_flat_params_

SIMULATION_ONLY = "evaluator: simulation device holding both decoding keys; no real deployment has it"


class EvaluatorRole:
    def __init__(
        self,
        *,
        model: torch.nn.Module,
        x_test: np.ndarray,
        y_test: np.ndarray,
        batch_size: int,
        device: torch.device,
    ):
        self.model = model.to(device).eval()
        # The test set as it came (on Ray: the object store's shared pages, not a copy of its own). Ray's
        # zero-copy arrays are read-only, which torch warns about: this role only reads them.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.x = torch.from_numpy(np.asarray(x_test))
            self.y = torch.from_numpy(np.asarray(y_test))
        self.batch_size = batch_size
        self.device = device
        self.views: dict[str, tuple[str, ClientServerKey | None, AggregatorKey | None]] = {}
        self.reference: dict[int, torch.Tensor] = {}  # plain fl model per round (paired deviation)
        self.paired: dict[str, bool] = {}
        self.label = SIMULATION_ONLY
        self.dtype = next(self.model.parameters()).dtype

    def set_arm(
        self,
        arm: str,
        mode: str,
        server_view: ClientServerKey | None,
        aggregator_view: AggregatorKey | None,
        *,
        paired: bool | None = None,
    ) -> None:
        """``paired``: report the deviation of this arm's model from fl's (default: coded arms)."""
        self.views[arm] = (mode, server_view, aggregator_view)
        self.paired[arm] = mode != "plain" if paired is None else paired

    def decode(self, arm: str, broadcast: torch.Tensor) -> torch.Tensor:
        """The plain global model behind an arm's broadcast."""
        mode, server_view, aggregator_view = self.views[arm]
        if mode == "plain":
            return broadcast.to(CODING_DTYPE)
        w_tilde = aggregator_view.strip(broadcast) if broadcast.dim() == 2 else broadcast
        return server_view.decode(w_tilde)

    @torch.no_grad()
    def evaluate(self, arm: str, t: int, broadcast: torch.Tensor) -> dict[str, float]:
        """Test accuracy and loss of the global model after round ``t``, and its deviation from fl's."""
        w = self.decode(arm, broadcast.to(self.device))
        load_flat_params_(self.model, w)
        correct, loss_sum = 0, 0.0
        for s in range(0, len(self.y), self.batch_size):
            xb = self.x[s : s + self.batch_size].to(self.device, self.dtype)
            yb = self.y[s : s + self.batch_size].to(self.device)
            logits = self.model(xb)
            loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(1) == yb).sum())
        out = {
            "test_accuracy": correct / len(self.y),
            "test_loss": loss_sum / len(self.y),
            "finite": float(bool(torch.isfinite(w).all())),
        }
        if arm == "fl":
            self.reference = {t: w.detach().clone()}
        elif t in self.reference and self.paired[arm]:
            out["max_deviation"] = float((w - self.reference[t]).abs().max())
        return out
