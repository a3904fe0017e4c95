"""Key 2 (π2, Proposition 2): the aggregator's code, for any p ≥ 2 (docs/method.md "SIFL M2").

From a Haar-random orthogonal p×p matrix ``U = [u, U⊥]``: ``P2 = γ uᵀ`` (1×p, small entries),
``P2R = u/γ`` (its right inverse, ``P2 P2R = uᵀu = 1``, ``‖P2R‖₂ = 1/γ``) and ``N2 = η U⊥ᵀ`` ((p−1)×p,
orthonormal rows scaled by η, ``N2 P2R = 0``). ``W'_a = w~_a P2 + R2 N2`` hides ``w~_a`` in a p-column
matrix; a client strips it with ``W' P2R``. Everything is p×p-sized, so one dense backend serves all n.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from sifl_ray.coding._common import (
    KeyStream,
    MissingKeyMaterial,
    Seed,
    check_positive,
    fresh_seed,
    on_device_of,
)
from sifl_ray.coding.base import CODING_DTYPE, AggregatorKey, AggregatorNorms
from sifl_ray.coding.roundoff import aggregator_roundoff


def _check_W(W: torch.Tensor, p: int, device: torch.device) -> torch.Tensor:
    if W.dim() != 2 or W.shape[1] != p:
        raise ValueError(f"strip: expected shape (ñ, {p}); got {tuple(W.shape)}")
    return W.to(device=device, dtype=CODING_DTYPE)


@dataclass(frozen=True, eq=False, repr=False)
class DenseAggregatorKey(AggregatorKey):
    """Key 2. Build it with :meth:`create` or :func:`~sifl_ray.coding.make_aggregator_key`."""

    is_client_view = False

    p: int
    gamma: float
    eta: float
    epoch: int
    seed: Seed = field(repr=False)
    P2: torch.Tensor = field(repr=False)  # (p,): the row vector P2
    P2R: torch.Tensor = field(repr=False)  # (p,): the column vector P2R
    N2: torch.Tensor = field(repr=False)  # (p − 1, p)

    @classmethod
    def create(
        cls,
        *,
        p: int,
        gamma: float,
        eta: float,
        seed: Seed | None = None,
        epoch: int = 0,
        device: str | torch.device = "cpu",
    ) -> DenseAggregatorKey:
        if not isinstance(p, int) or p < 2:
            raise ValueError(f"p must be an integer ≥ 2 (p − 1 ≥ 1 noise columns); got {p!r}")
        gamma, eta = check_positive("gamma", gamma), check_positive("eta", eta)
        seed = fresh_seed(seed)
        U = KeyStream(seed, "aggregator-key", p, int(epoch)).orthonormal("U", p, p)
        u = U[:, 0]
        return cls(
            p,
            gamma,
            eta,
            int(epoch),
            seed,
            (gamma * u).to(device),
            (u / gamma).to(device),
            (eta * U[:, 1:].T).contiguous().to(device),
        )

    @property
    def device(self) -> torch.device:
        return self.P2.device

    def encode(self, w_tilde: torch.Tensor, R2: torch.Tensor | None = None) -> torch.Tensor:
        if w_tilde.dim() != 1:
            raise ValueError(f"encode: expected w~ of shape (ñ,); got {tuple(w_tilde.shape)}")
        w = w_tilde.to(device=self.device, dtype=CODING_DTYPE)
        out = torch.outer(w, self.P2)
        if R2 is not None:
            if tuple(R2.shape) != (w.shape[0], self.p - 1):
                raise ValueError(
                    f"encode: expected R2 of shape ({w.shape[0]}, {self.p - 1}); got {tuple(R2.shape)}"
                )
            out.addmm_(R2.to(device=self.device, dtype=CODING_DTYPE), self.N2)
        return on_device_of(out, w_tilde)

    def strip(self, W: torch.Tensor) -> torch.Tensor:
        return on_device_of(_check_W(W, self.p, self.device) @ self.P2R, W)

    def roundoff(self):
        """Rigorous float64 error constants of key 2 (:mod:`sifl_ray.coding.roundoff`): scalars only."""
        return aggregator_roundoff(self)

    def client_view(self) -> AggregatorClientView:
        return AggregatorClientView(self.p, self.epoch, self.P2R)

    def norms(self) -> AggregatorNorms:
        return AggregatorNorms(
            p2_abs=self.P2.abs().cpu(),
            p2r_l2=float(torch.linalg.vector_norm(self.P2R)),
            n2_spectral=float(torch.linalg.matrix_norm(self.N2, ord=2)),
            n2_col_l2=torch.linalg.vector_norm(self.N2, dim=0).cpu(),
        )

    def to(self, device: str | torch.device) -> DenseAggregatorKey:
        return replace(self, P2=self.P2.to(device), P2R=self.P2R.to(device), N2=self.N2.to(device))

    def state_dict(self) -> dict:
        return {
            "backend": "dense-aggregator",
            "format": 1,
            "p": self.p,
            "gamma": self.gamma,
            "eta": self.eta,
            "epoch": self.epoch,
            "seed": self.seed,
        }

    @classmethod
    def from_state_dict(cls, state: dict, *, device: str | torch.device = "cpu") -> DenseAggregatorKey:
        if state.get("backend") != "dense-aggregator":
            raise ValueError(f"not an aggregator key state (backend={state.get('backend')!r})")
        return cls.create(
            p=state["p"],
            gamma=state["gamma"],
            eta=state["eta"],
            seed=state["seed"],
            epoch=state["epoch"],
            device=device,
        )

    def __repr__(self) -> str:
        return (
            f"DenseAggregatorKey(p={self.p}, gamma={self.gamma:g}, eta={self.eta:g}, epoch={self.epoch}, "
            f"device={str(self.device)!r})"
        )


@dataclass(frozen=True, eq=False, repr=False)
class AggregatorClientView(AggregatorKey):
    """What a client holds of key 2 (docs/method.md "Parties"): ``P2R`` only, to strip code 2. Encoding, norms
    and ``P2``/``N2`` are the aggregator's and raise :class:`MissingKeyMaterial`."""

    is_client_view = True

    p: int
    epoch: int
    P2R: torch.Tensor = field(repr=False)

    @property
    def device(self) -> torch.device:
        return self.P2R.device

    def encode(self, w_tilde: torch.Tensor, R2: torch.Tensor | None = None) -> torch.Tensor:
        raise MissingKeyMaterial("a client's view of key 2 holds only P2R; encoding needs P2 and N2")

    def strip(self, W: torch.Tensor) -> torch.Tensor:
        return on_device_of(_check_W(W, self.p, self.device) @ self.P2R, W)

    def client_view(self) -> AggregatorClientView:
        return self

    def norms(self) -> AggregatorNorms:
        raise MissingKeyMaterial(
            "a client's view of key 2 holds only P2R; the norms belong to the aggregator"
        )

    def to(self, device: str | torch.device) -> AggregatorClientView:
        return AggregatorClientView(self.p, self.epoch, self.P2R.to(device))

    def state_dict(self) -> dict:
        return {
            "backend": "aggregator-client-view",
            "format": 1,
            "p": self.p,
            "epoch": self.epoch,
            "P2R": self.P2R.cpu(),
        }

    def __repr__(self) -> str:
        return f"AggregatorClientView(p={self.p}, epoch={self.epoch})"
