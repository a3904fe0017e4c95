"""Which key material an object holds: the check that no party holds another's (docs/method.md "Parties").

The seeds themselves are made by :mod:`sifl_ray.party_seeds`, each party's secrets from them in its own
module (:func:`~sifl_ray.parties.server.make_server`,
:func:`~sifl_ray.parties.aggregator.make_aggregator_state`); this module only looks.
"""

from __future__ import annotations

from sifl_ray.party_seeds import ClientNoiseSeeds


def key_inventory(
    obj: object, *, _seen: set[int] | None = None, _depth: int = 0, _name: str = ""
) -> set[str]:
    """Kinds of key material reachable from ``obj``'s attributes.

    ``server-key`` (key 1 with ``N1``), ``server-client-view`` (``P1``/``P1L`` only), ``aggregator-key``
    (``P2``, ``N2``), ``aggregator-client-view`` (``P2R`` only), ``secret-seed`` (bytes held under a name
    containing "seed": a key or noise seed reproduces the key or the noise), ``client-noise-seed`` (the
    NbAFL noise seeds a worker made for its own clients, :class:`ClientNoiseSeeds`), ``key-internals`` (a
    coding object that is not a key, e.g. a backend core holding matrices, outside any key). Used by tests
    to prove that no party's host holds another party's key.
    """
    # deferred: omegaconf, torch, which this module does not load otherwise
    from sifl_ray.coding import IdentityKey

    # deferred: omegaconf, torch, which this module does not load otherwise
    from sifl_ray.coding.base import AggregatorKey, ClientServerKey, ServerKey

    seen = _seen if _seen is not None else set()
    if isinstance(obj, bytes | bytearray):
        return {"secret-seed"} if "seed" in _name.lower() and len(obj) >= 16 else set()
    if isinstance(obj, int | float | str | bool) or obj is None or id(obj) in seen or _depth > 8:
        return set()
    seen.add(id(obj))
    if isinstance(obj, ClientNoiseSeeds):
        return {"client-noise-seed"} if obj.client_seeds else set()
    if isinstance(obj, IdentityKey):
        return set()
    if isinstance(obj, ServerKey):
        return {"server-key"}
    if isinstance(obj, ClientServerKey):
        return {"server-client-view"}
    if isinstance(obj, AggregatorKey):
        return {"aggregator-client-view" if getattr(obj, "is_client_view", False) else "aggregator-key"}
    if type(obj).__module__.startswith("sifl_ray.coding") and not isinstance(obj, type):
        # deferred: omegaconf, torch, which this module does not load otherwise
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
