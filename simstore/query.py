"""Prefix range scans over the permutation tables, and the popcount filter.

For each table the query's permuted key fixes a leading prefix; every stored
fingerprint that shares that prefix sits in one contiguous range of the
sorted table, found with one ``set_range`` and walked with ``next`` until the
prefix changes. The Hamming distance is the popcount of the XOR of the
permuted keys: a permutation moves bits but never changes how many differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simstore import occupancy
from simstore._lmdb import Cursor, Database, Txn
from simstore.permute import MAX_FINGERPRINT, Table, U64Array

# Compares greater than every 8-byte key: the end bound of the last prefix range.
PAST_LAST_KEY = b"\xff" * 9


#: Per table, flat for the hot loop: the bits after its prefix, its occupancy
#: bitmap (``None`` when it has no trusted one), its crowded bitmap (or
#: ``None``), the shift that gives a key's slot in them (``key >> shift``),
#: and slot masks: ``slot_masks[a]`` is the bits of that slot as they lie in
#: table ``a``'s permuted keys.
TableScan = tuple[int, bytes | None, bytes | None, int, tuple[int, ...]]
ScanPlan = tuple[TableScan, ...]

# Entries examined in one query that later probes may be skipped for; past
# this many (a big bucket) the rest are not remembered, which only costs probes.
SEEN_LIMIT = 16


def scan_plan(tables: Sequence[Table], bitmaps: Sequence[tuple[bytes, bytes | None, int] | None]) -> ScanPlan:
    """The :data:`ScanPlan` of ``tables`` given each one's trusted bitmaps
    (``(bitmap, crowded, shift)`` or ``None``).

    >>> from simstore.permute import one_level_tables
    >>> tables = one_level_tables(3, 5)
    >>> plan = scan_plan(tables, [(b"", None, 40)] + [None] * 9)
    >>> plan[0][4][0] == MAX_FINGERPRINT >> 40 << 40, plan[1]
    (True, (38, None, None, 0, ()))
    """
    return tuple(table_scan(tables, index, entry) for index, entry in enumerate(bitmaps))


def table_scan(
    tables: Sequence[Table], index: int, bitmaps: tuple[bytes, bytes | None, int] | None
) -> TableScan:
    """Table ``index``'s entry of a :data:`ScanPlan`."""
    table = tables[index]
    if bitmaps is None:
        return table.suffix_bits, None, None, 0, ()
    bitmap, crowded, shift = bitmaps
    slot_bits = table.unpermute(MAX_FINGERPRINT >> shift << shift)
    slot_masks = tuple(other.permute(slot_bits) for other in tables)
    return table.suffix_bits, bitmap, crowded, shift, slot_masks


def occupied_tables(plan: ScanPlan, permuted_columns: Sequence[U64Array]) -> list[list[int]]:
    """For each query of a batch, the tables whose occupancy bitmap does not
    rule its prefix out (every table without a bitmap): the bit tests of
    :func:`scan_tables`, done for the whole batch with numpy.

    Args:
        plan: the scan plan.
        permuted_columns: per table, the batch's permuted keys.

    >>> from simstore.permute import one_level_tables
    >>> tables = one_level_tables(1, 2)
    >>> plan = scan_plan(tables, [(bytes([0b10]), None, 61), None])
    >>> keys = np.array([1 << 61, 2 << 61], dtype=np.uint64)
    >>> occupied_tables(plan, [keys, keys])
    [[0, 1], [1]]
    """
    count = len(permuted_columns[0]) if permuted_columns else 0
    occupied = np.ones((count, len(plan)), dtype=bool)
    for index, ((_, bitmap, _, shift, _), column) in enumerate(zip(plan, permuted_columns, strict=True)):
        if bitmap is not None:
            occupied[:, index] = occupancy.are_set(bitmap, column >> np.uint64(shift))
    rows, columns = np.nonzero(occupied)  # row-major: by query, then table
    bounds = np.searchsorted(rows, np.arange(count + 1)).tolist()
    table_list = columns.tolist()
    return [table_list[bounds[row] : bounds[row + 1]] for row in range(count)]


def scan_tables(
    txn: Txn,
    databases: Sequence[Database],
    cursors: list[Cursor | None],
    plan: ScanPlan,
    permuted: Sequence[int],
    k: int,
    found: dict[int, int],
    tables: Sequence[int] | None = None,
    remember: int = SEEN_LIMIT,
) -> None:
    """Add every table entry within ``k`` bits of the query to ``found``.

    Args:
        txn: the read transaction.
        databases: the tables' databases, in table order.
        cursors: one cursor per table, ``None`` until a probe needs it (and
            then kept there, so that a batch of queries reuses them).
        plan: per table, the bits after its prefix and its bitmaps.
        permuted: the query's permuted key in each table.
        k: the largest distance kept.
        found: ``{doc_id: distance}``, updated in place.
        tables: the tables to scan, in order, when their occupancy bitmaps
            were tested already (:func:`occupied_tables`); ``None``: test
            every table's here.
        remember: how many examined entries may later skip a probe (see
            below); 0 while a merge is under way (``State.merged_tables``).
    """
    # (table, stored key ^ query key) of the entries examined so far. Every
    # document is in every table, so an entry seen in table a that shares the
    # query's slot in table b, where that slot holds one entry, is all that b
    # could return: b's probe is skipped. A merge under way breaks the
    # premise: its documents are in the tables it has written and not yet in
    # the others, so an entry seen in a written table says nothing of what
    # an unwritten one holds (a probe skipped on it lost a stored document).
    seen: list[tuple[int, int]] = []
    for index in range(len(plan)) if tables is None else tables:
        suffix, bitmap, crowded, shift, slot_masks = plan[index]
        query_key = permuted[index]
        if bitmap is not None:
            # Most prefixes are empty: a bit test instead of a B-tree descent.
            slot = query_key >> shift
            if tables is None and not (bitmap[slot >> 3] >> (slot & 7)) & 1:
                continue
            if (
                seen
                and crowded is not None
                and not (crowded[slot >> 3] >> (slot & 7)) & 1
                and any(not difference & slot_masks[table] for table, difference in seen)
            ):
                continue
        cursor = cursors[index]
        if cursor is None:
            cursor = cursors[index] = txn.cursor(databases[index])
        low = (query_key >> suffix) << suffix
        end = low + (1 << suffix)
        end_key = end.to_bytes(8, "big") if end <= MAX_FINGERPRINT else PAST_LAST_KEY
        # Most probes find an empty range: test the first key before paying
        # for an iterator.
        if not cursor.set_range(low.to_bytes(8, "big")) or cursor.key() >= end_key:
            continue
        for stored_key, doc_id in cursor:
            if stored_key >= end_key:
                break
            difference = int.from_bytes(stored_key, "big") ^ query_key
            if len(seen) < remember:
                seen.append((index, difference))
            distance = difference.bit_count()
            if distance <= k:
                found[int.from_bytes(doc_id, "big")] = distance


def permute_columns(tables: Sequence[Table], fingerprints: U64Array) -> list[U64Array]:
    """Per table, every query's permuted key."""
    return [table.permute_array(fingerprints) for table in tables]


def rows_of(columns: Sequence[U64Array]) -> list[tuple[int, ...]]:
    """Per-table columns of keys as one tuple of Python ints per query."""
    if not columns or not len(columns[0]):
        return []
    return list(zip(*(column.tolist() for column in columns), strict=True))
