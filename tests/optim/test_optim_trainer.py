"""TorchTrainer: the small protocol the target optimizers rely on (reset / load / step / params)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sifl_ray.optim import TorchTrainer, Trainer
from sifl_ray.optim.rules import update_rule


def net(dtype=torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(dtype)


def batch(dtype=torch.float64):
    gen = torch.Generator().manual_seed(3)
    return torch.randn(8, 3, generator=gen, dtype=dtype), torch.randint(0, 2, (8,), generator=gen)


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "AdamW", "RMSprop"])
def test_named_optimizers_take_ordinary_steps(name):
    trainer = TorchTrainer(net(), name, lr=0.1)
    assert isinstance(trainer, Trainer) and trainer.n == 3 * 4 + 4 + 4 * 2 + 2
    w0 = trainer.params()
    assert w0.dtype == torch.float64 and w0.shape == (trainer.n,)
    loss = trainer.step(batch())
    assert loss > 0 and not torch.equal(trainer.params(), w0)


def test_momentum_is_sgd_with_momentum_09():
    """By its rule's name here; tests/optim/test_optim_rules.py checks it trains as SGD(momentum=0.9)."""
    trainer = TorchTrainer(net(), "momentum", lr=0.1)
    assert trainer.optimizer.rule.name == "momentum"
    assert update_rule(torch.optim.SGD, 0.1, momentum=0.9).name == "momentum"


def test_reset_loads_and_forgets_state_load_keeps_it():
    trainer = TorchTrainer(net(), "momentum", lr=0.01)
    w0 = trainer.params()
    trainer.step(batch())
    trainer.step(batch())
    assert trainer.optimizer.state  # momentum buffers exist
    trainer.reset(w0)
    assert torch.equal(trainer.params(), w0) and not trainer.optimizer.state
    trainer.step(batch())
    after_one = trainer.params()
    state = trainer.optimizer.state
    trainer.load(w0)  # same start, but the buffer is kept: the next step differs from a fresh one
    assert torch.equal(trainer.params(), w0) and trainer.optimizer.state is state
    trainer.step(batch())
    assert not torch.allclose(trainer.params(), after_one, rtol=0, atol=1e-12)


def test_float32_model_round_trips_float64_vectors():
    trainer = TorchTrainer(net(torch.float32), "sgd", lr=0.1)
    w = torch.linspace(-1, 1, trainer.n, dtype=torch.float64)
    trainer.load(w)
    assert trainer.params().dtype == torch.float64
    assert torch.allclose(trainer.params(), w, atol=1e-7)
    trainer.step(batch(torch.float32))


def test_custom_optimizer_and_loss():
    calls = []

    def factory(params, lr, **kw):
        calls.append((lr, kw))
        return torch.optim.SGD(params, lr=lr, **kw)

    trainer = TorchTrainer(net(), factory, lr=0.5, loss_fn=lambda out, y: out.pow(2).mean(), weight_decay=0.1)
    assert calls == [(0.5, {"weight_decay": 0.1})]
    assert trainer.step(batch()) > 0


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown optimizer 'adamm'"):
        TorchTrainer(net(), "adamm", lr=0.1)
    trainer = TorchTrainer(net(), "sgd", lr=0.1)
    with pytest.raises(ValueError, match=f"{trainer.n} entries"):
        trainer.load(torch.zeros(trainer.n + 1, dtype=torch.float64))
