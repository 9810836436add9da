"""Skew statistics: how far a table's prefix ranges are from uniform.

The planner assumes random fingerprints, so that a table with a ``p``-bit
prefix holds about ``N / 2**p`` entries per prefix range. Real text is not
random: boilerplate pages, empty or very short texts and mirrored copies give
identical or degenerate fingerprints that pile up in a few ranges, and every
query landing there walks them all. These functions measure that from a
table's sorted permuted keys and from the stored fingerprints. They are pure
numpy; the store reads the arrays.
"""

from __future__ import annotations

import numpy as np

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.index.permute import FINGERPRINT_BITS, MAX_FINGERPRINT, U64Array
from simstore.results import Degenerate, TableSkew

DEFAULT_HOT = 5
DEFAULT_SHARED_THRESHOLD = 10
DEFAULT_TOP_SHARED = 10


def _check_uint64(name: str, values: object) -> U64Array:
    if not isinstance(values, np.ndarray) or values.dtype != np.uint64 or values.ndim != 1:
        described = (
            f"dtype {values.dtype}, shape {values.shape}"
            if isinstance(values, np.ndarray)
            else type(values).__name__
        )
        raise InvalidTypeError(f"{name} must be a one-dimensional numpy uint64 array, got {described}")
    return values


def _check_count(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if int(value) < low:
        raise InvalidValueError(f"{name} must be at least {low}, got {value}")
    return int(value)


def _top_counts(values: U64Array, counts: np.ndarray, top: int) -> tuple[tuple[int, int], ...]:
    """The ``top`` largest counts with their values, largest first, ties by value."""
    if top == 0 or counts.size == 0:
        return ()
    if counts.size > top:
        # argpartition finds the top counts in linear time; the cut-off count
        # may be shared by more values than fit, so take every value at or
        # above it and order those.
        cutoff = counts[np.argpartition(counts, counts.size - top)[counts.size - top]]
        chosen = np.flatnonzero(counts >= cutoff)
    else:
        chosen = np.arange(counts.size)
    order = np.lexsort((values[chosen], -counts[chosen]))[:top]
    picked = chosen[order]
    return tuple(
        (int(value), int(count)) for value, count in zip(values[picked], counts[picked], strict=True)
    )


def table_skew(permuted_sorted: U64Array, prefix_bits: int, hot: int = DEFAULT_HOT) -> TableSkew:
    """Skew statistics of one table from its permuted keys in ascending order.

    >>> import numpy as np
    >>> skew = table_skew(np.array([0, 1, 2, 1 << 63], dtype=np.uint64), 1)
    >>> skew.largest_range, skew.occupied, skew.hot_prefixes
    (3, 2, ((0, 3), (1, 1)))

    Raises:
        InvalidTypeError: ``permuted_sorted`` is not a 1-D uint64 array.
        InvalidValueError: it is not sorted, or ``prefix_bits`` is not in 1..64.
    """
    keys = _check_uint64("permuted_sorted", permuted_sorted)
    prefix_bits = _check_count("prefix_bits", prefix_bits, 1)
    if prefix_bits > FINGERPRINT_BITS:
        raise InvalidValueError(f"prefix_bits must be in 1..{FINGERPRINT_BITS}, got {prefix_bits}")
    hot = _check_count("hot", hot, 0)
    if keys.size > 1 and bool(np.any(keys[1:] < keys[:-1])):
        raise InvalidValueError("permuted_sorted must be in ascending order")
    entries = int(keys.size)
    expected = entries / 2.0**prefix_bits
    if entries == 0:
        return TableSkew(prefix_bits, 0, 0, 0, 0, 0.0, 0.0, 0.0, ())
    prefixes = keys >> np.uint64(FINGERPRINT_BITS - prefix_bits)
    # The keys are sorted, so equal prefixes are adjacent: one pass of diff
    # finds the range boundaries (np.unique would sort again).
    starts = np.concatenate(([0], np.flatnonzero(prefixes[1:] != prefixes[:-1]) + 1))
    sizes = np.diff(np.concatenate((starts, [entries])))
    return TableSkew(
        prefix_bits=prefix_bits,
        entries=entries,
        occupied=int(sizes.size),
        largest_range=int(sizes.max()),
        p99_range=int(np.percentile(sizes, 99, method="higher")),
        mean_range=float(entries / sizes.size),
        expected_range=expected,
        query_weighted_range=float(np.dot(sizes.astype(np.float64), sizes) / entries),
        hot_prefixes=_top_counts(prefixes[starts], sizes, hot),
    )


def degenerate_fingerprints(
    fingerprints: U64Array,
    shared_threshold: int = DEFAULT_SHARED_THRESHOLD,
    top: int = DEFAULT_TOP_SHARED,
) -> Degenerate:
    """Count all-zero, all-one and widely shared fingerprints.

    Args:
        fingerprints: every stored fingerprint (any order).
        shared_threshold: a fingerprint counts as shared when at least this
            many documents have it (at least 2).
        top: how many of the most shared fingerprints to list.

    >>> import numpy as np
    >>> fps = np.array([0, 0, 5, 5, 5, 7], dtype=np.uint64)
    >>> found = degenerate_fingerprints(fps, shared_threshold=2)
    >>> found.zeros, found.shared_docs, found.shared
    (2, 5, ((5, 3), (0, 2)))
    """
    values = _check_uint64("fingerprints", fingerprints)
    shared_threshold = _check_count("shared_threshold", shared_threshold, 2)
    top = _check_count("top", top, 0)
    if values.size == 0:
        return Degenerate(0, 0, 0, 0, 0, (), shared_threshold)
    distinct, counts = np.unique(values, return_counts=True)
    shared_mask = counts >= shared_threshold
    return Degenerate(
        docs=int(values.size),
        distinct=int(distinct.size),
        zeros=int(np.count_nonzero(values == 0)),
        ones=int(np.count_nonzero(values == np.uint64(MAX_FINGERPRINT))),
        shared_docs=int(counts[shared_mask].sum()),
        shared=_top_counts(distinct[shared_mask], counts[shared_mask], top),
        shared_threshold=shared_threshold,
    )
