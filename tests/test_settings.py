"""A component owns its settings: an arm declares its section, validated like the built-in ones."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from sifl_ray.arms import ARMS, Arm, register_arm, unregister_arm
from sifl_ray.arms.dp_fedavg import DpFedAvgConfig
from sifl_ray.config import load_config
from sifl_ray.config.help import describe_keys
from sifl_ray.config.sections import SECTIONS, SectionError
from sifl_ray.config.validation import ConfigError, Range, setting

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ScaleConfig:
    factor: float = setting(0.5, rule=Range(lambda v: 0 < v <= 1, "a number in (0, 1]"))  # the scale
    label: str = "half"


class ScaleArm(Arm):
    kind: ClassVar[str] = "scale_test"
    settings: ClassVar = {"scale_test": ScaleConfig}


@pytest.fixture
def scale_arm():
    register_arm(ScaleArm())
    yield
    unregister_arm(ScaleArm.kind)


def test_a_registered_arms_section_is_a_typed_key_with_its_default(scale_arm):
    cfg = load_config(["arms=[fl,scale_test]", "scale_test.factor=0.25"])
    assert cfg.scale_test.factor == 0.25 and cfg.scale_test.label == "half"
    assert load_config([]).scale_test.factor == 0.5  # the section exists while the arm is registered
    keys = {k.key: k for k in describe_keys(cfg)}
    assert keys["scale_test.factor"].allowed == "a number in (0, 1]"
    assert keys["scale_test.factor"].meaning == "the scale"


def test_its_problems_are_reported_with_the_others_at_once(scale_arm):
    with pytest.raises(ConfigError) as got:
        load_config(["scale_test.factor=2", "scale_test.fator=1", "scale_test.label=3", "train.rounds=0"])
    problems = got.value.problems
    assert len(problems) == 4, problems
    assert "scale_test.factor: expected a number in (0, 1], got 2.0; change scale_test.factor" in problems
    assert any(
        p.startswith("scale_test.fator: unknown key; did you mean scale_test.factor?") for p in problems
    )
    assert any(p.startswith("scale_test.label: expected str, got 3") for p in problems)


@pytest.fixture
def registries():
    """The arm and section registries as they were, whatever the test removed from them."""
    sections = {name: copy.deepcopy(section) for name, section in SECTIONS.items()}
    with ARMS.restored():
        yield
    SECTIONS.clear()
    SECTIONS.update(sections)


def test_the_section_goes_with_its_last_owner(scale_arm, registries):
    unregister_arm(ScaleArm.kind)
    with pytest.raises(ConfigError, match="scale_test: unknown key"):
        load_config(["scale_test.factor=0.25"])
    # a section shared by two arms stays while one of them is registered
    unregister_arm("dp_fedavg")
    assert SECTIONS["dp_fedavg"].schema is DpFedAvgConfig
    assert load_config(["dp_fedavg.clip=2"]).dp_fedavg.clip == 2.0
    unregister_arm("dp_fedavg_secagg")
    with pytest.raises(ConfigError, match="dp_fedavg: unknown key"):
        load_config(["dp_fedavg.clip=2"])


def test_a_section_cannot_take_another_components_or_the_platforms_name():
    class Taken(Arm):
        kind: ClassVar[str] = "taken_test"
        settings: ClassVar = {"nbafl": ScaleConfig}

    with pytest.raises(SectionError, match="section 'nbafl' is already NbaflConfig of arm nbafl"):
        register_arm(Taken())
    assert "taken_test" not in ARMS

    class Core(Arm):
        kind: ClassVar[str] = "core_test"
        settings: ClassVar = {"train": ScaleConfig}

    register_arm(Core())
    try:
        with pytest.raises(SectionError, match="arm core_test: section 'train' is a section of the platform"):
            load_config([])
    finally:
        unregister_arm("core_test")


def test_replacing_an_arm_replaces_its_section(scale_arm):
    @dataclass
    class Other:
        factor: int = 3

    class Redefined(ScaleArm):
        settings: ClassVar = {"scale_test": Other}

    register_arm(Redefined(), replace=True)  # a notebook cell run again with a new settings class
    assert load_config([]).scale_test.factor == 3


PLUGIN = '''
"""A plug-in arm with a setting: each client uploads only the largest fraction of its update."""
from dataclasses import dataclass
from typing import ClassVar

from sifl_ray.arms import Arm, PartySteps, register_arm
from sifl_ray.config.validation import Range, setting


@dataclass
class TopKConfig:
    fraction: float = setting(0.1, rule=Range(lambda v: 0 < v <= 1, "a number in (0, 1]"))


@dataclass(frozen=True)
class TopK:
    fraction: float

    def __call__(self, w, *, start, arm, client, t):
        update = w.to(start.dtype) - start
        k = max(1, int(self.fraction * update.numel()))
        small = update.abs().argsort(descending=True)[k:]
        update[small] = 0.0
        return start + update, {"sparsity": small.numel() / update.numel()}


class TopKArm(Arm):
    kind: ClassVar[str] = "topk"
    settings: ClassVar = {"topk": TopKConfig}

    def steps(self, ctx):
        return PartySteps(client=TopK(float(ctx.cfg.topk.fraction)))


register_arm(TopKArm())
'''


def _run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "SIFL_PLUGINS": "my_topk_arm",
        "SIFL_PROGRESS": "0",
    }
    args = [
        "arms=[fl,topk]",
        "backend=local",
        "train.rounds=2",
        "clients.num_clients=3",
        "output.plot=false",
        "output.tensorboard=false",
        f"output.dir={tmp_path / 'runs'}",
        *overrides,
    ]
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # `sifl run` processes
def test_a_plugin_arms_setting_works_from_the_command_line_and_is_checked(tmp_path):
    (tmp_path / "my_topk_arm.py").write_text(PLUGIN)
    done = _run(tmp_path, "topk.fraction=0.05")
    assert done.returncode == 0, done.stderr
    fields = dict(f.split("=", 1) for f in done.stdout.strip().splitlines()[-1].split()[2:])
    assert 0 <= float(fields["topk"]) <= 1 and fields["topk"] != fields["fl"]
    for value, message in [
        ("topk.fraction=2", "topk.fraction: expected a number in (0, 1], got 2.0; change topk.fraction"),
        ("topk.fractoin=0.1", "topk.fractoin: unknown key; did you mean topk.fraction?"),
    ]:
        refused = _run(tmp_path, value)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr and "Traceback" not in refused.stderr
