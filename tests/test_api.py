"""The Python API (``sifl_ray.simulate``): the command line's path, its history as data, its errors raised."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from sifl_ray import SiflError, simulate
from sifl_ray.api import SimulationResult
from sifl_ray.arms import Arm, ArmContext, PartySteps, unregister_arm
from sifl_ray.arms.steps import clip
from sifl_ray.config import load_config
from sifl_ray.config.validation import ConfigError


def _small(tmp_path) -> dict:
    return {
        "train.rounds": 2,
        "clients.num_clients": 3,
        "coding.key_seed": 3,
        "output.dir": str(tmp_path),
        "output.plot": False,
        "output.progress": False,
        "output.tensorboard": False,
    }


def test_every_problem_is_raised_at_once_and_nothing_exits():
    with pytest.raises(ConfigError) as got:
        simulate("quickstart", {"train.rounds": 0, "train.lrr": 0.1}, arms=["fl", "nbaf"])
    problems = got.value.problems
    assert len(problems) == 3, problems
    assert any(p.startswith("train.rounds:") for p in problems)
    assert any("train.lrr: unknown key; did you mean train.lr?" in p for p in problems)
    assert any("did you mean nbafl?" in p for p in problems)
    assert isinstance(got.value, SiflError)


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter importing this checkout: what it loads, it loads itself."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_a_refused_configuration_costs_no_torch_and_no_ray():
    code = (
        "import sys\n"
        "from sifl_ray import simulate\n"
        "from sifl_ray.config.validation import ConfigError\n"
        "try:\n"
        "    simulate('quickstart', {'train.lrr': 1})\n"
        "except ConfigError:\n"
        "    print('torch' in sys.modules, 'ray' in sys.modules)\n"
    )
    done = _fresh_python(code)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_the_api_says_what_it_starts_before_it_imports_torch():
    """The first line of a first simulate() (what it starts) comes before the heavy imports: stderr is
    watched, and at that line neither torch nor Ray is loaded yet."""
    code = (
        "import os, sys\n"
        "class Watch:\n"
        "    def __init__(self, inner): self.inner = inner\n"
        "    def write(self, text):\n"
        "        if text.startswith('[sifl] starting'):\n"
        "            print(text.strip(), 'torch' in sys.modules, 'ray' in sys.modules, flush=True)\n"
        "            os._exit(0)\n"
        "        return self.inner.write(text)\n"
        "    def __getattr__(self, name): return getattr(self.inner, name)\n"
        "sys.stderr = Watch(sys.stderr)\n"
        "from sifl_ray import simulate\n"
        "simulate('quickstart', {'train.rounds': 1})\n"
    )
    done = _fresh_python(code)
    assert done.stdout.split()[-2:] == ["False", "False"], (done.stdout, done.stderr)
    assert done.stdout.startswith("[sifl] starting Ray: a private local instance"), done.stdout


def test_a_missing_scenario_is_a_configuration_problem():
    with pytest.raises(ConfigError, match=r"no scenario 'quickstrat'.*did you mean quickstart"):
        simulate("quickstrat")


def test_a_run_returns_every_arms_history_as_a_table(tmp_path):
    got = simulate("quickstart", _small(tmp_path), arms=["fl", "nbafl"], backend="local")
    assert isinstance(got, SimulationResult)
    assert got.arms == ["fl", "nbafl_eps1"]
    assert [r["round"] for r in got.history["fl"]] == [0, 1]
    rows = got.rows()
    assert [(r["arm"], r["round"]) for r in rows] == [(a, t) for a in got.arms for t in (0, 1)]
    columns = got.columns()
    assert {len(v) for v in columns.values()} == {4}
    assert columns["arm"] == ["fl", "fl", "nbafl_eps1", "nbafl_eps1"]
    assert all(0 <= a <= 1 for a in columns["test_accuracy"])
    # the run folder and summary are the command line's
    summary = yaml.safe_load((got.run_dir / "summary.json").read_text())
    assert summary["arms"]["fl"]["final_accuracy"] == got.summary["arms"]["fl"]["final_accuracy"]
    assert got.history["fl"][-1]["test_accuracy"] == got.summary["arms"]["fl"]["final_accuracy"]
    assert got.result_line.startswith("RESULT ")
    assert got.config.backend == "local"


def test_the_api_and_a_loaded_configuration_give_the_same_numbers(tmp_path):
    # a scenario given as sections, as a loaded configuration and by name: one path, one result
    by_name = simulate("quickstart", _small(tmp_path), arms=["fl"], backend="local")
    texts = [f"{k}={v}" for k, v in _small(tmp_path).items()]
    cfg = load_config([*texts, "arms=[fl]", "backend=local"])
    by_config = simulate(cfg)
    by_sections = simulate(yaml.safe_load((by_name.run_dir / "config.yaml").read_text()))
    accuracy = [r["test_accuracy"] for r in by_name.history["fl"]]
    assert [r["test_accuracy"] for r in by_config.history["fl"]] == accuracy
    assert [r["test_accuracy"] for r in by_sections.history["fl"]] == accuracy


class HalfClip(Arm):
    """A test arm given as an object: fl's clip at half the radius (its own name, its own numbers)."""

    kind: ClassVar[str] = "api_half_clip"
    clip_key: ClassVar[str | None] = "privacy.clip"

    def steps(self, ctx: ArmContext) -> PartySteps:
        return PartySteps(client=clip(ctx.cfg.privacy.clip / 2))


def test_an_arm_object_is_registered_and_run(tmp_path):
    try:
        got = simulate(
            "quickstart",
            {**_small(tmp_path), "privacy.clip": 0.5},
            arms=["fl", HalfClip()],
            backend="local",
        )
    finally:
        unregister_arm(HalfClip.kind)
    assert got.arms == ["fl", "api_half_clip"]
    clipped = [r["clients/clipped"] for r in got.history["api_half_clip"]]
    assert clipped == [3.0, 3.0]  # every client's model is longer than 0.25
    assert got.history["api_half_clip"][-1]["test_accuracy"] != got.history["fl"][-1]["test_accuracy"]


def test_to_pandas_is_the_rows(tmp_path):
    pandas = pytest.importorskip("pandas")
    got = simulate("quickstart", _small(tmp_path), arms=["fl"], backend="local")
    frame = got.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["round"]) == [0, 1]


@pytest.mark.slow
@pytest.mark.ray
def test_on_ray_and_in_process_the_history_is_the_same(ray_session, tmp_path):
    # a notebook on Ray gets the numbers of an in-process run (here Ray is the test session's, joined)
    small = {**_small(tmp_path), "ray.num_workers": 2}
    on_ray = simulate("quickstart", small, arms=["fl", "nbafl"], backend="ray")
    in_process = simulate("quickstart", small, arms=["fl", "nbafl"], backend="local")
    assert on_ray.config.backend == "ray"
    for arm in ("fl", "nbafl_eps1"):
        for got, want in zip(on_ray.history[arm], in_process.history[arm], strict=True):
            assert got["test_accuracy"] == want["test_accuracy"] and got["train_loss"] == want["train_loss"]
