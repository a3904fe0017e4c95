"""The server: key 1 (π1). It encodes the global model and decodes what the aggregator sends back.

docs/method.md "Parties": the server sees only aggregated, encoded models. In M1 it decodes the average to
the plain global model ``w^{t+1} = P1L w~_a`` and re-encodes it with fresh noise; in M2 it never holds a
plain model: ``W' = P1 (P1L W'_a) + N1 R1`` keeps the aggregator's code 2 on (Algorithm 2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import torch

from sifl_ray.arms.base import ServerStep
from sifl_ray.checkpoint import (
    CheckpointError,
    load_party_key,
    read_checkpoint_file,
    save_party_key,
    write_checkpoint_file,
)
from sifl_ray.coding import IdentityKey, make_server_key
from sifl_ray.coding.base import (
    CODING_DTYPE,
    ClientServerKey,
    KeyNorms,
    NoiseDistribution,
    NoiseSpec,
    ServerKey,
)
from sifl_ray.coding.keys import server_key_class, server_key_from_state_dict
from sifl_ray.parties.handle import returns
from sifl_ray.parties.messages import Finished, ServerInfo
from sifl_ray.parties.process import Host, placement, prepare_process
from sifl_ray.party_seeds import party_seed
from sifl_ray.seeding import derive_bytes, noise_generator
from sifl_ray.specs import Coding, CodingSpec


class Server:
    """Server role for one arm.

    Args:
        coding: the arm's; ``PLAIN`` (fl and nbafl: the identity code, nothing to encode), ``M1`` or ``M2``.
        key: key 1; an identity key for ``PLAIN``.
        noise: the law of ``r1`` / ``R1``.
        noise_seed: secret seed of the server's noise streams (one stream per round, Philox keyed by it:
            :func:`sifl_ray.seeding.noise_generator`). The noise is what hides the model in every
            broadcast; a seed known to anyone else would let them subtract it.
        p: columns of the aggregator code (M2).
    """

    def __init__(self, *, coding: Coding, key: ServerKey, noise: NoiseSpec, noise_seed: bytes, p: int = 2):
        self.coding = coding
        self.key = key
        self.noise = noise
        self._noise_seed = noise_seed
        self.p = p

    def state_dict(self) -> dict[str, Any]:
        """Everything that makes this server this server: key 1 and its noise seed (secret: the server's own
        key file only, see :mod:`sifl_ray.checkpoint`). The server keeps nothing else across rounds. The
        coding is stored by its value under ``"mode"``, as key files always had it, so old ones still load."""
        return {
            "mode": self.coding.value,
            "key": self.key.state_dict(),
            "noise": {"distribution": self.noise.distribution, "scale": self.noise.scale},
            "noise_seed": self._noise_seed,
            "p": self.p,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Server:

        return cls(
            coding=Coding.of(state["mode"]),
            key=server_key_from_state_dict(state["key"]),
            noise=NoiseSpec(**state["noise"]),
            noise_seed=state["noise_seed"],
            p=int(state["p"]),
        )

    def _r1(self, t: int, cols: int | None) -> torch.Tensor | None:
        if not self.coding.coded:
            return None
        shape = (self.key.n_tilde - self.key.n,) if cols is None else (self.key.n_tilde - self.key.n, cols)
        gen = noise_generator(self._noise_seed, "server", "r1", self.key.epoch, t)
        return self.noise.sample(shape, gen)

    def initial_broadcast(self, w0: torch.Tensor) -> torch.Tensor:
        """Round 0: ``w~^0 = P1 w^0 + N1 r1^0`` (M1 and M2 both start from an M1 encoding)."""
        w0 = w0.to(CODING_DTYPE)
        return self.key.encode(w0, self._r1(0, None)) if self.coding.coded else w0.clone()

    def finish_round(
        self,
        t: int,
        aggregate: torch.Tensor,
        *,
        previous: torch.Tensor | None = None,
        step: ServerStep | None = None,
        arm: str = "",
    ) -> Finished:
        """Step 4 of a round: decode the aggregate and encode the next broadcast (for round ``t + 1``).

        ``step``: the arm's server step, from the clients' average to the new global model (the previous
        one behind ``previous``, this round's broadcast); its metrics are in the info's ``step_metrics``.
        M2 has none: its server never holds a plain model.
        """
        start = time.perf_counter()
        if not self.coding.server_holds_model and step is not None:
            raise ValueError(f"{arm}: an M2 server holds no plain model, so it cannot run a server step")
        step_metrics: dict[str, float] = {}
        if not self.coding.coded:
            out = aggregate
            if step is not None:
                out, step_metrics = self._step(step, previous, aggregate, arm, t)
            decode_s = encode_s = 0.0
        elif self.coding.server_holds_model:
            w = self.key.decode(aggregate)  # w^{t+1} = P1L w~_a (exact: weights sum to 1, P1L N1 = 0)
            if step is not None:
                plain = None if previous is None else self.key.decode(previous)
                w, step_metrics = self._step(step, plain, w, arm, t)
            decode_s = time.perf_counter() - start
            out = self.key.encode(w, self._r1(t + 1, None))
            encode_s = time.perf_counter() - start - decode_s
        else:
            # Wbar = P1L W'_a still carries code 2; re-encode every column with fresh R1 (Algorithm 2).
            out = self.key.reencode(aggregate, self._r1(t + 1, aggregate.shape[1]))
            decode_s, encode_s = 0.0, time.perf_counter() - start
        return Finished(out, ServerInfo(decode_s=decode_s, encode_s=encode_s, step_metrics=step_metrics))

    @staticmethod
    def _step(
        step: ServerStep, previous: torch.Tensor | None, average: torch.Tensor, arm: str, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if previous is None:
            raise ValueError(f"{arm}: a server step needs the previous global model (the round's broadcast)")
        out, metrics = step(average, previous=previous.to(CODING_DTYPE), arm=arm, t=t)
        return out.to(CODING_DTYPE), {name: float(value) for name, value in metrics.items()}


def make_server(
    *, arm: str, coding: Coding, n: int, spec: CodingSpec
) -> tuple[Server, ClientServerKey | None]:
    """The server's role for ``arm`` with its fresh key 1 (made as ``spec`` says, from the server's own
    seed), and the clients' view of that key. Runs inside the server's process: docs/method.md "Parties":
    no other party, the driver included, ever holds key 1."""
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
        noise=coding_noise(spec, spec.sigma1),
        noise_seed=derive_bytes(seed, "noise"),
        p=spec.p,
    )
    return role, key.client_view()


def coding_noise(spec: CodingSpec, scale: float) -> NoiseSpec:
    """A party's coding noise: ``coding.noise.distribution`` (one of NoiseDistribution's, as the
    configuration's validation checked) at ``scale``."""
    return NoiseSpec(distribution=cast(NoiseDistribution, spec.noise_distribution), scale=scale)


class ServerHost(Host):
    """The server's process: one :class:`Server` per arm, its steps, and the broadcasts of a checkpoint.

    It keeps its own state on disk (paths come from the driver, contents never go back to it): its key file
    (mode 0600, written once) and, at every checkpoint, each arm's next broadcast.
    """

    def __init__(self) -> None:
        prepare_process()
        self.roles: dict[str, Server] = {}
        self.steps: dict[str, ServerStep] = {}  # arm → its server step, if it has one
        self._loaded: dict[str, torch.Tensor] = {}

    def setup_arm(
        self, arm: str, *, coding: Coding, n: int, spec: CodingSpec, key_path: str | None = None
    ) -> ClientServerKey | None:
        """Create this arm's key 1 (and save it to ``key_path``); return only the clients' view of it."""
        self.roles[arm], view = make_server(arm=arm, coding=coding, n=n, spec=spec)
        if key_path is not None and coding.coded:
            state = self.roles[arm].state_dict()
            save_party_key(key_path, party="server", arm=arm, mode=coding.value, state=state)
        return view

    def restore_arm(
        self, arm: str, *, coding: Coding, n: int, spec: CodingSpec, key_path: str | None
    ) -> None:
        """Take this arm's key 1 back from the server's own key file (a restarted server, or a resume).
        Returns nothing: the clients' view is asked for separately (:meth:`client_view`), by reference."""
        if not coding.coded:
            self.setup_arm(arm, coding=coding, n=n, spec=spec)
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

    def client_view(self, arm: str) -> ClientServerKey | None:
        role = self.roles[arm]
        return role.key.client_view() if role.coding.coded else None

    def key_norms(self, arm: str) -> KeyNorms | None:
        role = self.roles[arm]
        return role.key.norms() if role.coding.coded else None

    def roundoff(self, arm: str) -> Any:
        """Key 1's float64 error constants (public scalars; see :mod:`sifl_ray.coding.roundoff`); every coded
        key answers, plain FL's identity has none."""
        role = self.roles[arm]
        return cast(Any, role.key).roundoff() if role.coding.coded else None

    def set_step(self, arm: str, step: ServerStep) -> None:
        """The arm's server step (kept apart from the key: a restored key finds it here)."""
        self.steps[arm] = step

    def initial_broadcast(self, arm: str, w0: torch.Tensor) -> torch.Tensor:
        return self.roles[arm].initial_broadcast(w0)

    @returns(Finished)
    def finish_round(
        self, arm: str, t: int, *shards: torch.Tensor | None, previous: torch.Tensor | None = None
    ) -> Finished:
        """Step 4 on the shards' aggregates (in shard order); ``previous``: the round's broadcast, for the
        arm's server step. A shard with nothing to aggregate has no place in a released round."""
        if any(s is None for s in shards):
            raise ValueError(f"{arm}, round {t}: a shard has no aggregate; the round releases nothing")
        aggregate = torch.cat([s for s in shards if s is not None], dim=0)
        step = self.steps.get(arm)
        return self.roles[arm].finish_round(t, aggregate, previous=previous, step=step, arm=arm)

    def save_broadcasts(self, path: str, t: int, arms: list[str], *broadcasts: torch.Tensor) -> str:
        """Checkpoint every arm's next broadcast (what this server holds); return the file's SHA-256."""
        payload = {"format": 1, "round": t, "broadcasts": dict(zip(arms, broadcasts, strict=True))}
        return write_checkpoint_file(Path(path), payload)

    def load_broadcasts(self, path: str, sha256: str | None, arms: list[str]) -> int:
        """Read and check a checkpoint's broadcasts (each against its arm's key); keep them until
        :meth:`loaded_broadcast` hands each out by reference. Returns the checkpoint's round."""
        data = read_checkpoint_file(Path(path), expect_sha256=sha256)
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

    def placement(self) -> dict[str, Any]:
        """Where this host runs (the CPU: :mod:`sifl_ray.device` says why) and what it holds."""
        return placement(torch.device("cpu"), [role.key for role in self.roles.values()])
