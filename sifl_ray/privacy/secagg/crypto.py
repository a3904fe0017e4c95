"""The cryptographic primitives of secure aggregation, all from the ``cryptography`` package.

* Seeds: every secret a party needs is HKDF-SHA256 of a 32-byte party seed and a label naming its use, so one
  seed per party and round fixes everything, and two uses never share key material. The party seed comes
  from the platform's one rule, :func:`sifl_ray.party_seeds.party_seed`: ``secrets``, unless the simulation
  passes a ``key_seed``, which is for reproducible experiments only (whoever holds it can derive every
  party's secrets). It is never the run seed, so that a published run seed (configs, logs) reveals no key.
* Key agreement: X25519; the shared secret goes through HKDF with the pair's ids and the round in the label
  (:func:`derive`), never used raw.
* Mask expansion (:func:`prg_ring`): ChaCha20 keyed by a 32-byte seed, zero nonce (each seed keys one stream),
  read as little-endian words and masked to k bits. Every bit of the keystream is uniform, so masking off
  high bits leaves a uniform element of ``Z_(2^k)``: no modulo bias, as reduction ``mod q`` for ``q`` not a
  power of two would have.
* Share encryption (:func:`seal`, :func:`open_sealed`): AES-256-GCM under a key derived for one message
  (sender, receiver, round), so a fixed nonce is never reused under one key; the 16-byte tag is counted.
* :class:`RandomStream`: a ChaCha20 byte stream for the other random choices (Shamir coefficients, the
  neighbourhood graph's shuffle), uniform integers by rejection sampling.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

SEED_BYTES = 32
PUBLIC_KEY_BYTES = 32
GCM_TAG_BYTES = 16
_SALT = b"sifl-ray/secagg/v1"
_ZERO_CHACHA_NONCE = bytes(16)
_CHACHA_BLOCK_BYTES = 64
_ZERO_GCM_NONCE = bytes(12)


def derive(seed: bytes, label: str, length: int = SEED_BYTES) -> bytes:
    """HKDF-SHA256 of ``seed`` for the use named by ``label`` (domain separation: one label, one use)."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=_SALT, info=label.encode()).derive(seed)


def x25519_from_seed(seed: bytes) -> X25519PrivateKey:
    """An X25519 private key whose 32 raw bytes are ``seed`` (clamped by X25519 itself)."""
    return X25519PrivateKey.from_private_bytes(seed)


def private_bytes(key: X25519PrivateKey) -> bytes:
    """The 32 raw bytes of an X25519 private key: what Shamir shares."""
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The 32 raw bytes of the public key of ``key``: what a party advertises."""
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def agree(key: X25519PrivateKey, peer_public: bytes, label: str) -> bytes:
    """A 32-byte seed shared with the owner of ``peer_public``: HKDF of the X25519 shared secret.

    Both parties must pass the same ``label``, so it names the pair by sorted ids, never by "me" and "you".
    """
    shared = key.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return derive(shared, label)


def prg_ring(seed: bytes, length: int, ring_bits: int, *, offset: int = 0) -> np.ndarray:
    """Elements ``offset .. offset + length`` of the uniform ``Z_(2^k)`` stream (``uint64``) that ChaCha20
    expands from a 32-byte ``seed``.

    For k ≤ 32 each element takes 4 keystream bytes, for k > 32 it takes 8; the bits above k are masked off.
    ``offset`` seeks with ChaCha20's block counter (the first 4 bytes of the 16-byte nonce, little-endian,
    RFC 7539), so an aggregator shard expands only its rows of a mask: ``prg_ring(s, b - a, k, offset=a)``
    equals ``prg_ring(s, b, k)[a:]``.
    """
    if len(seed) != SEED_BYTES:
        raise ValueError(f"a mask seed has {SEED_BYTES} bytes, got {len(seed)}")
    if int(offset) != offset or offset < 0:
        raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
    width = 4 if ring_bits <= 32 else 8
    block, skip = divmod(width * int(offset), _CHACHA_BLOCK_BYTES)
    nonce = block.to_bytes(4, "little") + _ZERO_CHACHA_NONCE[4:]
    encryptor = Cipher(algorithms.ChaCha20(seed, nonce), mode=None).encryptor()
    stream = encryptor.update(bytes(skip + width * int(length)))[skip:]
    words = np.frombuffer(stream, dtype="<u4" if width == 4 else "<u8").astype(np.uint64)
    if ring_bits < 64:
        np.bitwise_and(words, np.uint64((1 << ring_bits) - 1), out=words)
    return words


def seal(key: bytes, plaintext: bytes, header: bytes) -> bytes:
    """AES-256-GCM ciphertext of ``plaintext`` bound to ``header`` (authenticated, not encrypted).

    ``key`` must be used for this one message only: the nonce is fixed.
    """
    return AESGCM(key).encrypt(_ZERO_GCM_NONCE, plaintext, header)


def open_sealed(key: bytes, ciphertext: bytes, header: bytes) -> bytes:
    """Inverse of :func:`seal`; raises ``cryptography.exceptions.InvalidTag`` if anything was altered."""
    return AESGCM(key).decrypt(_ZERO_GCM_NONCE, ciphertext, header)


class RandomStream:
    """A deterministic cryptographic byte stream (ChaCha20 keyed by a 32-byte seed), read sequentially."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != SEED_BYTES:
            raise ValueError(f"a stream seed has {SEED_BYTES} bytes, got {len(seed)}")
        self._encryptor = Cipher(algorithms.ChaCha20(seed, _ZERO_CHACHA_NONCE), mode=None).encryptor()

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes of the stream."""
        return self._encryptor.update(bytes(n))

    def below(self, bound: int) -> int:
        """A uniform integer in ``[0, bound)`` by rejection sampling (no modulo bias)."""
        if bound < 1:
            raise ValueError(f"bound must be >= 1, got {bound}")
        bits = (bound - 1).bit_length()
        if bits == 0:
            return 0
        nbytes = (bits + 7) // 8
        excess = 8 * nbytes - bits
        while True:
            value = int.from_bytes(self.read(nbytes), "big") >> excess
            if value < bound:
                return value
