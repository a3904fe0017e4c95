"""Ray shell around the aggregator role: an actor hosts one or several shards of the encoded vector, all
arms (``ray.aggregator_actors`` says how many actors share the ``ray.num_shards`` shards)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from actors.process import node_id, placement, prepare_process
from sifl_ray.checkpoint import CheckpointError, load_party_key, save_party_key
from sifl_ray.keys import key_inventory
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.factories import aggregator_from_state, make_party_aggregator_state
from sifl_ray.roles.messages import Partial
from sifl_ray.specs import Coding, CodingSpec

if TYPE_CHECKING:  # imported where a secure arm is set up: ``cryptography`` costs ~13 MiB in each process
    from sifl_ray.roles.secure import AggregatorSecAgg, SecAggSpec


class AggregatorActor:
    """The aggregator party, or part of it: the shards set up here (``shard``: the one a call means when it
    names none). The host of shard 0 creates key 2 (and saves it to the aggregator's key file); the other
    shards receive it by ObjectRef, or read that file on a restore (the driver never reads either).

    Several shards in one actor reduce one after the other, each with its own rows and noise stream, so
    the numbers depend on ``ray.num_shards`` only, never on how many actors host the shards.
    """

    def __init__(self, shard: int = 0) -> None:
        prepare_process()
        self.shard = shard
        self.roles: dict[str, dict[int, Aggregator]] = {}  # arm → shard → its role
        self.steps: dict[str, object] = {}  # arm → its aggregator step (sifl_ray.arms.AggregatorStep), if any
        self.secagg: dict[str, SecAggSpec] = {}  # arm → its secure aggregation's public parameters
        self.secagg_rounds: dict[str, AggregatorSecAgg] = {}  # host of shard 0: SecAgg's server, per arm

    def create_key(
        self, arm: str, *, coding: Coding, spec: CodingSpec, run_seed: int, key_path: str | None = None
    ) -> dict:
        """The aggregator's secrets of ``arm`` (key 2 in M2, its step's noise seed), saved to its key file."""
        state = make_party_aggregator_state(arm=arm, coding=coding, spec=spec, run_seed=run_seed)
        if key_path is not None:
            save_party_key(key_path, party="aggregator", arm=arm, mode=coding.value, state=state)
        return state

    def setup_arm(
        self,
        arm: str,
        *,
        coding: Coding,
        spec: CodingSpec,
        state: dict | None,
        bounds: tuple[int, int],
        shard: int | None = None,
    ) -> None:
        shard = self.shard if shard is None else shard
        self.roles.setdefault(arm, {})[shard] = aggregator_from_state(
            coding=coding, spec=spec, state=state, bounds=bounds, shard=shard
        )

    def restore_arm(
        self,
        arm: str,
        *,
        coding: Coding,
        spec: CodingSpec,
        key_path: str | None,
        bounds: tuple[int, int],
        shard: int | None = None,
    ) -> None:
        """Take the aggregator's secrets back from its own key file (a restarted shard, or a resume): key 2
        in M2, and in every arm the seed of its step's noise, so that a replayed round draws the noise it
        drew the first time."""
        if key_path is None:
            raise CheckpointError(
                f"arm {arm}: the aggregator's key file is unknown; its secrets cannot be restored"
            )
        saved = load_party_key(key_path, party="aggregator", arm=arm)
        if saved.get("mode") != coding.value:  # the key file stores the coding's value as its "mode"
            raise CheckpointError(
                f"{key_path}: a key for coding {saved.get('mode')}, expected {coding.value}"
            )
        self.setup_arm(arm, coding=coding, spec=spec, state=saved["state"], bounds=bounds, shard=shard)

    def _key(self, arm: str):
        """Key 2 of ``arm`` (every shard of this actor holds the same one; ``None`` unless M2)."""
        return next(iter(self.roles[arm].values())).key

    def client_view(self, arm: str):
        key = self._key(arm)
        return None if key is None else key.client_view()

    def key_norms(self, arm: str):
        key = self._key(arm)
        return None if key is None else key.norms()

    def roundoff(self, arm: str):
        """Key 2's float64 error constants (public scalars; see :mod:`sifl_ray.coding.roundoff`)."""
        key = self._key(arm)
        return None if key is None else key.roundoff()

    def set_step(self, arm: str, step) -> None:
        """The arm's aggregator step (kept apart from key 2: a restored key finds it here)."""
        self.steps[arm] = step

    def set_secagg(self, arm: str, spec: SecAggSpec) -> None:
        """The arm's secure aggregation (public parameters; kept apart from keys, like the steps)."""
        from sifl_ray.roles.secure import AggregatorSecAgg

        self.secagg[arm] = spec
        self.secagg_rounds[arm] = AggregatorSecAgg(spec, arm)

    def reduce(
        self, arm: str, t: int, key_epoch: int, *partials: Partial, shard: int | None = None, plan=None
    ):
        """Step 3 on one shard; a secure arm's (``plan``: the masks to remove) returns a third value, the
        decoded sum, which only the evaluator receives."""
        role = self.roles[arm][self.shard if shard is None else shard]
        step = self.steps.get(arm)
        if plan is not None:
            return role.reduce_masked(t, list(partials), plan=plan, spec=self.secagg[arm], step=step, arm=arm)
        return role.reduce(t, key_epoch, list(partials), allow_empty=True, step=step, arm=arm)

    # Secure aggregation: the host of shard 0 plays SecAgg's server; every shard checks and unmasks its own
    # rows. Each step of SecAgg's server returns its result and a status (None, or why the round cannot go
    # on: it then reveals nothing, and the driver skips it).
    def secagg_open(self, arm: str, t: int, roster: list[int]):
        return self._secagg_step(lambda: self.secagg_rounds[arm].open(t, roster))

    def secagg_route_keys(self, arm: str, t: int, *keys: dict):
        return self._secagg_step(lambda: self.secagg_rounds[arm].route_keys(t, keys))

    def secagg_route_shares(self, arm: str, t: int, *outboxes: dict):
        return self._secagg_step(lambda: self.secagg_rounds[arm].route_shares(t, outboxes))

    def secagg_announce(self, arm: str, t: int, *partials):
        survivors = {c for p in partials for c in p.clients}
        return self._secagg_step(lambda: self.secagg_rounds[arm].announce(t, survivors))

    def check_masked(self, arm: str, t: int, key_epoch: int, *partials, shard: int | None = None):
        role = self.roles[arm][self.shard if shard is None else shard]
        return role.check_masked(t, key_epoch, list(partials))

    @staticmethod
    def _secagg_step(step):
        from sifl_ray.privacy.secagg import SecAggError

        try:
            return step(), None
        except SecAggError as err:
            return None, str(err)

    def secagg_plan(self, arm: str, t: int, *responses: dict):
        """The masks left in the sum, and what the round cost SecAgg's server (``error``: the round cannot
        be unmasked, and reveals nothing)."""
        from sifl_ray.privacy.secagg import SecAggError

        rounds = self.secagg_rounds[arm]
        try:
            plan, error = rounds.plan(t, responses), None
        except SecAggError as err:
            plan, error = None, str(err)
        stats = rounds.stats()
        info = {
            "error": error,
            "server_s": stats.compute_s,
            "server_bytes": stats.bytes_sent + stats.bytes_received,
            "server_messages": stats.messages_sent,
            **rounds.round_sets(),
        }
        return plan, info

    def placement(self) -> dict:
        """Where this actor runs (the CPU: :mod:`sifl_ray.device` says why) and what it holds."""
        keys = [role.key for shards in self.roles.values() for role in shards.values()]
        return placement(torch.device("cpu"), keys)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`actors.process.node_id`)."""
        return node_id()

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
