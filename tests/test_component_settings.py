"""A model, a data set and a partitioner own their settings: each declares a dataclass
when it registers; the dataclass is a configuration section named after it, checked like every section
(unknown key, type, range, all at once, exit code 2 from the command line), and its typed values are what
the factory, the loader and the scheme receive, through the functions a run calls
(:mod:`sifl_ray.runner.workload`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch import nn

from sifl_ray.config import load_config
from sifl_ray.config.help import describe_keys
from sifl_ray.config.names import MODELS
from sifl_ray.config.sections import SECTIONS, SectionError
from sifl_ray.config.validation import Choice, ConfigError, Range, setting
from sifl_ray.data.partition import (
    PARTITIONERS,
    partition_dataset,
    register_partitioner,
    unregister_partitioner,
)
from sifl_ray.data.registry import DATASETS, register_dataset, unregister_dataset
from sifl_ray.models import build_model, count_params, register_model, unregister_model
from sifl_ray.runner.workload import load_data, model_for, partition
from sifl_ray.seeding import torch_generator

ROOT = Path(__file__).resolve().parents[1]

#: What each component was called with, newest last: the test asserts on what arrived, not on the config.
RECEIVED: dict[str, list[dict[str, Any]]] = {"model": [], "data": [], "partition": []}


@dataclass
class NetSettings:
    # hidden units of the one hidden layer
    width: int = setting(8, rule=Range(lambda v: v >= 1, "an integer >= 1"))
    activation: str = setting("tanh", rule=Choice(lambda: ("tanh", "relu")))


def st_net(input_shape, num_classes, *, width: int, activation: str) -> nn.Module:
    RECEIVED["model"].append({"width": width, "activation": activation})
    c, h, w = input_shape
    act = nn.Tanh() if activation == "tanh" else nn.ReLU()
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, width), act, nn.Linear(width, num_classes))


@dataclass
class WritersSettings:
    # writers per class: the data's own clients
    per_class: int = setting(2, rule=Range(lambda v: v >= 1, "an integer >= 1"))
    # added to every sample
    shift: float = setting(0.0, rule=Range(lambda v: v >= 0, "a number >= 0"))


def st_writers(*, per_class: int, shift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    RECEIVED["data"].append({"per_class": per_class, "shift": shift})
    y = np.arange(60) % 3
    x = np.tile(np.eye(3, dtype=np.float32)[y], (1, 2)) + shift
    return x, y, y * per_class + np.arange(60) // 3 % per_class


@dataclass
class BlocksSettings:
    # samples per block, blocks dealt round-robin to the clients
    block: int = setting(4, rule=Range(lambda v: v >= 1, "an integer >= 1"))


def st_blocks(labels, num_clients, generator, *, block: int) -> list[np.ndarray]:
    RECEIVED["partition"].append({"block": block})
    owner = np.arange(len(labels)) // block % num_clients
    return [np.flatnonzero(owner == k) for k in range(num_clients)]


@pytest.fixture
def components():
    """The three registered as a plug-in would, and removed after (with their sections)."""
    for got in RECEIVED.values():
        got.clear()
    register_model("st_net", settings=NetSettings)(st_net)
    register_dataset("st_writers", settings=WritersSettings)(st_writers)
    register_partitioner("st_blocks", settings=BlocksSettings)(st_blocks)
    yield
    unregister_model("st_net")
    unregister_dataset("st_writers")
    unregister_partitioner("st_blocks")
    assert not {"st_net", "st_writers", "st_blocks"} & set(SECTIONS)


MINE = ["train.model=st_net", "data.name=st_writers", "data.partition=st_blocks", "clients.num_clients=3"]


def test_valid_overrides_reach_the_factory_loader_and_scheme_typed(components):
    cfg = load_config([*MINE, "st_net.width=5", "st_writers.shift=1", "st_blocks.block=2"])
    dataset = load_data(cfg)
    assert RECEIVED["data"] == [{"per_class": 2, "shift": 1.0}]  # the default, and 1 as the float it is
    assert isinstance(RECEIVED["data"][0]["shift"], float)
    assert dataset.x_train.min() >= 1.0  # the shift was applied
    parts = partition(cfg, np.asarray(dataset.y_train), dataset.client_train)
    assert RECEIVED["partition"] == [{"block": 2}]
    assert list(parts[0][:4]) == [0, 1, 6, 7]  # blocks of two, dealt to three clients
    spec, net = model_for(cfg, dataset)
    assert RECEIVED["model"][-1] == {"width": 5, "activation": "tanh"}
    assert spec.args == {"width": 5, "activation": "tanh"}  # what every party builds from
    assert count_params(net) == 6 * 5 + 5 + 5 * 3 + 3
    keys = {k.key: k for k in describe_keys(cfg)}  # what `sifl config` shows
    assert (keys["st_net.width"].value, keys["st_net.width"].allowed) == (5, "an integer >= 1")
    assert keys["st_net.width"].meaning == "hidden units of the one hidden layer"


def test_without_overrides_each_receives_its_dataclass_defaults(components):
    cfg = load_config(MINE)
    dataset = load_data(cfg)
    partition(cfg, np.asarray(dataset.y_train))
    model_for(cfg, dataset)
    assert RECEIVED == {
        "model": [{"width": 8, "activation": "tanh"}],
        "data": [{"per_class": 2, "shift": 0.0}],
        "partition": [{"block": 4}],
    }


def test_from_python_given_values_go_over_the_defaults(components):
    net = build_model(
        "st_net",
        input_shape=(1, 1, 6),
        num_classes=3,
        generator=torch_generator(0, "init"),
        args={"width": 2},
    )
    assert (
        RECEIVED["model"] == [{"width": 2, "activation": "tanh"}]
        and count_params(net) == 6 * 2 + 2 + 2 * 3 + 3
    )
    partition_dataset(np.zeros(12, int), scheme="st_blocks", num_clients=2, seed=0)
    assert RECEIVED["partition"] == [{"block": 4}]
    with pytest.raises(ValueError, match="'iid' declares no settings"):
        partition_dataset(np.zeros(12, int), scheme="iid", num_clients=2, seed=0, settings={"block": 1})


def test_unknown_keys_wrong_types_and_ranges_are_refused_together(components):
    with pytest.raises(ConfigError) as got:
        load_config(
            [
                *MINE,
                "st_net.widht=5",
                "st_net.activation=sigmoid",
                "st_writers.per_class=two",
                "st_writers.shift=-1",
                "st_blocks.block=0",
                "train.model_args={width: 3}",
                "data.args={per_class: 3}",
            ]
        )
    problems = got.value.problems
    assert len(problems) == 7, problems
    text = "\n".join(problems)
    assert "st_net.widht: unknown key; did you mean st_net.width?" in text
    assert "st_net.activation: expected one of tanh, relu" in text
    assert "st_writers.per_class: expected int, got 'two'" in text
    assert "st_writers.shift: expected a number >= 0, got -1.0; change st_writers.shift" in text
    assert "st_blocks.block: expected an integer >= 1, got 0; change st_blocks.block" in text
    assert "train.model_args: the model 'st_net' takes its settings from its section st_net" in text
    assert "data.args: the data set 'st_writers' takes its settings from its section st_writers" in text


def test_a_section_the_function_cannot_take_or_anothers_name_is_refused_at_registration():
    @dataclass
    class Depth:
        depth: int = 2

    with pytest.raises(SectionError, match=r"model st_bad: 'st_net' takes no keyword argument depth"):
        register_model("st_bad", settings=Depth)(st_net)
    with pytest.raises(SectionError, match=r"section 'nbafl' is already NbaflConfig of arm nbafl"):
        register_dataset("nbafl", settings=Depth)(lambda depth: None)

    @dataclass
    class NoDefault:
        block: int

    with pytest.raises(SectionError, match="need a default for block"):
        register_partitioner("st_nodefault", settings=NoDefault)(st_blocks)
    assert "st_bad" not in MODELS and "nbafl" not in DATASETS and "st_nodefault" not in PARTITIONERS


# ---------------------------------------------------------------------------------------------------------
# From the command line: a plug-in module named in SIFL_PLUGINS
# ---------------------------------------------------------------------------------------------------------

PLUGIN = '''
"""A plug-in with a model, a data set and a partitioner, each with its settings; each writes what it
received to $RECORD, one JSON line a call."""
import json
import os
from dataclasses import dataclass

import numpy as np
from torch import nn

from sifl_ray.data.own import register_dataset
from sifl_ray.data.partition import register_partitioner
from sifl_ray.models import register_model
from sifl_ray.config.validation import Range, setting


def record(what, **values):
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({"what": what, **values}) + "\\n")


@dataclass
class NetSettings:
    width: int = setting(8, rule=Range(lambda v: v >= 1, "an integer >= 1"))


@register_model("pl_net", settings=NetSettings)
def pl_net(input_shape, num_classes, width):
    record("model", width=width)
    return nn.Sequential(nn.Flatten(), nn.Linear(6, width), nn.Tanh(), nn.Linear(width, num_classes))


@dataclass
class DataSettings:
    samples: int = setting(60, rule=Range(lambda v: v >= 12, "an integer >= 12"))


@register_dataset("pl_data", settings=DataSettings)
def pl_data(samples):
    record("data", samples=samples)
    y = np.arange(samples) % 3
    return np.tile(np.eye(3, dtype=np.float32)[y], (1, 2)), y


@dataclass
class BlockSettings:
    block: int = setting(4, rule=Range(lambda v: v >= 1, "an integer >= 1"))


@register_partitioner("pl_blocks", settings=BlockSettings)
def pl_blocks(labels, num_clients, generator, block):
    record("partition", block=block)
    owner = np.arange(len(labels)) // block % num_clients
    return [np.flatnonzero(owner == k) for k in range(num_clients)]
'''


def _run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "SIFL_PLUGINS": "my_components",
        "SIFL_PROGRESS": "0",
        "RECORD": str(tmp_path / "record.jsonl"),
    }
    args = [
        "arms=[fl]",
        "train.model=pl_net",
        "data.name=pl_data",
        "data.partition=pl_blocks",
        "backend=local",
        "train.rounds=1",
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
def test_a_plugins_sections_work_from_the_command_line_and_are_checked(tmp_path):
    (tmp_path / "my_components.py").write_text(PLUGIN)
    done = _run(tmp_path, "pl_net.width=3", "pl_data.samples=48", "pl_blocks.block=2")
    assert done.returncode == 0, done.stderr[-3000:]
    calls = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    assert {"what": "data", "samples": 48} in calls and {"what": "partition", "block": 2} in calls
    widths = {c["width"] for c in calls if c["what"] == "model"}
    assert widths == {3}  # every party built the model from the section's value
    saved = (next((tmp_path / "runs").rglob("config.yaml"))).read_text()
    assert "pl_net:\n  width: 3" in saved  # the run records the values it used

    (tmp_path / "record.jsonl").unlink()
    refused = _run(tmp_path, "pl_net.widht=3", "pl_data.samples=many", "pl_blocks.block=0")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "3 configuration problems" in refused.stderr and "Traceback" not in refused.stderr
    for message in (
        "pl_net.widht: unknown key; did you mean pl_net.width?",
        "pl_data.samples: expected int, got 'many'",
        "pl_blocks.block: expected an integer >= 1, got 0; change pl_blocks.block",
    ):
        assert message in refused.stderr
    assert not (tmp_path / "record.jsonl").exists()  # refused before anything was loaded or built
