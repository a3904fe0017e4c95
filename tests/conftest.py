"""Shared fixtures: one Ray session for the whole test run (start-up costs seconds on this machine)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs and 4 *declared* GPUs (Ray accepts them on a CPU machine), so placement of
    fractional-GPU workers can be tested here; CUDA itself is absent and workers fall back to the CPU."""
    import ray

    if not ray.is_initialized():
        # address="local": a Ray of its own even when `ray start` left a record of a cluster in /tmp
        # (ray.init() would join it, or a stale one, and refuse num_cpus / num_gpus there)
        ray.init(
            address="local",
            num_cpus=2,
            num_gpus=4,
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
        )
    yield ray
    ray.shutdown()
