"""The base optimizer a client runs: a thin, stateful wrapper around a torch model and optimizer.

docs/method.md "Standard FL": a client runs K ordinary optimizer steps ``w_{k+1} = w_k − g(w_k, batch)``. The
target optimizers (:mod:`sifl_ray.optim.target`) only need four things from it — load parameters with fresh or
kept optimizer state, take one step, read the parameters back — so any trainer with this protocol works.
Parameters cross the boundary as one flat float64 vector (the coding dtype); the model keeps its own dtype.

A step returns its loss as a tensor on the model's device, not a Python float: reading a GPU value waits for
the GPU, and one such wait per step would stall the step loop K times per client. Callers read a client's
losses together, once, with :func:`loss_values`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from sifl_ray.coding.base import CODING_DTYPE
from sifl_ray.config import names
from sifl_ray.config.names import torch_optimizer_names
from sifl_ray.optim.rules import RuleOptimizer, UpdateRule, update_rule

Batch = tuple[torch.Tensor, torch.Tensor]


@runtime_checkable
class Trainer(Protocol):
    """What a target optimizer needs from the base optimizer."""

    def reset(self, w0: torch.Tensor) -> None:
        """Load ``w0`` (float64, (n,)) into the model and start a fresh optimizer state."""

    def load(self, w: torch.Tensor) -> None:
        """Load ``w`` into the model, keeping the optimizer state."""

    def step(self, batch: Batch) -> float | torch.Tensor:
        """One ordinary optimizer step on ``batch``; returns the loss before the step (a float, or a 0-d
        tensor that :func:`loss_values` reads)."""

    def params(self) -> torch.Tensor:
        """The model parameters as a flat float64 vector (n,)."""


def loss_values(losses: Sequence[float | torch.Tensor]) -> list[float]:
    """The per-step losses as Python floats, the tensors among them read from their device in one transfer.

    One read per client instead of one per step (see the module docstring); the values are those
    ``float(loss)`` gives, so the statistics computed from them do not change.
    """
    tensors = [x for x in losses if isinstance(x, torch.Tensor)]
    if not tensors:
        return [float(x) for x in losses]
    read = iter(torch.stack([x.detach().reshape(()) for x in tensors]).tolist())
    return [next(read) if isinstance(x, torch.Tensor) else float(x) for x in losses]


#: The optimizers known by a short name (``train.optimizer``): a ``torch.optim`` class and its default
#: settings, in the registry where the configuration validator reads them without importing torch
#: (:data:`sifl_ray.config.names.OPTIMIZERS`). Any ``torch.optim`` class name
#: (:func:`~sifl_ray.config.names.torch_optimizer_names`) works too.
OPTIMIZERS = names.OPTIMIZERS


def make_optimizer_factory(optimizer: str | Callable[..., torch.optim.Optimizer], lr: float, **kwargs: Any):
    """``params -> optimizer`` for a name (``sgd``, ``momentum`` = SGD with momentum 0.9, ``adam``, or any
    ``torch.optim`` class name such as ``"AdamW"``), or a callable ``f(params, lr=..., **kwargs)``.

    SGD and Adam with the options their rules implement are :class:`~sifl_ray.optim.rules.RuleOptimizer`
    over :func:`~sifl_ray.optim.rules.update_rule` (``torch.optim``'s arithmetic without its class: see
    there why); everything else is the ``torch.optim`` class itself.
    """
    if callable(optimizer):
        return lambda params: optimizer(params, lr=lr, **kwargs)
    if optimizer in OPTIMIZERS:
        known_as = OPTIMIZERS[optimizer]
        cls = getattr(torch.optim, known_as.torch_class)
        kwargs = {**known_as.defaults, **kwargs}
    elif optimizer in torch_optimizer_names():
        cls = getattr(torch.optim, optimizer)
    else:
        known = ", ".join([*OPTIMIZERS, "or a torch.optim class name (e.g. 'AdamW', 'RMSprop')"])
        raise ValueError(f"unknown optimizer {optimizer!r}; expected {known}")
    rule = update_rule(cls, lr, **kwargs)
    if isinstance(rule, UpdateRule):
        return lambda params: RuleOptimizer(params, rule)
    return lambda params: cls(params, lr=lr, **kwargs)


class TorchTrainer:
    """A :class:`Trainer` over ``model`` (any ``nn.Module``) and an optimizer: ``torch.optim``'s SGD /
    Momentum / Adam arithmetic as a rule (:mod:`sifl_ray.optim.rules`), or any ``torch.optim`` class.

    Args:
        model: the network; its parameters, in ``model.parameters()`` order, are the vector w.
        optimizer: ``"sgd"``, ``"momentum"`` (SGD, momentum 0.9), ``"adam"``, any ``torch.optim`` class
            name, or a callable ``f(params, lr=..., **opt_kwargs)``.
        lr: learning rate.
        loss_fn: ``loss_fn(model(x), y)``; cross-entropy by default.
        **opt_kwargs: passed to the optimizer (e.g. ``weight_decay``).

    ``optimizer`` (the attribute) is the current client's optimizer: a fresh one at every :meth:`reset`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: str | Callable[..., torch.optim.Optimizer],
        lr: float,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
        **opt_kwargs: Any,
    ):
        self.model = model
        self.loss_fn = loss_fn
        self._make_optimizer = make_optimizer_factory(optimizer, lr, **opt_kwargs)
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.n = sum(p.numel() for p in self._params)
        self.optimizer = self._make_optimizer(self._params)

    @property
    def device(self) -> torch.device:
        return self._params[0].device

    def reset(self, w0: torch.Tensor) -> None:
        self.load(w0)
        self.optimizer = self._make_optimizer(self._params)

    def load(self, w: torch.Tensor) -> None:
        if w.dim() != 1 or w.numel() != self.n:
            raise ValueError(
                f"expected a flat parameter vector of {self.n} entries; got shape {tuple(w.shape)}"
            )
        with torch.no_grad():
            offset = 0
            for p in self._params:
                k = p.numel()
                p.copy_(w[offset : offset + k].view_as(p))  # in place: the optimizer keeps its state
                offset += k

    def step(self, batch: Batch) -> torch.Tensor:
        """One step; the loss before it as a 0-d tensor on the model's device (no host synchronisation)."""
        x, y = batch
        if not self.model.training:  # train() walks every submodule: a cost per step when repeated
            self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def params(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The parameters as a flat float64 vector: a new tensor, or ``out`` (float64, (n,)) filled.

        Why ``out``: a worker reads the parameters of one client after another; a fresh multi-megabyte
        vector each time costs more in page faults than the copy itself.
        """
        with torch.no_grad():
            if out is None:
                return torch.cat([p.detach().reshape(-1) for p in self._params]).to(CODING_DTYPE)
            if out.shape != (self.n,) or out.dtype != CODING_DTYPE:
                raise ValueError(
                    f"out must be a float64 vector of {self.n} entries; got {out.dtype} {tuple(out.shape)}"
                )
            offset = 0
            for p in self._params:
                k = p.numel()
                out[offset : offset + k].copy_(p.detach().reshape(-1))
                offset += k
            return out
