"""The server: key 1 (π1). It encodes the global model and decodes what the aggregator sends back.

SPEC "Parties": the server sees only aggregated, encoded models. In M1 it decodes the average to the plain
global model ``w^{t+1} = P1L w~_a`` and re-encodes it with fresh noise; in M2 it never holds a plain model:
``W' = P1 (P1L W'_a) + N1 R1`` keeps the aggregator's code 2 on (Algorithm 2).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from sifl_ray.arms.base import ServerStep
from sifl_ray.coding.base import CODING_DTYPE, NoiseSpec, ServerKey
from sifl_ray.seeding import noise_generator
from sifl_ray.specs import Coding


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
        from sifl_ray.coding.keys import server_key_from_state_dict

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
    ) -> tuple[torch.Tensor, dict[str, Any]]:
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
        return out, {"decode_s": decode_s, "encode_s": encode_s, "step_metrics": step_metrics}

    @staticmethod
    def _step(
        step: ServerStep, previous: torch.Tensor | None, average: torch.Tensor, arm: str, t: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if previous is None:
            raise ValueError(f"{arm}: a server step needs the previous global model (the round's broadcast)")
        out, metrics = step(average, previous=previous.to(CODING_DTYPE), arm=arm, t=t)
        return out.to(CODING_DTYPE), {name: float(value) for name, value in metrics.items()}
