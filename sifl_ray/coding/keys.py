"""The registry of key-1 backends and the factories: configuration code names a backend, never a class."""

from __future__ import annotations

import importlib

import torch

from sifl_ray.coding._common import Seed
from sifl_ray.coding.aggregator import DenseAggregatorKey
from sifl_ray.coding.base import AggregatorKey, ServerKey
from sifl_ray.coding.identity import IdentityKey
from sifl_ray.config.names import SERVER_KEYS
from sifl_ray.config.registry import RegistryError

#: Key 1's backends by the name a configuration and a key's state use: the registry
#: (:data:`sifl_ray.config.names.SERVER_KEYS`) declares the built-in ones by import path, so their names
#: are known without torch; a backend registered here is a name there at once.
BACKENDS = SERVER_KEYS.names()  # the built-in ones (a registered backend joins the registry)
DEFAULT_LEFT_INVERSE = "oblique"


def register_server_key(cls: type[ServerKey]) -> type[ServerKey]:
    """Make ``cls`` a backend of key 1 under ``cls.backend`` (usable as a class decorator).

    The class needs ``create(*, n, n_tilde, alpha, beta, left_inverse, kappa, seed, epoch, device, ...)``
    (its extra options named in ``cls.create_options``), ``state_dict`` / ``from_state_dict``, and passes the
    conformance suite (``tests/coding/test_coding_conformance.py``). Its module must be importable where
    the server runs (a Ray actor imports it by the path the registry records).

    Raises:
        ValueError: not a key class, a bad name, or a name another class has.
    """
    name = getattr(cls, "backend", None)
    if not (isinstance(cls, type) and issubclass(cls, ServerKey)):
        raise ValueError(f"a coding backend must subclass sifl_ray.coding.ServerKey, got {cls!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{cls.__name__}.backend must be a name like 'fast', got {name!r}")
    try:
        SERVER_KEYS.register(name, cls)
    except RegistryError:
        raise ValueError(
            f"coding backend {name!r} is already {SERVER_KEYS.path(name)}; pick another name"
        ) from None
    return cls


def server_key_class(backend: str, path: str | None = None) -> type[ServerKey]:
    """The key class of ``backend``, imported from where it lives (``path``, else the registry's) if this
    process has not loaded it yet; a ValueError naming the choices for an unknown one."""
    if backend not in SERVER_KEYS and path:
        module, _, qualname = path.partition(":")
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        return register_server_key(found)  # type: ignore[arg-type]
    if backend not in SERVER_KEYS:
        raise ValueError(f"backend must be one of {SERVER_KEYS.names()}; got {backend!r}")
    return SERVER_KEYS[backend]  # type: ignore[no-any-return]


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
    """Key 1 (π1) of ``backend``: identity, dense, fast, block, or one registered with
    :func:`register_server_key`.

    Args:
        n, n_tilde: model size and encoded size (``n_tilde == n`` for identity, ``> n`` otherwise).
        left_inverse: ``"pinv"`` (kernel ⟂ col(P1): noise removable by a projection once col(P1) is known)
            or ``"oblique"`` (a random left inverse; the default, see docs/method.md "Noise removal").
        alpha, beta: scales of ``P1`` and ``N1`` (required except for identity).
        kappa: ``‖K‖₂`` of the oblique part; ``None`` means 1/α (45° between ker P1L and col(P1)⊥). Ignored
            for pinv, so a configuration may always pass it.
        block_size: block backend only.
        seed: secret seed (bytes; an int only for reproducible simulation); ``None`` draws 256 secure bits.
        epoch: key epoch; a new epoch derives an independent key from the same seed (re-keying).
        rounds, perm_block: fast backend only (see :class:`~sifl_ray.coding.fast.FastServerKey`).
    """
    cls = server_key_class(backend)  # an unknown name fails here, naming the choices
    if backend == "identity":
        if n_tilde != n:
            raise ValueError(f"the identity code has ñ = n; got n={n}, n_tilde={n_tilde}")
        return IdentityKey(n, int(epoch)).to(device)
    if alpha is None or beta is None:
        raise ValueError(f"backend {backend!r} needs alpha and beta (the scales of P1 and N1)")
    options = {"block_size": int(block_size), "rounds": rounds, "perm_block": perm_block}
    return cls.create(
        n=n,
        n_tilde=n_tilde,
        alpha=alpha,
        beta=beta,
        left_inverse=left_inverse,
        kappa=kappa,
        seed=seed,
        epoch=epoch,
        device=device,
        **{k: options[k] for k in cls.create_options},
    )


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
    try:
        cls = server_key_class(str(state.get("backend")))
    except ValueError:
        raise ValueError(
            f"unknown server key state backend {state.get('backend')!r}; expected {SERVER_KEYS.names()}"
        ) from None
    return cls.from_state_dict(state, device=device)


def aggregator_key_from_state_dict(state: dict, *, device: str | torch.device = "cpu") -> AggregatorKey:
    """Rebuild an aggregator key from its ``state_dict()``."""
    return DenseAggregatorKey.from_state_dict(state, device=device)
