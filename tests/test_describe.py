"""``sifl describe`` (``sifl_ray.describe``) uses the real client sizes (ε depends on the smallest |D_i|) and
builds the user's model on the user's data exactly as a run does."""

from __future__ import annotations

from sifl_ray.config import load_config
from sifl_ray.data import load_dataset, partition_dataset
from sifl_ray.describe import dataset_sizes, describe_scenario


def test_dataset_sizes_use_the_real_split():
    cfg = load_config(["data.partition=dirichlet", "dirichlet.alpha=0.1"])
    ds = load_dataset("digits", seed=cfg.seed, test_fraction=cfg.data.test_fraction)
    parts = partition_dataset(
        ds.y_train, scheme="dirichlet", num_clients=10, seed=cfg.seed, settings={"alpha": 0.1}
    )
    assert dataset_sizes(cfg) == (min(len(p) for p in parts), len(ds.y_train))
    iid = dataset_sizes(load_config([]))
    assert iid == (len(ds.y_train) // 10, len(ds.y_train))


def test_describe_builds_the_users_model_on_the_users_data_as_a_run_does(tmp_path):
    """``sifl describe`` of a model given by import path, on arrays split by their own clients: the same n
    and the same client sizes as the run's workload (it loads and builds through the same functions)."""
    import numpy as np

    from sifl_ray.runner.workload import load_workload

    gen = np.random.default_rng(0)
    x = gen.normal(size=(120, 1, 8, 8)).astype(np.float32)
    ids = np.repeat(np.arange(6), 20)
    np.savez(tmp_path / "d.npz", x_train=x, y_train=gen.integers(0, 10, 120), client_train=ids)
    cfg = load_config(
        [
            "data.name=arrays",
            f"arrays.path={tmp_path / 'd.npz'}",
            "data.partition=natural",
            "clients.num_clients=3",
            "train.model=tests.test_models_own:small_net",
            "train.model_args={hidden: 4}",
        ]
    )
    info = describe_scenario(cfg, progress=False)
    work = load_workload(cfg, num_workers=1)
    assert info["n"] == work.n == 64 * 4 + 4 + 4 * 10 + 10
    assert (info["local_size"], info["total_size"]) == (int(work.sizes.min()), int(work.sizes.sum()))
