"""Named, derived random streams: every stream comes from the run seed and its own name.

Why: a Ray run, an in-process run and a resumed run must draw the same numbers (data split, model init,
minibatches per client per round, each party's noise). Deriving each stream from ``(seed, *names)`` through
SHA-256 makes a stream independent of the order in which other streams are used, and of which process
uses it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def derive_bytes(seed: int | bytes, *names: object, nbytes: int = 32) -> bytes:
    """Return ``nbytes`` pseudo-random bytes determined by ``seed`` and the ``names`` path."""
    base = seed if isinstance(seed, bytes) else int(seed).to_bytes(16, "little", signed=True)
    out = b""
    counter = 0
    while len(out) < nbytes:
        h = hashlib.sha256()
        h.update(base)
        for name in names:
            h.update(b"\x00")
            h.update(str(name).encode())
        h.update(counter.to_bytes(4, "little"))
        out += h.digest()
        counter += 1
    return out[:nbytes]


def derive_seed(seed: int | bytes, *names: object) -> int:
    """A 63-bit integer seed for ``(seed, *names)`` (fits ``torch.Generator.manual_seed``)."""
    return int.from_bytes(derive_bytes(seed, *names, nbytes=8), "little") & ((1 << 63) - 1)


def torch_generator(seed: int | bytes, *names: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded for the stream ``(seed, *names)``."""
    import torch  # deferred: NumPy-only users (data partitions, read by config validation) skip torch

    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *names))
    return gen


def numpy_generator(seed: int | bytes, *names: object) -> np.random.Generator:
    """A NumPy generator with 256 bits of state entropy for the stream ``(seed, *names)``."""
    entropy = int.from_bytes(derive_bytes(seed, *names, nbytes=32), "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))
