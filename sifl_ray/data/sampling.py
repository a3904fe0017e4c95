"""Per-round choices: which clients take part, and which minibatches each of them uses."""

from __future__ import annotations

import math

import numpy as np

from sifl_ray.config import names
from sifl_ray.seeding import numpy_generator

__all__ = ["SAMPLINGS", "client_batches", "sample_clients"]

SAMPLINGS = names.SAMPLINGS  # how a round's clients are drawn (clients.sampling)


def sample_clients(
    num_clients: int, fraction: float, round: int, seed: int | bytes, sampling: str = "fixed"
) -> np.ndarray:
    """The clients taking part in ``round``, sorted.

    ``seed`` is the sampling party's secret (a run passes its sampler seed, never the public run seed:
    amplification by sampling holds only against those who cannot tell who was sampled).

    ``sampling="fixed"``: ``max(1, ⌈fraction·num_clients⌉)`` of them, drawn without replacement from the
    stream ``(seed, "sample_clients", round)``. ``"poisson"``: each client independently with probability
    ``fraction`` from the stream ``(seed, "sample_clients", "poisson", round)``; a round may then have no
    client at all (the model stays). Either way the choice of a round does not depend on earlier rounds (a
    resumed run picks the same clients), and ``fraction = 1`` selects everyone, as in the paper.
    """
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1; got {num_clients}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}")
    if round < 0:
        raise ValueError(f"round must be non-negative; got {round}")
    if sampling == "poisson":
        if fraction == 1.0:
            return np.arange(num_clients, dtype=np.int64)
        draws = numpy_generator(seed, "sample_clients", "poisson", round).random(num_clients)
        return np.flatnonzero(draws < fraction).astype(np.int64)
    if sampling != "fixed":
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}; got {sampling!r}")
    m = max(1, math.ceil(fraction * num_clients - 1e-9))  # the tolerance keeps 0.3·10 at 3, not 4
    chosen = numpy_generator(seed, "sample_clients", round).choice(num_clients, size=m, replace=False)
    return np.sort(chosen).astype(np.int64)


def client_batches(
    indices: np.ndarray,
    *,
    batch_size: int,
    epochs: int | None = None,
    steps: int | None = None,
    seed: int,
    client_id: int,
    round: int,
    drop_last: bool = False,
) -> list[np.ndarray]:
    """The minibatches (dataset indices) client ``client_id`` uses in ``round``.

    Each epoch is a fresh permutation of ``indices`` cut into consecutive batches of ``batch_size`` (the
    last one shorter unless ``drop_last``). Local work is ``epochs`` passes (the paper's K), or, when
    ``steps`` is positive, exactly ``steps`` optimizer steps running through as many epochs as needed;
    ``steps`` then wins over ``epochs`` and ``steps`` of 0 or None means "use epochs" (the convention of
    the scenario keys ``train.local_epochs`` / ``train.local_steps``). The order comes from the stream
    ``(seed, "batches", client_id, round)``, which does not name the arm, so FL and both SIFL arms train on
    identical minibatches and their difference is the coding's alone.

    Raises:
        ValueError: empty ``indices``, a non-positive ``batch_size``, negative ``steps``, no positive
            ``steps`` and no ``epochs`` ≥ 1, or ``drop_last`` with fewer samples than one batch.
    """
    indices = np.asarray(indices)
    if indices.ndim != 1 or indices.size == 0:
        raise ValueError(f"client {client_id} has no samples (indices shape {indices.shape})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1; got {batch_size}")
    if steps is not None and steps < 0:
        raise ValueError(f"steps must be non-negative (0 means: use epochs); got {steps}")
    if steps:
        epochs = None
    else:
        steps = None
        if epochs is None or epochs < 1:
            raise ValueError(f"give epochs >= 1 or steps >= 1; got epochs={epochs}, steps=0/None")
    if drop_last and indices.size < batch_size:
        raise ValueError(
            f"client {client_id} has {indices.size} samples, fewer than batch_size {batch_size}, and "
            "drop_last=True would leave it no batch. Fix: drop_last=False or a smaller batch."
        )
    gen = numpy_generator(seed, "batches", client_id, round)
    n = indices.size
    stop = n - n % batch_size if drop_last else n
    batches: list[np.ndarray] = []
    epoch = 0
    while (epochs is not None and epoch < epochs) or (steps is not None and len(batches) < steps):
        perm = indices[gen.permutation(n)]
        for start in range(0, stop, batch_size):
            if steps is not None and len(batches) == steps:
                break
            batches.append(perm[start : start + batch_size])
        epoch += 1
    return batches
