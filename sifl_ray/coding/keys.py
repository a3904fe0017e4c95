"""The registry of key-1 backends and the factories: configuration code names a backend, never a class."""

from __future__ import annotations

import torch

from sifl_ray.coding._common import Seed
from sifl_ray.coding.aggregator import DenseAggregatorKey
from sifl_ray.coding.base import AggregatorKey, ServerKey
from sifl_ray.coding.block import BlockServerKey
from sifl_ray.coding.dense import DenseServerKey
from sifl_ray.coding.fast import FastServerKey
from sifl_ray.coding.identity import IdentityKey
from sifl_ray.registry_names import CODING_BACKENDS

#: Every backend of key 1, by the name a configuration and a key's state use.
SERVER_KEYS: dict[str, type[ServerKey]] = {
    "identity": IdentityKey,
    "dense": DenseServerKey,
    "fast": FastServerKey,
    "block": BlockServerKey,
}
BACKENDS = CODING_BACKENDS  # the same names, spelled once where validation reads them without torch
DEFAULT_LEFT_INVERSE = "oblique"


def server_key_class(backend: str) -> type[ServerKey]:
    """The key class of ``backend``; a ValueError naming the choices for an unknown one."""
    if backend not in SERVER_KEYS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    return SERVER_KEYS[backend]


def transform_depth(backend: str, *, n_tilde: int, rounds: int = 1, block_rows: int | None = None) -> float:
    """The precision model's D for a backend known only by name (a configuration, before its key exists).

    fast: ``log₂ L`` butterfly levels plus ~4 for signs and Givens, per round; dense: a dot product of
    length ñ, block: of length (block height, ñ when not given), each divided by 64 because BLAS accumulates
    a dot product in many independent SIMD/blocked partial sums (measured with MKL: errors ~8x below a
    sequential sum); identity: 1. A key says its own: ``key.transform_depth()``.
    """
    return server_key_class(backend).depth_for(n_tilde=n_tilde, rounds=rounds, block_rows=block_rows)


def make_server_key(
    *,
    n: int,
    n_tilde: int,
    backend: str,
    left_inverse: str = DEFAULT_LEFT_INVERSE,
    alpha: float | None = None,
    beta: float | None = None,
    kappa: float | None = None,
    block_size: int = 64,
    seed: Seed | None = None,
    epoch: int = 0,
    device: str | torch.device = "cpu",
    rounds: int = 1,
    perm_block: int = 1,
) -> ServerKey:
    """Key 1 (π1) of ``backend`` ∈ {identity, dense, fast, block}.

    Args:
        n, n_tilde: model size and encoded size (``n_tilde == n`` for identity, ``> n`` otherwise).
        left_inverse: ``"pinv"`` (kernel ⟂ col(P1): noise removable by a projection once col(P1) is known)
            or ``"oblique"`` (a random left inverse; the default, see SPEC "Noise removal").
        alpha, beta: scales of ``P1`` and ``N1`` (required except for identity).
        kappa: ``‖K‖₂`` of the oblique part; ``None`` means 1/α (45° between ker P1L and col(P1)⊥). Ignored
            for pinv, so a configuration may always pass it.
        block_size: block backend only.
        seed: secret seed (bytes; an int only for reproducible simulation); ``None`` draws 256 secure bits.
        epoch: key epoch; a new epoch derives an independent key from the same seed (re-keying).
        rounds, perm_block: fast backend only (see :class:`~sifl_ray.coding.fast.FastServerKey`).
    """
    server_key_class(backend)  # an unknown name fails here, naming the choices
    if backend == "identity":
        if n_tilde != n:
            raise ValueError(f"the identity code has ñ = n; got n={n}, n_tilde={n_tilde}")
        return IdentityKey(n, int(epoch)).to(device)
    if alpha is None or beta is None:
        raise ValueError(f"backend {backend!r} needs alpha and beta (the scales of P1 and N1)")
    common = dict(
        n=n,
        n_tilde=n_tilde,
        alpha=alpha,
        beta=beta,
        left_inverse=left_inverse,
        kappa=kappa,
        seed=seed,
        epoch=epoch,
        device=device,
    )
    if backend == "dense":
        return DenseServerKey.create(**common)
    if backend == "block":
        return BlockServerKey.create(block_size=int(block_size), **common)
    return FastServerKey.create(rounds=rounds, perm_block=perm_block, **common)


def make_aggregator_key(
    *,
    p: int,
    gamma: float,
    eta: float,
    seed: Seed | None = None,
    epoch: int = 0,
    device: str | torch.device = "cpu",
) -> AggregatorKey:
    """Key 2 (π2): ``P2 = γuᵀ``, ``P2R = u/γ``, ``N2`` = η·(orthonormal basis of u⊥)ᵀ, for p ≥ 2."""
    return DenseAggregatorKey.create(p=p, gamma=gamma, eta=eta, seed=seed, epoch=epoch, device=device)


def server_key_from_state_dict(state: dict, *, device: str | torch.device = "cpu") -> ServerKey:
    """Rebuild a server key from its ``state_dict()`` (the owner's checkpoint)."""
    cls = SERVER_KEYS.get(state.get("backend"))
    if cls is None:
        raise ValueError(f"unknown server key state backend {state.get('backend')!r}; expected {BACKENDS}")
    return cls.from_state_dict(state, device=device)


def aggregator_key_from_state_dict(state: dict, *, device: str | torch.device = "cpu") -> AggregatorKey:
    """Rebuild an aggregator key from its ``state_dict()``."""
    return DenseAggregatorKey.from_state_dict(state, device=device)
