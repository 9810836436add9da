"""Prefix range scans over the permutation tables, and the popcount filter.

For each table the query's permuted key fixes a leading prefix; every stored
fingerprint that shares that prefix sits in one contiguous range of the
sorted table, found with one ``set_range`` and walked with ``next`` until the
prefix changes. The Hamming distance is the popcount of the XOR of the
permuted keys: a permutation moves bits but never changes how many differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from simstore._lmdb import Cursor, Database, Txn
from simstore.permute import MAX_FINGERPRINT, Table, U64Array

# Compares greater than every 8-byte key: the end bound of the last prefix range.
PAST_LAST_KEY = b"\xff" * 9


#: A table's occupancy bitmap and the shift that gives a key's slot in it, or
#: ``None`` when the table has no usable bitmap and must always be probed.
Occupancy = tuple[bytes, int] | None


def scan_tables(
    txn: Txn,
    databases: Sequence[Database],
    cursors: list[Cursor | None],
    plan: Sequence[tuple[int, Occupancy]],
    permuted: Sequence[int],
    k: int,
    found: dict[int, int],
) -> None:
    """Add every table entry within ``k`` bits of the query to ``found``.

    Args:
        txn: the read transaction.
        databases: the tables' databases, in table order.
        cursors: one cursor per table, ``None`` until a probe needs it (and
            then kept there, so that a batch of queries reuses them).
        plan: per table, the bits after its prefix and its occupancy bitmap.
        permuted: the query's permuted key in each table.
        k: the largest distance kept.
        found: ``{doc_id: distance}``, updated in place.
    """
    for index, ((suffix, occupied), query_key) in enumerate(zip(plan, permuted, strict=True)):
        if occupied is not None:
            # Most prefixes are empty: a bit test instead of a B-tree descent.
            bitmap, shift = occupied
            slot = query_key >> shift
            if not (bitmap[slot >> 3] >> (slot & 7)) & 1:
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
            distance = (int.from_bytes(stored_key, "big") ^ query_key).bit_count()
            if distance <= k:
                found[int.from_bytes(doc_id, "big")] = distance


def permute_batch(tables: Sequence[Table], fingerprints: U64Array) -> list[tuple[int, ...]]:
    """Every query's permuted key in every table: one tuple per query."""
    if fingerprints.size == 0:
        return []
    per_table = [table.permute_array(fingerprints).tolist() for table in tables]
    return list(zip(*per_table, strict=True))
