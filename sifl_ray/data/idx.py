"""IDX files, the format of MNIST and Fashion-MNIST: a strict reader and its inverse.

The format (LeCun's MNIST page) is a small header followed by the values, big-endian; a file may be
gzip-compressed. Nothing here touches the network or knows which dataset a file belongs to.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

from sifl_ray.errors import SiflError

__all__ = ["IDXFormatError", "check_idx_file", "encode_idx", "read_idx"]


class IDXFormatError(SiflError, ValueError):
    """An IDX file is malformed (bad magic, unknown type, truncated, trailing bytes, wrong dimensions)."""


_IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES = {dt.newbyteorder(">") if dt.itemsize > 1 else dt: code for code, dt in _IDX_TYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


def read_idx(
    source: str | os.PathLike[str] | bytes,
    *,
    expected_ndim: int | None = None,
    name: str | None = None,
) -> np.ndarray:
    """Parse an IDX file (gzip-compressed or raw; detected from the content, not the file name).

    The format (LeCun's MNIST page): two zero bytes, a type code, the number of dimensions, one big-endian
    uint32 per dimension, then the values in C order, big-endian. Parsing is strict: anything left over or
    missing is an error, because a silently truncated training set would quietly change every result.

    Args:
        source: a path, or the file's bytes.
        expected_ndim: if given, the number of dimensions the file must have (3 for images, 1 for labels).
        name: how to call the file in error messages (defaults to the path, or ``"<bytes>"``).

    Returns:
        The array, in native byte order (uint8 for MNIST).

    Raises:
        IDXFormatError: the content is not a well-formed IDX file (the message names the file).
        FileNotFoundError: ``source`` is a path that does not exist.
    """
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        label = name or "<bytes>"
    else:
        label = name or str(source)
        data = Path(source).read_bytes()
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise IDXFormatError(f"{label}: corrupt or truncated gzip stream ({e})") from e
    dtype, shape, header = _parse_header(data[:_MAX_HEADER], len(data), label, expected_ndim)
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def check_idx_file(path: str | os.PathLike[str], *, expected_ndim: int | None = None) -> tuple[int, ...]:
    """The shape a well-formed IDX file at ``path`` declares, checked against its length; nothing is kept.

    What :func:`read_idx` would refuse for the header and the length, at the cost of reading the header
    (a raw file) or of streaming the decompression (a ``.gz``), never of holding the values: a run's
    pre-flight check (:mod:`sifl_ray.data.preflight`) uses it to answer a truncated or foreign file before
    any work starts.

    Raises:
        IDXFormatError: as :func:`read_idx` for the header and the length.
        FileNotFoundError: ``path`` does not exist.
    """
    label = str(path)
    with Path(path).open("rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
    if not compressed:
        with Path(path).open("rb") as f:
            head = f.read(_MAX_HEADER)
        _, shape, _ = _parse_header(head, Path(path).stat().st_size, label, expected_ndim)
        return shape
    size = 0
    head = b""
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                if len(head) < _MAX_HEADER:
                    head += chunk[: _MAX_HEADER - len(head)]
                size += len(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise IDXFormatError(f"{label}: corrupt or truncated gzip stream ({e})") from e
    _, shape, _ = _parse_header(head, size, label, expected_ndim)
    return shape


_MAX_HEADER = 4 + 4 * 255  # magic, then at most 255 big-endian uint32 dimensions


def _parse_header(
    head: bytes, size: int, label: str, expected_ndim: int | None
) -> tuple[np.dtype, tuple[int, ...], int]:
    """``(dtype, shape, header length)`` of a file of ``size`` bytes that begins with ``head``; a header
    that is malformed or a size that is not the one the header declares is an :class:`IDXFormatError`."""
    if size < 4:
        raise IDXFormatError(f"{label}: {size} bytes is too short for an IDX header")
    if head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES:
        raise IDXFormatError(
            f"{label}: bad IDX magic {head[:4].hex()}: expected 0000 then a type code in "
            f"{{{', '.join(f'{c:02x}' for c in _IDX_TYPES)}}} and the number of dimensions; "
            "is this really an IDX file?"
        )
    dtype, ndim = _IDX_TYPES[head[2]], head[3]
    if expected_ndim is not None and ndim != expected_ndim:
        raise IDXFormatError(f"{label}: has {ndim} dimensions, expected {expected_ndim}")
    header = 4 + 4 * ndim
    if size < header:
        raise IDXFormatError(f"{label}: truncated header ({size} bytes, {header} needed for {ndim} dims)")
    shape = tuple(int.from_bytes(head[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + math.prod(shape) * dtype.itemsize
    if size != expected:
        what = "truncated" if size < expected else "has trailing bytes"
        raise IDXFormatError(
            f"{label}: {what}: shape {shape} of {dtype} needs {expected} bytes, the file has {size}"
        )
    return dtype, shape, header


def encode_idx(array: np.ndarray) -> bytes:
    """The raw IDX bytes of ``array`` (uint8, int8, int16, int32, float32 or float64), the inverse of
    :func:`read_idx`. Useful to cache a subset or to build test fixtures."""
    arr = np.asarray(array)
    big = arr.dtype.newbyteorder(">") if arr.dtype.itemsize > 1 else arr.dtype
    if big not in _IDX_CODES:
        raise ValueError(
            f"IDX cannot store dtype {arr.dtype}; use one of uint8, int8, int16, int32, float32, float64"
        )
    if arr.ndim > 255 or any(s >= 2**32 for s in arr.shape):
        raise ValueError(f"IDX cannot store shape {arr.shape}")
    head = bytes([0, 0, _IDX_CODES[big], arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    return head + np.ascontiguousarray(arr, dtype=big).tobytes()
