"""Shamir secret sharing over the prime field ``GF(2^521 − 1)`` (Shamir 1979), for 32-byte secrets.

A secret s is the constant term of a random polynomial of degree t − 1; holder x gets ``p(x)``. Any t shares
fix p and so s (Lagrange interpolation at 0); any t − 1 shares are consistent with every s, so they reveal
nothing. The prime ``2^521 − 1`` (a Mersenne prime) exceeds every 256-bit secret, so a secret is its own field
element. Shares are Python ints; the randomness of the coefficients is passed in, never global.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

PRIME = 2**521 - 1
SHARE_BYTES = (PRIME.bit_length() + 7) // 8  # 66: one field element on the wire
SECRET_BYTES = 32


def secret_to_int(secret: bytes) -> int:
    """A 32-byte secret as a field element (big-endian)."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"secrets are {SECRET_BYTES} bytes, got {len(secret)}")
    return int.from_bytes(secret, "big")


def int_to_secret(value: int) -> bytes:
    """Inverse of :func:`secret_to_int`; fails loudly if the value is not a 256-bit secret (wrong shares)."""
    if not 0 <= value < 2 ** (8 * SECRET_BYTES):
        raise ValueError(
            "the reconstructed value is not a 32-byte secret: the shares are inconsistent (altered, or from "
            "different secrets)"
        )
    return value.to_bytes(SECRET_BYTES, "big")


def split(
    secret: int, *, holders: Iterable[int], threshold: int, draw: Callable[[int], int]
) -> dict[int, int]:
    """Shares of ``secret`` for each holder x (a nonzero field element): ``{x: p(x)}``.

    Args:
        secret: the field element to share, ``0 ≤ secret < PRIME``.
        holders: distinct nonzero x-coordinates, one per share-holder.
        threshold: t, how many shares reconstruct; ``1 ≤ t ≤ len(holders)``.
        draw: ``draw(bound)`` returns a uniform integer in ``[0, bound)`` (cryptographic source).
    """
    xs = list(holders)
    if len(set(xs)) != len(xs) or any(not 0 < x < PRIME for x in xs):
        raise ValueError(f"holders must be distinct nonzero field elements, got {xs}")
    if not 1 <= threshold <= len(xs):
        raise ValueError(f"threshold must be in [1, {len(xs)}] (the number of holders), got {threshold}")
    if not 0 <= secret < PRIME:
        raise ValueError("the secret must be a field element, 0 <= secret < 2^521 - 1")
    coefficients = [secret] + [draw(PRIME) for _ in range(threshold - 1)]

    def p(x: int) -> int:
        acc = 0
        for c in reversed(coefficients):  # Horner
            acc = (acc * x + c) % PRIME
        return acc

    return {x: p(x) for x in xs}


def reconstruct(shares: Mapping[int, int], threshold: int) -> int:
    """The secret from at least ``threshold`` shares ``{x: y}``: Lagrange interpolation at 0.

    Exactly t shares are used (the t smallest x), so the result does not depend on how many arrived.

    Raises:
        ValueError: fewer than ``threshold`` shares.
    """
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares cannot rebuild a secret shared with threshold {threshold}")
    points = sorted(shares.items())[:threshold]
    secret = 0
    for i, (xi, yi) in enumerate(points):
        num, den = 1, 1
        for j, (xj, _) in enumerate(points):
            if j != i:
                num = num * xj % PRIME
                den = den * (xj - xi) % PRIME
        secret = (secret + yi * num * pow(den, -1, PRIME)) % PRIME
    return secret
