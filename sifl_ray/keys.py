"""Each party makes its own key, inside its own actor, from its own secret seed.

Why here and not in the driver: SPEC "Parties" — no actor may receive another party's key material, and
the driver orchestrates every party, so it must never hold a key either. With ``coding.key_seed`` unset a
party draws 256 bits from the operating system's secure source (``secrets``); with an integer it derives
its seed from it and its own name: reproducible (Ray vs in-process, resume), and not secret — for
simulations only. The noise seeds of a party are derived from its key seed, so they are exactly as secret.
"""

from __future__ import annotations

import secrets

from sifl_ray.coding import IdentityKey, make_aggregator_key, make_server_key
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.server import Server
from sifl_ray.seeding import derive_bytes


def party_seed(coding: dict, arm: str, party: str) -> bytes:
    """A party's 256-bit key seed: secure random, or derived from ``coding.key_seed`` (not secret)."""
    if coding.get("key_seed") is None:
        return secrets.token_bytes(32)
    return derive_bytes(int(coding["key_seed"]), "key", party, arm)


def noise_spec(coding: dict, which: str) -> NoiseSpec:
    noise = coding["noise"]
    return NoiseSpec(distribution=noise["distribution"], scale=float(noise[which]))


def make_party_server_key(*, arm: str, mode: str, n: int, coding: dict, run_seed: int):
    """The server's role for ``arm`` with its fresh key 1, and the clients' view of that key."""
    if mode == "plain":
        key = IdentityKey(n)
        role = Server(mode=mode, key=key, noise=NoiseSpec(), noise_seed=b"")
        return role, None
    seed = party_seed(coding, arm, "server")
    key = make_server_key(
        n=n,
        n_tilde=n + int(coding["n_extra"]),
        backend=coding["backend"],
        left_inverse=coding["left_inverse"],
        alpha=float(coding["alpha"]),
        beta=float(coding["beta"]),
        kappa=None if coding.get("kappa") is None else float(coding["kappa"]),
        block_size=int(coding["block_size"]),
        seed=seed,
    )
    role = Server(
        mode=mode,
        key=key,
        noise=noise_spec(coding, "sigma1"),
        noise_seed=derive_bytes(seed, "noise"),
        p=int(coding["p"]),
    )
    return role, key.client_view()


def make_party_aggregator_state(*, arm: str, mode: str, coding: dict, run_seed: int) -> dict | None:
    """Key 2's seed (M2 only), made by aggregator shard 0 and shared with the other shards by reference."""
    if mode != "m2":
        return None
    return {"seed": party_seed(coding, arm, "aggregator")}


def aggregator_from_state(
    *, mode: str, coding: dict, state: dict | None, bounds: tuple[int, int], shard: int
) -> Aggregator:
    key = None
    noise_seed = b""
    if mode == "m2":
        assert state is not None
        key = make_aggregator_key(
            p=int(coding["p"]), gamma=float(coding["gamma"]), eta=float(coding["eta"]), seed=state["seed"]
        )
        noise_seed = derive_bytes(state["seed"], "noise")
    return Aggregator(
        mode=mode,
        key=key,
        noise=noise_spec(coding, "sigma2"),
        noise_seed=noise_seed,
        bounds=bounds,
        shard=shard,
    )


def key_inventory(
    obj: object, *, _seen: set[int] | None = None, _depth: int = 0, _name: str = ""
) -> set[str]:
    """Kinds of key material reachable from ``obj``'s attributes.

    ``server-key`` (key 1 with ``N1``), ``server-client-view`` (``P1``/``P1L`` only), ``aggregator-key``
    (``P2``, ``N2``), ``aggregator-client-view`` (``P2R`` only), ``secret-seed`` (bytes held under a name
    containing "seed": a key or noise seed reproduces the key or the noise), ``key-internals`` (a coding
    object that is not a key, e.g. a backend core holding matrices, outside any key). Used by tests to prove
    that no actor holds another party's key.
    """
    from sifl_ray.coding import IdentityKey
    from sifl_ray.coding.base import AggregatorKey, ClientServerKey, ServerKey

    seen = _seen if _seen is not None else set()
    if isinstance(obj, bytes | bytearray):
        return {"secret-seed"} if "seed" in _name.lower() and len(obj) >= 16 else set()
    if isinstance(obj, int | float | str | bool) or obj is None or id(obj) in seen or _depth > 8:
        return set()
    seen.add(id(obj))
    if isinstance(obj, IdentityKey):
        return set()
    if isinstance(obj, ServerKey):
        return {"server-key"}
    if isinstance(obj, ClientServerKey):
        return {"server-client-view"}
    if isinstance(obj, AggregatorKey):
        return {"aggregator-client-view" if getattr(obj, "is_client_view", False) else "aggregator-key"}
    if type(obj).__module__.startswith("sifl_ray.coding") and not isinstance(obj, type):
        from sifl_ray.coding.base import NoiseSpec

        if not isinstance(obj, NoiseSpec):  # a noise law is public configuration, not key material
            return {"key-internals"}
    children: list[tuple[str, object]] = []
    if isinstance(obj, dict):
        children = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, list | tuple | set):
        children = [(_name, v) for v in obj]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = list(vars(obj).items())
    found: set[str] = set()
    for name, child in children:
        found |= key_inventory(child, _seen=seen, _depth=_depth + 1, _name=name)
    return found
