"""The identity code: ñ = n, ``P1 = P1L = I``, no kernel. Plain FL (FedAvg) runs through the same pipeline
with it, so that an SIFL run and its plain-FL twin differ only in the key: any difference in their numbers
is the coding's, never a second code path's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from sifl_ray.coding._common import ClientKeyView, on_device_of, prepare, zeros_like_rows
from sifl_ray.coding.base import CODING_DTYPE, KeyNorms, ServerKey

_CPU = torch.device("cpu")


@dataclass(frozen=True, eq=False)
class IdentityCore:
    """``P1 = P1L = I`` (a fresh float64 copy, so no caller ever aliases another party's tensor)."""

    n: int
    device: torch.device = _CPU

    @property
    def n_tilde(self) -> int:
        return self.n

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return on_device_of(prepare(x, self.n, "apply_P1", self.device).clone(), x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return on_device_of(prepare(x, self.n, "decode", self.device).clone(), x)

    def to(self, device: str | torch.device) -> IdentityCore:
        return IdentityCore(self.n, torch.device(device))


@dataclass(frozen=True, eq=False)
class IdentityKey(ServerKey):
    """Key 1 of plain FL: ``w~ = w``. Holds no secret; ``N1`` is n×0, so ``apply_N1`` of an empty ``r``
    returns zeros and any nonempty ``r`` is an error (there is nowhere to put noise)."""

    backend: ClassVar[str] = "identity"
    left_inverse: ClassVar[str] = "pinv"

    n: int
    epoch: int = 0
    core: IdentityCore | None = None

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"IdentityKey: n must be an integer ≥ 1; got {self.n!r}")
        if self.core is None:
            object.__setattr__(self, "core", IdentityCore(self.n))

    @property
    def n_tilde(self) -> int:  # type: ignore[override]
        return self.n

    @property
    def device(self) -> torch.device:
        return self.core.device

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.apply_P1(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.decode(x)

    def apply_N1(self, r: torch.Tensor) -> torch.Tensor:
        rr = prepare(r, 0, "apply_N1 (the identity code has no kernel: ñ − n = 0)", self.device)
        return on_device_of(zeros_like_rows(self.n, rr), r)

    def encode(self, w: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
        if r is not None and r.numel():
            raise ValueError("IdentityKey.encode: the identity code has no kernel, so it cannot carry noise")
        return self.apply_P1(w)

    def client_view(self) -> ClientKeyView:
        return ClientKeyView(self.core, self.backend, self.left_inverse, self.epoch)

    def norms(self) -> KeyNorms:
        ones = torch.ones(self.n, dtype=CODING_DTYPE)
        return KeyNorms(
            p1_row_l2=ones,
            p1_row_l1=ones.clone(),
            n1_row_l2=torch.zeros(self.n, dtype=CODING_DTYPE),
            n1_row_maxabs=torch.zeros(self.n, dtype=CODING_DTYPE),
            p1l_spectral=1.0,
            exact=True,
            note="identity code (plain FL): P1 = P1L = I and no noise, so no privacy from coding",
            p1p1l_row_l2=ones.clone(),
            p1p1l_exact=True,
        )

    @classmethod
    def depth_for(cls, *, n_tilde: int, rounds: int = 1, block_rows: int | None = None) -> float:
        return 1.0  # P1 = P1L = I: no transform arithmetic

    def transform_depth(self) -> float:
        return self.depth_for(n_tilde=self.n)

    def p1l_spectral(self) -> float:
        return 1.0

    def conditioning(self, *, p1l_norm: float, alpha: float) -> float:
        return 1.0

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        eye = torch.eye(self.n, dtype=CODING_DTYPE, device=self.device)
        return eye, eye.clone(), torch.zeros((self.n, 0), dtype=CODING_DTYPE, device=self.device)

    def to(self, device: str | torch.device) -> IdentityKey:
        return IdentityKey(self.n, self.epoch, self.core.to(device))

    def state_dict(self) -> dict:
        return {"backend": self.backend, "format": 1, "n": self.n, "epoch": self.epoch}

    @classmethod
    def from_state_dict(cls, state: dict, *, device: str | torch.device = "cpu") -> IdentityKey:
        if state.get("backend") != "identity":
            raise ValueError(f"not an identity key state (backend={state.get('backend')!r})")
        return cls(int(state["n"]), int(state.get("epoch", 0))).to(device)

    def __repr__(self) -> str:
        return f"IdentityKey(n={self.n}, epoch={self.epoch})"
