"""Pairs of items that share a key: the candidate pairs of band keys
(:mod:`simstore.fingerprinting.bands`) or of any other exact-match index.
Pure numpy; nothing here does I/O."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "KeyIndex",
    "cross_members",
    "key_star_edges",
    "pairs_across",
    "pairs_beyond_k",
    "pairs_sharing_keys",
]

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


def pairs_across(
    left_items: IntArray, left_keys: U64Array, right_items: IntArray, right_keys: U64Array
) -> tuple[IntArray, IntArray]:
    """Every pair ``(a, b)`` of a left item ``a`` and a right item ``b`` that
    have a key in common (``left_keys[i]`` is a key of ``left_items[i]``, and
    likewise on the right), each once, ordered by ``(a, b)``: the two sides
    are separate collections, so ``a`` and ``b`` may be equal numbers.

    >>> a, b = pairs_across(
    ...     np.array([0, 0, 1]), np.array([7, 9, 9], dtype=np.uint64),
    ...     np.array([5, 6, 5]), np.array([9, 9, 7], dtype=np.uint64),
    ... )
    >>> [(int(x), int(y)) for x, y in zip(a, b)]
    [(0, 5), (0, 6), (1, 5), (1, 6)]
    """
    if len(left_keys) + len(right_keys) <= FEW_KEYS:
        return _few_pairs_across(left_items, left_keys, right_items, right_keys)
    return KeyIndex(left_items, left_keys).pairs_with(right_items, right_keys)


#: Joins of at most this many keys in all (a query's against its
#: candidates') are made in a dict: some 30 numpy calls cost ~250 µs.
FEW_KEYS = 512


def _few_pairs_across(
    left_items: IntArray, left_keys: U64Array, right_items: IntArray, right_keys: U64Array
) -> tuple[IntArray, IntArray]:
    """:func:`pairs_across` of a few keys, in a dict."""
    by_key: dict[int, list[int]] = {}
    for item, key in zip(np.asarray(left_items).tolist(), np.asarray(left_keys).tolist(), strict=True):
        by_key.setdefault(key, []).append(item)
    pairs = sorted(
        {
            (left, right)
            for right, key in zip(
                np.asarray(right_items).tolist(), np.asarray(right_keys).tolist(), strict=True
            )
            for left in by_key.get(key, ())
        }
    )
    return np.array([a for a, _ in pairs], dtype=np.int64), np.array([b for _, b in pairs], dtype=np.int64)


class KeyIndex:
    """Items by key, for :meth:`pairs_with` many batches of other items: the
    keys sorted once, and a bitmap of their low bits that turns away most
    keys not among them before any search (a batch join's keys rarely meet)."""

    __slots__ = ("_items", "_keys", "_low_bits", "_present")

    def __init__(self, items: IntArray, keys: U64Array) -> None:
        keys = np.asarray(keys, dtype=np.uint64)
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._items = np.asarray(items, dtype=np.int64)[order]
        # About 16 bitmap bits a key: some 1 in 16 absent keys gets through.
        bits = int(np.clip(np.ceil(np.log2(max(len(keys), 1) * 16)), 10, 28))
        self._low_bits = np.uint64((1 << bits) - 1)
        self._present = np.zeros(1 << bits, dtype=np.bool_)
        self._present[self._keys & self._low_bits] = True

    def pairs_with(self, items: IntArray, keys: U64Array) -> tuple[IntArray, IntArray]:
        """:func:`pairs_across` of this index's items (left) and ``items`` (right)."""
        items = np.asarray(items, dtype=np.int64)
        keys = np.asarray(keys, dtype=np.uint64)
        empty = np.zeros(0, dtype=np.int64)
        if not len(self._keys) or not len(keys):
            return empty, empty
        maybe = self._present[keys & self._low_bits]
        items, keys = items[maybe], keys[maybe]
        low = np.searchsorted(self._keys, keys, side="left")
        counts = np.searchsorted(self._keys, keys, side="right") - low
        # Each right key's run of equal left keys, expanded.
        which = np.repeat(np.arange(len(keys)), counts)
        offset = np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
        first = self._items[low[which] + offset]
        second = items[which]
        if not len(first):
            return empty, empty
        pairs = np.unique(np.stack([first, second], axis=1), axis=0)
        return pairs[:, 0].copy(), pairs[:, 1].copy()


def cross_members(
    members: IntArray, starts: IntArray, left: IntArray, right: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    """``(a, b, which)``: every member ``a`` of group ``left[i]`` with every
    member ``b`` of group ``right[i]`` (group ``g``'s members are
    ``members[starts[g]:starts[g + 1]]``), and the ``i`` each came from."""
    sizes = np.diff(starts)
    counts = sizes[left] * sizes[right]
    which = np.repeat(np.arange(len(left)), counts)
    offset = np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
    width = sizes[right][which]
    a = members[starts[left][which] + offset // width]
    b = members[starts[right][which] + offset % width]
    return a, b, which


def pairs_beyond_k(
    keys: U64Array, positions: IntArray, fingerprints: U64Array, k: int
) -> tuple[IntArray, IntArray, IntArray]:
    """``(first, second, distance)``: every pair of positions, ``first <
    second``, that have a key in common (``keys[i]`` is a key of
    ``positions[i]``, whose fingerprint is ``fingerprints[i]``) and whose
    fingerprints are more than ``k`` bits apart, each once: the band pairs a
    distributed search adds to those within ``k``.

    Positions of one fingerprint under one key are taken together, so many
    copies of a text cost one node per key rather than pairs among them
    (they are 0 bits apart: the fingerprint search's).

    >>> first, second, distance = pairs_beyond_k(
    ...     np.array([7, 7, 7, 9], dtype=np.uint64), np.array([0, 1, 2, 2]),
    ...     np.array([0, 0, 0xFF, 0xFF], dtype=np.uint64), 3,
    ... )
    >>> [(int(a), int(b), int(d)) for a, b, d in zip(first, second, distance)]
    [(0, 2, 8), (1, 2, 8)]
    """
    keys = np.asarray(keys, dtype=np.uint64)
    positions = np.asarray(positions, dtype=np.int64)
    fingerprints = np.asarray(fingerprints, dtype=np.uint64)
    empty = np.zeros(0, dtype=np.int64)
    if len(keys) < 2:
        return empty, empty, empty
    order = np.lexsort((positions, fingerprints, keys))
    keys, positions, fingerprints = keys[order], positions[order], fingerprints[order]
    new_node = np.r_[True, (keys[1:] != keys[:-1]) | (fingerprints[1:] != fingerprints[:-1])]
    node_starts = np.flatnonzero(new_node)
    starts = np.r_[node_starts, len(keys)]
    # Nodes under one key hold distinct fingerprints: every pair of them is a candidate.
    left, right = pairs_sharing_keys(np.arange(len(node_starts)), keys[node_starts])
    distance = np.bitwise_count(fingerprints[node_starts[left]] ^ fingerprints[node_starts[right]])
    beyond = distance > k
    left, right = left[beyond], right[beyond]
    first, second, which = cross_members(positions, starts, left, right)
    low, high = np.minimum(first, second), np.maximum(first, second)
    if not len(low):
        return empty, empty, empty
    pairs, where = np.unique(np.stack([low, high], axis=1), axis=0, return_index=True)
    return pairs[:, 0].copy(), pairs[:, 1].copy(), distance[beyond][which[where]].astype(np.int64)


def key_star_edges(keys: U64Array, fingerprints: U64Array) -> tuple[U64Array, U64Array]:
    """``(low, high)``: edges that join every fingerprint sharing a key with
    another (``keys[i]`` is a key of ``fingerprints[i]``) to the smallest
    fingerprint under that key. They connect what every pair sharing a key
    would, in one edge per fingerprint and key instead of a pair per two: a
    component forest's input (:func:`simstore.index.prefix_shuffle.edge_forest`).

    >>> low, high = key_star_edges(
    ...     np.array([7, 7, 7, 9, 9], dtype=np.uint64), np.array([5, 3, 4, 4, 4], dtype=np.uint64)
    ... )
    >>> [(int(a), int(b)) for a, b in zip(low, high)]
    [(3, 4), (3, 5)]
    """
    keys = np.asarray(keys, dtype=np.uint64)
    fingerprints = np.asarray(fingerprints, dtype=np.uint64)
    if not len(keys):
        return fingerprints, fingerprints
    order = np.lexsort((fingerprints, keys))
    keys, fingerprints = keys[order], fingerprints[order]
    distinct = np.r_[True, (keys[1:] != keys[:-1]) | (fingerprints[1:] != fingerprints[:-1])]
    keys, fingerprints = keys[distinct], fingerprints[distinct]
    run_start = np.r_[True, keys[1:] != keys[:-1]]
    # Each entry's run's first (smallest) fingerprint.
    smallest = fingerprints[np.flatnonzero(run_start)[np.cumsum(run_start) - 1]]
    joined = ~run_start
    return smallest[joined], fingerprints[joined]
