"""Ray shell around the server role. The server generates key 1 itself: no other party ever sees it."""

from __future__ import annotations

import torch

from sifl_ray.keys import key_inventory, make_party_server_key
from sifl_ray.roles.server import Server


class ServerActor:
    """Hosts one :class:`~sifl_ray.roles.server.Server` per arm."""

    def __init__(self) -> None:
        self.roles: dict[str, Server] = {}

    def setup_arm(self, arm: str, *, mode: str, n: int, coding: dict, run_seed: int):
        """Create this arm's key 1; return only the clients' view of it (``P1``, ``P1L``)."""
        self.roles[arm], view = make_party_server_key(
            arm=arm, mode=mode, n=n, coding=coding, run_seed=run_seed
        )
        return view

    def key_norms(self, arm: str):
        role = self.roles[arm]
        return None if role.mode == "plain" else role.key.norms()

    def initial_broadcast(self, arm: str, w0: torch.Tensor) -> torch.Tensor:
        return self.roles[arm].initial_broadcast(w0)

    def finish_round(self, arm: str, t: int, *shards: torch.Tensor):
        aggregate = torch.cat(shards, dim=0)
        return self.roles[arm].finish_round(t, aggregate)

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
