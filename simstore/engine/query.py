"""Query helpers that do no I/O: permuting a batch of queries for every table.

The scan itself, a bucket probe per table and run with the popcount filter,
is :meth:`simstore.engine.tableset.TableSet.find`.
"""

from __future__ import annotations

from collections.abc import Sequence

from simstore.index.permute import Table, U64Array


def permute_columns(tables: Sequence[Table], fingerprints: U64Array) -> list[U64Array]:
    """Per table, every query's permuted key."""
    return [table.permute_array(fingerprints) for table in tables]


def rows_of(columns: Sequence[U64Array]) -> list[tuple[int, ...]]:
    """Per-table columns of keys as one tuple of Python ints per query."""
    if not columns or not len(columns[0]):
        return []
    return list(zip(*(column.tolist() for column in columns), strict=True))
