"""Pairs of items that share a key: the candidate pairs of band keys
(:mod:`simstore.fingerprinting.bands`) or of any other exact-match index.
Pure numpy; nothing here does I/O."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["pairs_sharing_keys"]

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]


def pairs_sharing_keys(items: IntArray, keys: U64Array) -> tuple[IntArray, IntArray]:
    """Every pair ``(a, b)``, ``a < b``, of distinct items that have a key in
    common (``keys[i]`` is a key of ``items[i]``; an item may have many),
    each once, ordered by ``(a, b)``.

    >>> a, b = pairs_sharing_keys(np.array([0, 1, 2, 2, 0]), np.array([7, 7, 7, 9, 9], dtype=np.uint64))
    >>> [(int(x), int(y)) for x, y in zip(a, b)]
    [(0, 1), (0, 2), (1, 2)]
    """
    items = np.asarray(items, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.uint64)
    empty = np.zeros(0, dtype=np.int64)
    if len(items) < 2:
        return empty, empty
    order = np.lexsort((items, keys))
    sorted_keys, sorted_items = keys[order], items[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    sizes = np.diff(np.r_[starts, len(sorted_keys)])
    firsts: list[IntArray] = []
    seconds: list[IntArray] = []
    # Runs of one size at a time: every pair of places within a run of s is
    # one of s(s-1)/2 offsets, the same for all runs of that size.
    for size in np.unique(sizes[sizes > 1]).tolist():
        run_starts = starts[sizes == size]
        left, right = np.triu_indices(size, 1)
        firsts.append(sorted_items[(run_starts[:, None] + left[None, :]).ravel()])
        seconds.append(sorted_items[(run_starts[:, None] + right[None, :]).ravel()])
    if not firsts:
        return empty, empty
    first, second = np.concatenate(firsts), np.concatenate(seconds)
    distinct = first != second  # an item twice under one key
    first, second = first[distinct], second[distinct]
    low, high = np.minimum(first, second), np.maximum(first, second)
    pairs = np.unique(np.stack([low, high], axis=1), axis=0)
    return pairs[:, 0].copy(), pairs[:, 1].copy()
