"""Each party's role for one arm, made inside the party's own process from its own secret seed.

Why here and not in the driver: SPEC "Parties": no actor may receive another party's key material, and the
driver orchestrates every party, so it must never hold a key either. The server's actor calls
:func:`make_party_server_key`; aggregator shard 0 calls :func:`make_party_aggregator_state` and every shard
:func:`aggregator_from_state` with the state shard 0 kept in its key file.
"""

from __future__ import annotations

from typing import cast

from sifl_ray.coding import IdentityKey, make_aggregator_key, make_server_key
from sifl_ray.coding.base import ClientServerKey, NoiseDistribution, NoiseSpec
from sifl_ray.coding.keys import server_key_class
from sifl_ray.party_seeds import party_seed
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.server import Server
from sifl_ray.seeding import derive_bytes
from sifl_ray.specs import Coding, CodingSpec


def make_party_server_key(
    *, arm: str, coding: Coding, n: int, spec: CodingSpec, run_seed: int
) -> tuple[Server, ClientServerKey | None]:
    """The server's role for ``arm`` with its fresh key 1 (made as ``spec`` says), and the clients' view of
    that key."""
    if not coding.coded:
        return Server(coding=coding, key=IdentityKey(n), noise=NoiseSpec(), noise_seed=b""), None
    seed = party_seed(spec.key_seed, arm, "server")
    server_key_class(spec.backend, spec.backend_path)  # a backend the user registered: import it here
    key = make_server_key(
        n=n,
        n_tilde=n + spec.n_extra,
        backend=spec.backend,
        left_inverse=spec.left_inverse,
        alpha=spec.alpha,
        beta=spec.beta,
        kappa=spec.kappa,
        block_size=spec.block_size,
        seed=seed,
    )
    role = Server(
        coding=coding,
        key=key,
        noise=_noise(spec, spec.sigma1),
        noise_seed=derive_bytes(seed, "noise"),
        p=spec.p,
    )
    return role, key.client_view()


def make_party_aggregator_state(
    *, arm: str, coding: Coding, spec: CodingSpec, run_seed: int
) -> dict[str, bytes]:
    """The aggregator's secrets of ``arm``, made by aggregator shard 0, kept in its key file and shared with
    the other shards by reference: key 2's seed (M2 only) and the seed of its step's noise (every arm:
    DP-FedAvg's central noise). Both live in the key file so that a respawned aggregator replaying a round
    draws the same noise (SPEC "A replay reproduces, never redraws"): two independent draws on one sum
    would let whoever sees both releases average the noise down."""
    state = {"step_seed": party_seed(spec.key_seed, arm, "aggregator-dp-noise")}
    if coding.aggregator_encodes:
        state["seed"] = party_seed(spec.key_seed, arm, "aggregator")
    return state


def aggregator_from_state(
    *,
    coding: Coding,
    spec: CodingSpec,
    state: dict[str, bytes] | None,
    bounds: tuple[int, int],
    shard: int,
) -> Aggregator:
    """An aggregator shard rebuilt from its own key state (a checkpoint or the driver's hand-out): M2's key 2
    and noise seed reach the aggregator only."""
    key = None
    noise_seed = b""
    if coding.aggregator_encodes:
        assert state is not None
        key = make_aggregator_key(p=spec.p, gamma=spec.gamma, eta=spec.eta, seed=state["seed"])
        noise_seed = derive_bytes(state["seed"], "noise")
    return Aggregator(
        coding=coding,
        key=key,
        noise=_noise(spec, spec.sigma2),
        noise_seed=noise_seed,
        step_seed=(state or {}).get("step_seed"),
        bounds=bounds,
        shard=shard,
    )


def _noise(spec: CodingSpec, scale: float) -> NoiseSpec:
    """A party's coding noise: ``coding.noise.distribution`` (one of NoiseDistribution's, as the
    configuration's validation checked) at ``scale``."""
    return NoiseSpec(distribution=cast(NoiseDistribution, spec.noise_distribution), scale=scale)
