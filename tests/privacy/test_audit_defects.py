"""Privacy defects put back one at a time, with the in-run audit on (docs/method.md "Auditing inside
the run"): for each, whether the audit catches it, and where it cannot, why, and which check of the run does.

1. Skipping the noise on a round where nobody was sampled: the audit cannot see it. Its statistic is the
   cosine of the release's change with each direction; an unchanged release has change 0, so the round
   adds nothing to the score of any canary, inserted or not, nor to any null. The leak is in the fact
   that the model did not move, which says that nobody was sampled: about the sample, not about one
   canary. So such an arm is refused before it runs: the round releases what the arm's guarantee says,
   and the set-up tries the aggregator's step on a zero sum (`test_release_guarantee`); the release check
   (`test_privacy_run_paths`) checks the runs: no DP-FedAvg release may equal the one before it.
2. Fresh noise when a round is replayed after a fault: the audit cannot see it. Its record is the
   driver's, checkpointed and rolled back with the models, so it scores each round once, on the replayed
   trajectory; the leak is the pair of releases of one round (before the fault and in the replay), which
   no statistic over one trajectory holds. Even an auditor that kept both would gain little: one extra
   release of T rounds raises μ by a factor of at most sqrt((T + 1) / T), far below what a few hundred
   canaries resolve. Caught by the replay check: every step of a curve has one value, however often it
   was written.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
import torch

from sifl_ray.arms import register_arm, unregister_arm
from sifl_ray.arms.dp_fedavg import CentralNoise, DpFedAvg
from sifl_ray.config import load_config
from sifl_ray.runner import Simulation


@dataclasses.dataclass
class FreshNoiseEachProcess(CentralNoise):
    """The defect of a replay: the noise seed is made anew in each process, not read from the key file,
    so a respawned aggregator replaying a round draws other noise than the release it made before."""

    def __call__(
        self, average: torch.Tensor, *, arm: str, seed: bytes | None = None, **kw
    ) -> tuple[torch.Tensor, dict[str, float]]:
        fresh = self._seeds.setdefault(f"{arm}/fresh", os.urandom(32))
        return super().__call__(average, arm=arm, seed=fresh, **kw)


def _defective(steps, step_class):
    """``steps`` with the aggregator step rebuilt as ``step_class``: same settings, the defect put back."""
    agg = steps.aggregator
    fields = {f.name: getattr(agg, f.name) for f in dataclasses.fields(agg) if f.init}
    return dataclasses.replace(steps, aggregator=step_class(**fields))


class FreshOnReplay(DpFedAvg):
    kind = "dp_fedavg_fresh"

    def steps(self, ctx):
        return _defective(super().steps(ctx), FreshNoiseEachProcess)


@pytest.fixture(scope="module", autouse=True)
def defects():
    """Register the defective arms (and let Ray's workers unpickle their steps by value: this file is not
    a package module they could import)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    arms = (FreshOnReplay(),)
    for arm in arms:
        register_arm(arm)
    yield
    for arm in arms:
        unregister_arm(arm.kind)
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


BASE = [
    "clients.num_clients=10",
    "dp_fedavg.epsilons=[5]",
    "output.progress=false",
    "output.plot=false",
]


def _sim(tmp_path, overrides, name):
    cfg = load_config([*BASE, *overrides, f"output.dir={tmp_path}"])
    return Simulation(cfg, run_dir=tmp_path / name)


@pytest.mark.slow  # an aggregator killed on Ray, its rounds replayed
@pytest.mark.ray
def test_fresh_noise_on_replay_is_out_of_the_audits_sight_and_the_replay_check_catches_it(
    ray_session, tmp_path
):
    """Checkpoints every 3 rounds, the aggregator killed in round 4: rounds from 3 are replayed from the
    checkpoint of round 2. The honest arm's audit ends exactly as in a run without the fault (in-process,
    the same secrets): the audit scored each round once, on the replayed trajectory, as it would any
    replay. The defective arm released round 3 twice with different noise: its curve has two values at
    step 3, which the replay check sees and the audit, rolled back with the run, cannot."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    over = [
        "arms=[dp_fedavg,dp_fedavg_fresh]",
        "train.rounds=6",
        "audit.canaries=10",
        "audit.nulls=20",
        "coding.key_seed=11",
    ]
    faulted = _sim(
        tmp_path,
        [
            *over,
            "backend=ray",
            "ray.num_workers=2",
            "checkpoint.every=3",
            "faults.inject=[{kind: aggregator_kill, round: 4, arm: dp_fedavg_eps5}]",
            "ray.placement=separate",  # a party killed alone: its own process
        ],
        "faulted",
    )
    try:
        result = faulted.run()
    finally:
        faulted.close()
    assert [r["replayed_from_round"] for r in result.summary["restored"]] == [3]
    clean = _sim(tmp_path, [*over, "backend=local", "arms=[dp_fedavg]"], "clean")
    try:
        reference = clean.run()
    finally:
        clean.close()
    honest = "dp_fedavg_eps5"
    # the same figures; only the size of the table's family differs (two arms audited, against one)
    faulted_audit = {k: v for k, v in result.summary["arms"][honest]["audit"].items() if k != "family"}
    assert faulted_audit == {
        k: v for k, v in reference.summary["arms"][honest]["audit"].items() if k != "family"
    }

    def values(arm: str) -> dict[int, set[float]]:
        out: dict[int, set[float]] = {}
        for f in sorted((result.run_dir / "tb" / arm).glob("events.out.tfevents.*")):
            for event in EventFileLoader(str(f)).Load():
                for v in event.summary.value:
                    if v.tag == "eval/test_loss":
                        out.setdefault(event.step, set()).add(float(v.tensor.float_val[0]))
        return out

    assert all(len(v) == 1 for v in values(honest).values())
    fresh = values("dp_fedavg_fresh_eps5")
    assert len(fresh[3]) == 2, fresh  # two releases of round 3: the replay check catches the defect
