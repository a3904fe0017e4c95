"""Interfaces of the immersion codes (docs/method.md "SIFL M1", "SIFL M2", "Choosing the matrices").

A code is a value: an immutable key object with pure maps. Randomness (the noise ``r1``, ``R1``, ``R2``)
is always passed in as a generator, never drawn from global state, so the same key gives the same numbers in
any process. The parties draw their noise from :func:`sifl_ray.seeding.noise_generator` (Philox keyed by
their secret seed: the noise is what protects a release, and a seed known to the adversary removes it).
All coding arithmetic is float64 (docs/method.md "Precision").

Who holds what (docs/method.md "Parties"): the server holds a :class:`ServerKey` (``P1``, ``P1L``, ``N1``); a
client holds only ``ServerKey.client_view()`` (``P1`` and ``P1L``, which the target optimizer needs) and, in
M2, ``AggregatorKey.client_view()`` (``P2R``); the aggregator holds an :class:`AggregatorKey`. No other party
may receive key material.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import torch

from sifl_ray.config.names import NOISE_DISTRIBUTIONS

CODING_DTYPE = torch.float64

#: Where noise comes from: a NumPy generator (the parties' secret streams) or a ``torch.Generator``.
NoiseGenerator = np.random.Generator | torch.Generator

NoiseDistribution = Literal["gaussian", "laplace"]


@dataclass(frozen=True)
class NoiseSpec:
    """The law of a party's coding noise (``r1``/``R1`` for the server, ``R2`` for the aggregator).

    Attributes:
        distribution: ``"gaussian"`` (``scale`` is the standard deviation σ) or ``"laplace"`` (``scale`` is
            the Laplace scale b; its standard deviation is b·√2).
        scale: σ or b. Zero means no noise (the identity code and tests use it).
    """

    distribution: NoiseDistribution = "gaussian"
    scale: float = 0.0

    def sample(
        self,
        shape: tuple[int, ...],
        generator: NoiseGenerator,
        device: str | torch.device = "cpu",
    ) -> torch.Tensor:
        """Draw float64 noise of ``shape`` from ``generator``.

        A NumPy generator (the parties' secret streams, :func:`sifl_ray.seeding.noise_generator`) draws on
        the CPU (ziggurat normals; Laplace as ``b·(E1 − E2)`` with E1, E2 independent Exp(1), exact and with
        no logarithm of zero) and the tensor is moved to ``device``; a ``torch.Generator`` must live on
        ``device``. The same generator state gives the same numbers.
        """
        if self.distribution not in NOISE_DISTRIBUTIONS:
            raise ValueError(
                f"unknown noise distribution {self.distribution!r}; expected one of {NOISE_DISTRIBUTIONS}"
            )
        if self.scale == 0.0 or math.prod(shape) == 0:
            return torch.zeros(shape, dtype=CODING_DTYPE, device=device)
        if isinstance(generator, np.random.Generator):
            if self.distribution == "gaussian":
                out = generator.standard_normal(shape)
                out *= self.scale
            else:
                out = generator.standard_exponential(shape)
                out -= generator.standard_exponential(shape)
                out *= self.scale
            return torch.from_numpy(out).to(device)
        if self.distribution == "gaussian":
            out = torch.randn(shape, generator=generator, dtype=CODING_DTYPE, device=device)
            return out.mul_(self.scale)
        # Laplace: inverse CDF of Laplace(0, b) from U(-1/2, 1/2); exact in float64 except at |u| = 1/2.
        u = torch.rand(shape, generator=generator, dtype=CODING_DTYPE, device=device) - 0.5
        return -self.scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())


@dataclass(frozen=True)
class KeyNorms:
    """Row norms of a server key, the inputs of the DP formulas (docs/method.md "Differential privacy").

    Arrays have one entry per encoded coordinate j (length ñ). ``exact`` says whether they are exact (up to
    float64 round-off) or rigorous bounds; bounds are always on the conservative side for ε: upper bounds
    for ``P1`` norms and ``P1L`` spectral norm, lower bounds for ``N1`` norms. ``note`` explains how they
    were obtained, so reports can say it.

    ``p1p1l_row_l2`` is ``‖P1^j P1L‖₂``, row j of ``P1 P1L``: it scales the aggregator's ``R2`` noise in
    M2's broadcast ``W'`` (docs/method.md "SIFL M2"). It enters the std of the noise, so its conservative side
    is a lower bound; ``p1p1l_exact`` says which it is (``exact`` covers the other arrays). Empty means
    unknown: the accountant then credits no ``R2`` noise at all.
    """

    p1_row_l2: torch.Tensor
    p1_row_l1: torch.Tensor
    n1_row_l2: torch.Tensor
    n1_row_maxabs: torch.Tensor
    p1l_spectral: float
    exact: bool
    note: str = ""
    p1p1l_row_l2: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    p1p1l_exact: bool = False


@dataclass(frozen=True)
class AggregatorNorms:
    """Norms of the aggregator key π2 used by Theorems 1 and 2 (M2)."""

    p2_abs: torch.Tensor  # |P2^m| for m = 1..p
    p2r_l2: float  # ‖P2R‖₂
    n2_spectral: float  # ‖N2‖₂
    n2_col_l2: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # ‖N2^m‖₂, column m


class ClientServerKey(abc.ABC):
    """What a client holds of the server's key: ``P1`` and ``P1L`` (for the target optimizer), never ``N1``
    as such and never the power to draw the server's noise."""

    n: int
    n_tilde: int
    epoch: int

    @abc.abstractmethod
    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        """``P1 @ x`` for ``x`` of shape (n,) or (n, p); float64."""

    @abc.abstractmethod
    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """``P1L @ x`` for ``x`` of shape (ñ,) or (ñ, p); float64."""


class ServerKey(ClientServerKey):
    """Key 1 (π1, Proposition 1): ``w~ = P1 w + N1 r``, decoded by ``P1L`` with ``P1L P1 = I``,
    ``P1L N1 = 0``."""

    backend: str
    #: The coding options ``create`` takes beyond the common ones (``coding.block_size``, ...): what
    #: :func:`~sifl_ray.coding.keys.make_server_key` passes it.
    create_options: ClassVar[tuple[str, ...]] = ()
    left_inverse: str

    @abc.abstractmethod
    def apply_N1(self, r: torch.Tensor) -> torch.Tensor:
        """``N1 @ r`` for ``r`` of shape (ñ−n,) or (ñ−n, p)."""

    def encode(self, w: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
        """π1: ``P1 w + N1 r`` (Eq. privacymechanisms); ``r=None`` means no noise."""
        out = self.apply_P1(w)
        if r is not None:
            out = out + self.apply_N1(r)
        return out

    def reencode(self, x: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
        """M2 server step: ``P1 (P1L x) + N1 r`` for ``x`` of shape (ñ, p), without removing code 2."""
        return self.encode(self.decode(x), r)

    @abc.abstractmethod
    def client_view(self) -> ClientServerKey:
        """The part of this key a client may hold (``P1``, ``P1L``)."""

    @abc.abstractmethod
    def norms(self) -> KeyNorms:
        """Row norms for the DP accountant (exact, or conservative bounds; see :class:`KeyNorms`)."""

    @abc.abstractmethod
    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(P1, P1L, N1)`` as dense float64 matrices; only for small n (attacks, tests)."""

    @abc.abstractmethod
    def state_dict(self) -> dict:
        """Secret key material, for the owner's own checkpoint file only."""

    # -- what the precision model (:mod:`sifl_ray.coding.precision`) asks of a key ---------------------
    # Each backend answers for itself, so the model holds no table of backends.

    @classmethod
    @abc.abstractmethod
    def depth_for(cls, *, n_tilde: int, rounds: int = 1, block_rows: int | None = None) -> float:
        """The model's D for a key of this backend with these sizes, before any key exists (a configuration
        names only the backend); sizes a backend has no use for are ignored."""

    @abc.abstractmethod
    def transform_depth(self) -> float:
        """The model's D: how many roundings one output of an encode or a decode accumulates."""

    def p1l_spectral(self) -> float:
        """``‖P1L‖₂``: how much a decode amplifies an error in the encoded vector."""
        return float(self.norms().p1l_spectral)

    @abc.abstractmethod
    def conditioning(self, *, p1l_norm: float, alpha: float) -> float:
        """The model's ``cond``, the factor on the round-off of the signal ``P1 w``: ``‖P1L‖₂‖P1‖₂`` where
        the decode can amplify it, 1 for the orthogonal designs. ``p1l_norm`` and ``alpha`` are the values
        the model uses (this key's, unless the caller gave its own)."""


class AggregatorKey(abc.ABC):
    """Key 2 (π2, Proposition 2): ``W'_a = w~_a P2 + R2 N2``; clients strip it with ``P2R``."""

    p: int

    @abc.abstractmethod
    def encode(self, w_tilde: torch.Tensor, R2: torch.Tensor | None = None) -> torch.Tensor:
        """(ñ,) → (ñ, p): ``w~ P2 + R2 N2`` with ``R2`` of shape (ñ, p−1)."""

    @abc.abstractmethod
    def strip(self, W: torch.Tensor) -> torch.Tensor:
        """(ñ, p) → (ñ,): ``W P2R``."""

    @abc.abstractmethod
    def client_view(self) -> AggregatorKey:
        """A key holding only ``P2R`` (encode raises)."""

    @abc.abstractmethod
    def norms(self) -> AggregatorNorms:
        """Norms for Theorems 1 and 2."""

    @abc.abstractmethod
    def state_dict(self) -> dict:
        """Secret key material, for the aggregator's own checkpoint file only."""
