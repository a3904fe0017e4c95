"""Your own arm, with a setting: each client uploads only the largest ``topk.fraction`` of its update.

Run it as a script (a few clients, two rounds, in-process)::

    python examples/own_arm.py                    # topk.fraction = 0.1, its default
    python examples/own_arm.py topk.fraction=0.05 # any key=value, as on the command line

or use it as a plug-in of the command line (the folder on ``PYTHONPATH``, the module in ``SIFL_PLUGINS``)::

    PYTHONPATH=examples SIFL_PLUGINS=own_arm python run.py arms=[fl,topk] topk.fraction=0.05

docs/extending.md ("Your own arm") walks through it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from sifl_ray.arms import Arm, ArmContext, PartySteps, register_arm
from sifl_ray.arms.dp_fedavg import clipped_update
from sifl_ray.arms.steps import add_update, chain
from sifl_ray.config import Range, setting


# 1. The arm's settings: a section of the configuration, its keys, types, defaults and ranges.
@dataclass
class TopKConfig:
    """The ``topk`` arm: top-k sparsification of each client's update (Aji and Heafield, 2017)."""

    # the share of the update's coordinates a client uploads (the largest in magnitude)
    fraction: float = setting(0.1, rule=Range(lambda v: 0 < v <= 1, "a number in (0, 1]"))
    # C: each client's update is clipped to ‖w_i − w^t‖ ≤ C before it is sparsified
    clip: float = setting(10.0, rule=Range(lambda v: v > 0, "a number > 0"))


# 2. A client step: the vector in, the vector to upload and its metrics out.
@dataclass(frozen=True)
class TopK:
    """Keep the ``fraction`` largest coordinates of the vector (here: the clipped update), zero the rest."""

    fraction: float

    def __call__(self, update, *, start, arm, client, t):
        keep = max(1, int(self.fraction * update.numel()))
        dropped = update.abs().argsort(descending=True)[keep:]
        update[dropped] = 0.0
        return update, {"sparsity": dropped.numel() / update.numel()}


# 3. The arm: its name, its settings, what its clients upload, its steps (a chain: the built-in clipped
#    update, then top-k), and the server adding the average update to the global model. Its coding and its
#    channels are plain FedAvg's; the upload they name is the update, as ``uploads`` declares.
class TopKArm(Arm):
    """Top-k sparsified updates: each client clips its update, keeps the ``topk.fraction`` largest entries and
    uploads them; the server adds the average update to the model."""

    kind: ClassVar[str] = "topk"
    clip_key: ClassVar[str | None] = "topk.clip"
    clips: ClassVar[str] = "updates to ‖w_i − w^t‖"
    uploads: ClassVar[str] = "update"
    summary: ClassVar[str] = "FedAvg whose clients upload the top-k coordinates of their clipped update"
    settings: ClassVar = {"topk": TopKConfig}

    def steps(self, ctx: ArmContext) -> PartySteps:
        topk = ctx.cfg.topk
        return PartySteps(client=chain(clipped_update(topk.clip), TopK(topk.fraction)), server=add_update())


# 4. Register it: ``arms=[fl,topk]`` and ``topk.fraction=...`` are then valid, from Python and the CLI.
register_arm(TopKArm())


def main(overrides: list[str]) -> None:
    """Run fl beside topk on a small scenario and print each arm's accuracy and sparsity per round."""
    from sifl_ray import simulate

    small = ["train.rounds=2", "clients.num_clients=4", "output.plot=false", "output.progress=false"]
    result = simulate("quickstart", [*small, *overrides], arms=["fl", "topk"])
    for row in result.rows():
        sparsity = row.get("client/sparsity")
        print(
            f"{row['arm']:>5} round {row['round']}: accuracy {row['test_accuracy']:.4f}"
            + ("" if sparsity is None else f", sparsity {sparsity:.3f}")
        )
    print(f"run folder: {result.run_dir}")


if __name__ == "__main__":
    main(["backend=local", *sys.argv[1:]])
