"""The fast backend's transform Q: orthogonal, and mixing — every output depends on every input
(docs/method.md "Mixing"), structurally (support propagation) and numerically, for powers of two and not."""

from __future__ import annotations

import math

import pytest
import torch
from coding_cases import make_key, rand
from hypothesis import given, settings
from hypothesis import strategies as st

from sifl_ray.coding import transform as T
from sifl_ray.coding._common import KeyStream
from sifl_ray.coding.transform import (
    Givens,
    Permutation,
    SignedHadamard,
    StructuredOrthogonal,
    fwht_,
    head_length,
)

# powers of two, their neighbours, primes (199,411 is one), ñ − n = 1 sizes
SMALL_SIZES = [
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    15,
    16,
    17,
    31,
    33,
    63,
    64,
    65,
    100,
    127,
    129,
    255,
    257,
    331,
    512,
    513,
    997,
]


def transform(size: int, seed: int = 0, **kwargs) -> StructuredOrthogonal:
    return StructuredOrthogonal.random(size, KeyStream(seed, "test-transform", size), "Q", **kwargs)


def hadamard(length: int) -> torch.Tensor:
    H = torch.ones(1, 1, dtype=torch.float64)
    while H.shape[0] < length:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H


@pytest.mark.parametrize("length", [1, 2, 4, 8, 64, 1024])
@pytest.mark.parametrize("cols", [None, 1, 2, 3])
def test_fwht_is_the_hadamard_matrix(length, cols):
    x = rand((length,) if cols is None else (length, cols), length)
    expected = hadamard(length) @ x
    assert torch.allclose(fwht_(x.clone()), expected, rtol=0, atol=1e-12 * length)


def level_by_level(x: torch.Tensor) -> torch.Tensor:
    """The butterflies one level after the other over the whole array: the order fwht_'s blocks keep."""
    flat = x.reshape(-1)
    T._levels(flat, flat.numel() // x.shape[0], 1, x.shape[0])
    return x


@pytest.mark.parametrize("block", [2, 8, 96])
@pytest.mark.parametrize("length", [1, 2, 16, 4096])
@pytest.mark.parametrize("cols", [None, 1, 3])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_fwht_in_blocks_gives_the_same_bits_as_level_by_level(monkeypatch, block, length, cols, dtype):
    """The cache-sized blocks change which element is updated when, never what it is added to: equal to the
    bit, for blocks below, across and above the complex128 level (stride 2) and a block size that is not a
    power of two (96: the blocks are 64 rows)."""
    monkeypatch.setattr(T, "fwht_block_elems", lambda: block)
    x = rand((length,) if cols is None else (length, cols), length).to(dtype)
    assert torch.equal(fwht_(x.clone()), level_by_level(x.clone()))


@pytest.mark.parametrize("cols", [None, 2])
def test_fwht_of_a_paper_sized_head_is_level_by_levels_to_the_bit(cols):
    """This CPU's own block size (read from its L2) on a head of four blocks or more: 2¹⁹ rows where the
    block is 1 MiB, the size between the MLP's L = 2¹⁷ and the CNN's 2²⁰."""
    length = max(1 << 19, 4 * T.fwht_block_elems())
    x = rand((length,) if cols is None else (length, cols), 7)
    assert torch.equal(fwht_(x.clone()), level_by_level(x.clone()))


def cache_tree(root, caches: list[tuple[str, str, str]]):
    """A directory laid out as Linux's /sys/devices/system/cpu/cpu0/cache: (level, type, size) each."""
    for i, (level, kind, size) in enumerate(caches):
        index = root / f"index{i}"
        index.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (index / name).write_text(text + "\n")
    return str(root)


@pytest.mark.parametrize(
    ("caches", "elems"),
    [
        ([("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K")], 1 << 17),
        ([("1", "Data", "32K"), ("2", "Unified", "1024K"), ("3", "Unified", "32768K")], 1 << 16),
        ([("2", "Unified", "1280K")], 1 << 16),  # 640 KiB of doubles, down to a power of two
        ([("2", "Unified", "2M")], 1 << 17),
        ([("1", "Data", "48K")], T._FWHT_BLOCK_ELEMS),  # no L2 said: the default
        ([("2", "Unified", "a lot")], T._FWHT_BLOCK_ELEMS),
        ([("2", "Unified", "8K")], T._FWHT_BLOCK_ELEMS),  # too small to be an L2: the default
    ],
)
def test_the_fwht_block_is_half_the_l2_linux_reports(tmp_path, caches, elems):
    assert T.fwht_block_elems.__wrapped__(cache_tree(tmp_path, caches)) == elems


def test_without_a_cache_directory_the_fwht_block_is_the_default(tmp_path):
    assert T.fwht_block_elems.__wrapped__(str(tmp_path / "missing")) == T._FWHT_BLOCK_ELEMS


@pytest.mark.parametrize("size", SMALL_SIZES)
def test_orthogonal_and_transpose(size):
    Q = transform(size, seed=size)
    M = Q.dense()
    eye = torch.eye(size, dtype=torch.float64)
    assert (M.T @ M - eye).abs().max() < 1e-13
    assert torch.allclose(Q.apply_t(eye), M.T, rtol=0, atol=1e-14)
    x = rand(size, 1)
    x_copy = x.clone()
    assert torch.allclose(Q.apply_t(Q.apply(x)), x, rtol=0, atol=1e-13)
    assert torch.equal(x, x_copy)  # inputs are never modified


@pytest.mark.parametrize("size", SMALL_SIZES)
@pytest.mark.parametrize("rounds", [1, 2])
def test_full_mixing_small(size, rounds):
    """Every entry of Q is structurally and numerically nonzero: each output depends on each input."""
    Q = transform(size, seed=3 * size + rounds, rounds=rounds)
    support = Q.support(torch.eye(size, dtype=torch.bool))
    assert bool(support.all())
    assert float(Q.dense().abs().min()) > 1e-9 / math.sqrt(size)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 3000), seed=st.integers(0, 2**20), perm_block=st.sampled_from([1, 16]))
def test_full_mixing_any_size(size, seed, perm_block):
    """Unit vectors at sampled input coordinates reach every output, numerically and structurally."""
    Q = transform(size, seed=seed, perm_block=perm_block)
    gen = torch.Generator().manual_seed(seed)
    cols = torch.randint(0, size, (min(size, 8),), generator=gen)
    E = torch.zeros(size, cols.numel(), dtype=torch.float64)
    E[cols, torch.arange(cols.numel())] = 1.0
    assert bool(Q.support(E != 0).all())
    assert bool((Q.apply(E) != 0).all())
    assert bool((Q.apply_t(E) != 0).all())  # and every input reaches every output of Qᵀ


@pytest.mark.parametrize("size", [199_411, 582_539, 1_200_011])
def test_full_mixing_paper_sizes(size):
    """The paper's ñ (199,411 is prime): sampled inputs reach all outputs, structurally and numerically."""
    Q = transform(size, seed=1)
    E = torch.zeros(size, 3, dtype=torch.float64)
    E[[0, size // 2, size - 1], [0, 1, 2]] = 1.0
    assert bool(Q.support(E != 0).all())
    assert bool((Q.apply(E) != 0).all())


def test_mixing_checks_can_fail():
    """Negative controls: a chunked Hadamard (block-diagonal in disguise) and the design without G2 or
    without G1 are caught by the same support check."""
    size, length = 48, 32
    stream = KeyStream(0, "control")
    ident = Permutation(torch.arange(size, dtype=torch.int32), torch.arange(size, dtype=torch.int32))
    signs = SignedHadamard(stream.signs("d", length) / math.sqrt(length))
    g = transform(size).layers[1]
    assert isinstance(g, Givens)
    eye = torch.eye(size, dtype=torch.bool)
    chunked = StructuredOrthogonal(
        size, (ident, SignedHadamard(torch.ones(8, dtype=torch.float64)), ident)
    )  # H on the first 8 coordinates only
    no_g2 = StructuredOrthogonal(size, (ident, g, signs, ident))
    no_g1 = StructuredOrthogonal(size, (ident, signs, g, ident))
    full = StructuredOrthogonal(size, (ident, g, signs, g, ident))
    assert not bool(chunked.support(eye).all())
    assert not bool(no_g2.support(eye).all())
    assert not bool(no_g1.support(eye).all())
    assert bool(full.support(eye).all())
    assert bool((full.dense() != 0).all()) and not bool((no_g2.dense() != 0).all())


@pytest.mark.parametrize("n, m", [(1, 1), (5, 1), (63, 1), (64, 1), (200, 1), (30, 70), (1000, 24)])
def test_key_maps_mix_fully(n, m):
    """Every coordinate of the encoding depends on every model coordinate and every noise coordinate,
    including ñ − n = 1; the oblique map K is dense too."""
    key = make_key("fast", "oblique", n=n, m=m, seed=n)
    P1, P1L, N1 = key.dense()
    assert bool((P1 != 0).all()) and bool((N1 != 0).all()) and bool((P1L != 0).all())
    K = key.core.K.apply(torch.eye(m, dtype=torch.float64))
    assert bool((K != 0).all())
    assert math.isclose(float(torch.linalg.matrix_norm(K, 2)), key.kappa, rel_tol=1e-12)


def test_layout():
    """1 ≤ r ≤ L: each tail coordinate gets its own head partner in G1/G2, powers of two included."""
    assert head_length(1) == 1
    for size in (2, 3, 4, 5, 1024, 1025, 199_411, 1_200_011):
        length = head_length(size)
        assert length & (length - 1) == 0 and 1 <= size - length <= length
