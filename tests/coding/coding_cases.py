"""Shared builders for the coding tests: every backend × left inverse through one constructor."""

from __future__ import annotations

import torch

from sifl_ray.coding import NoiseSpec, ServerKey, make_server_key
from sifl_ray.coding.precision import predict_decode_error

CASES = [
    ("identity", "pinv"),
    ("dense", "pinv"),
    ("dense", "oblique"),
    ("fast", "pinv"),
    ("fast", "oblique"),
    ("block", "pinv"),
    ("block", "oblique"),
]
CODED = [c for c in CASES if c[0] != "identity"]


def case_id(case: tuple[str, str]) -> str:
    return "-".join(case)


def make_key(
    backend: str,
    left_inverse: str,
    *,
    n: int,
    m: int,
    seed: int = 0,
    alpha: float = 1e-2,
    beta: float = 10.0,
    **kwargs,
) -> ServerKey:
    """A key of ``backend`` with ñ = n + m (ñ = n for identity)."""
    n_tilde = n if backend == "identity" else n + m
    kwargs.setdefault("block_size", 8)
    return make_server_key(
        n=n, n_tilde=n_tilde, backend=backend, left_inverse=left_inverse, alpha=alpha, beta=beta, seed=seed,
        **kwargs,
    )  # fmt: skip


def bound(key: ServerKey, *, sigma: float, w_max: float, scheme: str = "M1", **kwargs) -> float:
    """The precision model's bound for ``key`` with Gaussian noise of std ``sigma``."""
    return predict_decode_error(
        key=key, noise=NoiseSpec("gaussian", sigma), w_max=w_max, scheme=scheme, **kwargs
    ).predicted_max_error


def rand(shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(shape, generator=gen, dtype=torch.float64)
