"""Ray shell around the aggregator role: one actor per shard of the encoded vector, all arms."""

from __future__ import annotations

from sifl_ray.keys import aggregator_from_state, key_inventory, make_party_aggregator_state
from sifl_ray.roles.aggregator import Aggregator
from sifl_ray.roles.messages import Partial


class AggregatorActor:
    """Shard ``shard`` of the aggregator party. Shard 0 creates key 2; the other shards receive it by
    ObjectRef (the driver never reads it)."""

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.roles: dict[str, Aggregator] = {}

    def create_key(self, arm: str, *, mode: str, coding: dict, run_seed: int) -> dict | None:
        return make_party_aggregator_state(arm=arm, mode=mode, coding=coding, run_seed=run_seed)

    def setup_arm(
        self, arm: str, *, mode: str, coding: dict, state: dict | None, bounds: tuple[int, int]
    ) -> None:
        self.roles[arm] = aggregator_from_state(
            mode=mode, coding=coding, state=state, bounds=bounds, shard=self.shard
        )

    def client_view(self, arm: str):
        key = self.roles[arm].key
        return None if key is None else key.client_view()

    def key_norms(self, arm: str):
        key = self.roles[arm].key
        return None if key is None else key.norms()

    def reduce(self, arm: str, t: int, key_epoch: int, *partials: Partial):
        return self.roles[arm].reduce(t, key_epoch, list(partials))

    def key_inventory(self) -> list[str]:
        """Which kinds of key material this actor holds (see :func:`sifl_ray.keys.key_inventory`)."""
        return sorted(key_inventory(self))
