"""Datasets, IDX parsing, the verified downloader (against a real loopback HTTP server), partitions,
client sampling and minibatch order."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import inspect
import math
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings

from sifl_ray.data import (
    IDX_FILES,
    PARTITIONERS,
    ChecksumMismatchError,
    Dataset,
    DatasetDownloadError,
    IDXFormatError,
    client_batches,
    encode_idx,
    load_dataset,
    load_digits_dataset,
    load_mnist,
    make_synthetic,
    partition_dataset,
    partition_dirichlet,
    partition_iid,
    partition_shards,
    read_idx,
    register_partitioner,
    sample_clients,
)
from sifl_ray.data.partition import PARTITION_OPTIONS
from sifl_ray.models import build_model
from sifl_ray.seeding import numpy_generator

# ---------------------------------------------------------------------------------------------------------
# IDX files, built by hand with struct (independent of encode_idx)
# ---------------------------------------------------------------------------------------------------------


def _idx_bytes(type_code: int, shape: tuple[int, ...], payload: bytes) -> bytes:
    return (
        struct.pack(">BBBB", 0, 0, type_code, len(shape)) + struct.pack(f">{len(shape)}I", *shape) + payload
    )


def test_read_idx_uint8_images_raw_and_gz(tmp_path: Path) -> None:
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = _idx_bytes(0x08, (2, 3, 4), images.tobytes())
    (tmp_path / "img").write_bytes(raw)
    (tmp_path / "img.gz").write_bytes(gzip.compress(raw))
    for source in (tmp_path / "img", tmp_path / "img.gz", str(tmp_path / "img.gz"), raw, gzip.compress(raw)):
        out = read_idx(source, expected_ndim=3)
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, images)
    assert read_idx(raw).flags.writeable  # callers may normalise in place


def test_read_idx_big_endian_types() -> None:
    ints = read_idx(_idx_bytes(0x0C, (3,), struct.pack(">3i", -1, 2, 70000)))
    np.testing.assert_array_equal(ints, [-1, 2, 70000])
    assert ints.dtype == np.dtype("int32") and ints.dtype.isnative
    doubles = read_idx(_idx_bytes(0x0E, (2, 1), struct.pack(">2d", 0.5, -3.25)))
    np.testing.assert_array_equal(doubles, [[0.5], [-3.25]])
    shorts = read_idx(_idx_bytes(0x0B, (2,), struct.pack(">2h", -300, 300)))
    np.testing.assert_array_equal(shorts, [-300, 300])


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(["uint8", "int8", "int16", "int32", "float32", "float64"]),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple),
    seed=st.integers(0, 2**32 - 1),
)
def test_encode_read_round_trip(dtype: str, shape: tuple[int, ...], seed: int) -> None:
    rng = np.random.default_rng(seed)
    arr = (rng.standard_normal(shape) * 100).astype(dtype)
    back = read_idx(encode_idx(arr))
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    np.testing.assert_array_equal(back, arr)
    np.testing.assert_array_equal(read_idx(gzip.compress(encode_idx(arr))), arr)


def test_encode_idx_matches_the_hand_built_layout() -> None:
    arr = np.array([[1, 2], [3, 4]], dtype=np.int32)
    assert encode_idx(arr) == _idx_bytes(0x0C, (2, 2), struct.pack(">4i", 1, 2, 3, 4))
    with pytest.raises(ValueError, match="cannot store dtype"):
        encode_idx(np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\x00\x08", "too short for an IDX header"),
        (b"PK\x03\x04" + bytes(20), "bad IDX magic 504b0304"),
        (b"\x00\x00\x07\x01" + bytes(8), "bad IDX magic"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x02", "truncated header"),
        (_idx_bytes(0x08, (2, 3, 4), bytes(23)), "truncated: shape (2, 3, 4)"),
        (_idx_bytes(0x08, (2, 3, 4), bytes(25)), "has trailing bytes"),
        (gzip.compress(_idx_bytes(0x08, (4,), bytes(4)))[:-6], "corrupt or truncated gzip"),
    ],
)
def test_read_idx_errors_name_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(content)
    with pytest.raises(IDXFormatError) as err:
        read_idx(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_read_idx_wrong_dimensions() -> None:
    with pytest.raises(IDXFormatError, match=r"labels\.idx: has 3 dimensions, expected 1"):
        read_idx(_idx_bytes(0x08, (1, 1, 1), b"\x00"), expected_ndim=1, name="labels.idx")


# ---------------------------------------------------------------------------------------------------------
# MNIST-like files and a real loopback HTTP server
# ---------------------------------------------------------------------------------------------------------

N_TRAIN, N_TEST = 40, 12


def _mnist_like(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, bytes]]:
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


def _digests(files: dict[str, bytes], algorithm: str = "md5") -> dict[str, str]:
    return {name: hashlib.new(algorithm, data).hexdigest() for name, data in files.items()}


@dataclass
class LoopbackServer:
    """Serves ``files[path]`` at ``http://127.0.0.1:<port>/<path>``; 404 otherwise; records requests."""

    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    delay_s: float = 0.0
    port: int = 0

    def url(self, prefix: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{prefix}"


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # a proxy must not intercept loopback requests
    state = LoopbackServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            state.requests.append(path)
            if state.delay_s:
                time.sleep(state.delay_s)
            body = state.files.get(path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_from_loopback_mirror_verifies_and_loads(tmp_path: Path, loopback: LoopbackServer) -> None:
    arrays, files = _mnist_like()
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
    _, files = _mnist_like(seed=1)
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
    _, files = _mnist_like()
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
    _, files = _mnist_like()
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
    _, files = _mnist_like()
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
    arrays, _ = _mnist_like(seed=2)
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
    _, files = _mnist_like()
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
    arrays, _ = _mnist_like()
    (tmp_path / "mnist").mkdir()
    arrays["train_labels"] = arrays["train_labels"][:-1]
    for role, arr in arrays.items():
        (tmp_path / "mnist" / IDX_FILES[role]).write_bytes(encode_idx(arr))
    with pytest.raises(IDXFormatError, match=f"{N_TRAIN} images but {N_TRAIN - 1} labels"):
        load_mnist(tmp_path, download=False)


# ---------------------------------------------------------------------------------------------------------
# Digits, synthetic data, load_dataset
# ---------------------------------------------------------------------------------------------------------


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

    arrays, _ = _mnist_like()
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


# ---------------------------------------------------------------------------------------------------------
# Partitions
# ---------------------------------------------------------------------------------------------------------


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    every = np.concatenate(parts)
    assert every.dtype == np.int64
    np.testing.assert_array_equal(np.sort(every), np.arange(n))  # each sample once, none missing
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats


def _labels(n: int = 3000, classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.arange(n) % classes)


def test_iid_partition_covers_and_balances() -> None:
    labels = _labels(1003)
    parts = partition_iid(labels, 10, np.random.default_rng(0))
    _assert_exact_cover(parts, labels.size)
    assert {len(p) for p in parts} == {100, 101}
    again = partition_iid(labels, 10, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def _skew(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between a client's label distribution and the global one."""
    k = labels.max() + 1
    overall = np.bincount(labels, minlength=k) / labels.size
    return float(
        np.mean([0.5 * np.abs(np.bincount(labels[p], minlength=k) / len(p) - overall).sum() for p in parts])
    )


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    labels = _labels(5000)
    skews = []
    for alpha in (100.0, 1.0, 0.1):
        parts = partition_dirichlet(labels, 20, alpha, np.random.default_rng(0))
        _assert_exact_cover(parts, labels.size)
        skews.append(_skew(labels, parts))
    assert skews[0] < 0.1 < skews[1] < skews[2]
    assert skews[2] > 0.6
    assert _skew(labels, partition_iid(labels, 20, np.random.default_rng(0))) < 0.1


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(60, 400),  # ≥ clients × min_size, so every draw is feasible
    clients=st.integers(1, 20),
    alpha=st.sampled_from([1e-3, 0.05, 0.5, 5.0]),
    min_size=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_always_covers_and_respects_min_size(
    n: int, clients: int, alpha: float, min_size: int, seed: int
) -> None:
    labels = _labels(n, classes=7, seed=seed % 1000)
    parts = partition_dirichlet(labels, clients, alpha, np.random.default_rng(seed), min_size=min_size)
    assert len(parts) == clients
    _assert_exact_cover(parts, n)
    assert min(len(p) for p in parts) >= min_size


def test_shards_give_few_classes_per_client() -> None:
    labels = _labels(2000)
    parts = partition_shards(labels, 50, 2, np.random.default_rng(0))
    _assert_exact_cover(parts, labels.size)
    assert {len(p) for p in parts} == {40}
    classes_per_client = [len(np.unique(labels[p])) for p in parts]
    assert max(classes_per_client) <= 4 and np.mean(classes_per_client) <= 2.5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda y, g: partition_iid(y, 11, g), "11 clients but only 10 samples"),
        (lambda y, g: partition_iid(y, 0, g), "num_clients must be at least 1"),
        (lambda y, g: partition_dirichlet(y, 2, 0.0, g), "alpha must be a positive finite number; got 0.0"),
        (lambda y, g: partition_dirichlet(y, 2, float("nan"), g), "alpha must be a positive finite"),
        (lambda y, g: partition_dirichlet(y, 4, 1.0, g, min_size=3), "12 samples needed, only 10"),
        (lambda y, g: partition_shards(y, 3, 4, g), "12 shards, more than the 10 samples"),
        (lambda y, g: partition_shards(y, 3, 0, g), "shards_per_client must be at least 1"),
        (lambda y, g: partition_iid(y.reshape(2, 5), 2, g), "labels must be a 1-D array"),
    ],
)
def test_partition_errors(call, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(np.arange(10) % 3, np.random.default_rng(0))


def test_partition_dataset_uses_named_streams() -> None:
    labels = _labels(500)
    a = partition_dataset(labels, scheme="dirichlet", num_clients=5, seed=1, alpha=0.3)
    b = partition_dirichlet(labels, 5, 0.3, numpy_generator(1, "partition", "dirichlet"))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(partition_dataset(labels, scheme="shards", num_clients=5, seed=1)) == 5
    with pytest.raises(ValueError, match="unknown partition scheme 'pathological'"):
        partition_dataset(labels, scheme="pathological", num_clients=5, seed=1)


@pytest.fixture
def restore_partitioners() -> Iterator[None]:
    """Put :data:`PARTITIONERS` back as it was, so a toy scheme registered by a test does not leak."""
    saved = dict(PARTITIONERS)
    yield
    PARTITIONERS.clear()
    PARTITIONERS.update(saved)


def test_a_registered_partitioner_is_accepted_and_unknown_schemes_list_the_registry(
    restore_partitioners: None,
) -> None:
    labels = _labels(103)
    with pytest.raises(
        ValueError, match="unknown partition scheme 'round_robin'; registered: iid, dirichlet, shards"
    ):
        partition_dataset(labels, scheme="round_robin", num_clients=4, seed=1)

    @register_partitioner("round_robin")
    def partition_round_robin(
        labels: np.ndarray, num_clients: int, generator: np.random.Generator
    ) -> list[np.ndarray]:
        """Deal the samples out like cards, starting from a random client."""
        order = np.roll(np.arange(num_clients), int(generator.integers(num_clients)))
        return [np.arange(k, labels.size, num_clients, dtype=np.int64) for k in order]

    # Accepted by name, on its own stream, given none of the options it did not ask for.
    parts = partition_dataset(labels, scheme="round_robin", num_clients=4, seed=1, alpha=0.1)
    _assert_exact_cover(parts, labels.size)
    direct = partition_round_robin(labels, 4, numpy_generator(1, "partition", "round_robin"))
    assert all(np.array_equal(a, b) for a, b in zip(parts, direct, strict=True))

    with pytest.raises(ValueError, match=r"registered: iid, dirichlet, shards, round_robin\. Fix:"):
        partition_dataset(labels, scheme="pathological", num_clients=4, seed=1)
    with pytest.raises(ValueError, match="'round_robin' is already registered"):
        register_partitioner("round_robin")(partition_round_robin)
    with pytest.raises(ValueError, match=r"unknown option.*beta"):
        register_partitioner("skewed", options=("beta",))


def test_partition_options_are_partition_datasets_keywords() -> None:
    """The options a scheme may ask for are exactly the knobs partition_dataset hands out."""
    keywords = [
        p.name
        for p in inspect.signature(partition_dataset).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in ("scheme", "num_clients", "seed")
    ]
    assert keywords == list(PARTITION_OPTIONS)
    assert list(PARTITIONERS) == ["iid", "dirichlet", "shards"]  # the built-ins, in the order shown to users


# ---------------------------------------------------------------------------------------------------------
# Client sampling and minibatches
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("clients", "fraction"), [(10, 1.0), (10, 0.3), (50, 0.1), (7, 0.5), (100, 0.001)])
def test_sample_clients_respects_the_fraction(clients: int, fraction: float) -> None:
    expected = max(1, math.ceil(round(fraction * clients, 9)))
    chosen = sample_clients(clients, fraction, 3, 42)
    assert len(chosen) == expected
    assert np.all(np.diff(chosen) > 0) and chosen.min() >= 0 and chosen.max() < clients
    np.testing.assert_array_equal(chosen, sample_clients(clients, fraction, 3, 42))


def test_sample_clients_varies_by_round_and_is_fair() -> None:
    rounds = [sample_clients(20, 0.25, t, 7) for t in range(400)]
    assert len({tuple(r) for r in rounds}) > 300
    counts = np.bincount(np.concatenate(rounds), minlength=20)
    assert counts.min() > 60 and counts.max() < 140  # 100 expected each
    assert not np.array_equal(sample_clients(20, 0.25, 0, 7), sample_clients(20, 0.25, 0, 8))
    np.testing.assert_array_equal(sample_clients(20, 1.0, 5, 7), np.arange(20))


@pytest.mark.parametrize(("fraction", "round_"), [(0.0, 0), (1.5, 0), (0.5, -1)])
def test_sample_clients_errors(fraction: float, round_: int) -> None:
    with pytest.raises(ValueError):
        sample_clients(10, fraction, round_, 0)


def test_client_batches_epochs_cover_each_sample_once_per_epoch() -> None:
    idx = np.arange(100, 123)
    batches = client_batches(idx, batch_size=5, epochs=2, seed=0, client_id=3, round=4)
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3] * 2
    for epoch in (batches[:5], batches[5:]):
        np.testing.assert_array_equal(np.sort(np.concatenate(epoch)), idx)
    assert not np.array_equal(np.concatenate(batches[:5]), np.concatenate(batches[5:]))
    dropped = client_batches(idx, batch_size=5, epochs=2, seed=0, client_id=3, round=4, drop_last=True)
    assert [len(b) for b in dropped] == [5] * 8


def test_client_batches_are_deterministic_per_seed_client_and_round() -> None:
    idx = np.arange(50)

    def order(**kw: int) -> np.ndarray:
        args = {"seed": 1, "client_id": 2, "round": 3, **kw}
        return np.concatenate(client_batches(idx, batch_size=8, epochs=1, **args))

    np.testing.assert_array_equal(order(), order())
    assert not np.array_equal(order(), order(round=4))
    assert not np.array_equal(order(), order(client_id=5))
    assert not np.array_equal(order(), order(seed=9))
    assert not np.array_equal(order(), idx)  # actually shuffled


def test_client_batches_steps_run_across_epochs() -> None:
    idx = np.arange(10)
    batches = client_batches(idx, batch_size=4, steps=7, seed=0, client_id=0, round=0)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2, 4]
    same_start = client_batches(idx, batch_size=4, epochs=2, seed=0, client_id=0, round=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches[:6], same_start, strict=True))
    # The scenario convention: positive steps win over epochs; steps=0 means "use epochs".
    both = client_batches(idx, batch_size=4, epochs=1, steps=7, seed=0, client_id=0, round=0)
    assert all(np.array_equal(a, b) for a, b in zip(both, batches, strict=True))
    zero = client_batches(idx, batch_size=4, epochs=2, steps=0, seed=0, client_id=0, round=0)
    assert all(np.array_equal(a, b) for a, b in zip(zero, same_start, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give epochs >= 1 or steps >= 1"),
        ({"epochs": 0}, "give epochs >= 1 or steps >= 1"),
        ({"epochs": 0, "steps": 0}, "give epochs >= 1 or steps >= 1"),
        ({"epochs": 1, "steps": -1}, "steps must be non-negative"),
        ({"epochs": 1, "batch_size": 0}, "batch_size must be at least 1"),
        ({"epochs": 1, "batch_size": 20, "drop_last": True}, "fewer than batch_size 20"),
    ],
)
def test_client_batches_errors(kwargs: dict, message: str) -> None:
    args = {"batch_size": 4, "seed": 0, "client_id": 0, "round": 0, **kwargs}
    with pytest.raises(ValueError, match=message):
        client_batches(np.arange(10), **args)
    with pytest.raises(ValueError, match="client 0 has no samples"):
        client_batches(np.array([], dtype=np.int64), batch_size=4, epochs=1, seed=0, client_id=0, round=0)
