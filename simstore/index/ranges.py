"""Vectorised range expansion: every position of many ``[first, first + count)``
ranges at once, and which range each came from. No I/O."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def expand_ranges(first: npt.NDArray[Any], counts: npt.NDArray[Any]) -> tuple[IntArray, IntArray]:
    """``(positions, owner)``: every position in the ranges of ``counts[j]``
    positions from ``first[j]``, in order, and the ``j`` of each.

    >>> positions, owner = expand_ranges(np.array([10, 0, 5]), np.array([2, 0, 3]))
    >>> positions.tolist(), owner.tolist()
    ([10, 11, 5, 6, 7], [0, 0, 2, 2, 2])
    """
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    if not len(owner):
        return np.empty(0, dtype=np.int64), owner
    # Position = range start + offset inside the range: offsets are a running
    # count that restarts at every range.
    starts_before = np.cumsum(counts, dtype=np.int64) - counts
    positions = np.arange(len(owner), dtype=np.int64) - starts_before[owner] + first[owner]
    return positions, owner
