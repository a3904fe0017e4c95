"""The driver's own records (what a checkpoint keeps of it, and a rollback or resume restores): each arm's
history, wall time, drops and incidents, the SIFL accountant's releases, and each arm's in-run audit record
(:class:`~sifl_ray.privacy.canaries.CanaryAudit`), which goes back with the models on a rollback."""

from __future__ import annotations

import hashlib
from typing import Any

from omegaconf import DictConfig

from sifl_ray.config import to_yaml
from sifl_ray.privacy.accountant import SiflAccountant
from sifl_ray.privacy.canaries import CanaryAudit


def config_sha(text: str) -> str:
    """The SHA-256 of a configuration's YAML: a checkpoint's driver file is refused under another one."""
    return hashlib.sha256(text.encode()).hexdigest()


class DriverState:
    """The driver's own records: what a checkpoint keeps of it (and a rollback or resume restores)."""

    def __init__(self, arms: list[str]):
        self.arms = list(arms)
        self.restored: list[dict] = []  # restores and resumes: carried across rollbacks
        self.checkpoint_s: list[float] = []
        self.audits: dict[str, CanaryAudit] = {}  # arm → its canaries' record (audit.canaries > 0)
        self.reset()

    def reset(self) -> None:
        self.history: dict[str, list[dict[str, float]]] = {arm: [] for arm in self.arms}
        self.wall: dict[str, float] = dict.fromkeys(self.arms, 0.0)
        self.dropped: dict[str, list[dict]] = {arm: [] for arm in self.arms}
        self.incidents: list[dict] = []
        self.accountant = SiflAccountant()
        for audit in self.audits.values():
            audit.reset()

    @property
    def next_round(self) -> int:
        """The first round not yet played (0, or the round after the restored checkpoint)."""
        return len(next(iter(self.history.values()))) if self.history else 0

    def payload(self, t: int, cfg: DictConfig) -> dict[str, Any]:
        """The driver's file of the checkpoint of round ``t``."""
        return {
            "format": 1,
            "round": t,
            "arms": list(self.arms),
            "config_sha256": config_sha(to_yaml(cfg)),
            "history": self.history,
            "wall": self.wall,
            "dropped": self.dropped,
            "incidents": self.incidents,
            "restored": self.restored,
            "accountant": self.accountant.state_dict(),
            "checkpoint_s": self.checkpoint_s,
            "audits": {arm: a.state_dict() for arm, a in self.audits.items()},
        }

    def load(self, state: dict | None) -> None:
        """Back to ``state`` (a checkpoint's driver file; ``None``: back to the start)."""
        self.reset()
        if state is None:
            return
        self.history = {arm: list(state["history"][arm]) for arm in self.arms}
        self.wall = {arm: float(state["wall"][arm]) for arm in self.arms}
        self.dropped = {arm: list(state["dropped"][arm]) for arm in self.arms}
        self.incidents = list(state["incidents"])
        self.accountant.load_state_dict(state["accountant"])
        self.checkpoint_s = list(state.get("checkpoint_s", []))
        for arm, audit in self.audits.items():
            if arm in state.get("audits", {}):
                audit.load_state_dict(state["audits"][arm])
