"""Named, derived random streams: every stream comes from a seed and its own name.

Why: a Ray run, an in-process run and a resumed run must draw the same numbers (data split, model init,
minibatches per client per round, each party's noise). Deriving each stream from ``(seed, *names)`` through
SHA-256 makes a stream independent of the order in which other streams are used, and of which process
uses it.

Two kinds of seed. The public run seed (an integer in the configuration) drives what needs no secrecy: data,
initial model, minibatches. A party's noise is the secret that protects its release: whoever knows the seed
of a noise stream subtracts the noise and holds the release without it, whatever σ. So noise streams come
only from a party's secret seed (:func:`sifl_ray.party_seeds.party_seed`: 256 bits from the operating system,
or derived from ``coding.key_seed`` for reproducible simulations, not secret) and carry at least 128 bits of
it: :func:`noise_generator` (the SIFL parties' ``r1``, ``R1``, ``R2``) and :func:`secret_torch_generator`
(NbAFL's client noise, drawn by ``torch.randn``). ``torch.Generator.manual_seed`` takes 64 bits, which
would cap the secret at 2^64 guesses; :func:`torch_generator` is for the public streams only.
"""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def derive_bytes(seed: int | bytes, *names: object, nbytes: int = 32) -> bytes:
    """Return ``nbytes`` pseudo-random bytes determined by ``seed`` and the ``names`` path: block ``i`` (32
    bytes) is SHA-256 of the seed's bytes, each name after a zero byte, and ``i`` (4 bytes, little-endian).

    The common prefix is hashed once and copied for each block (a whole Mersenne Twister state, 2,496 bytes,
    is 78 blocks: 69 → 27 µs a stream), the same bytes as hashing each block's message whole
    (``tests/test_noise_seeds.py``)."""
    base = seed if isinstance(seed, bytes) else int(seed).to_bytes(16, "little", signed=True)
    prefix = hashlib.sha256(base)
    for name in names:
        prefix.update(b"\x00")
        prefix.update(str(name).encode())
    blocks = []
    for counter in range(-(-nbytes // 32)):
        block = prefix.copy()
        block.update(counter.to_bytes(4, "little"))
        blocks.append(block.digest())
    return b"".join(blocks)[:nbytes]


def derive_seed(seed: int | bytes, *names: object) -> int:
    """A 63-bit integer seed for ``(seed, *names)`` (fits ``torch.Generator.manual_seed``)."""
    return int.from_bytes(derive_bytes(seed, *names, nbytes=8), "little") & ((1 << 63) - 1)


def torch_generator(seed: int | bytes, *names: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded for the stream ``(seed, *names)``."""
    import torch  # deferred: NumPy-only users (data partitions, read by config validation) skip torch

    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *names))
    return gen


def numpy_generator(seed: int | bytes, *names: object) -> np.random.Generator:
    """A NumPy generator with 256 bits of state entropy for the stream ``(seed, *names)``."""
    entropy = int.from_bytes(derive_bytes(seed, *names, nbytes=32), "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


#: A noise seed must carry at least this many bytes of secret (docs/method.md "Mixing": at least 128 bits).
MIN_SECRET_BYTES = 16


def _check_secret(seed: object) -> bytes:
    if not isinstance(seed, bytes | bytearray) or len(seed) < MIN_SECRET_BYTES:
        got = f"{len(seed)} bytes" if isinstance(seed, bytes | bytearray) else type(seed).__name__
        raise ValueError(
            f"a noise stream needs a secret seed of at least {MIN_SECRET_BYTES} bytes (128 bits), got {got}: "
            "pass the party's secret seed (sifl_ray.party_seeds.party_seed), never the run seed: whoever "
            "knows the seed of the noise removes it"
        )
    return bytes(seed)


def noise_generator(seed: bytes, *names: object) -> np.random.Generator:
    """A party's noise stream ``(seed, *names)``: Philox-4×64 keyed by 128 bits of the 256-bit derivation.

    Why Philox: a counter-based generator whose output is a keyed bijection of the counter (10 rounds), with
    no known way back from outputs to key; PCG64's 128-bit state has been recovered from its outputs in
    practice (Bouillaguet, Martinez and Sauvage, ToSC 2020). NumPy's ziggurat normals also draw faster than
    ``torch.randn`` on a CPU. It is not a
    cryptographic generator; the keys themselves use SHAKE-256 (:mod:`sifl_ray.coding._common`).

    Args:
        seed: the party's secret seed (at least 16 bytes; :func:`sifl_ray.party_seeds.party_seed` gives 32).
        names: the stream's name, e.g. ``("server", "r1", epoch, round)``.
    """
    entropy = int.from_bytes(derive_bytes(_check_secret(seed), *names, nbytes=32), "little")
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(entropy)))


# torch's CPU generator state (ATen's CPUGeneratorImplState): the_initial_seed (8 bytes), left (4),
# seeded (4), next (8), then the 624 Mersenne Twister words, one per 8 bytes, then the normal caches.
_MT_WORDS = 624
_MT_OFFSET = 24


def _mt_init_genrand(seed: int) -> np.ndarray:
    """The reference MT19937 initialisation of ``seed`` (Matsumoto and Nishimura's init_genrand)."""
    words = np.zeros(_MT_WORDS, dtype=np.uint64)
    words[0] = seed & 0xFFFFFFFF
    for i in range(1, _MT_WORDS):
        prev = int(words[i - 1])
        words[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF
    return words


def _generator_from_words(words: np.ndarray) -> torch.Generator:
    """A fresh CPU generator whose Mersenne Twister state is ``words`` (624 values below 2^32); its next draw
    regenerates the state from them (``left = 1``), as after ``manual_seed``."""
    import torch  # deferred, as in torch_generator

    _check_state_layout()
    gen = torch.Generator()
    state = gen.get_state().clone()
    state[:8] = 0  # the_initial_seed: nothing to report (the state did not come from a 64-bit seed)
    body = torch.from_numpy(np.ascontiguousarray(words, dtype="<u8").view(np.uint8))
    state[_MT_OFFSET : _MT_OFFSET + 8 * _MT_WORDS] = body
    gen.set_state(state)
    return gen


@functools.cache
def _check_state_layout() -> None:
    """Refuse to run if this torch lays out its generator state differently from what we write into it."""
    import torch

    seed = 0x5EED_1234
    state = torch.Generator().manual_seed(seed).get_state().numpy()
    end = _MT_OFFSET + 8 * _MT_WORDS
    words = state[_MT_OFFSET:end].copy().view("<u8") if state.size >= end else None
    if words is None or not np.array_equal(words, _mt_init_genrand(seed)):
        raise RuntimeError(
            f"torch {torch.__version__} stores its CPU generator state in a layout this module does not "
            "know; secret_torch_generator cannot set a full Mersenne Twister state (update _MT_OFFSET)"
        )


def secret_torch_generator(seed: bytes, *names: object) -> torch.Generator:
    """A CPU ``torch.Generator`` for a secret stream ``(seed, *names)``, for code that draws with ``torch``.

    ``manual_seed`` would take 64 bits; instead the whole Mersenne Twister state (624 words) is filled from
    the SHA-256 expansion of ``(seed, *names)``, so the stream carries all of the seed's secret (256 bits
    from :func:`sifl_ray.party_seeds.party_seed`). Used for NbAFL's client noise
    (:func:`sifl_ray.privacy.nbafl.privatize_upload` takes a ``torch.Generator``).

    Args:
        seed: the party's secret seed (at least 16 bytes).
        names: the stream's name.
    """
    raw = derive_bytes(_check_secret(seed), *names, nbytes=4 * _MT_WORDS)
    words = np.frombuffer(raw, dtype="<u4").astype(np.uint64)
    if not (words[1:].any() or words[0] >> 31):  # MT19937's one dead state (probability 2^-19937)
        words[0] = 1 << 31
    return _generator_from_words(words)
