"""All near-duplicate pairs of a set of fingerprints: Manku's batch mode, vectorised.

For every table, the fingerprints whose permuted keys share the table's
leading prefix form a *run*; two fingerprints within ``k`` bits share the
whole prefix of at least one table, so comparing every pair inside every run
of every table finds every pair within ``k``. Inside a run the comparison is
an XOR and a popcount, done for all runs at once with numpy: at *offset* ``d``
every entry is compared with the entry ``d`` places after it, for the entries
whose run is longer than ``d``. The entries still active shrink at each step,
so the work is the sum over runs of ``length**2 / 2`` and the memory is one
array as long as the entries in runs, never a ``length x length`` matrix:
a degenerate fingerprint shared by thousands of documents costs time in
proportion to its pairs (which are all reported) but no extra memory.

A pair found in several tables is reported only by the first table whose
prefix it shares: for each pair and each earlier table, a mask test on the
XOR of the two fingerprints tells whether the earlier table's prefix agrees,
so the check needs no set of pairs already seen.

Each table's runs come from sorting the table's prefixes in memory. Walking
the sorted LMDB tables instead would read each table through py-lmdb's
cursor at about 0.36 s per million entries (measured on the benchmark
machine), ten times the 0.035 s a numpy sort of a million keys takes, so
:mod:`simstore.store.dedup` reads the fingerprints once and rebuilds one table's
order at a time.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from simstore.index.permute import FINGERPRINT_BITS, Table, U64Array

IntArray = npt.NDArray[np.int64]

#: ``(left, right, distance)``: positions into the fingerprint array (left < right
#: is not guaranteed, only left != right) and the pairs' Hamming distances.
PairArrays = tuple[IntArray, IntArray, npt.NDArray[np.uint8]]


def prefix_mask(table: Table) -> int:
    """The fingerprint bits that make up ``table``'s prefix, as a mask.

    Two fingerprints share the table's prefix exactly when their XOR has no
    bit of this mask set.

    >>> from simstore.index.permute import one_level_tables
    >>> hex(prefix_mask(one_level_tables(3, 5)[0]))
    '0xffffffc000000000'
    """
    mask = 0
    for source_bit in table.bit_order[: table.prefix_bits]:
        mask |= 1 << source_bit
    return mask


def prefix_masks(tables: Sequence[Table]) -> list[int]:
    """:func:`prefix_mask` of every table, in table order."""
    return [prefix_mask(table) for table in tables]


def _position_bits(count: int) -> int:
    return max(1, int(count - 1).bit_length())


def packs(table: Table, count: int) -> bool:
    """Whether :func:`group_by_prefix` sorts ``count`` fingerprints for
    ``table`` as packed (prefix, position) values, or (slower) with an argsort."""
    return table.prefix_bits + _position_bits(count) <= FINGERPRINT_BITS


def group_by_prefix(fingerprints: U64Array, table: Table) -> tuple[U64Array, IntArray]:
    """Order the fingerprints so that those sharing ``table``'s prefix are adjacent.

    Returns:
        ``(prefixes, order)``: ``order`` lists positions into ``fingerprints``
        with equal prefixes contiguous (ascending by prefix, then by
        position), and ``prefixes[i]`` is the prefix of
        ``fingerprints[order[i]]``.
    """
    count = len(fingerprints)
    prefixes = table.permute_array(fingerprints) >> np.uint64(table.suffix_bits)
    position_bits = _position_bits(count)
    if packs(table, count):
        # Pack (prefix, position) into one uint64 and sort values, not indices:
        # numpy's vectorised sort is three times faster than argsort for 10M keys.
        packed = (prefixes << np.uint64(position_bits)) | np.arange(count, dtype=np.uint64)
        packed.sort()
        order = (packed & np.uint64((1 << position_bits) - 1)).astype(np.int64)
        return packed >> np.uint64(position_bits), order
    order = np.argsort(prefixes, kind="stable").astype(np.int64)
    return prefixes[order], order


def run_pairs(
    prefixes: U64Array,
    fingerprints: U64Array,
    k: int,
    exclude_masks: Sequence[int] = (),
    *,
    max_step: int | None = None,
) -> Iterator[PairArrays]:
    """Pairs inside runs of equal prefixes whose fingerprints are within ``k`` bits.

    Args:
        prefixes: one prefix per entry, equal prefixes contiguous.
        fingerprints: the entries' fingerprints, in the same order.
        k: the largest Hamming distance kept.
        exclude_masks: drop a pair if its XOR has no bit of one of these masks
            set (the pair shares the prefix of a table that reports it).
        max_step: compare at most this many entries per numpy step (memory
            bound); ``None`` for no bound.

    Yields:
        ``(left, right, distance)`` arrays, positions into ``prefixes``, with
        ``left < right``; every qualifying pair exactly once.
    """
    count = len(prefixes)
    if count < 2:
        return
    masks = [np.uint64(mask) for mask in exclude_masks]
    limit = np.uint8(k)
    active = np.flatnonzero(prefixes[1:] == prefixes[:-1])
    offset = 1
    while active.size:
        step = active.size if max_step is None else max_step
        for start in range(0, active.size, step):
            left = active[start : start + step]
            right = left + offset
            xor = fingerprints[left] ^ fingerprints[right]
            distance = np.bitwise_count(xor)
            # The masks only judge the pairs within k, which are few: testing
            # them on every compared entry cost most of a k = 8 search.
            near = np.flatnonzero(distance <= limit)
            if not near.size:
                continue
            near_xor = xor[near]
            keep = np.ones(near.size, dtype=bool)
            for mask in masks:
                keep &= (near_xor & mask) != 0
            near = near[keep]
            if near.size:
                yield left[near], right[near], distance[near]
        offset += 1
        # Runs are contiguous, so an entry whose prefix equals the one
        # ``offset`` places on also equals every one in between: the active
        # entries only ever shrink.
        active = active[active + offset < count]
        active = active[prefixes[active] == prefixes[active + offset]]


def table_pairs(
    fingerprints: U64Array,
    table: Table,
    k: int,
    earlier_masks: Sequence[int] = (),
    *,
    max_step: int | None = None,
) -> Iterator[PairArrays]:
    """Pairs within ``k`` that share ``table``'s prefix and no earlier table's.

    Yields ``(left, right, distance)`` with positions into ``fingerprints``.
    """
    if len(fingerprints) < 2:
        return
    prefixes, order = group_by_prefix(fingerprints, table)
    grouped = fingerprints[order]
    for left, right, distance in run_pairs(prefixes, grouped, k, earlier_masks, max_step=max_step):
        yield order[left], order[right], distance


def all_pairs(
    fingerprints: U64Array,
    tables: Sequence[Table],
    k: int,
    *,
    max_step: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[PairArrays]:
    """Every pair of positions whose fingerprints are within ``k`` bits, each once;
    ``progress(tables_done, tables_total)`` after each table.

    ``tables`` must cover ``k``: every two fingerprints within ``k`` bits
    share the full prefix of at least one table (true of every simstore
    layout for any ``k`` up to the store's).

    >>> from simstore.index.permute import one_level_tables
    >>> fps = np.array([0b1111, 0b0111, 1 << 60, 0b0011], dtype=np.uint64)
    >>> found = [(int(a), int(b), int(d)) for chunk in all_pairs(fps, one_level_tables(3, 5), 2)
    ...          for a, b, d in zip(*chunk)]
    >>> sorted(tuple(sorted(p[:2])) + p[2:] for p in found)
    [(0, 1, 1), (0, 3, 2), (1, 3, 1)]
    """
    masks = prefix_masks(tables)
    for index, table in enumerate(tables):
        yield from table_pairs(fingerprints, table, k, masks[:index], max_step=max_step)
        if progress is not None:
            progress(index + 1, len(tables))


def brute_force_pairs(fingerprints: U64Array, k: int) -> set[tuple[int, int, int]]:
    """``{(i, j, distance)}`` with ``i < j`` for every pair within ``k``: the
    quadratic oracle the tests compare :func:`all_pairs` with."""
    found: set[tuple[int, int, int]] = set()
    for i in range(len(fingerprints) - 1):
        distances = np.bitwise_count(fingerprints[i + 1 :] ^ fingerprints[i])
        for offset in np.flatnonzero(distances <= k).tolist():
            found.add((i, i + 1 + offset, int(distances[offset])))
    return found
