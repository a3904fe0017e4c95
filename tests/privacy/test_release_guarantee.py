"""What a round releases is its arm's stated guarantee's, not a step's (docs/method.md "Every round releases a
noised output"; sifl_ray/arms/conformance.py).

A conformance run: every registered arm, and the plug-in DP arm of docs/extending.md ("A DP arm of your own")
as the page writes it, through Poisson rounds that sample nobody. An arm whose guarantee releases every round
(``every_round``) releases a new, noised model in each of them and says so on the console; any other arm
releases nothing new (the round is skipped, the model unchanged) and says so too. An arm whose steps cannot
make the release its guarantee states is refused at set-up with the reason, before any party starts.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import ClassVar

import pytest
import torch

from sifl_ray.arms import ARMS, arm_of, register_arm, unregister_arm
from sifl_ray.arms.dp_fedavg import DpFedAvg
from sifl_ray.arms.secagg import DpFedAvgSecAgg
from sifl_ray.config import ConfigError, load_config
from sifl_ray.runner import Simulation
from tests.test_extending_recipes import RECIPES

EMPTY_ROUNDS = [
    "backend=local",
    "clients.num_clients=6",
    "clients.sampling=poisson",
    "clients.fraction=0.1",  # P[nobody] = 0.9^6 ≈ 0.53 a round
    "train.rounds=4",
    "dp_fedavg.epsilons=[5]",
    "nbafl.epsilons=[5]",
    "coding.key_seed=2",  # a sample with empty rounds (asserted below)
    "checkpoint.every=0",
    "output.progress=false",
    "output.plot=false",
]


@pytest.fixture(scope="module")
def docs_arm(tmp_path_factory):
    """The page's DP arm: its code blocks written as a module and imported, as a reader runs the page
    (they register the arm and play it once)."""
    folder = tmp_path_factory.mktemp("recipe")
    (folder / "recipe_dp_arm.py").write_text(RECIPES["dp_arm"])
    sys.path.insert(0, str(folder))
    cwd = os.getcwd()
    os.chdir(folder)  # its run's folder lands there
    try:
        module = importlib.import_module("recipe_dp_arm")
    finally:
        os.chdir(cwd)
    yield vars(module)
    unregister_arm("my_dp")
    sys.modules.pop("recipe_dp_arm", None)
    sys.path.remove(str(folder))


def _play(tmp_path, arms: list[str], name: str):
    """Run ``arms`` through EMPTY_ROUNDS; each round's sample size and each arm's model after it."""
    cfg = load_config([*EMPTY_ROUNDS, f"arms=[{','.join(arms)}]", f"output.dir={tmp_path}"])
    sim = Simulation(cfg, run_dir=tmp_path / name)
    seen: list[dict] = []

    def record(s: Simulation, t: int) -> None:
        seen.append(
            {"sampled": sum(len(c) for c in s.assignment(t)), **{a: s.global_model(a) for a in s.arms}}
        )

    try:
        start = {a: sim.global_model(a) for a in sim.arms}
        result = sim.run(on_round_end=record)
    finally:
        sim.close()
    return cfg, result, [start, *seen]


def test_every_arm_releases_in_an_empty_round_what_its_guarantee_says(tmp_path, docs_arm, capfd):
    kinds = [
        k for k in ARMS.names() if not k.startswith(("dp_fedavg_weak", "dp_fedavg_skips", "dp_fedavg_fresh"))
    ]
    assert {"fl", "dp_fedavg", "dp_fedavg_secagg", "secagg", "nbafl", "sifl_m1", "sifl_m2", "my_dp"} <= set(
        kinds
    )
    cfg, result, seen = _play(tmp_path, kinds, "all")
    console = capfd.readouterr().err
    empty = [t for t in range(4) if seen[t + 1]["sampled"] == 0]
    assert empty, "this seed samples nobody in some round"
    for arm in result.history:
        protocol = arm_of(cfg, arm)
        privacy = result.summary["arms"][arm].get("privacy") or {}
        if privacy.get("amplified_by_sampling"):
            assert protocol.every_round, f"{arm}: an amplified ε needs every round released"
        rows = result.history[arm]
        for t in empty:
            before, after = seen[t][arm], seen[t + 1][arm]
            if protocol.every_round:
                assert not torch.equal(after, before), (arm, t)  # a new release: the noise
                assert rows[t]["clients/accepted"] == 0 and rows[t]["aggregator/noise_std"] > 0
                assert f"round {t} {arm}: nobody took part; released the aggregator's noise" in console
            else:
                assert torch.equal(after, before), (arm, t)  # nothing new: the model as it was
                assert f"round {t} {arm}: skipped" in console, (arm, t)


@dataclasses.dataclass(frozen=True)
class QuietWhenEmpty:
    """The page's noise step with the defect: no noise when nobody took part."""

    inner: object

    def __call__(self, average, *, weight, **context):
        if weight == 0:
            return average, {}
        return self.inner(average, weight=weight, **context)


def test_a_plugin_dp_arm_whose_step_cannot_noise_an_empty_round_is_refused_at_set_up(tmp_path, docs_arm):
    class Quiet(docs_arm["MyDpArm"]):
        kind = "my_dp_quiet"

        def steps(self, ctx):
            steps = super().steps(ctx)
            return dataclasses.replace(steps, aggregator=QuietWhenEmpty(steps.aggregator))

    register_arm(Quiet())
    try:
        cfg = load_config([*EMPTY_ROUNDS, "arms=[my_dp_quiet]", f"output.dir={tmp_path}"])
        with pytest.raises(ConfigError, match="its aggregator step returns a zero sum unchanged"):
            Simulation(cfg, run_dir=tmp_path / "quiet")
    finally:
        unregister_arm("my_dp_quiet")


class NoEmptyRounds(DpFedAvg):
    """DP-FedAvg whose guarantee says empty rounds release nothing, while its ε is amplified by sampling."""

    kind = "dp_fedavg_no_empty"
    every_round: ClassVar[bool] = False


def test_an_amplified_epsilon_without_every_round_is_refused_with_the_reason(tmp_path):
    register_arm(NoEmptyRounds())
    try:
        cfg = load_config([*EMPTY_ROUNDS, "arms=[dp_fedavg_no_empty]", f"output.dir={tmp_path}"])
        with pytest.raises(ConfigError) as err:
            Simulation(cfg, run_dir=tmp_path / "no_empty")
        said = (  # the reason and both fixes, as the set-up prints them
            "dp_fedavg_no_empty_eps5: its ε is amplified by sampling, which holds only against whoever "
            "cannot tell who was sampled; a round that sampled nobody then releases the model unchanged and "
            "tells everyone. Set every_round = True on the arm (with an aggregator step that noises a zero "
            "sum), or report the ε without amplification"
        )
        assert any(said in problem for problem in err.value.problems), err.value.problems
    finally:
        unregister_arm("dp_fedavg_no_empty")


def test_the_aggregator_refuses_to_release_an_unchanged_zero_sum_under_every_round():
    """The run-time guard behind the set-up's trial: a step that noises its trial but not a round (a step
    whose behaviour depends on the round) still releases nothing unnoised."""
    from sifl_ray.parties.aggregator import ReleaseError, aggregator_from_state
    from sifl_ray.specs import Coding, CodingSpec

    cfg = load_config(["coding.key_seed=1"])
    agg = aggregator_from_state(
        coding=Coding.PLAIN, spec=CodingSpec.from_config(cfg), state=None, bounds=(0, 4), shard=0
    )

    def only_round_zero(average, *, t, **context):
        return (average + 1.0 if t == 0 else average), {}

    assert agg.reduce(0, 0, [], step=only_round_zero, arm="x", every_round=True).aggregate is not None
    with pytest.raises(ReleaseError, match="x round 3: its guarantee releases a noised output every round"):
        agg.reduce(3, 0, [], step=only_round_zero, arm="x", every_round=True)
    assert agg.reduce(3, 0, [], step=only_round_zero, arm="x", every_round=False).aggregate is None


def test_each_arm_that_cannot_release_every_round_is_told_why_and_the_fix():
    """The set-up's three reasons, word for word: a secure arm (nothing to unmask), an arm with no
    aggregator step, one whose step leaves a zero sum as it was."""
    from sifl_ray.arms import get_arm
    from sifl_ray.arms.base import PartySteps
    from sifl_ray.arms.conformance import release_problems

    why = (
        "a: its guarantee releases every round (every_round = True), a round in which nobody took part too "
        "(else the unchanged model tells everyone that nobody did), but "
    )

    class Secure(DpFedAvgSecAgg):
        every_round: ClassVar[bool] = True

    class Bare(DpFedAvg):
        every_round: ClassVar[bool] = True

    assert release_problems(Secure(), PartySteps(), name="a", rows=3) == [
        f"{why}under secure aggregation such a round has nothing to unmask; set every_round = False and "
        "state the guarantee with participation public (zero-out)"
    ]
    assert release_problems(Bare(), PartySteps(), name="a", rows=3) == [
        f"{why}it has no aggregator step to release the noise on a zero sum; give it one (DP-FedAvg's "
        "CentralNoise) or set every_round = False and claim no amplification by sampling"
    ]
    assert release_problems(get_arm("fl"), PartySteps(), name="a", rows=3) == []  # no such guarantee
