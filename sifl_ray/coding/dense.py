"""The dense backend of key 1: the paper taken literally, explicit matrices, for n up to ~10,000.

``P1 = α·G`` with ``G`` an ñ×n Gaussian matrix with entries N(0, 1/ñ) (full column rank with probability
one, columns of norm ≈ 1, *not* orthogonal: the generic ``P1`` of Proposition 1). From the complete QR
factorisation ``G = [U1 U⊥] [R; 0]``:

* pinv:    ``P1L = R⁻¹U1ᵀ/α`` (the pseudo-inverse), ``N1 = β·U⊥`` (so ``col(N1) = col(P1)⊥``);
* oblique: ``P1L = pinv + K U⊥ᵀ`` with ``K`` = κ·(a Haar-random n×(ñ−n) matrix with orthonormal columns,
  or rows when ñ−n > n), and ``N1 = β(U⊥ − P1 K)``.

Check: ``P1L P1 = I`` since ``U⊥ᵀP1 = 0``; ``P1L N1 = β(0 − K + K − 0) = 0``. Every left inverse of ``P1``
has this form for some K, so this is the general case. It is the reference the fast backend is tested
against, and what the attack suite uses at small n. Its precision is worse than the fast backend's: the
condition number of a near-square Gaussian ``G`` grows like 2ñ/(ñ−n) (see ``norms().p1l_spectral``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from sifl_ray.coding._common import (
    ClientKeyView,
    KeyStream,
    Seed,
    check_left_inverse,
    check_positive,
    check_sizes,
    fresh_seed,
    on_device_of,
    prepare,
    resolve_kappa,
)
from sifl_ray.coding.base import KeyNorms, ServerKey
from sifl_ray.coding.roundoff import matrix_roundoff

DENSE_MAX_N = 12_000
# A BLAS dot product accumulates in many independent SIMD/blocked partial sums: a product of length L rounds
# about L/64 times per output (measured with MKL: errors ~8x below a sequential sum).
BLAS_LANES = 64


def dot_product_depth(length: int) -> float:
    """The precision model's D for a matrix product whose outputs are dot products of ``length`` terms."""
    return max(1.0, length / BLAS_LANES)


def gaussian_spectral_bound(cols: int, rows: int) -> float:
    """A high-probability upper bound on ``‖G‖₂`` for a rows×cols Gaussian ``G`` with entries N(0, 1/rows)
    (``P1 = αG`` per block): ``1 + √(min/rows) + 6/√rows`` (Davidson–Szarek, failure probability e⁻¹⁸), so
    the precision model needs no SVD of an ñ×n matrix."""
    return 1.0 + math.sqrt(min(cols, rows) / rows) + 6.0 / math.sqrt(rows)


def dense_code(
    *,
    n: int,
    m: int,
    alpha: float,
    beta: float,
    kappa: float,
    left_inverse: str,
    stream: KeyStream,
    label: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(P1, P1L, N1)`` of one dense code (see the module docstring); ``m = ñ − n`` may be 0."""
    n_tilde = n + m
    rng = stream.numpy_generator(f"{label}/G")
    G = torch.from_numpy(rng.standard_normal((n_tilde, n))) / math.sqrt(n_tilde)
    U, R = torch.linalg.qr(G, mode="complete")
    R1 = R[:n]
    U1, U_perp = U[:, :n], U[:, n:]
    P1 = alpha * G
    pinv = torch.linalg.solve_triangular(R1, U1.T, upper=True) / alpha
    if left_inverse == "pinv" or m == 0:
        return P1, pinv, beta * U_perp
    K = kappa * stream.orthonormal(f"{label}/K", n, m)
    return P1, pinv + K @ U_perp.T, beta * (U_perp - P1 @ K)


@dataclass(frozen=True, eq=False, repr=False)
class DenseCore:
    """``P1`` and ``P1L`` as explicit matrices (the client's part of a dense key)."""

    P1: torch.Tensor
    P1L: torch.Tensor

    @property
    def n(self) -> int:
        return self.P1.shape[1]

    @property
    def n_tilde(self) -> int:
        return self.P1.shape[0]

    @property
    def device(self) -> torch.device:
        return self.P1.device

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return on_device_of(self.P1 @ prepare(x, self.n, "apply_P1", self.device), x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return on_device_of(self.P1L @ prepare(x, self.n_tilde, "decode", self.device), x)

    def to(self, device: str | torch.device) -> DenseCore:
        return DenseCore(self.P1.to(device), self.P1L.to(device))


@dataclass(frozen=True, eq=False, repr=False)
class DenseServerKey(ServerKey):
    """Key 1, dense backend. Build it with :meth:`create` or :func:`~sifl_ray.coding.make_server_key`."""

    backend: ClassVar[str] = "dense"

    n: int
    n_tilde: int
    alpha: float
    beta: float
    left_inverse: str
    kappa: float
    epoch: int
    seed: Seed = field(repr=False)
    core: DenseCore = field(repr=False)
    N1: torch.Tensor = field(repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def create(
        cls,
        *,
        n: int,
        n_tilde: int,
        alpha: float,
        beta: float,
        left_inverse: str = "oblique",
        kappa: float | None = None,
        seed: Seed | None = None,
        epoch: int = 0,
        device: str | torch.device = "cpu",
    ) -> DenseServerKey:
        check_sizes(n, n_tilde)
        if n > DENSE_MAX_N:
            raise ValueError(
                f"the dense backend stores explicit ñ×n matrices; n = {n} is above {DENSE_MAX_N}. "
                "Use backend='fast' for large models"
            )
        check_left_inverse(left_inverse)
        alpha, beta = check_positive("alpha", alpha), check_positive("beta", beta)
        kappa = resolve_kappa(left_inverse, kappa, alpha)
        seed = fresh_seed(seed)
        stream = KeyStream(seed, "server-key", "dense", n, n_tilde, int(epoch))
        P1, P1L, N1 = dense_code(
            n=n,
            m=n_tilde - n,
            alpha=alpha,
            beta=beta,
            kappa=kappa,
            left_inverse=left_inverse,
            stream=stream,
            label="code",
        )
        return cls(
            n,
            n_tilde,
            alpha,
            beta,
            left_inverse,
            kappa,
            int(epoch),
            seed,
            DenseCore(P1, P1L).to(device),
            N1.to(device),
        )

    @property
    def device(self) -> torch.device:
        return self.core.device

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.apply_P1(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.decode(x)

    def apply_N1(self, r: torch.Tensor) -> torch.Tensor:
        return on_device_of(self.N1 @ prepare(r, self.n_tilde - self.n, "apply_N1", self.device), r)

    def roundoff(self):
        """Rigorous float64 error constants of this key (:mod:`sifl_ray.coding.roundoff`): scalars only.
        Costs one n×ñ×n product (the defect ‖P1L P1 − I‖): dense keys are for small n."""
        if "roundoff" not in self._cache:
            core = self.core
            self._cache["roundoff"] = matrix_roundoff([(core.P1[None], core.P1L[None], self.N1[None])])
        return self._cache["roundoff"]

    def client_view(self) -> ClientKeyView:
        return ClientKeyView(self.core, self.backend, self.left_inverse, self.epoch)

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.core.P1.clone(), self.core.P1L.clone(), self.N1.clone()

    def norms(self) -> KeyNorms:
        """Exact row norms from the matrices and ``‖P1L‖₂`` (computed once, cached on the key)."""
        if "norms" not in self._cache:
            P1, P1L, N1 = self.core.P1, self.core.P1L, self.N1
            gram = P1L @ P1L.T
            self._cache["norms"] = KeyNorms(
                p1_row_l2=torch.linalg.vector_norm(P1, dim=1).cpu(),
                p1_row_l1=P1.abs().sum(1).cpu(),
                n1_row_l2=torch.linalg.vector_norm(N1, dim=1).cpu(),
                n1_row_maxabs=N1.abs().amax(1).cpu(),
                # λmax of the n×n Gram matrix: exact like an SVD of P1L, and a symmetric eigenproblem is
                # far cheaper than an SVD of the n×ñ matrix.
                p1l_spectral=float(torch.linalg.eigvalsh(gram)[-1].clamp_min(0.0).sqrt()),
                exact=True,
                note="dense backend: exact norms of the explicit matrices (‖P1L‖₂ from λmax(P1L P1Lᵀ), "
                "‖P1^j P1L‖₂ from the same Gram matrix)",
                # ‖P1^j P1L‖₂² = P1^j (P1L P1Lᵀ) P1^jᵀ: no ñ×ñ product.
                p1p1l_row_l2=((P1 @ gram) * P1).sum(1).clamp_min(0.0).sqrt().cpu(),
                p1p1l_exact=True,
            )
        return self._cache["norms"]

    @classmethod
    def depth_for(cls, *, n_tilde: int, rounds: int = 1, block_rows: int | None = None) -> float:
        return dot_product_depth(n_tilde)

    def transform_depth(self) -> float:
        return self.depth_for(n_tilde=self.n_tilde)

    def conditioning(self, *, p1l_norm: float, alpha: float) -> float:
        # A near-square Gaussian P1 is ill-conditioned: the decode amplifies the signal's round-off too.
        return p1l_norm * alpha * gaussian_spectral_bound(self.n, self.n_tilde)

    def to(self, device: str | torch.device) -> DenseServerKey:
        return replace(self, core=self.core.to(device), N1=self.N1.to(device), _cache={})

    def state_dict(self) -> dict:
        return {
            "backend": self.backend, "format": 1, "n": self.n, "n_tilde": self.n_tilde, "alpha": self.alpha,
            "beta": self.beta, "left_inverse": self.left_inverse, "kappa": self.kappa, "epoch": self.epoch,
            "seed": self.seed,
        }  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: dict, *, device: str | torch.device = "cpu") -> DenseServerKey:
        if state.get("backend") != cls.backend:
            raise ValueError(f"not a dense-backend key state (backend={state.get('backend')!r})")
        kappa = state["kappa"] if state["left_inverse"] == "oblique" else None
        return cls.create(
            n=state["n"],
            n_tilde=state["n_tilde"],
            alpha=state["alpha"],
            beta=state["beta"],
            left_inverse=state["left_inverse"],
            kappa=kappa,
            seed=state["seed"],
            epoch=state["epoch"],
            device=device,
        )

    def __repr__(self) -> str:
        return (
            f"DenseServerKey(n={self.n}, n_tilde={self.n_tilde}, left_inverse={self.left_inverse!r}, "
            f"alpha={self.alpha:g}, beta={self.beta:g}, kappa={self.kappa:g}, epoch={self.epoch}, "
            f"device={str(self.device)!r})"
        )
