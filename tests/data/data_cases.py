"""Small MNIST-like IDX files shared by the download and dataset tests."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field

import numpy as np

from sifl_ray.data import IDX_FILES, encode_idx

N_TRAIN, N_TEST = 40, 12


def mnist_like(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, bytes]]:
    """Small 28×28 uint8 IDX files named like the real ones: the arrays and their ``.gz`` bytes."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(N_TRAIN) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(N_TEST) % 10).astype(np.uint8),
    }
    files = {f"{IDX_FILES[role]}.gz": gzip.compress(encode_idx(a), mtime=0) for role, a in arrays.items()}
    return arrays, files


@dataclass
class LoopbackServer:
    """Serves ``files[path]`` at ``http://127.0.0.1:<port>/<path>``; 404 otherwise; records requests."""

    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    delay_s: float = 0.0
    port: int = 0

    def url(self, prefix: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{prefix}"
