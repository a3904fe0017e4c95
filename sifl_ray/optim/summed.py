"""One step of many clients as one sum: their weighted gradients in one backward, and a bound on each one.

A worker whose clients each take a single step of SGD or Momentum from the round's start, and that needs
only the weighted sum of their models, needs only the weighted sum of their gradients
(:meth:`sifl_ray.optim.vectorised.ClientRound.summed`): one forward and backward of all their samples,
each client's mean loss weighted, gives it. What each client still needs on its own is its clip: the
arms clip every local model to ``‖w_i‖ ≤ C`` (:class:`sifl_ray.arms.steps.Clip`), and that needs the norm
of a model that is never formed. So the same backward also gives an upper bound on each client's gradient
norm, from every parametrised layer's input and output gradient per sample (no per-client gradient):

* a linear layer's per-sample weight gradient ``δ_s a_sᵀ`` has norm ``‖δ_s‖ ‖a_s‖`` (rank one; by
  Cauchy–Schwarz at most that when the layer sees several positions per sample), its bias gradient
  ``Σ_p δ_s,p`` at most ``√P ‖δ_s‖`` over P positions;
* a convolution's weight gradient is ``δ_s`` times the unfolded input, whose norm is at most
  ``√(kernel elements) ‖a_s‖`` (each input element sits in at most that many windows), its bias gradient
  at most ``√(output positions) ‖δ_s‖``;

and a client's gradient is the sum of its samples' (the triangle inequality), each parameter's bounds
combined in quadrature. ``‖w_i‖ ≤ ‖w_0‖ + lr ‖g_i‖`` then says where no clip can bind: only there are a
chunk's clients summed (the worker checks; where one might bind, it trains them one by one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

#: Layers whose per-sample gradient norms are bounded here: every parametrised layer that
#: :data:`sifl_ray.optim.vectorised.STATELESS_LAYERS` admits.
BOUNDED_LAYERS: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d)


def gradient_and_bounds(
    model: nn.Module,
    names: Sequence[str],
    start: Sequence[torch.Tensor],
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None],
    weights: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """One minibatch of C clients from the shared ``start`` (``names``' parameters, in the flat vector's
    order), in one forward and backward of all their samples.

    Args:
        batch: ``(x, y, mask, count)`` with a leading client axis, as
            :meth:`sifl_ray.optim.vectorised.Batches.gather` gives them (mask and count ``None``: every
            minibatch full).
        weights: each client's weight ``s_i`` on its mean loss (its FedAvg weight).

    Returns:
        ``Σ_i s_i g_i`` (flat, the model's dtype), the C mean losses, and an upper bound on each ``‖g_i‖``
        (float64); ``None`` where a parameter lies outside :data:`BOUNDED_LAYERS` or a layer is called
        more than once.
    """
    x, y, mask, count = batch
    clients, width = y.shape
    params = [p.detach().requires_grad_() for p in start]
    layers = _bounded_layers(model, dict(zip(names, params, strict=True)))
    if layers is None:
        return None
    seen: dict[nn.Module, list[torch.Tensor]] = {}  # layer → [its input, the gradient of its output]

    def keep(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if module in seen:  # a layer called twice: its per-sample gradient is a sum this does not bound
            seen[module] = []
            return
        seen[module] = [inputs[0].detach()]
        output.register_hook(lambda g: seen[module].append(g.detach()))

    hooks = [layer.register_forward_hook(keep) for layer in layers]
    try:
        out = functional_call(model, dict(zip(names, params, strict=True)), (x.flatten(0, 1),))
        each = F.cross_entropy(out, y.flatten(), reduction="none").view(clients, width)
        losses = each.mean(1) if mask is None else (each * mask).sum(1) / count
        grads = torch.autograd.grad((losses * weights).sum(), params)
    finally:
        for hook in hooks:
            hook.remove()
    if any(len(seen.get(layer, ())) != 2 for layer in layers):
        return None
    squares = sum(_layer_bounds(layer, *seen[layer], clients) for layer in layers)
    norms = torch.as_tensor(squares).sqrt() / weights.to(torch.float64)
    return torch.cat([g.reshape(-1) for g in grads]).detach(), losses.detach(), norms


def _bounded_layers(model: nn.Module, params: dict[str, torch.Tensor]) -> list[nn.Module] | None:
    """The layers that hold every parameter, or ``None`` where one is held by another kind of module."""
    layers, covered = [], set()
    for prefix, module in model.named_modules():
        own = [f"{prefix}.{n}" if prefix else n for n, _ in module.named_parameters(recurse=False)]
        if own and isinstance(module, BOUNDED_LAYERS):
            layers.append(module)
            covered.update(own)
    return layers if covered == set(params) else None


def _layer_bounds(layer: nn.Module, a: torch.Tensor, delta: torch.Tensor, clients: int) -> torch.Tensor:
    """``Σ`` over the layer's parameters of (a bound on each client's weighted gradient norm)², (C,) float64:
    per sample, the weight's ``f ‖δ_s‖ ‖a_s‖`` and the bias's ``√P ‖δ_s‖``, summed over the client's
    samples (see the module docstring for ``f`` and ``P``)."""
    samples = a.shape[0]
    a_norm = torch.linalg.vector_norm(a.reshape(samples, -1), dim=1, dtype=torch.float64)
    d_norm = torch.linalg.vector_norm(delta.reshape(samples, -1), dim=1, dtype=torch.float64)
    if isinstance(layer, nn.Linear):
        factor, positions = 1.0, math.prod(delta.shape[1:-1])
    else:
        factor, positions = math.sqrt(math.prod(layer.kernel_size)), math.prod(delta.shape[2:])
    weight = (factor * a_norm * d_norm).view(clients, -1).sum(1)
    out = weight**2
    if layer.bias is not None:
        out = out + (math.sqrt(positions) * d_norm).view(clients, -1).sum(1) ** 2
    return out
