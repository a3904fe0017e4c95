"""Each party makes its own key and its own noise seed, inside its own actor, from its own secret seed.

Why here and not in the driver: SPEC "Parties" — no actor may receive another party's key material, and
the driver orchestrates every party, so it must never hold a key either. One rule, :func:`party_seed`, for
every party secret: with ``coding.key_seed`` unset a party draws 256 bits from the operating system's secure
source (``secrets``); with an integer it derives its seed from it and its own name: reproducible (Ray vs
in-process, resume), and not secret — for simulations only.

Noise is a secret too: it is what protects a release (the SIFL parties' ``r1``, ``R1``, ``R2``; an NbAFL
client's Gaussian noise), and whoever knows the seed of a noise stream subtracts the noise and holds the
release without it. So noise never comes from the public run seed. The server's and the aggregator's noise
seeds are derived from their key seeds, exactly as secret; each NbAFL client's noise comes from its own
:func:`party_seed`, made on first use inside the worker that hosts it (:class:`ClientNoiseSeeds`). Noise
streams carry the seed's full secret (:mod:`sifl_ray.seeding`: Philox keyed by 128 bits, or a whole
Mersenne Twister state), not a 64-bit ``manual_seed``.
"""

from __future__ import annotations

import secrets

import torch

from sifl_ray.coding import IdentityKey, make_aggregator_key, make_server_key
from sifl_ray.coding.base import NoiseSpec
from sifl_ray.coding.keys import server_key_class
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.server import Server
from sifl_ray.seeding import derive_bytes, secret_torch_generator
from sifl_ray.specs import CodingSpec


def party_seed(key_seed: int | None, arm: str, party: str) -> bytes:
    """A party's 256-bit secret seed (its key, its noise): 256 bits from ``secrets`` when ``key_seed``
    (``coding.key_seed``) is ``None``, else derived from it, the party's name and the arm (reproducible, not
    secret: simulations only). Call it inside the party's own process."""
    if key_seed is None:
        return secrets.token_bytes(32)
    return derive_bytes(int(key_seed), "key", party, arm)


class ClientNoiseSeeds:
    """The noise seeds of the clients a worker hosts (NbAFL's noise, DP-FedAvg's distributed noise share):
    one :func:`party_seed` per client (party ``client-<id>``), made on first use in the worker's process and
    never sent anywhere.

    Round t's noise of client i comes from ``secret_torch_generator(seed_i, "noise", "nbafl", t)``: with
    ``key_seed`` unset no other party, and not the run seed, determines it. Each client keeps its seed in its
    own key file in ``key_dir`` (when the run checkpoints), as the server and the aggregator keep theirs: a
    replaced worker, or every worker after a resume, reads it back, so a replayed round draws the noise it
    drew the first time (two independent draws on one upload would let the aggregator average the noise
    down: SPEC "A replay reproduces, never redraws"). Pickling keeps only ``key_seed`` and ``key_dir``: the
    seeds themselves never travel.

    Args:
        key_seed: ``coding.key_seed`` (``None``: secure random seeds).
        key_dir: the run's key folder (``None``: checkpointing is off, the seeds live in memory only).
    """

    def __init__(self, key_seed: int | None = None, key_dir: str | None = None):
        self.key_seed = key_seed
        self.key_dir = key_dir
        self.client_seeds: dict[tuple[str, int], bytes] = {}

    def generator(self, arm: str, client: int, t: int) -> torch.Generator:
        """Client ``client``'s noise stream of round ``t`` in ``arm``."""
        seed = self.client_seeds.get((arm, client))
        if seed is None:
            seed = self.client_seeds[(arm, client)] = self._seed(arm, client)
        return secret_torch_generator(seed, "noise", "nbafl", t)

    def _seed(self, arm: str, client: int) -> bytes:
        """The client's seed: from its key file if it made one before, else a new one (saved there)."""
        party = f"client-{client}"
        if self.key_dir is None or self.key_seed is not None:  # derived seeds reproduce without a file
            return party_seed(self.key_seed, arm, party)
        from sifl_ray.checkpoint import key_file, load_party_key, save_party_key

        path = key_file(self.key_dir, party, arm)
        if path.exists():
            return bytes(load_party_key(path, party=party, arm=arm)["state"]["noise_seed"])
        seed = party_seed(None, arm, party)
        save_party_key(path, party=party, arm=arm, mode="noise", state={"noise_seed": seed})
        return seed

    def __getstate__(self) -> dict:
        return {"key_seed": self.key_seed, "key_dir": self.key_dir}

    def __setstate__(self, state: dict) -> None:
        self.key_seed = state["key_seed"]
        self.key_dir = state.get("key_dir")
        self.client_seeds = {}

    def __repr__(self) -> str:
        kind = "secure random" if self.key_seed is None else "derived from coding.key_seed"
        return f"ClientNoiseSeeds({kind}, {len(self.client_seeds)} made)"


def make_party_server_key(*, arm: str, mode: str, n: int, coding: CodingSpec, run_seed: int):
    """The server's role for ``arm`` with its fresh key 1, and the clients' view of that key."""
    if mode == "plain":
        key = IdentityKey(n)
        role = Server(mode=mode, key=key, noise=NoiseSpec(), noise_seed=b"")
        return role, None
    seed = party_seed(coding.key_seed, arm, "server")
    server_key_class(coding.backend, coding.backend_path)  # a backend the user registered: import it here
    key = make_server_key(
        n=n,
        n_tilde=n + coding.n_extra,
        backend=coding.backend,
        left_inverse=coding.left_inverse,
        alpha=coding.alpha,
        beta=coding.beta,
        kappa=coding.kappa,
        block_size=coding.block_size,
        seed=seed,
    )
    role = Server(
        mode=mode,
        key=key,
        noise=NoiseSpec(distribution=coding.noise_distribution, scale=coding.sigma1),
        noise_seed=derive_bytes(seed, "noise"),
        p=coding.p,
    )
    return role, key.client_view()


def make_party_aggregator_state(*, arm: str, mode: str, coding: CodingSpec, run_seed: int) -> dict:
    """The aggregator's secrets of ``arm``, made by aggregator shard 0, kept in its key file and shared with
    the other shards by reference: key 2's seed (M2 only) and the seed of its step's noise (every arm:
    DP-FedAvg's central noise). Both live in the key file so that a respawned aggregator replaying a round
    draws the same noise (SPEC "A replay reproduces, never redraws"): two independent draws on one sum
    would let whoever sees both releases average the noise down."""
    state = {"step_seed": party_seed(coding.key_seed, arm, "aggregator-dp-noise")}
    if mode == "m2":
        state["seed"] = party_seed(coding.key_seed, arm, "aggregator")
    return state


def aggregator_from_state(
    *, mode: str, coding: CodingSpec, state: dict | None, bounds: tuple[int, int], shard: int
) -> Aggregator:
    key = None
    noise_seed = b""
    if mode == "m2":
        assert state is not None
        key = make_aggregator_key(p=coding.p, gamma=coding.gamma, eta=coding.eta, seed=state["seed"])
        noise_seed = derive_bytes(state["seed"], "noise")
    return Aggregator(
        mode=mode,
        key=key,
        noise=NoiseSpec(distribution=coding.noise_distribution, scale=coding.sigma2),
        noise_seed=noise_seed,
        step_seed=(state or {}).get("step_seed"),
        bounds=bounds,
        shard=shard,
    )


def key_inventory(
    obj: object, *, _seen: set[int] | None = None, _depth: int = 0, _name: str = ""
) -> set[str]:
    """Kinds of key material reachable from ``obj``'s attributes.

    ``server-key`` (key 1 with ``N1``), ``server-client-view`` (``P1``/``P1L`` only), ``aggregator-key``
    (``P2``, ``N2``), ``aggregator-client-view`` (``P2R`` only), ``secret-seed`` (bytes held under a name
    containing "seed": a key or noise seed reproduces the key or the noise), ``client-noise-seed`` (the
    NbAFL noise seeds a worker made for its own clients, :class:`ClientNoiseSeeds`), ``key-internals`` (a
    coding object that is not a key, e.g. a backend core holding matrices, outside any key). Used by tests
    to prove that no actor holds another party's key.
    """
    from sifl_ray.coding import IdentityKey
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
