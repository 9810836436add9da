"""Prefix range scans over the permutation tables, and the popcount filter.

For each table the query's permuted key fixes a leading prefix; every stored
fingerprint that shares that prefix sits in one contiguous range of the
sorted table, found with one ``set_range`` and walked with ``next`` until the
prefix changes. The Hamming distance is the popcount of the XOR of the
permuted keys: a permutation moves bits but never changes how many differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from simstore.permute import MAX_FINGERPRINT, Table, U64Array

# Compares greater than every 8-byte key: the end bound of the last prefix range.
PAST_LAST_KEY = b"\xff" * 9


def scan_tables(
    cursors: Sequence[object],
    suffix_bits: Sequence[int],
    permuted: Sequence[int],
    k: int,
    found: dict[int, int],
) -> None:
    """Add every table entry within ``k`` bits of the query to ``found``.

    Args:
        cursors: one LMDB cursor per table, in table order.
        suffix_bits: bits after each table's prefix.
        permuted: the query's permuted key in each table.
        k: the largest distance kept.
        found: ``{doc_id: distance}``, updated in place.
    """
    for cursor, suffix, query_key in zip(cursors, suffix_bits, permuted, strict=True):
        low = (query_key >> suffix) << suffix
        end = low + (1 << suffix)
        end_key = end.to_bytes(8, "big") if end <= MAX_FINGERPRINT else PAST_LAST_KEY
        # Most probes find an empty range: test the first key before paying
        # for an iterator.
        if not cursor.set_range(low.to_bytes(8, "big")) or cursor.key() >= end_key:  # type: ignore[attr-defined]
            continue
        for stored_key, doc_id in cursor:  # type: ignore[attr-defined]
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
