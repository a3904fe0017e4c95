"""Many virtual clients trained at once: the loop's arithmetic on stacked parameters.

A client worker hosts many clients and, one after another, gives each a fresh optimizer at the round's
start, runs its minibatches and reads its model back. At a thousand clients of sixty samples that loop is
per-client overhead more than arithmetic. Here the clients of a worker that share the model and the
optimizer train together: their parameters are stacked along a leading client axis, one
:func:`torch.func.vmap` of :func:`torch.func.grad_and_value` over :func:`torch.func.functional_call`
computes every client's gradient on its own minibatch, and the optimizer's update runs on the stack.

What stays exactly as in the loop:

* each client's minibatches: the same indices, from the same stream (``client_batches(..., seed, client,
  round)``; the worker hands them over), so the same samples in the same order;
* each client's optimizer: fresh at the round's start, its own state (momentum buffer, Adam's moments and
  step count), the same elementwise operations in the same order as ``torch.optim``'s single-tensor path
  (:func:`stacked_optimizer`), with the hyperparameters read from the trainer's own optimizer;
* each client's upload: the worker reads every client's model back as the loop's float64 vector and runs
  the arm's client step, the coding and the checks on it one client at a time, as before (the target
  optimizers' own tails, :func:`sifl_ray.optim.target.fused_tail` and ``stepwise_tail``).

What differs is round-off: a stacked matrix product sums in another order than a single one, so a float64
model agrees with the loop to round-off and a float32 one within a bound that the tests derive (not a
figure read off this CPU). Clients with different data set sizes run different numbers of minibatches:
they are grouped by that number, and within a group a shorter last minibatch is padded and masked (the
loss is the mean over the real samples, as in the loop). A round's clients are trained group by group, a
chunk at a time (:data:`CHUNK_BYTES` of stacked state), so memory does not grow with the client count. A
chunk of fewer than :data:`MIN_TOGETHER` clients is trained one client at a time, as the loop trains it:
stacking a handful of clients costs more than it saves (see there).

Where every client of a chunk takes a single step of SGD or Momentum (one minibatch a round: FedSGD, or
FedAvg with a client's data within one batch) and the worker needs only their sum, not each model, the
chunk is trained as one sum (:meth:`ClientRound.summed`): the worker's sum is then linear in the
gradients, which one forward and backward of the chunk's samples gives.

What is not vectorised falls back to the loop, said once per process (:func:`fallback_reason`): a
``torch.optim`` class or option this module does not implement, a loss other than cross-entropy, a layer
outside :data:`STATELESS_LAYERS` (batch norm keeps running statistics, dropout draws from the global
generator), a trainer that is not a :class:`~sifl_ray.optim.TorchTrainer`, a transcript recorder (the
attack suite's transcripts stay those of the loop). ``train.vectorise=false`` (or ``off``) turns it off.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from sifl_ray.coding.base import CODING_DTYPE, ClientServerKey
from sifl_ray.device import SampleStore
from sifl_ray.models import CNN, CNN2, MLP
from sifl_ray.optim import summed
from sifl_ray.optim.rules import Params, RuleOptimizer, UpdateRule, update_rule
from sifl_ray.optim.target import ModelStep, fused_tail, fused_update, stepwise_tail, stepwise_update
from sifl_ray.optim.trainer import TorchTrainer, loss_values

#: The stacked state one chunk of clients may hold (parameters, gradients, optimizer state, and for the
#: stepwise form the encoded and decoded vectors). Why this size: a smaller chunk pays the fixed overhead
#: of a vmap call more often, a larger one leaves the cache; on the reference workload (the paper's MLP,
#: 60 samples a client) 64 MiB holds a few dozen clients and sits between the two
#: (``python -m bench overhead`` measures a round with and without vectorising).
CHUNK_BYTES = 64 << 20

#: The fewest clients a chunk trains together; a smaller chunk trains them one at a time, as the loop does.
#: Why: a stacked step has a fixed cost (the vmap call) that the clients it replaces must pay for, so a few
#: clients trained together are slower than the loop, and the break-even for long local training lies near a
#: dozen clients (``python -m bench overhead`` compares the two at a chosen client count).
MIN_TOGETHER = 12

#: Layers with no state and no randomness, whose forward vmap batches: the only leaves a vectorised model
#: may have. Containers must be :data:`CONTAINERS` (their forward only composes their children).
STATELESS_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.ReLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.Flatten,
    nn.Identity,
)
CONTAINERS: tuple[type[nn.Module], ...] = (nn.Sequential, MLP, CNN, CNN2)

# ------------------------------------------------------------------------------------------------------------
# The optimizer, on a stack of clients.


def stacked_optimizer(optimizer: Any) -> UpdateRule | str:
    """The update rule of the trainer's own optimizer (:mod:`sifl_ray.optim.rules`: the loop's arithmetic,
    which updates a stack as it updates one client), or why there is none."""
    if isinstance(optimizer, RuleOptimizer):
        return optimizer.rule
    if len(optimizer.param_groups) != 1:
        return "the optimizer has several parameter groups"
    settings = {k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "lr")}
    rule = update_rule(type(optimizer), optimizer.param_groups[0]["lr"], **settings)
    if isinstance(rule, UpdateRule):
        return rule
    return f"optimizer {rule} has no vectorised form (sgd, momentum and adam have)"


# ------------------------------------------------------------------------------------------------------------
# What can be vectorised, and saying once what cannot.


def model_problem(model: nn.Module) -> str | None:
    """Why ``model`` cannot be trained on a client stack (``None``: it can)."""
    if any(True for _ in model.buffers()):
        return f"model {type(model).__name__} has buffers (running statistics are state the loop would share)"
    for name, module in model.named_modules():
        leaf = not any(True for _ in module.children())
        if leaf and not isinstance(module, STATELESS_LAYERS):
            return (
                f"layer {name or type(model).__name__} ({type(module).__name__}) is not known to be stateless"
            )
        if not leaf and type(module) not in CONTAINERS:
            return (
                f"module {name or 'model'} ({type(module).__name__}) has a forward this module does not know"
            )
    return None


def fallback_reason(trainer: Any, *, recorder: Any = None) -> str | None:
    """Why this worker must train its clients one at a time (``None``: it need not)."""
    if recorder is not None:
        return "a transcript recorder is attached (its transcripts are those of the loop)"
    if not isinstance(trainer, TorchTrainer):
        return f"the trainer is a {type(trainer).__name__}, not a TorchTrainer"
    if trainer.loss_fn is not F.cross_entropy:
        return f"the loss {getattr(trainer.loss_fn, '__name__', trainer.loss_fn)!r} is not cross-entropy"
    why = model_problem(trainer.model)
    if why is None:
        optimizer = stacked_optimizer(trainer.optimizer)
        why = optimizer if isinstance(optimizer, str) else None
    return why


_SAID: set[str] = set()


def say_fallback(reason: str) -> None:
    """Tell the log once per process why clients are trained one at a time (Ray folds the workers' identical
    lines into one)."""
    if reason not in _SAID:
        _SAID.add(reason)
        print(
            f"[sifl] client workers train their clients one at a time: {reason}", file=sys.stderr, flush=True
        )


# ------------------------------------------------------------------------------------------------------------
# The stacked trainer.


class StackedTrainer:
    """Trains chunks of clients from one start on the model and optimizer of a :class:`TorchTrainer`.

    Args:
        trainer: the worker's trainer (its model, loss and optimizer are read, never changed); one that
            :func:`fallback_reason` accepts.
    """

    def __init__(self, trainer: TorchTrainer):
        optimizer = stacked_optimizer(trainer.optimizer)
        if isinstance(optimizer, str):
            raise ValueError(optimizer)
        self.trainer = trainer
        self.model = trainer.model
        self.optimizer = optimizer
        named = dict(trainer.model.named_parameters())
        ids = {id(p): name for name, p in named.items()}
        self.names = [ids[id(p)] for p in trainer._params]  # the flat vector's order
        self.shapes = [tuple(p.shape) for p in trainer._params]
        self.sizes = [p.numel() for p in trainer._params]
        self.n = sum(self.sizes)
        self.dtype = trainer._params[0].dtype
        self.device = trainer._params[0].device
        self._grads: dict[tuple[bool, bool], Callable] = {}

    def capacity(self, *, extra_bytes: int = 0, chunk_bytes: int | None = None) -> int:
        """How many clients one chunk holds: parameters, gradients and up to two optimizer states each."""
        per_client = 4 * self.n * self.dtype.itemsize + extra_bytes
        return max(1, (chunk_bytes or CHUNK_BYTES) // per_client)

    # -------------------------------------------------------------- one step of C clients
    def _loss(self, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.model, dict(zip(self.names, params, strict=True)), (x,))
        return F.cross_entropy(out, y)

    def _masked_loss(self, params: Params, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, count):
        """The mean over the real samples of a padded minibatch (its gradient is the loop's, 1/B each)."""
        out = functional_call(self.model, dict(zip(self.names, params, strict=True)), (x,))
        return (F.cross_entropy(out, y, reduction="none") * mask).sum() / count

    def _grad_fn(self, shared: bool, masked: bool) -> Callable:
        key = (shared, masked)
        if key not in self._grads:
            loss = self._masked_loss if masked else self._loss
            dims = (None if shared else 0, 0, 0, *((0, 0) if masked else ()))
            self._grads[key] = vmap(grad_and_value(loss), in_dims=dims)
        return self._grads[key]

    def step(self, chunk: Chunk, batches: Batches, k: int) -> torch.Tensor:
        """Minibatch ``k`` of every client of ``chunk``: one optimizer step each; returns the C losses."""
        x, y, mask, count = batches.gather(k)
        if not self.model.training:
            self.model.train()
        shared = k == 0
        params = chunk.start if shared else chunk.params
        if mask is None:
            grads, losses = self._grad_fn(shared, False)(params, x, y)
        else:
            grads, losses = self._grad_fn(shared, True)(params, x, y, mask, count)
        self.optimizer.update(params, grads, chunk.state, chunk.params)
        return losses.detach()

    def chunk(self, start: torch.Tensor, clients: int) -> Chunk:
        """``clients`` clients at the round's start ``start`` (model dtype, flat), with fresh optimizers."""
        flat = torch.empty((clients, self.n), dtype=self.dtype, device=self.device)
        return Chunk(self._split(start, ()), self._split(flat, (clients,)), flat, self.optimizer.init())

    def _split(self, w: torch.Tensor, lead: tuple[int, ...]) -> Params:
        """Views of the flat vector(s) ``w`` (..., n), one per parameter of shape ``lead + shape``."""
        out, offset = [], 0
        for shape, size in zip(self.shapes, self.sizes, strict=True):
            out.append(w[..., offset : offset + size].view(*lead, *shape))
            offset += size
        return out


@dataclass
class Chunk:
    """The state of C clients training together: their shared start, their parameters (views of one flat
    (C, n) tensor, so that a client's model is one row), and their optimizer state."""

    start: Params
    params: Params
    flat: torch.Tensor
    state: dict[str, Any]


class Batches:
    """The minibatches of one chunk's clients, gathered a step at a time from the worker's samples.

    Every client of a chunk has the same number of minibatches; a step whose minibatches differ in size
    (the last one of an epoch, for clients of different sizes) is padded with zeros and masked. The samples
    come as the loop's come (:class:`sifl_ray.device.SampleStore`: from the host arrays, or gathered on the
    device where they are staged), in one gather per step for the whole chunk.
    """

    def __init__(self, samples: SampleStore, indices: Sequence[list[np.ndarray]]):
        self.samples, self.indices = samples, indices
        self.steps = len(indices[0])

    def gather(self, k: int):
        """Minibatch ``k`` of every client: (x, y) with a leading client axis, and the mask and sample
        counts of a ragged step (``None`` when every minibatch has the same size)."""
        idx = [batches[k] for batches in self.indices]
        sizes = [len(i) for i in idx]
        c, width = len(idx), max(sizes)
        x, y = next(iter(self.samples.batches([np.concatenate(idx)])))
        if min(sizes) == width:
            return x.reshape(c, width, *x.shape[1:]), y.reshape(c, width), None, None
        xp = x.new_zeros((c, width, *x.shape[1:]))
        yp = y.new_zeros((c, width))
        mask = torch.zeros((c, width), dtype=x.dtype, device=x.device)
        start = 0
        for row, size in enumerate(sizes):
            xp[row, :size] = x[start : start + size]
            yp[row, :size] = y[start : start + size]
            mask[row, :size] = 1
            start += size
        count = torch.tensor(sizes, dtype=x.dtype).to(x.device)
        return xp, yp, mask, count


# ------------------------------------------------------------------------------------------------------------
# A round of one worker's clients.


def chunks(steps: dict[int, int], capacity: int, minimum: int = 1) -> list[list[int]]:
    """The clients in training order: grouped by their number of minibatches (groups in the order of their
    smallest client, clients sorted within), each group cut into near-equal chunks of at most ``capacity``,
    but never below ``minimum`` because of the cut (a group of ``minimum`` or more then has chunks a little
    over ``capacity``). When every client has as many minibatches (same-size clients), that is the sorted
    order."""
    groups: dict[int, list[int]] = {}
    for client in sorted(steps):
        groups.setdefault(steps[client], []).append(client)
    out = []
    for members in groups.values():
        pieces = -(-len(members) // capacity)
        if len(members) >= minimum:
            pieces = min(pieces, len(members) // minimum)
        bounds = np.linspace(0, len(members), pieces + 1).round().astype(int)
        out += [members[a:b] for a, b in itertools.pairwise(bounds)]
    return out


class ClientRound:
    """One round of a worker's clients, trained a chunk at a time as the worker asks for their results.

    The worker walks :attr:`order` and asks each client's result once: :meth:`local` (the local model, for
    plain arms and the fused shortcut) or :meth:`update` (the upload and the target optimizer's stats, for
    coded arms that build each upload). The first request of a chunk trains the whole chunk; a chunk's
    state is dropped when the next one trains. A chunk of fewer than :data:`MIN_TOGETHER` clients trains
    each of them alone, on the worker's own trainer, exactly as the loop does.

    Args:
        stacked: the worker's stacked trainer.
        samples: the worker's training samples (in the model's dtype and on its device).
        indices: every client's minibatches (dataset indices) for this round, as the loop would draw them.
        w0: the round's decoded start (float64); start: the same in the model dtype.
        coded: ``(key view, w~)`` for a coded arm (``None``: plain); form: ``fused`` or ``stepwise``.
    """

    def __init__(
        self,
        stacked: StackedTrainer,
        samples: SampleStore,
        indices: dict[int, list[np.ndarray]],
        *,
        w0: torch.Tensor,
        start: torch.Tensor,
        coded: tuple[ClientServerKey, torch.Tensor] | None = None,
        form: str = "fused",
        chunk_bytes: int | None = None,
    ):
        self.stacked, self.samples, self.indices = stacked, samples, indices
        self.w0, self.start, self.coded, self.form = w0, start, coded, form
        self.stepwise = coded is not None and form == "stepwise"
        extra = 0
        if self.stepwise:  # each client's encoded and decoded vectors (float64)
            extra = CODING_DTYPE.itemsize * (coded[1].numel() + 2 * stacked.n)
        capacity = stacked.capacity(extra_bytes=extra, chunk_bytes=chunk_bytes or CHUNK_BYTES)
        self.chunks = chunks({c: len(b) for c, b in indices.items()}, capacity, MIN_TOGETHER)
        self.together = any(len(chunk) >= MIN_TOGETHER for chunk in self.chunks)
        self.order = [c for chunk in self.chunks for c in chunk]
        self._chunk_of = {c: i for i, chunk in enumerate(self.chunks) for c in chunk}
        self._trained = -1
        self._flat = torch.empty(0)  # the trained chunk's models, one row per client (model dtype)
        self._losses: dict[int, list[float]] = {}
        self._encoded: dict[int, torch.Tensor] = {}
        self._start_norm: float | None = None  # ‖start‖, for the summed chunks' norm bounds

    def _train(self, client: int) -> int:
        """Train the chunk of ``client`` (unless it is the current one); return ``client``'s row in it."""
        i = self._chunk_of[client]
        if i != self._trained:
            members = self.chunks[i]
            self._flat = torch.empty(0)  # free the last chunk before the next one is allocated
            batches = Batches(self.samples, [self.indices[c] for c in members])
            chunk = self.stacked.chunk(self.start, len(members))
            losses = (
                self._run_stepwise(chunk, members, batches) if self.stepwise else self._run(chunk, batches)
            )
            self._flat = chunk.flat
            self._losses = dict(zip(members, losses.T.tolist(), strict=True))
            self._trained = i
        return self.chunks[i].index(client)

    def _run(self, chunk: Chunk, batches: Batches) -> torch.Tensor:
        if not batches.steps:
            chunk.flat.copy_(self.start.expand_as(chunk.flat))
            return torch.zeros((0, chunk.flat.shape[0]))
        return torch.stack([self.stacked.step(chunk, batches, k) for k in range(batches.steps)])

    def _run_stepwise(self, chunk: Chunk, members: list[int], batches: Batches) -> torch.Tensor:
        """:func:`~sifl_ray.optim.target.stepwise_update` for every client of the chunk in lockstep: each step
        decodes each client's ``w~``, loads it, steps all clients at once, and encodes each client's step."""
        view, w_tilde = self.coded
        w_tilde = w_tilde.to(CODING_DTYPE)
        encoded = [w_tilde] * len(members)
        decoded = [self.w0] * len(members)
        local = torch.empty_like(self.w0)
        losses = []
        for k in range(batches.steps):
            if k:
                for row in range(len(members)):
                    decoded[row] = view.decode(encoded[row])
                    chunk.flat[row].copy_(decoded[row])  # TorchTrainer.load
            losses.append(self.stacked.step(chunk, batches, k))
            for row in range(len(members)):
                g = decoded[row] - local.copy_(chunk.flat[row]).to(decoded[row].device)
                encoded[row] = encoded[row] - view.apply_P1(g)
        self._encoded = dict(zip(members, encoded, strict=True))
        return torch.stack(losses) if losses else torch.zeros((0, len(members)))

    def summed(self, i: int, sizes: Sequence[float]) -> tuple[torch.Tensor, list[float], torch.Tensor] | None:
        """Chunk ``i``'s clients as one sum, where each takes one step of a rule whose first step is
        ``w − lr·g`` (:attr:`~sifl_ray.optim.rules.UpdateRule.first_step_lr`: SGD, Momentum).

        Then a client's model is linear in its gradient, and ``Σ_i s_i (w_K,i − start) = −lr Σ_i s_i g_i``:
        one forward and backward of the chunk's samples, each client's loss weighted by its ``sizes[i]``,
        gives the worker's sum without forming any client's gradient or model
        (:mod:`sifl_ray.optim.summed`): each layer's weight gradient is one large product instead of a
        small one per client, and the stacked update and each client's model read back, checked and
        added are gone. The same minibatches, the same learning rate in the model's dtype, the same sum to
        round-off.

        Returns:
            ``Σ_i s_i (w_K,i − start)`` (float64), each client's loss, and an upper bound on each client's
            ``‖w_K,i‖`` (float64, for its clip); ``None`` where the chunk trains otherwise: a chunk not
            trained together, several steps, another rule, the stepwise form, a layer whose per-sample
            gradients :mod:`~sifl_ray.optim.summed` does not bound.
        """
        members, lr, stacked = self.chunks[i], self.stacked.optimizer.first_step_lr, self.stacked
        if lr is None or self.stepwise or len(members) < MIN_TOGETHER:
            return None
        batches = Batches(self.samples, [self.indices[c] for c in members])
        if batches.steps != 1:
            return None
        weights = torch.tensor(sizes, dtype=stacked.dtype, device=stacked.device)
        start = stacked._split(self.start, ())
        out = summed.gradient_and_bounds(stacked.model, stacked.names, start, batches.gather(0), weights)
        if out is None:
            return None
        total, losses, norms = out
        rate = float(torch.tensor(lr, dtype=stacked.dtype))  # as the loop's update uses it
        if self._start_norm is None:  # once a round
            self._start_norm = float(torch.linalg.vector_norm(self.start, dtype=torch.float64))
        reach = self._start_norm + rate * norms.cpu()
        return total.to(CODING_DTYPE).mul_(-rate), losses.tolist(), reach

    def _alone(self, client: int) -> bool:
        return len(self.chunks[self._chunk_of[client]]) < MIN_TOGETHER

    def _batches(self, client: int):
        return self.samples.batches(self.indices[client])

    def local(self, client: int, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        """``client``'s local model (in ``out``, float64) and its mean loss, as the loop's ``_train``."""
        if self._alone(client):
            trainer = self.stacked.trainer
            trainer.reset(self.start)
            losses = loss_values([trainer.step(b) for b in self._batches(client)])
            return trainer.params(out), float(np.mean(losses)) if losses else 0.0
        row = self._train(client)
        losses = self._losses[client]
        return out.copy_(self._flat[row]), float(np.mean(losses)) if losses else 0.0

    def update(self, client: int, *, step: ModelStep | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """``client``'s upload and stats, as :func:`~sifl_ray.optim.target.fused_update` or
        :func:`~sifl_ray.optim.target.stepwise_update` (by :attr:`form`) give them."""
        view, w_tilde = self.coded
        if self._alone(client):
            form = stepwise_update if self.stepwise else fused_update
            return form(view, w_tilde, self.stacked.trainer, self._batches(client), step=step)
        row = self._train(client)
        losses = self._losses[client]
        if self.stepwise:
            encoded = self._encoded.pop(client)
            wK = view.decode(encoded) if losses else self.w0.clone()
            return stepwise_tail(view, encoded, self.w0, wK, losses, step=step)
        wK = torch.empty_like(self.w0).copy_(self._flat[row])
        return fused_tail(view, w_tilde.to(CODING_DTYPE), self.w0, wK, losses, step=step)


def client_round(
    stacked: StackedTrainer,
    samples: SampleStore,
    batches: Callable[[int], list[np.ndarray]],
    clients: Iterable[int],
    **kwargs: Any,
) -> ClientRound | None:
    """A :class:`ClientRound` over ``clients``, with each one's minibatches from ``batches(client)``;
    ``None`` when no chunk would have :data:`MIN_TOGETHER` clients (the loop is then as fast or faster)."""
    rnd = ClientRound(stacked, samples, {c: batches(c) for c in clients}, **kwargs)
    return rnd if rnd.together else None
