"""The update rules (:mod:`sifl_ray.optim.rules`) are ``torch.optim``'s SGD, Momentum and Adam, bit for bit.

The rule and the torch class run the same elementwise operations in the same order, so on one machine the
trained models are equal, not close: these tests compare with ``torch.equal``, on any CPU. What no rule
implements runs the torch class, and the trainer never imports ``torch._dynamo`` for the three names.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from sifl_ray.optim import TorchTrainer
from sifl_ray.optim.rules import RuleOptimizer, update_rule

#: (the trainer's name, the torch class and settings it must equal, lr)
CASES = {
    "sgd": (torch.optim.SGD, {}, 0.1),
    "momentum": (torch.optim.SGD, {"momentum": 0.9}, 0.1),
    "adam": (torch.optim.Adam, {}, 0.01),
}


def model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).to(dtype)


def batches(dtype: torch.dtype, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(5)
    return [
        (torch.randn(10, 6, generator=gen, dtype=dtype), torch.randint(0, 3, (10,), generator=gen))
        for _ in range(count)
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_rule_trains_the_model_torch_optim_trains(name, dtype):
    """Two clients in a row, as a worker trains them: steps, a reset (fresh state), more steps."""
    cls, settings, lr = CASES[name]
    trainer = TorchTrainer(model(dtype), name, lr=lr)
    assert isinstance(trainer.optimizer, RuleOptimizer)
    net = model(dtype)
    w0 = trainer.params()
    for client in range(2):
        trainer.reset(w0)
        opt = cls(net.parameters(), lr=lr, **settings)  # a fresh torch optimizer per client, as the loop had
        for x, y in batches(dtype, 4 + client):
            loss = trainer.step((x, y))
            opt.zero_grad(set_to_none=True)
            ref = nn.functional.cross_entropy(net(x), y)
            ref.backward()
            opt.step()
            assert torch.equal(loss, ref.detach())
        params = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).to(torch.float64)
        assert torch.equal(trainer.params(), params)
        with torch.no_grad():  # the torch model restarts from w0 too
            torch.nn.utils.vector_to_parameters(w0.to(dtype), net.parameters())
    # the rule kept its state (momentum buffer, Adam's moments); plain SGD has none
    assert bool(trainer.optimizer.state) == (name != "sgd")


@pytest.mark.parametrize(
    ("name", "options", "cls", "why"),
    [
        ("RMSprop", {}, torch.optim.RMSprop, "RMSprop"),
        ("sgd", {"weight_decay": 0.1}, torch.optim.SGD, "SGD with weight_decay=0.1"),
        ("sgd", {"nesterov": True, "momentum": 0.9}, torch.optim.SGD, "SGD with nesterov=True"),
        ("adam", {"amsgrad": True}, torch.optim.Adam, "Adam with amsgrad=True"),
        ("adam", {"lr_decay": 0.5}, torch.optim.Adam, "Adam with option 'lr_decay'"),
    ],
)
def test_what_no_rule_implements_runs_the_torch_class(name, options, cls, why):
    assert update_rule(cls, 0.1, **options) == why
    if "option" in why:  # torch refuses it too: the trainer passes the option on, and torch names it
        with pytest.raises(TypeError, match="lr_decay"):
            TorchTrainer(model(torch.float64), name, lr=0.1, **options)
        return
    trainer = TorchTrainer(model(torch.float64), name, lr=0.1, **options)
    assert type(trainer.optimizer) is cls


def test_the_torch_class_names_with_rules_take_them():
    trainer = TorchTrainer(model(torch.float64), "SGD", lr=0.1, momentum=0.5, dampening=0.1)
    assert isinstance(trainer.optimizer, RuleOptimizer) and trainer.optimizer.rule.name == "momentum"
    assert update_rule(torch.optim.Adam, torch.tensor(0.1)) == "Adam with tensor hyperparameters"


def test_a_parameter_without_gradient_is_refused_not_skipped():
    net = nn.Sequential(nn.Linear(6, 3), nn.Linear(2, 2))  # the second layer is never used
    trainer = TorchTrainer(net[0], "sgd", lr=0.1)
    trainer.optimizer = RuleOptimizer(list(net.parameters()), trainer.optimizer.rule)
    with pytest.raises(ValueError, match="2 of 4 parameters got no gradient"):
        trainer.step(batches(torch.float32, 1)[0])


def test_the_trainer_does_not_import_dynamo():
    """The cause the rules remove: a torch optimizer's constructor imports torch._dynamo (~1 CPU-s and
    ~68 MiB per client worker). Checked in a fresh interpreter, with the torch class as the control."""
    script = textwrap.dedent(
        """
        import sys, torch
        from torch import nn
        from sifl_ray.optim import TorchTrainer
        for name in ("sgd", "momentum", "adam"):
            t = TorchTrainer(nn.Linear(4, 2), name, lr=0.1)
            t.step((torch.randn(3, 4), torch.tensor([0, 1, 1])))
        print("torch._dynamo" in sys.modules)
        torch.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1)
        print("torch._dynamo" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
