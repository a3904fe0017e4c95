"""Your own model: a model defined here, in the test file, runs end to end on Ray and
in-process with the same numbers under fl, sifl_m1, sifl_m2 and dp_fedavg; every party builds the same
initial model from the run seed; an LSTM on LEAF text runs (one client at a time, said once); running
statistics are refused with the reason (SIFL codes ``model.parameters()`` only; docs/models.md).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from sifl_ray.cli import main
from sifl_ray.config import ConfigError, load_config
from sifl_ray.config.import_paths import ImportPathError
from sifl_ray.models import (
    ModelError,
    build_model,
    flatten_params,
    model_refusal,
    register_model,
    resolve_model_factory,
    unregister_model,
)
from sifl_ray.runner import Simulation
from sifl_ray.seeding import torch_generator

HERE = __name__  # the module name pytest imported this file under: what an import path names


def small_net(input_shape, num_classes, hidden: int = 8) -> nn.Module:
    """A user's model: a plain function returning any nn.Module."""
    c, h, w = input_shape
    return nn.Sequential(
        nn.Flatten(), nn.Linear(c * h * w, hidden), nn.Tanh(), nn.Linear(hidden, num_classes)
    )


class TextLSTM(nn.Module):
    """A text model (Shakespeare-like): token ids arrive as floats of shape (N, 1, 1, L)."""

    def __init__(self, input_shape, num_classes, vocab: int = 17, width: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, batch_first=True)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.flatten(1).long().clamp(0, self.embed.num_embeddings - 1)
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out[:, -1])


def bn_cnn(input_shape, num_classes, track: bool = True) -> nn.Module:
    """A CNN with batch norm: refused with running statistics, accepted with batch statistics only."""
    c, h, w = input_shape
    return nn.Sequential(
        nn.Conv2d(c, 4, 3),
        nn.BatchNorm2d(4, track_running_stats=track),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * (h - 2) * (w - 2), num_classes),
    )


def broken_net(input_shape, num_classes) -> nn.Module:
    """A factory with a bug of its own (a TypeError inside it, not in how it is called)."""
    return nn.Linear(input_shape[0] + "wide", num_classes)


def _build(name: str, seed: int = 0, **args) -> nn.Module:
    return build_model(
        name, input_shape=(1, 8, 8), num_classes=10, generator=torch_generator(seed, "init"), args=args
    )


# ---------------------------------------------------------------------------------------------------------
# Building: the same model from the same stream, in any process, without touching the global generator
# ---------------------------------------------------------------------------------------------------------


def test_a_factory_by_import_path_builds_from_the_generator_alone():
    a = flatten_params(_build(f"{HERE}:small_net", hidden=5))
    torch.manual_seed(123)  # the global generator's state must not matter
    b = flatten_params(_build(f"{HERE}:small_net", hidden=5))
    assert torch.equal(a, b)
    assert a.numel() == 64 * 5 + 5 + 5 * 10 + 10  # model_args reached the factory
    assert not torch.equal(a, flatten_params(_build(f"{HERE}:small_net", seed=1, hidden=5)))
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    _build(f"{HERE}:small_net")
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's generator is left as it was


@pytest.mark.slow  # another Python process
def test_another_process_builds_the_same_initial_model(tmp_path):
    """What every party does: build from the run seed's stream in its own process (a fresh interpreter)."""
    (tmp_path / "usermodels.py").write_text(
        "from torch import nn\n"
        "def net(input_shape, num_classes, hidden=4):\n"
        "    return nn.Sequential(\n"
        "        nn.Flatten(), nn.Linear(64, hidden), nn.Tanh(), nn.Linear(hidden, num_classes)\n"
        "    )\n"
    )
    code = (
        "import sys, torch; sys.path.insert(0, sys.argv[1])\n"
        "from sifl_ray.models import build_model, flatten_params\n"
        "from sifl_ray.seeding import torch_generator\n"
        "torch.manual_seed(int(sys.argv[2]))\n"
        "m = build_model('usermodels:net', input_shape=(1, 8, 8), num_classes=10,"
        " generator=torch_generator(3, 'init'), args={'hidden': 4})\n"
        "print(repr(flatten_params(m).tolist()))\n"
    )
    outs = [
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path), seed], capture_output=True, text=True, check=True
        )
        for seed in ("0", "99")
    ]
    assert outs[0].stdout == outs[1].stdout and len(eval(outs[0].stdout)) == 64 * 4 + 4 + 4 * 10 + 10


def test_registered_models_are_choices_and_build():
    with pytest.raises(ConfigError, match=r"train.model: expected one of .*or an import path"):
        load_config(["train.model=my_small"])
    register_model("my_small")(small_net)
    try:
        assert load_config(["train.model=my_small"]).train.model == "my_small"
        assert resolve_model_factory("my_small") is small_net
        assert flatten_params(_build("my_small")).numel() == 64 * 8 + 8 + 8 * 10 + 10
        with pytest.raises(ValueError, match="already registered"):
            register_model("my_small")(small_net)
        with pytest.raises(ValueError, match="already registered"):
            register_model("mlp")(small_net)
    finally:
        unregister_model("my_small")


def test_bad_names_and_arguments_say_the_key_and_the_fix():
    with pytest.raises(ConfigError, match=r"train.model: expected an import path package.module:function"):
        load_config(["train.model=not a path:x"])
    with pytest.raises(ImportPathError, match=r"train.model: cannot import module 'no_such_module_xyz'"):
        _build("no_such_module_xyz:net")
    with pytest.raises(ImportPathError, match=r"has no attribute 'missing'"):
        _build(f"{HERE}:missing")
    with pytest.raises(ModelError, match=r"train.model_args: the built-in model 'digits_mlp' takes no"):
        _build("digits_mlp", hidden=3)
    with pytest.raises(ModelError, match=r"cannot be called as factory\(input_shape, .*fix train.model_args"):
        _build(f"{HERE}:small_net", width=3)
    with pytest.raises(TypeError, match="unsupported operand") as info:  # a bug in the factory stays itself
        _build(f"{HERE}:broken_net")
    assert not isinstance(info.value, ModelError)


def test_running_statistics_are_refused_with_the_reason_and_batch_statistics_are_not():
    with pytest.raises(
        ModelError, match=r"BatchNorm2d\) keeps running statistics.*codes only model.parameters"
    ):
        _build(f"{HERE}:bn_cnn")
    model = _build(f"{HERE}:bn_cnn", track=False)
    assert model_refusal(model) is None
    assert model(torch.randn(3, 1, 8, 8)).shape == (3, 10)


def test_the_paper_models_are_built_as_before():
    """The built-in path is untouched: its initial vector is what the meta-device init always gave."""
    gen = torch_generator(0, "init")
    a = flatten_params(build_model("digits_mlp", input_shape=(1, 8, 8), num_classes=10, generator=gen))
    assert a.numel() == 2410
    assert resolve_model_factory("digits_mlp") is None


# ---------------------------------------------------------------------------------------------------------
# End to end: Ray and in-process agree; an LSTM trains one client at a time; a refusal exits 2
# ---------------------------------------------------------------------------------------------------------

TINY = [
    "scenario=quickstart",
    "clients.num_clients=4",
    "coding.key_seed=7",
    "ray.num_workers=2",
    "train.rounds=2",
    "output.progress=false",
    "output.plot=false",
    "output.tensorboard=false",
    "nbafl.epsilons=[]",
]


def _run(tmp_path, *overrides, name):
    cfg = load_config([*TINY, f"output.dir={tmp_path / name}", *overrides])
    sim = Simulation(cfg, run_dir=tmp_path / name)
    result = sim.run()
    models = {arm: sim.global_model(arm) for arm in sim.arms}
    sim.close()
    return result, models


@pytest.fixture
def by_value():
    """Ray's workers cannot import this test file: let them unpickle its model factory by value (a script's
    own functions, in ``__main__``, are pickled so by default)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow  # a run on Ray beside one in-process
def test_a_test_file_model_runs_on_ray_and_in_process_with_identical_numbers(ray_session, by_value, tmp_path):
    arms = "arms=[fl,sifl_m1,sifl_m2,dp_fedavg]"
    model = [f"train.model={HERE}:small_net", "train.model_args={hidden: 6}", arms]
    ray_result, ray_models = _run(tmp_path, *model, name="ray")
    seq_result, seq_models = _run(tmp_path, *model, "backend=local", name="seq")
    assert set(ray_models) == {"fl", "sifl_m1", "sifl_m2", "dp_fedavg_eps5"}
    for arm in ray_models:
        assert torch.equal(ray_models[arm], seq_models[arm]), arm
        accuracies = [r["test_accuracy"] for r in ray_result.history[arm]]
        assert accuracies == [r["test_accuracy"] for r in seq_result.history[arm]], arm
    assert ray_models["fl"].numel() == 64 * 6 + 6 + 6 * 10 + 10
    assert ray_result.summary["arms"]["fl"]["final_accuracy"] > 0.2  # it learned: ten classes, chance 0.1


def _shakespeare(path, users: int = 4, lines: int = 24, width: int = 8) -> None:
    """LEAF's Shakespeare format: each user's lines of ``width`` characters, the next character as label
    (a text that repeats "abcd", so the next character is learnable)."""
    text = "abcd" * 64
    data = {}
    for u in range(users):
        starts = [(u * 7 + 3 * k) % 200 for k in range(lines)]
        data[f"speaker{u}"] = {
            "x": [text[i : i + width] for i in starts],
            "y": [text[i + width] for i in starts],
        }
    path.write_text(json.dumps({"users": list(data), "num_samples": [lines] * users, "user_data": data}))


def test_an_lstm_on_leaf_text_trains_one_client_at_a_time_said_once(tmp_path, capfd):
    _shakespeare(tmp_path / "shakespeare.json")
    text = [
        "data.name=leaf",
        f"leaf.path={tmp_path / 'shakespeare.json'}",
        "data.partition=natural",  # one speaker a client
        f"train.model={HERE}:TextLSTM",
        "train.model_args={vocab: 4}",
        "train.rounds=3",
    ]
    result, models = _run(tmp_path, *text, "arms=[fl,sifl_m1]", "backend=local", name="lstm")
    err = capfd.readouterr().err
    said = [line for line in err.splitlines() if "train their clients one at a time" in line]
    assert len(said) == 1 and "LSTM" in said[0], err
    assert torch.isfinite(models["fl"]).all()
    final = {arm: s["final_accuracy"] for arm, s in result.summary["arms"].items()}
    assert abs(final["sifl_m1"] - final["fl"]) <= 0.01


def test_a_refused_model_exits_2_with_the_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["run", *TINY, f"train.model={HERE}:bn_cnn", "backend=local", "arms=[fl]"])
    err = capsys.readouterr().err
    assert code == 2
    assert "train.model: model" in err and "running statistics" in err and "Traceback" not in err
    code = main(["run", *TINY, "train.model=no_such_module_xyz:net", "backend=local"])
    assert code == 2 and "train.model: cannot import module 'no_such_module_xyz'" in capsys.readouterr().err
