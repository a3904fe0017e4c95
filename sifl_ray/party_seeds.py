"""Each party's secret seed, the one rule for every party secret (keys, noise, the sample, the canaries).

Why one module: a seed made two ways is two rules to audit; every secret of the platform (a party's key, its
noise, the sampler's draw, the auditor's canaries, secure aggregation's keys and masks) comes from here,
inside the party that owns it: docs/method.md "Parties", no actor may receive another party's key material,
and the driver orchestrates every party, so it must never hold a key either. One rule, :func:`party_seed`, for
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
from typing import TYPE_CHECKING

from sifl_ray.seeding import derive_bytes, secret_torch_generator

if TYPE_CHECKING:
    import torch

#: The label of a client's noise streams when its arm declares none (:attr:`sifl_ray.arms.Arm.noise_stream`).
CLIENT_NOISE_STREAM = "client-noise"


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

    Round t's noise of client i comes from ``secret_torch_generator(seed_i, "noise", stream, t)``, where
    ``stream`` is the label the arm declares (:attr:`sifl_ray.arms.Arm.noise_stream`): with ``key_seed``
    unset no other party, and not the run seed, determines it. Each client keeps its seed in its own key
    file in ``key_dir`` (when the run checkpoints), as the server and the aggregator keep theirs: a replaced
    worker, or every worker after a resume, reads it back, so a replayed round draws the noise it drew the
    first time (two independent draws on one upload would let the aggregator average the noise down:
    docs/method.md "A replay reproduces, never redraws"). Pickling keeps only ``key_seed``, ``key_dir`` and
    ``stream``: the seeds themselves never travel.

    Args:
        key_seed: ``coding.key_seed`` (``None``: secure random seeds).
        key_dir: the run's key folder (``None``: checkpointing is off, the seeds live in memory only).
        stream: the label of the noise streams (the arm's :attr:`~sifl_ray.arms.Arm.noise_stream`); it
            separates the noise from anything else drawn from the client's seed.
    """

    def __init__(
        self, key_seed: int | None = None, key_dir: str | None = None, *, stream: str = CLIENT_NOISE_STREAM
    ):
        self.key_seed = key_seed
        self.key_dir = key_dir
        self.stream = stream
        self.client_seeds: dict[tuple[str, int], bytes] = {}

    def generator(self, arm: str, client: int, t: int) -> torch.Generator:
        """Client ``client``'s noise stream of round ``t`` in ``arm``."""
        seed = self.client_seeds.get((arm, client))
        if seed is None:
            seed = self.client_seeds[(arm, client)] = self._seed(arm, client)
        return secret_torch_generator(seed, "noise", self.stream, t)

    def _seed(self, arm: str, client: int) -> bytes:
        """The client's seed: from its key file if it made one before, else a new one (saved there)."""
        party = f"client-{client}"
        if self.key_dir is None or self.key_seed is not None:  # derived seeds reproduce without a file
            return party_seed(self.key_seed, arm, party)
        # deferred: torch, which this module does not load otherwise
        from sifl_ray.checkpoint import key_file, load_party_key, save_party_key

        path = key_file(self.key_dir, party, arm)
        if path.exists():
            return bytes(load_party_key(path, party=party, arm=arm)["state"]["noise_seed"])
        seed = party_seed(None, arm, party)
        save_party_key(path, party=party, arm=arm, mode="noise", state={"noise_seed": seed})
        return seed

    def __getstate__(self) -> dict:
        return {"key_seed": self.key_seed, "key_dir": self.key_dir, "stream": self.stream}

    def __setstate__(self, state: dict) -> None:
        self.key_seed = state["key_seed"]
        self.key_dir = state.get("key_dir")
        self.stream = state["stream"]
        self.client_seeds = {}

    def __repr__(self) -> str:
        kind = "secure random" if self.key_seed is None else "derived from coding.key_seed"
        return f"ClientNoiseSeeds({kind}, stream {self.stream!r}, {len(self.client_seeds)} made)"
