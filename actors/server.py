"""Ray shell around the server role. The server generates key 1 itself: no other party ever sees it.

It also keeps its own state on disk (paths come from the driver, contents never go back to it): its key
file (mode 0600, written once) and, at every checkpoint, each arm's next broadcast.
"""

from __future__ import annotations

import os

import torch

from actors.process import node_id, placement, prepare_process
from sifl_ray.checkpoint import (
    CheckpointError,
    load_party_key,
    read_checkpoint_file,
    save_party_key,
    write_checkpoint_file,
)
from sifl_ray.coding.keys import server_key_class
from sifl_ray.keys import key_inventory
from sifl_ray.roles.factories import make_party_server_key
from sifl_ray.roles.server import Server
from sifl_ray.specs import Coding, CodingSpec


class ServerActor:
    """Hosts one :class:`~sifl_ray.roles.server.Server` per arm."""

    def __init__(self) -> None:
        prepare_process()
        self.roles: dict[str, Server] = {}
        self.steps: dict[str, object] = {}  # arm → its server step (sifl_ray.arms.ServerStep), if it has one
        self._loaded: dict[str, torch.Tensor] = {}

    def setup_arm(
        self,
        arm: str,
        *,
        coding: Coding,
        n: int,
        spec: CodingSpec,
        run_seed: int,
        key_path: str | None = None,
    ):
        """Create this arm's key 1 (and save it to ``key_path``); return only the clients' view of it."""
        self.roles[arm], view = make_party_server_key(
            arm=arm, coding=coding, n=n, spec=spec, run_seed=run_seed
        )
        if key_path is not None and coding.coded:
            save_party_key(
                key_path, party="server", arm=arm, mode=coding.value, state=self.roles[arm].state_dict()
            )
        return view

    def restore_arm(
        self, arm: str, *, coding: Coding, n: int, spec: CodingSpec, run_seed: int, key_path: str | None
    ) -> None:
        """Take this arm's key 1 back from the server's own key file (a restarted server, or a resume).
        Returns nothing: the clients' view is asked for separately (:meth:`client_view`), by reference."""
        if not coding.coded:
            self.setup_arm(arm, coding=coding, n=n, spec=spec, run_seed=run_seed)
            return
        if key_path is None:
            raise CheckpointError(f"arm {arm}: the server's key file is unknown; the key cannot be restored")
        saved = load_party_key(key_path, party="server", arm=arm)
        server_key_class(spec.backend, spec.backend_path)  # a backend the user registered: import it
        role = Server.from_state_dict(saved["state"])
        if role.coding is not coding or role.key.n != n:
            raise CheckpointError(
                f"{key_path}: a key for coding {role.coding.value}, n={role.key.n}; "
                f"expected {coding.value}, n={n}"
            )
        self.roles[arm] = role

    def client_view(self, arm: str):
        role = self.roles[arm]
        return role.key.client_view() if role.coding.coded else None

    def key_norms(self, arm: str):
        role = self.roles[arm]
        return role.key.norms() if role.coding.coded else None

    def roundoff(self, arm: str):
        """Key 1's float64 error constants (public scalars; see :mod:`sifl_ray.coding.roundoff`)."""
        role = self.roles[arm]
        return role.key.roundoff() if role.coding.coded else None

    def initial_broadcast(self, arm: str, w0: torch.Tensor) -> torch.Tensor:
        return self.roles[arm].initial_broadcast(w0)

    def set_step(self, arm: str, step) -> None:
        """The arm's server step (kept apart from the key: a restored key finds it here)."""
        self.steps[arm] = step

    def finish_round(self, arm: str, t: int, *shards: torch.Tensor, previous: torch.Tensor | None = None):
        aggregate = torch.cat(shards, dim=0)
        step = self.steps.get(arm)
        return self.roles[arm].finish_round(t, aggregate, previous=previous, step=step, arm=arm)

    def save_broadcasts(self, path: str, t: int, arms: list[str], *broadcasts: torch.Tensor) -> str:
        """Checkpoint every arm's next broadcast (what this server holds); return the file's SHA-256."""
        payload = {"format": 1, "round": t, "broadcasts": dict(zip(arms, broadcasts, strict=True))}
        return write_checkpoint_file(path, payload)

    def load_broadcasts(self, path: str, sha256: str, arms: list[str]) -> int:
        """Read and check a checkpoint's broadcasts (each against its arm's key); keep them until
        :meth:`loaded_broadcast` hands each out by reference. Returns the checkpoint's round."""
        data = read_checkpoint_file(path, expect_sha256=sha256)
        found = data.get("broadcasts", {}) if isinstance(data, dict) else {}
        out = []
        for arm in arms:
            b = found.get(arm)
            expected = self.roles[arm].key.n_tilde
            if not isinstance(b, torch.Tensor) or b.shape[0] != expected or not bool(torch.isfinite(b).all()):
                raise CheckpointError(f"{path}: the broadcast of arm {arm} is missing or malformed")
            out.append(b)
        self._loaded = dict(zip(arms, out, strict=True))
        return int(data.get("round", -1))

    def loaded_broadcast(self, arm: str) -> torch.Tensor:
        return self._loaded.pop(arm)

    def placement(self) -> dict:
        """Where this actor runs (the CPU: :mod:`sifl_ray.device` says why) and what it holds."""
        return placement(torch.device("cpu"), [role.key for role in self.roles.values()])

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`actors.process.node_id`)."""
        return node_id()

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
