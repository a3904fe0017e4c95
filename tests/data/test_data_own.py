"""Your own data: arrays on disk, LEAF JSON, a loader of yours, the natural
partition by the data's own clients, the shipped MNIST sample, and data errors that exit 2 with the key."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sifl_ray.cli import main
from sifl_ray.config import ConfigError, load_config
from sifl_ray.data import partition_dataset
from sifl_ray.data.datasets import load_dataset
from sifl_ray.data.own import DataInputError, load_any_dataset
from sifl_ray.data.partition import PartitionError
from sifl_ray.data.registry import DATASETS, register_dataset

HERE = __name__


def _arrays(n: int = 60, users: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.normal(size=(n, 3, 4)).astype(np.float64),
        "y_train": np.arange(n) % 3,
        "client_train": np.array([f"user{i % users}" for i in range(n)]),
    }


def my_loader(n: int = 40, as_tensors: bool = False):
    """A user's loader: (x, y, client ids), as tensors or arrays."""
    a = _arrays(n)
    ids = np.arange(n) // 10
    if as_tensors:
        return torch.as_tensor(a["x_train"]), torch.as_tensor(a["y_train"]), torch.as_tensor(ids)
    return a["x_train"], a["y_train"], ids


def _leaf(path, users: dict[str, tuple[list, list]]) -> None:
    path.write_text(
        json.dumps(
            {
                "users": list(users),
                "num_samples": [len(x) for x, _ in users.values()],
                "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
            }
        )
    )


# ---------------------------------------------------------------------------------------------------------
# Loaders
# ---------------------------------------------------------------------------------------------------------


def test_npz_with_a_test_set_and_client_ids(tmp_path):
    a = _arrays()
    a["x_test"], a["y_test"] = a["x_train"][:7], a["y_train"][:7]
    np.savez(tmp_path / "d.npz", **a)
    ds = load_any_dataset("arrays", seed=0, args={"path": str(tmp_path / "d.npz")})
    assert ds.x_train.shape == (60, 1, 3, 4) and ds.x_train.dtype == np.float32  # (N, H, W) → (N, 1, H, W)
    assert ds.n_test == 7 and ds.num_classes == 3
    assert np.array_equal(ds.client_train, np.arange(60) % 5)  # the users' ids, numbered in sorted order
    np.testing.assert_array_equal(ds.x_train, a["x_train"][:, None].astype(np.float32))  # values as given


def test_a_pt_file_without_a_test_set_is_split_stratified_and_seeded(tmp_path):
    a = _arrays(90)
    torch.save({k: torch.as_tensor(v) for k, v in a.items() if k != "client_train"}, tmp_path / "d.pt")
    one = load_any_dataset("arrays", seed=1, args={"path": str(tmp_path / "d.pt")}, test_fraction=0.2)
    again = load_any_dataset("arrays", seed=1, args={"path": str(tmp_path / "d.pt")}, test_fraction=0.2)
    other = load_any_dataset("arrays", seed=2, args={"path": str(tmp_path / "d.pt")}, test_fraction=0.2)
    assert one.n_train == 72 and np.bincount(one.y_test).tolist() == [6, 6, 6]
    assert np.array_equal(one.x_test, again.x_test) and not np.array_equal(one.x_test, other.x_test)
    assert one.client_train is None


def test_leaf_images_and_text_with_their_users(tmp_path):
    (tmp_path / "train").mkdir()
    pixels = lambda v: [float(v)] * 16  # noqa: E731  (16 values: a 4×4 image, as FEMNIST's 784 are 28×28)
    _leaf(tmp_path / "train" / "a.json", {"w1": ([pixels(1), pixels(2)], [0, 1]), "w2": ([pixels(3)], [1])})
    _leaf(tmp_path / "train" / "b.json", {"w3": ([pixels(4), pixels(5), pixels(6)], [0, 2, 1])})
    _leaf(tmp_path / "test.json", {"w1": ([pixels(7)], [2])})
    leaf = {"path": str(tmp_path / "train"), "test_path": str(tmp_path / "test.json")}
    ds = load_any_dataset("leaf", seed=0, args=leaf)
    assert ds.x_train.shape == (6, 1, 4, 4) and ds.n_test == 1 and ds.num_classes == 3
    assert ds.client_train.tolist() == [0, 0, 1, 2, 2, 2]
    text = tmp_path / "shakespeare.json"
    _leaf(
        text, {"romeo": (["abca", "bcab", "cabc", "abcc"], ["b", "c", "a", "a"]), "juliet": (["ccba"], ["a"])}
    )
    ds = load_any_dataset("leaf", seed=0, args={"path": str(text)}, test_fraction=0.5)
    assert ds.x_train.shape[1:] == (1, 1, 4) and ds.num_classes == 3  # characters a, b, c → 0, 1, 2
    assert ds.n_train + ds.n_test == 5 and ds.n_test == 2  # half of romeo's 4, none of juliet's 1
    assert set(np.unique(ds.x_train)) <= {0.0, 1.0, 2.0}


def test_a_loader_by_import_path_or_registered(monkeypatch):
    ds = load_any_dataset(f"{HERE}:my_loader", seed=0, args={"n": 40, "as_tensors": True})
    assert ds.n_train + ds.n_test == 40 and ds.client_train is not None and ds.x_train.shape[1:] == (1, 3, 4)
    with DATASETS.restored():
        register_dataset("mine")(my_loader)
        assert "mine" in DATASETS and load_config(["data.name=mine"]).data.name == "mine"
        mine = load_any_dataset("mine", seed=0)
        assert mine.name == "mine" and (mine.n_train, mine.n_test) == (30, 10)  # a stratified quarter out
        assert np.array_equal(mine.x_train, load_any_dataset("mine", seed=0).x_train)
        with pytest.raises(ValueError, match="already registered"):
            register_dataset("mine")(my_loader)
        with pytest.raises(DataInputError, match=r"could not be called with data.args"):
            load_any_dataset("mine", seed=0, args={"nope": 1})


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x_train": np.zeros((4, 2))}, "missing y_train"),
        (
            {"x_train": np.zeros((4, 2)), "y_train": np.zeros(3, int)},
            r"expected \(4,\), one label per sample",
        ),
        ({"x_train": np.zeros((4, 2)), "y_train": np.array([0, 1, -1, 1])}, "negative label"),
        ({"x_train": np.full((4, 2), np.nan), "y_train": np.array([0, 1, 0, 1])}, "NaN"),
        ({"x_train": np.zeros((4, 2)), "y_train": np.array([0.5, 1, 0, 1])}, "not integer class labels"),
        (
            {"x_train": np.zeros((4, 2)), "y_train": np.array([0, 1, 0, 1]), "extra": np.zeros(4)},
            "unknown entries",
        ),
    ],
)
def test_bad_arrays_are_refused_with_what_is_wrong(tmp_path, arrays, message):
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(DataInputError, match=message) as info:
        load_any_dataset("arrays", seed=0, args={"path": str(tmp_path / "d.npz")})
    assert info.value.key == "arrays.path"


# ---------------------------------------------------------------------------------------------------------
# The natural partition
# ---------------------------------------------------------------------------------------------------------


def test_natural_gives_each_client_whole_users():
    groups = np.repeat([7, 3, 5, 9], [3, 4, 2, 1])
    labels = np.zeros(groups.size, dtype=np.int64)
    parts = partition_dataset(labels, scheme="natural", num_clients=4, seed=0, groups=groups)
    assert [groups[p].tolist() for p in parts] == [[7, 7, 7], [3, 3, 3, 3], [5, 5], [9]]  # the data's order
    parts = partition_dataset(labels, scheme="natural", num_clients=2, seed=0, groups=groups)
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    owners = [set(groups[p].tolist()) for p in parts]
    assert len(owners[0] | owners[1]) == 4 and not owners[0] & owners[1]  # no user cut in two
    again = partition_dataset(labels, scheme="natural", num_clients=2, seed=0, groups=groups)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    with pytest.raises(PartitionError, match="5 clients but the data has 4 users") as info:
        partition_dataset(labels, scheme="natural", num_clients=5, seed=0, groups=groups)
    assert info.value.key == "clients.num_clients"
    with pytest.raises(PartitionError, match="this data set has none") as info:
        partition_dataset(labels, scheme="natural", num_clients=2, seed=0)
    assert info.value.key == "data.partition"


# ---------------------------------------------------------------------------------------------------------
# The shipped MNIST sample
# ---------------------------------------------------------------------------------------------------------


def test_mnist_sample_is_real_28x28_digits_split_stratified_by_seed():
    ds = load_dataset("mnist_sample", seed=0)
    assert ds.x_train.shape == (3750, 1, 28, 28) and ds.n_test == 1250
    assert np.bincount(ds.y_test).tolist() == [125] * 10
    assert 0.12 < ds.mean < 0.14 and 0.29 < ds.std < 0.32  # MNIST's own 0.1307 / 0.3081, near enough
    other = load_dataset("mnist_sample", seed=1)
    assert np.array_equal(ds.x_test, load_dataset("mnist_sample", seed=0).x_test)
    assert not np.array_equal(ds.x_test, other.x_test)
    with pytest.raises(
        ConfigError, match=r"clients.num_clients: 4000 clients but only 3750 training samples \(data.name"
    ):
        load_config(["data.name=mnist_sample", "clients.num_clients=4000"])


# ---------------------------------------------------------------------------------------------------------
# Runs: end to end with the natural partition; data errors exit 2 with the key and no traceback
# ---------------------------------------------------------------------------------------------------------

RUN = [
    "scenario=quickstart",
    "backend=local",
    "train.rounds=2",
    "arms=[fl,sifl_m1]",
    "coding.key_seed=3",
    "output.progress=false",
    "output.plot=false",
    "output.tensorboard=false",
]


def test_a_leaf_run_with_the_natural_partition(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    users = {
        f"u{k}": (rng.normal(size=(12, 16)).round(3).tolist(), (np.arange(12) % 2).tolist()) for k in range(4)
    }
    _leaf(tmp_path / "leaf.json", users)
    argv = [
        *RUN,
        "data.name=leaf",
        f"leaf.path={tmp_path / 'leaf.json'}",
        "data.partition=natural",
        "train.model=mlp",
    ]
    assert main(["run", *argv, "clients.num_clients=4"]) == 0
    assert "RESULT quickstart fl=" in capsys.readouterr().out
    assert main(["run", *argv, "clients.num_clients=5"]) == 2
    err = capsys.readouterr().err
    assert "clients.num_clients: 5 clients but the data has 4 users" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("setup", "overrides", "expected"),
    [
        (
            None,
            ["data.name=arrays"],
            "arrays.path: data.name=arrays reads a .npz or .pt file, and arrays.path is not set",
        ),
        (
            None,
            ["data.name=leaf", "leaf.path=/no/such/file.json"],
            "leaf.path: /no/such/file.json does not exist",
        ),
        (
            "broken",
            ["data.name=leaf", "leaf.path=broken.json"],
            "leaf.path: broken.json is not readable JSON",
        ),
        (
            "foreign",
            ["data.name=leaf", "leaf.path=foreign.json"],
            "leaf.path: foreign.json is not in LEAF's format",
        ),
        (None, ["data.name=no_such_module_xyz:load"], "data.name: cannot import module 'no_such_module_xyz'"),
        (None, ["data.partition=natural"], "data.partition: natural splits by the data's own client ids"),
    ],
)
def test_data_errors_exit_2_naming_the_key(tmp_path, capsys, monkeypatch, setup, overrides, expected):
    monkeypatch.chdir(tmp_path)
    if setup == "broken":
        (tmp_path / "broken.json").write_text('{"users": [')
    if setup == "foreign":
        (tmp_path / "foreign.json").write_text('{"rows": []}')
    assert main(["run", *RUN, *overrides]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
