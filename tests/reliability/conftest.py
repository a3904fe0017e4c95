"""Shared by the reliability tests: one fault-free reference run on the test session's Ray."""

from __future__ import annotations

import pytest
from reliability_helpers import BASE, run_sim


@pytest.fixture(scope="session")
def reference(ray_session, tmp_path_factory):
    """The fault-free run every fault run is compared with: its final models and history."""
    return run_sim(BASE, tmp_path_factory.mktemp("reference") / "run")
