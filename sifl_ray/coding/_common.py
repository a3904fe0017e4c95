"""Helpers shared by the key backends: secret randomness, argument checks, the client's view of key 1.

Key material is drawn from a :class:`KeyStream`: SHAKE-256 (an extendable-output function, so a
cryptographic pseudo-random stream) keyed by a 256-bit sub-key derived from the party's seed and the key's
name with :func:`sifl_ray.seeding.derive_bytes`. Why not ``torch.Generator``: its seed has 64 bits and
docs/method.md "Mixing" asks for at least 128; why not a statistical generator (PCG64): recovering a few key
entries (a known-plaintext attack does) would give its 128-bit state and with it the whole key. With SHAKE-256
each component (every permutation, sign vector, angle vector) is a separately named stream, so learning one
says nothing about the others.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from sifl_ray.coding.base import CODING_DTYPE, ClientServerKey
from sifl_ray.config.names import LEFT_INVERSES  # re-exported: spelled there, validation reads it
from sifl_ray.errors import SiflError
from sifl_ray.seeding import derive_bytes

Seed = int | bytes


class MissingKeyMaterial(SiflError, PermissionError):
    """Raised when a view of a key is asked for material its holder must not have (docs/method.md
    "Parties")."""


def fresh_seed(seed: Seed | None) -> Seed:
    """The seed to use: ``seed`` itself, or 256 bits from the operating system's secure source."""
    if seed is None:
        return secrets.token_bytes(32)
    if isinstance(seed, bool) or not isinstance(seed, int | bytes):
        raise TypeError(f"seed must be None, an int or bytes; got {type(seed).__name__}")
    return seed


class KeyStream:
    """Named cryptographic random streams for one key (see the module docstring).

    Args:
        seed: the party's secret seed (bytes, or an int for reproducible simulation only).
        names: the key's path, e.g. ``("server-key", "fast", epoch)``; different paths give independent keys.
    """

    def __init__(self, seed: Seed, *names: object):
        self._key = derive_bytes(seed, *names, nbytes=32)

    def _bytes(self, label: str, nbytes: int) -> bytes:
        return hashlib.shake_256(self._key + b"\x00" + label.encode()).digest(nbytes)

    def uint64(self, label: str, count: int) -> np.ndarray:
        return np.frombuffer(self._bytes(label, 8 * count), dtype=np.uint64)

    def uniform(self, label: str, count: int) -> torch.Tensor:
        """``count`` float64 draws from U[0, 1), 53 random bits each."""
        u = (self.uint64(label, count) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return torch.from_numpy(u)

    def signs(self, label: str, count: int) -> torch.Tensor:
        """``count`` independent random ±1.0 (float64)."""
        bits = np.unpackbits(np.frombuffer(self._bytes(label, (count + 7) // 8), dtype=np.uint8))[:count]
        return torch.from_numpy(1.0 - 2.0 * bits.astype(np.float64))

    def permutation(self, label: str, count: int) -> torch.Tensor:
        """A uniformly random permutation of ``range(count)`` (int64): the ranks of 64-bit random keys."""
        return torch.from_numpy(np.argsort(self.uint64(label, count), kind="stable").astype(np.int64))

    def normal(self, label: str, shape: tuple[int, ...]) -> torch.Tensor:
        """Standard normal float64 draws (Box–Muller on the uniform stream)."""
        count = math.prod(shape)
        half = (count + 1) // 2
        u = self.uniform(label, 2 * half)
        radius = torch.sqrt(-2.0 * torch.log1p(-u[:half]))  # 1 − u ∈ (0, 1]: log never sees 0
        angle = 2.0 * math.pi * u[half:]
        z = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)])[:count]
        return z.reshape(shape)

    def orthonormal(self, label: str, rows: int, cols: int) -> torch.Tensor:
        """A Haar-random ``rows × cols`` matrix, orthonormal columns (rows ≥ cols) or rows (rows < cols)."""
        tall = rows >= cols
        g = self.normal(label, (max(rows, cols), min(rows, cols)))
        q, r = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(r)).where(torch.diagonal(r) != 0, torch.ones(()))[None, :]
        return q if tall else q.T.contiguous()

    def numpy_generator(self, label: str) -> np.random.Generator:
        """A fast statistical generator (PCG64DXSM, 256-bit seed from this stream) for large dense
        simulation-only matrices, where a cryptographic stream of 10^8 normals would be slow."""
        entropy = int.from_bytes(self._bytes(label, 32), "little")
        return np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(entropy)))


def check_left_inverse(left_inverse: str) -> str:
    if left_inverse not in LEFT_INVERSES:
        raise ValueError(f"left_inverse must be one of {LEFT_INVERSES}; got {left_inverse!r}")
    return left_inverse


def check_sizes(n: int, n_tilde: int, *, allow_square: bool = False) -> None:
    if not isinstance(n, int) or not isinstance(n_tilde, int) or n < 1:
        raise ValueError(f"n must be an integer ≥ 1; got n={n!r}")
    if n_tilde < n + (0 if allow_square else 1):
        need = "ñ ≥ n" if allow_square else "ñ − n ≥ 1 (the noise needs a kernel)"
        raise ValueError(f"n_tilde must satisfy {need}; got n={n}, n_tilde={n_tilde}")


def check_positive(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return value


def resolve_kappa(left_inverse: str, kappa: float | None, alpha: float) -> float:
    """κ = ‖K‖₂ of the oblique part of ``P1L``; 0 for pinv (the argument is then ignored).

    The default for oblique is κ = 1/α: the kernel ``col(N1)`` then makes a 45° angle with ``col(P1)⊥``
    (tan θ = ακ), at a precision cost of only √2 in ‖P1L‖₂ = √(1/α² + κ²).
    """
    if left_inverse == "pinv":
        return 0.0
    if kappa is None:
        return 1.0 / alpha
    return check_positive("kappa (oblique left inverse)", kappa)


def prepare(x: torch.Tensor, rows: int, what: str, device: torch.device) -> torch.Tensor:
    """Check that ``x`` has shape (rows,) or (rows, p); return it as float64 on ``device``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in (1, 2) or x.shape[0] != rows:
        raise ValueError(f"{what}: expected shape ({rows},) or ({rows}, p); got {tuple(x.shape)}")
    return x.to(device=device, dtype=CODING_DTYPE)


def zeros_like_rows(rows: int, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros((rows, *like.shape[1:]), dtype=CODING_DTYPE, device=like.device)


class ClientCore(Protocol):
    """What a client's view needs of a backend: ``P1`` and ``P1L`` products, nothing about ``N1``."""

    n: int
    n_tilde: int

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor: ...

    def decode(self, x: torch.Tensor) -> torch.Tensor: ...

    def to(self, device: str | torch.device) -> ClientCore: ...


@dataclass(frozen=True, eq=False, repr=False)
class ClientKeyView(ClientServerKey):
    """The client's part of key 1 (docs/method.md "Parties"): ``apply_P1`` and ``decode`` only.

    It holds the backend's ``P1``/``P1L`` core and nothing else: no seed, no ``β``, no ``apply_N1``, so
    it cannot draw or place the server's noise. (``col(N1) = ker P1L`` is of course implied by ``P1L``;
    The table of docs/method.md "Parties" accepts that, since the target optimizer needs ``P1L``.)
    """

    core: ClientCore
    backend: str
    left_inverse: str
    epoch: int

    @property
    def n(self) -> int:  # type: ignore[override]
        return self.core.n

    @property
    def n_tilde(self) -> int:  # type: ignore[override]
        return self.core.n_tilde

    def apply_P1(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.apply_P1(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self.core.decode(x)

    def to(self, device: str | torch.device) -> ClientKeyView:
        return ClientKeyView(self.core.to(device), self.backend, self.left_inverse, self.epoch)

    def __repr__(self) -> str:
        return (
            f"ClientKeyView(backend={self.backend!r}, left_inverse={self.left_inverse!r}, n={self.n}, "
            f"n_tilde={self.n_tilde}, epoch={self.epoch})"
        )


def on_device_of(result: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Return ``result`` on the device of the caller's input (keys compute on their own device)."""
    return result if result.device == like.device else result.to(like.device)
