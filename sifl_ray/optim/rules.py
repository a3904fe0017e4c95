"""``torch.optim``'s SGD, Momentum and Adam as update rules: the same operations, without the class.

A rule is the optimizer's arithmetic as a function ``update(params, grads, state, out)``: ``torch.optim``'s
single-tensor path (``_single_tensor_sgd``, ``_single_tensor_adam``), operation for operation, so a model
trained by a rule is bit for bit the model ``torch.optim`` trains (tested). The same rule updates one
client's parameters (:class:`RuleOptimizer`, the loop) or a stack of clients' (one (C, *shape) tensor per
parameter, :mod:`sifl_ray.optim.vectorised`).

Why not ``torch.optim`` itself for these three: constructing any ``torch.optim.Optimizer`` imports
``torch._dynamo`` (``Optimizer.add_param_group`` is wrapped by ``torch._disable_dynamo``), a fixed cost of
CPU time and memory in every client worker process before its first client trains
(``PYTHONPROFILEIMPORTTIME=1`` shows it in the workers' logs; ``python -m bench startup`` measures the
start-up it is part of). A worker also makes a fresh optimizer per client and round; a rule's fresh state is
an empty dict. Any other optimizer, or an option no rule here implements (weight decay, Nesterov, AMSGrad,
...), runs ``torch.optim``'s own class: :func:`update_rule` says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

Params = list[torch.Tensor]  # one tensor per parameter: (C, *shape) stacked, or (*shape) shared by all


@dataclass(frozen=True)
class UpdateRule:
    """An optimizer's update, each client with its own state.

    ``init()`` makes the fresh state (empty: a new optimizer, as the loop makes per client and round);
    ``update(params, grads, state, out)`` writes the new parameters into ``out``, which may be ``params``
    itself (the loop: in place). Stacked, at a chunk's first step ``params`` are shared by every client (no
    client axis: they all start from the broadcast) and ``out`` is the stack.

    ``first_step_lr``: the learning rate where a fresh optimizer's first step is ``w − lr·g`` (SGD, and
    Momentum, whose buffer starts as the gradient), ``None`` where it is not (Adam divides by the
    gradient's own size). Why it is said: a client that takes one step of such a rule has a model linear
    in its gradient, so a worker may sum its clients' gradients instead of their models
    (:meth:`sifl_ray.optim.vectorised.ClientRound.summed`).
    """

    name: str
    init: Callable[[], dict[str, Any]]
    update: Callable[[Params, Params, dict[str, Any], Params], None]
    first_step_lr: float | None = None


def sgd(*, lr: float, momentum: float = 0.0, dampening: float = 0.0) -> UpdateRule:
    """``torch.optim.SGD`` (no weight decay, no Nesterov), ``_single_tensor_sgd`` operation for operation."""

    def update(params: Params, grads: Params, state: dict[str, Any], out: Params) -> None:
        first = "buf" not in state
        if momentum != 0 and first:
            state["buf"] = [g.detach().clone() for g in grads]
        for i, (p, g, o) in enumerate(zip(params, grads, out, strict=True)):
            if momentum != 0:
                buf = state["buf"][i]
                if not first:
                    buf.mul_(momentum).add_(g, alpha=1 - dampening)
                g = buf
            torch.add(p, g, alpha=-lr, out=o)

    return UpdateRule("momentum" if momentum else "sgd", dict, update, first_step_lr=lr)


def adam(*, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> UpdateRule:
    """``torch.optim.Adam`` (no weight decay, no AMSGrad), ``_single_tensor_adam`` operation for operation.

    Stacked, every client of a chunk has taken the same number of steps (a chunk is one minibatch count),
    so the step count, and with it the bias corrections, is one Python number, as torch computes it.
    """
    beta1, beta2 = betas

    def update(params: Params, grads: Params, state: dict[str, Any], out: Params) -> None:
        if "exp_avg" not in state:
            state["step"] = 0
            state["exp_avg"] = [torch.zeros_like(g) for g in grads]
            state["exp_avg_sq"] = [torch.zeros_like(g) for g in grads]
        state["step"] += 1
        step = float(state["step"])  # torch keeps the count as a float32 tensor and reads it with item()
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        moments = zip(params, grads, state["exp_avg"], state["exp_avg_sq"], out, strict=True)
        for p, g, exp_avg, exp_avg_sq, o in moments:
            exp_avg.lerp_(g, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            torch.addcdiv(p, exp_avg, denom, value=-step_size, out=o)

    return UpdateRule("adam", dict, update)


#: Per ``torch.optim`` class with a rule: the rule, the options it takes, and the options it does not
#: implement with the only value each may have (torch's default; anything else runs the torch class).
_RULES: dict[type[torch.optim.Optimizer], tuple[Callable[..., UpdateRule], tuple[str, ...], dict[str, Any]]]
_RULES = {
    torch.optim.SGD: (
        sgd,
        ("momentum", "dampening"),
        {
            "weight_decay": 0,
            "nesterov": False,
            "maximize": False,
            "foreach": None,
            "differentiable": False,
            "fused": None,
        },
    ),
    torch.optim.Adam: (
        adam,
        ("betas", "eps"),
        {
            "weight_decay": 0,
            "amsgrad": False,
            "maximize": False,
            "foreach": None,
            "capturable": False,
            "differentiable": False,
            "fused": None,
            "decoupled_weight_decay": False,
        },
    ),
}


def update_rule(cls: type, lr: Any, **options: Any) -> UpdateRule | str:
    """The rule for ``cls(params, lr=lr, **options)``, or why there is none (then ``torch.optim``'s class
    runs): a class without a rule, an option no rule implements, a tensor hyperparameter."""
    if cls not in _RULES:
        return cls.__name__
    make, taken, fixed = _RULES[cls]
    unknown = [k for k in options if k not in taken and k not in fixed]
    if unknown:
        return f"{cls.__name__} with option {unknown[0]!r}"
    off = [f"{k}={options[k]!r}" for k, v in fixed.items() if k in options and options[k] != v]
    if off:
        return f"{cls.__name__} with {', '.join(off)}"
    hyper = [lr, *(options[k] for k in taken if k in options)]
    if any(isinstance(x, torch.Tensor) for v in hyper for x in (v if isinstance(v, tuple | list) else (v,))):
        return f"{cls.__name__} with tensor hyperparameters"
    return make(lr=lr, **{k: options[k] for k in taken if k in options})


class RuleOptimizer:
    """The part of ``torch.optim.Optimizer`` a :class:`~sifl_ray.optim.TorchTrainer` uses, over a rule:
    ``zero_grad``, ``step`` and the per-optimizer ``state`` (empty when fresh; the rule fills it)."""

    def __init__(self, params: Iterable[torch.Tensor], rule: UpdateRule):
        self.params = list(params)
        self.rule = rule
        self.state: dict[str, Any] = rule.init()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter.

        Raises:
            ValueError: a parameter has no gradient (``torch.optim`` would skip it; a rule's state is one
                entry per parameter, so it cannot): freeze it (``requires_grad=False``) or give it a use.
        """
        grads = [p.grad for p in self.params]
        if any(g is None for g in grads):
            missing = sum(g is None for g in grads)
            raise ValueError(
                f"{missing} of {len(grads)} parameters got no gradient in this step; the {self.rule.name} "
                "update needs every trained parameter's: set requires_grad=False on unused ones"
            )
        self.rule.update(self.params, grads, self.state, self.params)
