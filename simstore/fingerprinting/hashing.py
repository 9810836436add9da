"""The hashes of the text fingerprint: tokens, n-gram folds, and version 1's
feature strings.

Version 2's hashes (``simstore-text-simhash-2``, and every verification
sketch), exactly:

- **token hash**: the token's UTF-8 bytes ``b_0 .. b_{L-1}`` give
  ``r = sum(b_i * P**(L-1-i)) mod 2**64`` (``P`` = :data:`POLY`), and the
  token's hash is ``mix64(r + L * LENGTH_MULT + salt)`` where
  ``salt = mix64(seed ^ SEED_XOR)`` and ``mix64`` is Pelle Evensen's
  "moremur" finaliser (xor-shift 27, multiply, xor-shift 33, multiply,
  xor-shift 27: a bijection that spreads every input bit over the output);
- **n-gram hash** (``n >= 2``) of tokens with hashes ``t_0 .. t_{n-1}``:
  ``a = t_0``, then ``a = a * NGRAM_MULT + t_j mod 2**64`` for each next
  ``t_j``, and the feature's hash is ``mix64(a + n * NGRAM_SALT)``.

The polynomial hash modulo ``2**64`` has known engineered collisions (Thue-
Morse strings of thousands of bytes), harmless for deduplication: a collision
merges two features of one document, it cannot make two documents look alike.

Version 1 (``simstore-text-simhash-1``) hashes each feature string's UTF-8
bytes with XXH3-64 (:func:`feature_hashes`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import xxhash

__all__ = [
    "LENGTH_MULT",
    "NGRAM_MULT",
    "NGRAM_SALT",
    "POLY",
    "SEED_XOR",
    "feature_hashes",
    "mix64",
    "mix64_array",
    "ngram_hash",
    "power_table",
    "salt",
    "token_hash",
]

# Odd 64-bit constants: odd multipliers are invertible modulo 2**64, so no
# information is lost when multiplying. POLY is the golden-ratio constant.
POLY = 0x9E3779B97F4A7C15
LENGTH_MULT = 0xC2B2AE3D27D4EB4F
NGRAM_MULT = 0x165667B19E3779F9
NGRAM_SALT = 0x27D4EB2F165667C5
SEED_XOR = 0x85EBCA77C2B2AE63
MASK = (1 << 64) - 1
POLY_INVERSE = pow(POLY, -1, 1 << 64)
U64 = np.uint64

# MurmurHash3's fmix64 was tried first: on 1000 unrelated KJV verses the
# mean distance between fingerprints came out 0.2-0.3 bits below version 1's
# and moremur's (20 seeds each, 2.5 standard errors), and its bit flips for
# inputs one apart spread with SD 3.93 instead of 4: similar tokens (their
# polynomials differ by small amounts) hashed slightly alike.
_MIX_A = 0x3C79AC492BA7B653
_MIX_B = 0x1C69B3F74AC4AE35


def mix64(value: int) -> int:
    """Pelle Evensen's moremur finaliser of an unsigned 64-bit int."""
    value ^= value >> 27
    value = (value * _MIX_A) & MASK
    value ^= value >> 33
    value = (value * _MIX_B) & MASK
    return value ^ (value >> 27)


def mix64_array(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """:func:`mix64` of each element (a new array; uint64 arithmetic wraps)."""
    values = values ^ (values >> U64(27))
    values *= U64(_MIX_A)
    values ^= values >> U64(33)
    values *= U64(_MIX_B)
    values ^= values >> U64(27)
    return values


@functools.lru_cache(maxsize=64)
def salt(seed: int) -> int:
    """What every token hash of ``seed`` adds before the final mix."""
    return mix64(seed ^ SEED_XOR)


def token_hash(token: bytes, seed: int = 0) -> int:
    """The version-2 hash of one token's UTF-8 bytes."""
    polynomial = 0
    for byte in token:
        polynomial = (polynomial * POLY + byte) & MASK
    return mix64((polynomial + len(token) * LENGTH_MULT + salt(seed)) & MASK)


def ngram_hash(hashes: Sequence[int]) -> int:
    """The version-2 hash of the n-gram of tokens hashed ``hashes`` (n >= 1)."""
    folded = hashes[0]
    for value in hashes[1:]:
        folded = (folded * NGRAM_MULT + value) & MASK
    return mix64((folded + len(hashes) * NGRAM_SALT) & MASK)


# (Token hashing keeps two segment-long tables; the few short ones a token
# cut by a segment's end asks for must not push them out.)
@functools.lru_cache(maxsize=8)
def _powers(base: int, count: int) -> npt.NDArray[np.uint64]:
    """``base**i mod 2**64`` for ``i`` in ``0..count-1`` (read-only)."""
    table = np.full(count, base, dtype=np.uint64)
    table[0] = 1
    np.cumprod(table, out=table)  # wraps modulo 2**64, which is the point
    table.flags.writeable = False
    return table


def power_table(base: int, count: int) -> npt.NDArray[np.uint64]:
    """``base**i mod 2**64`` for ``i`` in ``0..count-1`` (read-only)."""
    # Cached in sizes rounded up to a power of two so that batches share them.
    return _powers(base, 1 << max(count - 1, 1).bit_length())[:count]


def feature_hashes(feature_strings: Sequence[str], seed: int = 0) -> npt.NDArray[np.uint64]:
    """Version 1's feature hash: XXH3-64 (with ``seed``) of each feature's
    UTF-8 bytes, as uint64."""
    encoded = map(str.encode, feature_strings)
    if seed:
        hashed = map(functools.partial(xxhash.xxh3_64_intdigest, seed=seed), encoded)
    else:
        hashed = map(xxhash.xxh3_64_intdigest, encoded)
    return np.fromiter(hashed, dtype=np.uint64, count=len(feature_strings))
