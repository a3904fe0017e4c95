"""Ray shell around the aggregator role: one actor per shard of the encoded vector, all arms."""

from __future__ import annotations

import os

import torch

from actors.process import placement, prepare_process
from sifl_ray.checkpoint import CheckpointError, load_party_key, save_party_key
from sifl_ray.keys import aggregator_from_state, key_inventory, make_party_aggregator_state
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.messages import Partial
from sifl_ray.roles.secure import AggregatorSecAgg, SecAggSpec
from sifl_ray.specs import CodingSpec


class AggregatorActor:
    """Shard ``shard`` of the aggregator party. Shard 0 creates key 2 (and saves it to the aggregator's key
    file); the other shards receive it by ObjectRef, or read that file on a restore (the driver never reads
    either)."""

    def __init__(self, shard: int) -> None:
        prepare_process()
        self.shard = shard
        self.roles: dict[str, Aggregator] = {}
        self.steps: dict[str, object] = {}  # arm → its aggregator step (sifl_ray.arms.AggregatorStep), if any
        self.secagg: dict[str, SecAggSpec] = {}  # arm → its secure aggregation's public parameters
        self.secagg_rounds: dict[str, AggregatorSecAgg] = {}  # shard 0: SecAgg's server, per arm

    def create_key(
        self, arm: str, *, mode: str, coding: CodingSpec, run_seed: int, key_path: str | None = None
    ) -> dict | None:
        state = make_party_aggregator_state(arm=arm, mode=mode, coding=coding, run_seed=run_seed)
        if key_path is not None and state is not None:
            save_party_key(key_path, party="aggregator", arm=arm, mode=mode, state=state)
        return state

    def setup_arm(
        self, arm: str, *, mode: str, coding: CodingSpec, state: dict | None, bounds: tuple[int, int]
    ) -> None:
        self.roles[arm] = aggregator_from_state(
            mode=mode, coding=coding, state=state, bounds=bounds, shard=self.shard
        )

    def restore_arm(
        self, arm: str, *, mode: str, coding: CodingSpec, key_path: str | None, bounds: tuple[int, int]
    ) -> None:
        """Take key 2 back from the aggregator's own key file (a restarted shard, or a resume)."""
        state = None
        if mode == "m2":
            if key_path is None:
                raise CheckpointError(
                    f"arm {arm}: the aggregator's key file is unknown; key 2 cannot be restored"
                )
            saved = load_party_key(key_path, party="aggregator", arm=arm)
            if saved.get("mode") != mode:
                raise CheckpointError(f"{key_path}: a key for mode {saved.get('mode')}, expected {mode}")
            state = saved["state"]
        self.setup_arm(arm, mode=mode, coding=coding, state=state, bounds=bounds)

    def client_view(self, arm: str):
        key = self.roles[arm].key
        return None if key is None else key.client_view()

    def key_norms(self, arm: str):
        key = self.roles[arm].key
        return None if key is None else key.norms()

    def roundoff(self, arm: str):
        """Key 2's float64 error constants (public scalars; see :mod:`sifl_ray.coding.roundoff`)."""
        key = self.roles[arm].key
        return None if key is None else key.roundoff()

    def set_step(self, arm: str, step) -> None:
        """The arm's aggregator step (kept apart from key 2: a restored key finds it here)."""
        self.steps[arm] = step

    def set_secagg(self, arm: str, spec: SecAggSpec) -> None:
        """The arm's secure aggregation (public parameters; kept apart from keys, like the steps)."""
        self.secagg[arm] = spec
        self.secagg_rounds[arm] = AggregatorSecAgg(spec, arm)

    def reduce(self, arm: str, t: int, key_epoch: int, *partials: Partial, plan=None):
        """Step 3 on this shard; a secure arm's (``plan``: the masks to remove) returns a third value, the
        decoded sum, which only the evaluator receives."""
        step = self.steps.get(arm)
        if plan is not None:
            return self.roles[arm].reduce_masked(
                t, list(partials), plan=plan, spec=self.secagg[arm], step=step, arm=arm
            )
        return self.roles[arm].reduce(t, key_epoch, list(partials), allow_empty=True, step=step, arm=arm)

    # Secure aggregation: shard 0 plays SecAgg's server; every shard checks and unmasks its own rows. Each
    # step of shard 0 returns its result and a status (None, or why the round cannot go on: it then
    # reveals nothing, and the driver skips it).
    def secagg_open(self, arm: str, t: int, roster: list[int]):
        return self._secagg_step(lambda: self.secagg_rounds[arm].open(t, roster))

    def secagg_route_keys(self, arm: str, t: int, *keys: dict):
        return self._secagg_step(lambda: self.secagg_rounds[arm].route_keys(t, keys))

    def secagg_route_shares(self, arm: str, t: int, *outboxes: dict):
        return self._secagg_step(lambda: self.secagg_rounds[arm].route_shares(t, outboxes))

    def secagg_announce(self, arm: str, t: int, *partials):
        survivors = {c for p in partials for c in p.clients}
        return self._secagg_step(lambda: self.secagg_rounds[arm].announce(t, survivors))

    def check_masked(self, arm: str, t: int, key_epoch: int, *partials) -> dict[int, str]:
        return self.roles[arm].check_masked(t, key_epoch, list(partials))

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
        return placement(torch.device("cpu"), [role.key for role in self.roles.values()])

    def pid(self) -> int:
        return os.getpid()

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
