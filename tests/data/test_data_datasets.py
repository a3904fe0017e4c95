"""Datasets: the Dataset value, digits, synthetic data, load_dataset's dispatch and subsampling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from data_cases import N_TRAIN, mnist_like

from sifl_ray.data import (
    IDX_FILES,
    Dataset,
    client_batches,
    encode_idx,
    load_dataset,
    load_digits_dataset,
    make_synthetic,
)
from sifl_ray.models import build_model
from sifl_ray.seeding import numpy_generator


def test_digits_split_is_stratified_deterministic_and_standardised() -> None:
    ds = load_digits_dataset(test_fraction=0.25, generator=numpy_generator(0, "data", "digits_split"))
    again = load_digits_dataset(test_fraction=0.25, generator=numpy_generator(0, "data", "digits_split"))
    other = load_digits_dataset(test_fraction=0.25, generator=numpy_generator(1, "data", "digits_split"))
    assert ds.n_train + ds.n_test == 1797 and ds.input_shape == (1, 8, 8)
    assert ds.n_test == pytest.approx(0.25 * 1797, abs=10)
    np.testing.assert_array_equal(ds.x_test, again.x_test)
    assert not np.array_equal(ds.y_test, other.y_test)
    train_share = np.bincount(ds.y_train, minlength=10) / ds.n_train
    test_share = np.bincount(ds.y_test, minlength=10) / ds.n_test
    np.testing.assert_allclose(train_share, test_share, atol=0.01)
    assert abs(float(ds.x_train.mean())) < 1e-5 and float(ds.x_train.std()) == pytest.approx(1.0, abs=1e-4)
    raw = load_digits_dataset(test_fraction=0.25, generator=numpy_generator(0, "x"), standardize=False)
    assert raw.x_train.min() == 0.0 and raw.x_train.max() == 1.0 and raw.std == 1.0


def test_digits_are_read_without_scikit_learn_and_equal_load_digits(monkeypatch) -> None:
    """The digits come from scikit-learn's bundled file without importing scikit-learn (~1 s), and are
    exactly what ``load_digits`` returns; if the file is not there, ``load_digits`` itself is used."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from sifl_ray.data import datasets

    pixels, target = datasets._digits_arrays()
    bunch = load_digits()
    assert pixels.dtype == bunch.images.dtype and np.array_equal(pixels, bunch.images)
    assert target.dtype == bunch.target.dtype and np.array_equal(target, bunch.target)
    code = (
        "import sys; from sifl_ray.data import load_digits_dataset; from sifl_ray.seeding import "
        "numpy_generator as g; load_digits_dataset(generator=g(0, 'd')); print('sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]
    monkeypatch.setattr(datasets.importlib.util, "find_spec", lambda name: None)
    fallback_pixels, fallback_target = datasets._digits_arrays()
    assert np.array_equal(fallback_pixels, pixels) and np.array_equal(fallback_target, target)


def test_synthetic_is_deterministic_balanced_and_image_like() -> None:
    a = make_synthetic(n_train=200, n_test=50, generator=np.random.default_rng(3), standardize=False)
    b = make_synthetic(n_train=200, n_test=50, generator=np.random.default_rng(3), standardize=False)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (200, 1, 28, 28) and a.x_test.shape == (50, 1, 28, 28)
    assert a.x_train.min() > 0.0 and a.x_train.max() < 1.0
    np.testing.assert_array_equal(np.bincount(a.y_train), np.full(10, 20))


def _fit_and_score(ds: Dataset, model: str, epochs: int, lr: float = 0.05) -> float:
    net = build_model(
        model, input_shape=ds.input_shape, num_classes=ds.num_classes, generator=torch.Generator()
    )
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    x, y = torch.from_numpy(ds.x_train), torch.from_numpy(ds.y_train)
    for epoch in range(epochs):
        for batch in client_batches(
            np.arange(ds.n_train), batch_size=32, epochs=1, seed=0, client_id=0, round=epoch
        ):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            opt.step()
    with torch.no_grad():
        return float((net(torch.from_numpy(ds.x_test)).argmax(1).numpy() == ds.y_test).mean())


def test_synthetic_data_is_learnable() -> None:
    ds = make_synthetic(n_train=1500, n_test=500, shape=(1, 16, 16), generator=np.random.default_rng(0))
    assert _fit_and_score(ds, "digits_mlp", epochs=3) > 0.6  # chance is 0.1
    # Labels carry the signal: with permuted labels the same model stays near chance.
    shuffled = Dataset(
        name="shuffled",
        x_train=ds.x_train,
        y_train=np.random.default_rng(1).permutation(ds.y_train),
        x_test=ds.x_test,
        y_test=ds.y_test,
        num_classes=10,
    )
    assert _fit_and_score(shuffled, "digits_mlp", epochs=3) < 0.25


def test_load_dataset_dispatch_and_subsampling(tmp_path: Path) -> None:
    digits = load_dataset("digits", seed=5, limit_train=300, limit_test=100)
    assert (digits.n_train, digits.n_test, digits.name) == (300, 100, "digits")
    again = load_dataset("digits", seed=5, limit_train=300, limit_test=100)
    np.testing.assert_array_equal(digits.x_train, again.x_train)
    full = load_dataset("digits", seed=5)
    assert full.mean == digits.mean  # a subset keeps the full set's transform

    syn = load_dataset("synthetic", seed=5, synthetic_train=120, synthetic_test=30, synthetic_shape=(1, 8, 8))
    assert syn.x_train.shape == (120, 1, 8, 8) and syn.n_test == 30
    assert not np.array_equal(
        syn.x_train,
        load_dataset(
            "synthetic", seed=6, synthetic_train=120, synthetic_test=30, synthetic_shape=(1, 8, 8)
        ).x_train,
    )

    arrays, _ = mnist_like()
    (tmp_path / "mnist").mkdir()
    for role, arr in arrays.items():
        (tmp_path / "mnist" / IDX_FILES[role]).write_bytes(encode_idx(arr))
    mnist = load_dataset("mnist", seed=0, root=tmp_path, download=False)
    assert mnist.x_train.shape == (N_TRAIN, 1, 28, 28)

    with pytest.raises(ValueError, match="needs root="):
        load_dataset("mnist", seed=0)
    with pytest.raises(ValueError, match="unknown dataset 'cifar'"):
        load_dataset("cifar", seed=0)


def test_dataset_value_checks_its_arrays() -> None:
    x, y = np.zeros((3, 1, 2, 2), np.float32), np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="must be float32"):
        Dataset("d", x.astype(np.float64), y, x, y, num_classes=2)
    with pytest.raises(ValueError, match="must be int64"):
        Dataset("d", x, y[:2], x, y, num_classes=2)
    with pytest.raises(ValueError, match="labels outside"):
        Dataset("d", x, y + 2, x, y, num_classes=2)
