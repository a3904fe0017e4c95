"""The array plumbing every DP formula shares: one float64 NumPy computation, returned in the caller's kind.

Norm arguments are vectorised over rows: each accepts a Python float, a NumPy array or a torch tensor,
inputs broadcast by NumPy rules, and the result has the broadcast shape and the kind of the array inputs (a
torch tensor if any input is one, on that tensor's device; else a NumPy array if any input is one; else a
float). Zero safety lives here too: ``0/anything = 0`` and ``positive/0 = +inf``, never NaN, and invalid
inputs (negative norms, NaN, δ outside (0, 1)) raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

Arrayish = float | int | np.ndarray | torch.Tensor


def as_array(name: str, x: Arrayish, *, nonnegative: bool = True, allow_inf: bool = False) -> np.ndarray:
    """``x`` as a float64 NumPy array, refused (naming ``name``) if it has NaN, inf or, for a norm, a negative
    entry: a bound computed from it would be meaningless."""
    if isinstance(x, torch.Tensor):
        arr = x.detach().to(device="cpu", dtype=torch.float64).numpy()
    else:
        arr = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(arr)) or (not allow_inf and not np.all(np.isfinite(arr))):
        raise ValueError(
            f"{name} has a non-finite entry (NaN or inf); a privacy bound computed from it would be "
            "meaningless. Check the key norms and the configuration that produced it."
        )
    if nonnegative and np.any(arr < 0):
        raise ValueError(
            f"{name} must be >= 0 (it is a norm, a noise scale or a sensitivity), got a minimum of "
            f"{float(arr.min())!r}"
        )
    return arr


def wrap(result: np.ndarray, *inputs: Arrayish) -> Arrayish:
    """``result`` in the kind of the inputs: a tensor (on the first tensor's device), an array, or a float."""
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return torch.from_numpy(np.array(result, dtype=np.float64)).to(x.device)
    if any(isinstance(x, np.ndarray) for x in inputs):
        return np.asarray(result, dtype=np.float64)
    return float(result)


def shift_over_noise(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``a / s`` with ``0/anything = 0`` and ``positive/0 = +inf`` (no warnings, no NaN)."""
    a, s = np.broadcast_arrays(a, s)
    out = np.zeros(a.shape, dtype=np.float64)
    pos = a > 0
    zero_noise = pos & (s == 0)
    ok = pos & (s > 0)
    out[zero_noise] = np.inf
    with np.errstate(over="ignore"):
        out[ok] = a[ok] / s[ok]
    return out


def quiet(fn: Callable[..., Arrayish]) -> Callable[..., Arrayish]:
    """Run ``fn`` with float overflow/underflow silent: extreme norms give 0 or inf, never a warning."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Arrayish:
        with np.errstate(over="ignore", under="ignore"):
            return fn(*args, **kwargs)

    return wrapper


def check_delta(delta: float) -> float:
    """δ as a float, refused with the reason unless it lies in (0, 1)."""
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(
            f"delta must lie in (0, 1), got {delta!r}: Gaussian noise never gives pure ε-DP (delta = 0 would "
            "mean ε = inf), and delta >= 1 is no guarantee at all. The paper uses delta = 1e-5."
        )
    return delta
