"""Fingerprints of dense vectors: random-hyperplane simhash.

Bit ``i`` of a vector's fingerprint is 1 where the dot product of the vector
with hyperplane ``i`` is positive; the 64 hyperplanes for dimension ``d`` are
Gaussian, drawn from numpy's PCG64 bit generator seeded with ``seed`` (see
:func:`hyperplanes`), so the expected bit distance of two vectors is
``64 * angle / pi``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting._check import check_int

__all__ = ["fingerprint_vector", "hyperplanes"]


@functools.lru_cache(maxsize=16)
def hyperplanes(dimension: int, seed: int = 0) -> npt.NDArray[np.float64]:
    """The 64 Gaussian hyperplanes (a read-only ``(64, dimension)`` array) of
    :func:`fingerprint_vector`.

    Exactly: ``numpy.random.PCG64(seed).random_raw(64 * dimension)`` gives one
    64-bit draw per entry, row-major; its high and low 32 bits ``a``, ``b``
    give ``u = (a + 0.5) / 2**32`` and ``v = (b + 0.5) / 2**32``, and the
    entry is ``sqrt(-2 ln u) * cos(2 pi v)`` (Box-Muller). Bit generator
    streams are stable across numpy versions, unlike ``Generator`` methods.
    """
    check_int("dimension", dimension, 1, None)
    check_int("seed", seed, 0, None)
    raw = np.random.PCG64(seed).random_raw(64 * dimension)
    high = (raw >> np.uint64(32)).astype(np.float64)
    low = (raw & np.uint64(0xFFFFFFFF)).astype(np.float64)
    u = (high + 0.5) / 2.0**32
    v = (low + 0.5) / 2.0**32
    planes = np.sqrt(-2.0 * np.log(u)) * np.cos(2.0 * np.pi * v)
    planes = planes.reshape(64, dimension)
    planes.flags.writeable = False
    return planes


def fingerprint_vector(vectors: npt.ArrayLike, seed: int = 0) -> Any:
    """Random-hyperplane simhash of dense vectors.

    A 1-D vector of length ``d`` gives one ``int``; a 2-D ``(n, d)`` array
    gives a uint64 array of ``n`` fingerprints. Bit ``i`` (0 = LSB) is 1 where
    the dot product with hyperplane ``i`` of :func:`hyperplanes` is positive,
    so the expected bit distance of two vectors is ``64 * angle / pi``.
    Vectors must be real, finite and non-zero (a zero vector has no
    direction). Bits whose dot product is within rounding of 0 may differ
    between machines with different BLAS or SIMD.
    """
    array = _as_vectors(vectors)
    check_int("seed", seed, 0, None)
    matrix = array.reshape(1, -1) if array.ndim == 1 else array
    planes = hyperplanes(matrix.shape[1], seed)
    winners = (matrix @ planes.T) > 0.0
    packed = np.packbits(winners, axis=1, bitorder="little")
    values = packed.view("<u8").reshape(-1).astype(np.uint64)
    return int(values[0]) if array.ndim == 1 else values


def _as_vectors(vectors: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Validate vectors for :func:`fingerprint_vector`; return them as float64."""
    try:
        array = np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"vectors must be a numeric array: {exc}") from None
    if array.dtype.kind not in "iuf":
        raise InvalidTypeError(f"vectors must be real numbers (int or float), not dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise InvalidValueError(f"vectors must be 1-D (one vector) or 2-D (one per row); got {array.ndim}-D")
    if array.shape[-1] == 0:
        raise InvalidValueError("vectors must have at least one dimension (d >= 1)")
    floats = array.astype(np.float64)
    rows = floats.reshape(-1, floats.shape[-1])
    bad = ~np.isfinite(rows).all(axis=1)
    if bad.any():
        raise InvalidValueError(f"vector {int(np.argmax(bad))} holds NaN or infinity")
    zero = ~rows.any(axis=1)
    if zero.any():
        raise InvalidValueError(
            f"vector {int(np.argmax(zero))} is all zeros and has no direction to fingerprint"
        )
    return floats
