"""IDX files: parsing (hand-built files, independent of encode_idx), strict errors, and the round trip."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from sifl_ray.data import (
    IDXFormatError,
    encode_idx,
    read_idx,
)
from sifl_ray.data.idx import check_idx_file


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
        (gzip.compress(_idx_bytes(0x08, (4,), bytes(4)), mtime=0)[:-6], "corrupt or truncated gzip"),
    ],
    # ids from the messages: a gzip header holds its time, and the two processes of the suite must collect
    # the same ids (pytest-xdist refuses to run when they differ)
    ids=lambda value: value if isinstance(value, str) else "",
)
@pytest.mark.parametrize("reader", [read_idx, check_idx_file], ids=["read_idx", "check_idx_file"])
def test_read_idx_errors_name_the_file(tmp_path: Path, content: bytes, message: str, reader) -> None:
    """``check_idx_file`` (the pre-flight check: header and length, nothing kept) refuses what ``read_idx``
    refuses, raw or compressed."""
    path = tmp_path / "train-images-idx3-ubyte"
    compressed_too = reader is check_idx_file and not content.startswith(b"\x1f\x8b")
    for data in (content, gzip.compress(content)) if compressed_too else (content,):
        path.write_bytes(data)
        with pytest.raises(IDXFormatError) as err:
            reader(path)
        assert message in str(err.value)
        assert str(path) in str(err.value)


def test_check_idx_file_reads_the_declared_shape_raw_and_compressed(tmp_path: Path) -> None:
    arr = np.arange(5 * 28 * 28, dtype=np.uint8).reshape(5, 28, 28)
    (tmp_path / "raw").write_bytes(encode_idx(arr))
    (tmp_path / "gz").write_bytes(gzip.compress(encode_idx(arr)))
    assert check_idx_file(tmp_path / "raw", expected_ndim=3) == (5, 28, 28)
    assert check_idx_file(tmp_path / "gz") == (5, 28, 28)
    with pytest.raises(IDXFormatError, match="has 3 dimensions, expected 1"):
        check_idx_file(tmp_path / "gz", expected_ndim=1)


def test_read_idx_wrong_dimensions() -> None:
    with pytest.raises(IDXFormatError, match=r"labels\.idx: has 3 dimensions, expected 1"):
        read_idx(_idx_bytes(0x08, (1, 1, 1), b"\x00"), expected_ndim=1, name="labels.idx")
