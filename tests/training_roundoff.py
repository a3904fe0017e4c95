"""A rigorous first-order bound on the round-off of local training: what two executions may differ by.

The vectorised clients (:mod:`sifl_ray.optim.vectorised`) and the loop run the same arithmetic in another
order (a stacked matrix product sums in its own blocks), so their local models differ by round-off. The
tests bound that difference instead of reading a tolerance off this CPU: for an MLP (``Linear`` layers with
ReLU between them), cross-entropy and SGD, Momentum or Adam, a running error analysis charges every
floating-point operation its worst case and carries the bounds through forward, backward and optimizer
steps, elementwise:

* a matrix product with inner length k, plus the bias: Higham's γ_{k+1}(|W||a| + |b|), whatever the
  summation order, blocking, FMA or SIMD width (so it covers bmm and mm alike);
* log-softmax and the exponential: the log and exp of the math library within 2 ulps (4u relative);
* ReLU: exact, except where a pre-activation lies within its bound of zero, where the sign (and so the
  gradient's mask) may differ: there the bound is the whole gradient;
* each optimizer operation (``torch.optim``'s single-tensor path): one rounding, relative u, on its result;
  scalars are the model dtype's casts, as torch uses them (both executions use the same constants, so an
  exact execution of the same algorithm uses them too).

The bound E holds for *any* execution against the exact one, so two executions differ by at most 2E. It is
first order in u: products of error terms are dropped, and magnitudes are read from a float64 execution
(:func:`reference`), which differs from the exact one by its own E (u = 2⁻⁵³). The tests check the bound is
a bound on this CPU too (the loop's float32 result against the float64 reference) and that it is tight
enough to catch a wrong minibatch order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

U32 = 2.0**-24
U64 = 2.0**-53
LIBM = 4.0  # exp / log within 2 ulps: relative error ≤ 4u


def unit_roundoff(dtype: torch.dtype) -> float:
    return {torch.float32: U32, torch.float64: U64}[dtype]


def gamma(k: int, u: float) -> float:
    """Higham's γ_k = k·u / (1 − k·u)."""
    return k * u / (1.0 - k * u)


def cast(value: float, dtype: torch.dtype) -> float:
    """A Python scalar as a ``dtype`` tensor op uses it."""
    return float(torch.tensor(value, dtype=torch.float64).to(dtype).double())


@dataclass
class Bounded:
    """A float64 value (the reference execution's) and an elementwise bound on any execution's error."""

    v: torch.Tensor
    e: torch.Tensor


def _layers(model: nn.Module) -> list[nn.Linear]:
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    others = [m for m in model.modules() if not isinstance(m, nn.Linear | nn.ReLU | nn.Sequential)]
    if any(not isinstance(m, type(model)) for m in others):
        raise ValueError("the bound covers Linear/ReLU MLPs only")
    return layers


def _split(w: torch.Tensor, layers: list[nn.Linear]) -> list[torch.Tensor]:
    out, offset = [], 0
    for layer in layers:
        for p in (layer.weight, layer.bias):
            out.append(w[offset : offset + p.numel()].view(p.shape))
            offset += p.numel()
    return out


def gradient(
    params: list[Bounded], x: torch.Tensor, y: torch.Tensor, u: float, weights: torch.Tensor | None = None
) -> tuple[list[Bounded], Bounded]:
    """The mean cross-entropy's gradient over one minibatch and a bound on any execution's error in it,
    given the parameters' own bounds; and the loss, bounded likewise.

    ``weights``: sample j's loss weighted ``weights[j]`` instead of 1/B (a sum of clients' mean losses,
    each weighted by its size), the weight itself one rounding (its division) in the execution."""
    x = x.double().flatten(1)
    B, L = x.shape[0], len(params) // 2
    scale = torch.full((B, 1), 1.0 / B, dtype=torch.float64) if weights is None else weights.view(B, 1)
    acts = [Bounded(x, torch.zeros_like(x))]
    pre = []
    for layer in range(L):
        W, b = params[2 * layer], params[2 * layer + 1]
        a = acts[-1]
        z = a.v @ W.v.T + b.v
        ez = (
            a.e @ W.v.abs().T
            + a.v.abs() @ W.e.T
            + b.e
            + gamma(W.v.shape[1] + 1, u) * (a.v.abs() @ W.v.abs().T + b.v.abs())
        )
        pre.append(Bounded(z, ez))
        if layer < L - 1:
            acts.append(Bounded(z.clamp_min(0), ez))
    # Softmax cross-entropy: D = (p − onehot)/B, p = softmax(z).
    z, ez = pre[-1].v, pre[-1].e
    C = z.shape[1]
    logp = torch.log_softmax(z, 1)
    p = logp.exp()
    m = z.max(1, keepdim=True).values
    lse = torch.logsumexp(z, 1, keepdim=True)
    onehot = torch.zeros_like(z).scatter_(1, y.view(-1, 1), 1.0)
    # rounding in p̂ (relative): the sum of C exponentials and its log, the subtractions, the final exp
    rel_s = u * (z - m).abs().max(1, keepdim=True).values + LIBM * u + gamma(C, u)
    err_logp = rel_s + LIBM * u * lse.abs() + 2 * u * (z.abs() + m.abs() + lse.abs()) + u * logp.abs()
    rel_p = err_logp + LIBM * u
    prop = p * (ez + (p * ez).sum(1, keepdim=True))  # |∂p/∂z| applied to the logits' bound
    D = (p - onehot) * scale
    eD = (prop + p * (rel_p + 2 * u)) * scale + u * D.abs() + u * onehot * scale
    if weights is not None:
        eD = eD + u * D.abs()
    grads: list[Bounded] = [None] * (2 * L)  # type: ignore[list-item]
    for layer in reversed(range(L)):
        a, W = acts[layer], params[2 * layer]
        gW = D.T @ a.v
        egW = gamma(B, u) * (D.abs().T @ a.v.abs()) + eD.T @ a.v.abs() + D.abs().T @ a.e
        gb = D.sum(0)
        egb = gamma(B, u) * D.abs().sum(0) + eD.sum(0)
        grads[2 * layer], grads[2 * layer + 1] = Bounded(gW, egW), Bounded(gb, egb)
        if layer:
            t = D @ W.v
            et = gamma(W.v.shape[0], u) * (D.abs() @ W.v.abs()) + eD @ W.v.abs() + D.abs() @ W.e
            zp = pre[layer - 1]
            sure = zp.v.abs() > zp.e
            active = (zp.v > 0).double()
            D = t * active
            eD = torch.where(sure, et * active, t.abs() + et)
    # The loss −mean(logp_y): the logits' bound through lse − z_y, log-softmax's rounding, the mean of B.
    nll = -(logp * onehot).sum(1)
    e_nll = (p * ez).sum(1) + (ez * onehot).sum(1) + (err_logp * onehot).sum(1)
    loss = float(nll.mean())
    e_loss = float(e_nll.mean()) + gamma(B, u) * float(nll.abs().mean()) + u * abs(loss)
    return grads, Bounded(torch.tensor(loss), torch.tensor(e_loss))


class BoundedOptimizer:
    """``torch.optim``'s single-tensor SGD / Momentum / Adam on bounded values (see the module docstring)."""

    def __init__(self, name: str, lr: float, dtype: torch.dtype, u: float):
        self.name, self.u, self.dtype = name, u, dtype
        self.lr = cast(lr, dtype)
        self.momentum = cast(0.9, dtype)
        self.beta1, self.beta2, self.eps = 0.9, 0.999, 1e-8
        self.state: list[dict] | None = None
        self.steps = 0

    def update(self, params: list[Bounded], grads: list[Bounded]) -> list[Bounded]:
        u = self.u
        self.steps += 1
        if self.state is None:
            self.state = [{} for _ in params]
        out = []
        for p, g, s in zip(params, grads, self.state, strict=True):
            if self.name == "sgd":
                w = p.v - self.lr * g.v
                e = p.e + self.lr * g.e + u * (self.lr * g.v.abs() + w.abs())
            elif self.name == "momentum":
                if "buf" not in s:
                    buf = Bounded(g.v.clone(), g.e.clone())
                else:
                    old = s["buf"]
                    v = self.momentum * old.v + g.v
                    buf = Bounded(
                        v, self.momentum * old.e + g.e + u * (self.momentum * old.v.abs() + v.abs())
                    )
                s["buf"] = buf
                w = p.v - self.lr * buf.v
                e = p.e + self.lr * buf.e + u * (self.lr * buf.v.abs() + w.abs())
            else:
                w, e = self._adam(p, g, s)
            out.append(Bounded(w, e))
        return out

    def _adam(self, p: Bounded, g: Bounded, s: dict) -> tuple[torch.Tensor, torch.Tensor]:
        u, dt = self.u, self.dtype
        m = s.get("m", Bounded(torch.zeros_like(g.v), torch.zeros_like(g.v)))
        v = s.get("v", Bounded(torch.zeros_like(g.v), torch.zeros_like(g.v)))
        w1, b2, w2 = cast(1 - self.beta1, dt), cast(self.beta2, dt), cast(1 - self.beta2, dt)
        mv = m.v + w1 * (g.v - m.v)  # lerp
        me = (1 - w1) * m.e + w1 * g.e + 3 * u * (m.v.abs() + g.v.abs() + mv.abs())
        vv = b2 * v.v + w2 * g.v * g.v
        ve = b2 * v.e + 2 * w2 * g.v.abs() * g.e + u * (b2 * v.v.abs() + 2 * w2 * g.v * g.v + vv.abs())
        s["m"], s["v"] = Bounded(mv, me), Bounded(vv, ve)
        step = float(self.steps)
        step_size = cast(self.lr / (1 - self.beta1**step), dt)
        c2 = cast((1 - self.beta2**step) ** 0.5, dt)
        eps = cast(self.eps, dt)
        root = vv.sqrt()
        e_root = torch.minimum(ve.sqrt(), ve / root.clamp_min(1e-300)) + u * root
        q = root / c2
        d = q + eps
        ed = e_root / c2 + u * q + u * d
        r = mv / d
        d_lo = torch.clamp(d - ed, min=eps)
        er = (me * d + mv.abs() * ed) / (d * d_lo)
        # Where the gradient is within its bound of zero the quotient is ill-conditioned (d ≥ eps only), but
        # Adam's step is bounded whatever the gradients: by Cauchy–Schwarz |m| ≤ (1 − β1)/√(1 − β2) ·
        # √(Σ_j<t (β1²/β2)^j) · √v, so |m/d| ≤ R = c2 · that factor, for the exact and the computed values.
        ratio = self.beta1**2 / self.beta2
        R = (
            c2
            * (1 - self.beta1)
            / math.sqrt(1 - self.beta2)
            * math.sqrt(sum(ratio**j for j in range(self.steps)))
        )
        er = torch.clamp(er, max=2 * R * (1 + 8 * u))
        w = p.v - step_size * r
        e = p.e + step_size * er + 2 * u * step_size * r.abs() + u * w.abs()
        return w, e


@dataclass
class Reference:
    """K local steps in float64 and what bounds any execution in the model dtype.

    Attributes:
        w: the end point (flat); e: the elementwise bound on any execution's distance from the exact one.
        path: the point after each step (``path[-1]`` is ``w``); losses and loss_bounds: per step.
    """

    w: torch.Tensor
    e: torch.Tensor
    path: list[torch.Tensor]
    losses: list[float]
    loss_bounds: list[float]

    @property
    def mean_loss_bound(self) -> float:
        """A bound on the error of the mean loss (the mean of the steps' bounds; float64's own rounding of
        that mean, below 1e-15 relative, is covered by the factor)."""
        return (1 + 1e-12) * sum(self.loss_bounds) / len(self.loss_bounds)


def reference(
    model: nn.Module,
    w0: torch.Tensor,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    optimizer: str,
    lr: float,
    dtype: torch.dtype,
    extra: Sequence[float] = (),
) -> Reference:
    """K steps from ``w0`` (flat) in float64 with ``dtype``'s constants, bounded for ``dtype`` executions.

    ``extra[k]``: a further perturbation of every parameter before step k + 1 (a stepwise client's decode
    and encode error, bounded elsewhere), carried like the training's own.
    """
    u = unit_roundoff(dtype)
    layers = _layers(model)
    params = [Bounded(p.clone(), torch.zeros_like(p)) for p in _split(w0.double(), layers)]
    opt = BoundedOptimizer(optimizer, lr, dtype, u)
    path, losses, loss_bounds = [], [], []
    for k, (x, y) in enumerate(batches):
        if k and k - 1 < len(extra):
            params = [Bounded(p.v, p.e + extra[k - 1]) for p in params]
        grads, loss = gradient(params, x, y, u)
        losses.append(float(loss.v))
        loss_bounds.append(float(loss.e))
        params = opt.update(params, grads)
        path.append(torch.cat([p.v.reshape(-1) for p in params]))
    e = torch.cat([p.e.reshape(-1) for p in params])
    assert bool(torch.isfinite(e).all()) and math.isfinite(sum(loss_bounds))
    return Reference(path[-1], e, path, losses, loss_bounds)


def one_step_sum(
    model: nn.Module,
    w0: torch.Tensor,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    sizes: Sequence[float],
    *,
    lr: float,
    dtype: torch.dtype,
) -> Bounded:
    """``Σ_i s_i (w_1,i − w0)`` for clients that each take one SGD step from ``w0`` (flat) on their
    minibatch, computed as a worker sums a chunk of such clients: one gradient of ``Σ_i s_i·mean loss_i``
    over every sample (its products' inner length the chunk's sample count), in ``dtype``, then scaled by
    ``−lr`` (``dtype``'s cast) in float64. The value in float64 and a bound on that execution's error."""
    u = unit_roundoff(dtype)
    layers = _layers(model)
    params = [Bounded(p.clone(), torch.zeros_like(p)) for p in _split(w0.double(), layers)]
    x = torch.cat([xb for xb, _ in batches])
    y = torch.cat([yb for _, yb in batches])
    weights = torch.cat(
        [
            torch.full((len(yb),), s / len(yb), dtype=torch.float64)
            for (_, yb), s in zip(batches, sizes, strict=True)
        ]
    )
    grads, _ = gradient(params, x, y, u, weights)
    g = torch.cat([b.v.reshape(-1) for b in grads])
    e = torch.cat([b.e.reshape(-1) for b in grads])
    rate = cast(lr, dtype)
    value = -rate * g
    # the gradient's own bound, the float64 product's rounding (and the float64 sum's, counted by the caller)
    return Bounded(value, rate * e + U64 * value.abs())
