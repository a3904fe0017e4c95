"""The target optimizers: the base optimizer immersed in encoded coordinates (docs/method.md "SIFL M1").

A client receives ``w~ = P1 w + N1 r`` and must return an encoded model whose decoding is exactly what
K ordinary steps from w would give. Two forms, equal in exact arithmetic:

* :func:`stepwise_update` — the paper's target optimizer (Eq. targetoptimizerstep):
  ``w~_{k+1} = w~_k − P1 g(P1L w~_k, batch_k)``. By induction ``P1L w~_k = w_k`` and
  ``w~_k = P1 w_k + N1 r`` (``P1L P1 = I``, ``P1L N1 = 0``): the noise term never changes in a round.
* :func:`fused_update` — decode once, take the K ordinary steps, encode the change once:
  ``w~ + P1 (w_K − w_0)``. One decode and one ``P1`` product instead of K each, and fewer roundings.

``g`` is the step the base optimizer takes from the decoded point. Its state (momentum, Adam's moments)
lives in decoded coordinates and is reset every round, for two reasons: an elementwise rule like Adam's
``m/√v`` does not commute with ``P1``, so state kept in encoded coordinates would be a different
optimizer and the trajectories would no longer match plain FL; and a new round may bring a new key
epoch and always new noise, so encoded state from the last round would not even be in the right
coordinates. The plain-FL arm resets its optimizer every round too, so both arms run the same optimizer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

from sifl_ray.coding.base import CODING_DTYPE, ClientServerKey
from sifl_ray.optim.trainer import Batch, Trainer, loss_values
from sifl_ray.privacy.clipping import clip_norm_


def _stats(steps: list, w0: torch.Tensor, wK: torch.Tensor) -> dict[str, float]:
    losses = loss_values(steps)  # one read from the device per client, not one per step
    return {
        "loss": sum(losses) / len(losses) if losses else 0.0,
        "steps": float(len(losses)),
        "first_loss": losses[0] if losses else 0.0,
        "last_loss": losses[-1] if losses else 0.0,
        "update_norm": float(torch.linalg.vector_norm(wK - w0)),
    }


#: The arm's client step with its client and round bound: the local model → (the model to upload, its
#: metrics) (:class:`sifl_ray.arms.ClientStep`).
ModelStep = Callable[[torch.Tensor], tuple[torch.Tensor, Mapping[str, float]]]

#: The prefix of the client step's metrics among an update's stats (:func:`step_metrics` takes them out).
STEP_METRIC = "step/"


def _client_step(
    w: torch.Tensor, clip: float | None, step: ModelStep | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The step's upload and its stats: ``clipped`` (1.0 or 0.0) and its metrics, each under
    :data:`STEP_METRIC`."""
    if step is not None:
        w, metrics = step(w)
    else:
        metrics = {} if clip is None else {"clipped": float(clip_norm_(w, clip))}
    stats = {f"{STEP_METRIC}{name}": float(value) for name, value in metrics.items()}
    return w, {"clipped": float(bool(metrics.get("clipped"))), **stats}


def step_metrics(stats: Mapping[str, float]) -> dict[str, float]:
    """The client step's metrics among the stats of :func:`fused_update` or :func:`stepwise_update`."""
    return {k.removeprefix(STEP_METRIC): v for k, v in stats.items() if k.startswith(STEP_METRIC)}


def fused_update(
    key_view: ClientServerKey,
    w_tilde: torch.Tensor,
    trainer: Trainer,
    batches: Iterable[Batch],
    *,
    clip: float | None = None,
    step: ModelStep | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Decode once, K ordinary steps, upload ``w~ + P1 (f(w_K) − w_0)``.

    Args:
        clip: if given, ``w_K`` is clipped to ``‖w_K‖₂ ≤ clip`` before it is encoded (the ε figures assume
            bounded models; see :mod:`sifl_ray.privacy.clipping`).
        step: the arm's client step ``f`` on the local model before it is encoded (it may clip, add the
            client's noise, ...; returns the model and its metrics). Overrides ``clip``.

    Returns:
        The encoded upload (ñ,) and stats: mean ``loss`` over the steps, ``steps``, ``first_loss``,
        ``last_loss``, ``update_norm`` = ‖f(w_K) − w_0‖₂ (decoded coordinates), ``clipped`` (1.0 or 0.0),
        and the step's metrics (:func:`step_metrics`).
    """
    w_tilde = w_tilde.to(CODING_DTYPE)
    w0 = key_view.decode(w_tilde)
    trainer.reset(w0)
    losses = [trainer.step(batch) for batch in batches]
    return fused_tail(key_view, w_tilde, w0, trainer.params().to(w0.device), losses, clip=clip, step=step)


def fused_tail(
    key_view: ClientServerKey,
    w_tilde: torch.Tensor,
    w0: torch.Tensor,
    wK: torch.Tensor,
    losses: list[float],
    *,
    clip: float | None = None,
    step: ModelStep | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """What :func:`fused_update` does once the K steps are taken (``wK``: the local model, float64, which
    the client step may change in place); shared with :mod:`sifl_ray.optim.vectorised`."""
    wK, stepped = _client_step(wK, clip, step)
    upload = w_tilde + key_view.apply_P1(wK - w0)
    return upload, {**_stats(losses, w0, wK), **stepped}


def stepwise_update(
    key_view: ClientServerKey,
    w_tilde: torch.Tensor,
    trainer: Trainer,
    batches: Iterable[Batch],
    *,
    clip: float | None = None,
    step: ModelStep | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The paper's form: every step ``w~ ← w~ − P1 g(P1L w~)``, g the base optimizer's step from the
    decoded point (optimizer state in decoded coordinates, fresh each round; see the module docstring).

    Args:
        clip: if given, the final model is clipped to ``‖w_K‖₂ ≤ clip``: one more encoded step,
            ``w~ ← w~ + P1 (clip(w_K) − w_K)``, the same form as every other step.
        step: the arm's client step ``f`` (overrides ``clip``), applied the same way:
            ``w~ ← w~ + P1 (f(w_K) − w_K)`` when it changed the model.

    Returns:
        The encoded upload (ñ,) and the same stats as :func:`fused_update`.
    """
    w_tilde = w_tilde.to(CODING_DTYPE)
    w0 = key_view.decode(w_tilde)
    trainer.reset(w0)
    losses, first, w_k = [], True, w0
    for batch in batches:
        if not first:
            w_k = key_view.decode(w_tilde)
            trainer.load(w_k)
        first = False
        losses.append(trainer.step(batch))
        g = w_k - trainer.params().to(w_k.device)
        w_tilde = w_tilde - key_view.apply_P1(g)
    wK = key_view.decode(w_tilde) if losses else w0.clone()
    return stepwise_tail(key_view, w_tilde, w0, wK, losses, clip=clip, step=step)


def stepwise_tail(
    key_view: ClientServerKey,
    w_tilde: torch.Tensor,
    w0: torch.Tensor,
    wK: torch.Tensor,
    losses: list[float],
    *,
    clip: float | None = None,
    step: ModelStep | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """What :func:`stepwise_update` does once the K encoded steps are taken (``w_tilde``: the encoded model,
    ``wK``: its decoding); shared with :mod:`sifl_ray.optim.vectorised`."""
    stepped = {"clipped": 0.0}
    if clip is not None or step is not None:
        before = wK.clone()
        wK, stepped = _client_step(wK, clip, step)
        change = wK - before
        if bool(change.any()):
            w_tilde = w_tilde + key_view.apply_P1(change)
    return w_tilde, {**_stats(losses, w0, wK), **stepped}
