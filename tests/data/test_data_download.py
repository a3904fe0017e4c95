"""MNIST and Fashion-MNIST files: local lookup, checksums, and the verified downloader against a real
loopback HTTP server."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import pytest
from data_cases import N_TRAIN, LoopbackServer, mnist_like

from sifl_ray.data import (
    IDX_FILES,
    ChecksumMismatchError,
    DatasetDownloadError,
    IDXFormatError,
    encode_idx,
    load_mnist,
)


def _digests(files: dict[str, bytes], algorithm: str = "md5") -> dict[str, str]:
    return {name: hashlib.new(algorithm, data).hexdigest() for name, data in files.items()}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_from_loopback_mirror_verifies_and_loads(tmp_path: Path, loopback: LoopbackServer) -> None:
    arrays, files = mnist_like()
    loopback.files = {f"mnist/{k}": v for k, v in files.items()}
    ds = load_mnist(tmp_path, mirrors=[loopback.url("mnist/")], checksums=_digests(files), standardize=False)
    assert sorted(loopback.requests) == sorted(f"mnist/{k}" for k in files)
    assert _leftovers(tmp_path / "mnist") == sorted(files)  # verified files only, no .part left
    assert ds.name == "mnist" and ds.num_classes == 10
    assert ds.x_train.shape == (N_TRAIN, 1, 28, 28) and ds.x_train.dtype == np.float32
    assert ds.y_test.dtype == np.int64
    np.testing.assert_allclose(ds.x_train[:, 0], arrays["train_images"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_train, arrays["train_labels"])
    np.testing.assert_array_equal(ds.y_test, arrays["test_labels"])

    # A second call finds the files on disk and does not touch the network.
    loopback.requests.clear()
    again = load_mnist(tmp_path, mirrors=[loopback.url("mnist/")], checksums=_digests(files), download=False)
    assert loopback.requests == []
    assert again.x_train.mean(dtype=np.float64) == pytest.approx(0.0, abs=1e-5)
    assert again.x_train.std(dtype=np.float64) == pytest.approx(1.0, abs=1e-4)
    assert again.mean == pytest.approx((arrays["train_images"] / 255.0).mean())


def test_download_accepts_sha256_and_falls_back_to_the_next_mirror(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    _, files = mnist_like(seed=1)
    loopback.files = {f"good/{k}": v for k, v in files.items()}
    ds = load_mnist(
        tmp_path,
        kind="fashion_mnist",
        mirrors=[loopback.url("missing/"), loopback.url("good")],  # "good" without slash on purpose
        checksums=_digests(files, "sha256"),
    )
    assert ds.name == "fashion_mnist"
    assert {r.split("/")[0] for r in loopback.requests} == {"missing", "good"}
    assert _leftovers(tmp_path / "fashion_mnist") == sorted(files)


def test_corrupted_download_is_rejected_and_leaves_nothing(tmp_path: Path, loopback: LoopbackServer) -> None:
    _, files = mnist_like()
    bad_name = "train-images-idx3-ubyte.gz"
    corrupted = bytearray(files[bad_name])
    corrupted[len(corrupted) // 2] ^= 0xFF
    loopback.files = {**files, bad_name: bytes(corrupted)}
    expected = _digests(files)
    with pytest.raises(ChecksumMismatchError) as err:
        load_mnist(tmp_path, mirrors=[loopback.url()], checksums=expected)
    message = str(err.value)
    assert bad_name in message
    assert expected[bad_name] in message
    assert hashlib.md5(bytes(corrupted)).hexdigest() in message
    assert "Fix:" in message and "no copy of it was kept" in message
    assert bad_name not in _leftovers(tmp_path / "mnist")
    assert not any(name.endswith(".part") for name in _leftovers(tmp_path / "mnist"))


def test_default_tables_hold_the_published_checksums(tmp_path: Path, loopback: LoopbackServer) -> None:
    """Without ``checksums=`` the published MD5s are enforced: our generated files must be refused, and
    the message must quote the well-known digest of the real file."""
    _, files = mnist_like()
    loopback.files = dict(files)
    for kind, published in (
        ("mnist", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        ("fashion_mnist", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    ):
        with pytest.raises(ChecksumMismatchError, match=published):
            load_mnist(tmp_path, kind=kind, mirrors=[loopback.url()])
        assert _leftovers(tmp_path / kind) == []


def test_unreachable_and_silent_mirrors_fail_clearly_and_boundedly(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    _, files = mnist_like()
    with pytest.raises(DatasetDownloadError) as err:
        load_mnist(tmp_path, mirrors=[loopback.url("nowhere/")], checksums=_digests(files))
    assert "404" in str(err.value) and "train-images-idx3-ubyte.gz" in str(err.value)
    assert not isinstance(err.value, ChecksumMismatchError)

    loopback.files = dict(files)
    loopback.delay_s = 1.0
    start = time.perf_counter()
    with pytest.raises(DatasetDownloadError, match="timed out"):
        load_mnist(tmp_path, mirrors=[loopback.url()], checksums=_digests(files), timeout=0.2)
    assert time.perf_counter() - start < 5
    assert _leftovers(tmp_path / "mnist") == []


def test_local_folder_without_network(tmp_path: Path) -> None:
    """Uncompressed files in torchvision's layout load with download=False and no server at all."""
    arrays, _ = mnist_like(seed=2)
    folder = tmp_path / "FashionMNIST" / "raw"
    folder.mkdir(parents=True)
    for role, arr in arrays.items():
        (folder / IDX_FILES[role]).write_bytes(encode_idx(arr))
    ds = load_mnist(tmp_path, kind="fashion_mnist", download=False, mirrors=[], standardize=False)
    np.testing.assert_allclose(ds.x_test[:, 0], arrays["test_images"] / 255.0, rtol=1e-6)
    # The two datasets share file names, so MNIST must not pick up Fashion-MNIST's files.
    with pytest.raises(FileNotFoundError, match=r"mnist: missing train-images-idx3-ubyte.*download=True"):
        load_mnist(tmp_path, kind="mnist", download=False)


def test_local_gz_with_wrong_checksum_is_refused_and_kept(tmp_path: Path) -> None:
    _, files = mnist_like()
    (tmp_path / "mnist").mkdir()
    for name, data in files.items():
        (tmp_path / "mnist" / name).write_bytes(data)
    checksums = {**_digests(files), "t10k-labels-idx1-ubyte.gz": "0" * 32}
    with pytest.raises(
        ChecksumMismatchError, match=r"t10k-labels-idx1-ubyte\.gz: md5 is [0-9a-f]{32}.*delete it"
    ):
        load_mnist(tmp_path, download=False, checksums=checksums)
    assert (
        tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    ).exists()  # the user's file is not ours to delete


def test_inconsistent_local_files_are_refused(tmp_path: Path) -> None:
    arrays, _ = mnist_like()
    (tmp_path / "mnist").mkdir()
    arrays["train_labels"] = arrays["train_labels"][:-1]
    for role, arr in arrays.items():
        (tmp_path / "mnist" / IDX_FILES[role]).write_bytes(encode_idx(arr))
    with pytest.raises(IDXFormatError, match=f"{N_TRAIN} images but {N_TRAIN - 1} labels"):
        load_mnist(tmp_path, download=False)
