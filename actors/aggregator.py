"""Ray shell around the aggregator role: one actor per shard of the encoded vector, all arms."""

from __future__ import annotations

import os

from actors.process import node_id, prepare_process
from sifl_ray.checkpoint import CheckpointError, load_party_key, save_party_key
from sifl_ray.keys import aggregator_from_state, key_inventory, make_party_aggregator_state
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.messages import Partial
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

    def reduce(self, arm: str, t: int, key_epoch: int, *partials: Partial):
        step = self.steps.get(arm)
        return self.roles[arm].reduce(t, key_epoch, list(partials), allow_empty=True, step=step, arm=arm)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str | None:
        """The Ray node this party runs on (:func:`actors.process.node_id`)."""
        return node_id()

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
