"""A coding backend defined here, in the test file, is a backend like the built-in ones
(docs/extending.md, "To add a coding backend"): the validator offers it, the parties make, save and restore
its keys by name, and a run with it gives the numbers of the backend it mirrors, to the bit.

The example backend is the dense key under a name of its own (the smallest real backend: the same matrices,
so the same numbers); a new design overrides ``create`` and the products, and enrols in the conformance
suite through ``tests/coding/coding_cases.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from sifl_ray.coding import (
    DenseServerKey,
    make_server_key,
    register_server_key,
    server_key_class,
    server_key_from_state_dict,
)
from sifl_ray.coding.keys import SERVER_KEYS
from sifl_ray.config import ConfigError, load_config
from sifl_ray.runner import Simulation


class TwinDenseKey(DenseServerKey):
    """The dense backend under the name ``dense_twin``."""

    backend: ClassVar[str] = "dense_twin"


@pytest.fixture
def twin():
    register_server_key(TwinDenseKey)
    yield TwinDenseKey
    SERVER_KEYS.unregister("dense_twin")


def small_net(input_shape, num_classes) -> torch.nn.Module:
    """A model of 650 parameters (the quickstart's has 2,410): the dense key's matrices, and the spectral
    norms of its round-off bound, are the model's size, and the backend's numbers are its numbers at any."""
    c, h, w = input_shape
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(c * h * w, num_classes))


RUN = [
    "scenario=quickstart",
    "clients.num_clients=4",
    "coding.key_seed=3",
    "train.rounds=1",
    f"train.model={__name__}:small_net",  # the module name pytest imported this file under
    "arms=[sifl_m1]",
    "backend=local",
    "output.progress=false",
    "output.plot=false",
]


def test_a_registered_backend_is_a_choice_and_runs_like_the_one_it_mirrors(tmp_path, twin):
    models = {}
    for backend in ("dense", "dense_twin"):
        cfg = load_config([*RUN, f"coding.backend={backend}", f"output.dir={tmp_path}"])
        sim = Simulation(cfg, run_dir=tmp_path / backend)
        sim.run()
        models[backend] = sim.global_model("sifl_m1")
        sim.close()
    assert models["dense"].numel() == 650
    assert torch.equal(models["dense"], models["dense_twin"])


def test_an_unregistered_backend_is_refused_with_the_registered_ones_listed():
    with pytest.raises(ConfigError, match=r"coding\.backend: expected one of dense, fast, block") as info:
        load_config([*RUN, "coding.backend=dense_twin"])
    assert "did you mean dense?" in str(info.value)


def test_keys_of_a_registered_backend_are_made_saved_and_restored_by_name(twin):
    key = make_server_key(n=30, n_tilde=36, backend="dense_twin", alpha=0.1, beta=10.0, seed=5)
    assert type(key) is TwinDenseKey
    again = server_key_from_state_dict(key.state_dict())
    assert type(again) is TwinDenseKey
    w = torch.randn(30, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    r = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(again.encode(w, r), key.encode(w, r))
    with pytest.raises(ValueError, match="already"):
        register_server_key(type("Other", (DenseServerKey,), {"backend": "dense_twin"}))


def test_a_process_that_never_registered_it_imports_it_from_its_path(twin):
    """What a Ray actor does: it knows the backend only by the path the driver recorded."""
    path = SERVER_KEYS.path("dense_twin")
    assert path.endswith(":TwinDenseKey")
    module = Path(__file__).stem
    code = (
        "from sifl_ray.coding.keys import server_key_class; "
        f"cls = server_key_class('dense_twin', '{module}:TwinDenseKey'); print(cls.__name__, cls.backend)"
    )
    here = Path(__file__).parent
    root = str(here.parent.parent)  # the repository, whether or not the package is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=here, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["TwinDenseKey", "dense_twin"]
    with pytest.raises(ValueError, match="backend must be one of"):
        server_key_class("no_such_backend")
