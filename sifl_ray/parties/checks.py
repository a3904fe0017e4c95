"""What a party checks before it adds anything up: a client's upload, a worker's partial sum (plain or
masked), and how the encoded vector is cut into the aggregator's shards.

Nothing non-finite, mis-shaped, late or encoded under another key epoch is ever averaged in: one such vector
would corrupt the global model of every client (and, in SIFL, the decoding of it). The client workers check
each upload (they run the keyless leaves of the aggregator's summation tree), the aggregator each partial.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sifl_ray.parties.messages import MaskedPartial, Partial


def check_upload(
    upload: object,
    *,
    shape: tuple[int, ...],
    round: int,
    stamped_round: int,
    key_epoch: int,
    stamped_epoch: int,
) -> str | None:
    """Why an upload must be rejected, or ``None`` if it may be averaged in.

    Nothing non-finite, mis-shaped, late or encoded under another key epoch is ever averaged in: one such
    vector would corrupt the global model of every client (and, in SIFL, the decoding of it).
    """
    if not isinstance(upload, torch.Tensor):
        return f"not a tensor ({type(upload).__name__})"
    if tuple(upload.shape) != tuple(shape):
        return f"wrong shape {tuple(upload.shape)}, expected {tuple(shape)}"
    if stamped_round != round:
        return f"stamped with round {stamped_round}, expected {round}"
    if stamped_epoch != key_epoch:
        return f"stamped with key epoch {stamped_epoch}, expected {key_epoch}"
    if not bool(torch.isfinite(upload).all()):
        return "non-finite values"
    return None


def check_partial(partial: object, *, round: int, key_epoch: int, length: int) -> str | None:
    """Why a worker's partial sum must be refused, or ``None``.

    The workers run the keyless leaves of the summation tree, so the aggregator checks what they hand it
    as it would check a client's upload: a worker that died half-way, went bad or replays an old round
    must not corrupt the average.
    """
    if not isinstance(partial, Partial):
        return f"not a partial sum ({type(partial).__name__})"
    if partial.round != round:
        return f"stamped with round {partial.round}, expected {round}"
    if partial.key_epoch != key_epoch:
        return f"stamped with key epoch {partial.key_epoch}, expected {key_epoch}"
    ws = partial.weighted_sum
    if not isinstance(ws, torch.Tensor) or tuple(ws.shape) != (length,):
        shape = tuple(ws.shape) if isinstance(ws, torch.Tensor) else type(ws).__name__
        return f"wrong shape {shape}, expected {(length,)}"
    if not (
        isinstance(partial.weight, int | float) and math.isfinite(partial.weight) and partial.weight >= 0
    ):
        return f"invalid weight {partial.weight!r}"
    if not bool(torch.isfinite(ws).all()):
        return "non-finite values"
    return None


def check_masked_partial(partial: object, *, round: int, key_epoch: int, length: int) -> str | None:
    """Why a worker's masked partial sum must be refused before unmasking, or ``None``.

    Only the stamps and the shape can be checked: the content is uniform in the ring until the masks are
    removed, so a worker that adds garbage is not caught by anyone (secure aggregation protects the inputs'
    secrecy, not their integrity). Refusals must come before the survivors are announced: once the masks of
    a set of clients are removed, leaving one of them out would spoil the sum.
    """
    if not isinstance(partial, MaskedPartial):
        return f"not a masked partial sum ({type(partial).__name__})"
    if partial.round != round:
        return f"stamped with round {partial.round}, expected {round}"
    if partial.key_epoch != key_epoch:
        return f"stamped with key epoch {partial.key_epoch}, expected {key_epoch}"
    ms = partial.masked_sum
    if not isinstance(ms, np.ndarray) or ms.dtype != np.uint64 or ms.shape != (length,):
        shape = getattr(ms, "shape", type(ms).__name__)
        return f"not a uint64 vector of shape {(length,)} (got {shape})"
    if not (
        isinstance(partial.weight, int | float) and math.isfinite(partial.weight) and partial.weight >= 0
    ):
        return f"invalid weight {partial.weight!r}"
    if len(set(partial.clients)) != len(partial.clients) or len(partial.clients) != partial.accepted:
        return "its client list does not match its count"
    return None


def shard_bounds(length: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal row ranges covering ``range(length)``."""
    num_shards = max(1, min(num_shards, length))
    step = math.ceil(length / num_shards)
    return [(s, min(s + step, length)) for s in range(0, length, step)]
