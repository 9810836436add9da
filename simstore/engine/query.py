"""Query helpers that do no I/O: permuting a batch of queries for every table.

The scan itself, a bucket probe per table and run with the popcount filter,
is :meth:`simstore.engine.tableset.TableSet.find`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from simstore.index.permute import Table, U64Array

#: Below this many queries a batch is permuted a query at a time, every table
#: at once (``permute_all``, a few µs a query), rather than a table at a time
#: over the whole batch in numpy, whose fixed cost of a few dozen µs a table
#: made a one-query batch of 21 tables spend ~600 µs here.
FEW_QUERIES = 64


def permute_columns(tables: Sequence[Table], fingerprints: U64Array) -> list[U64Array]:
    """Per table, every query's permuted key."""
    return [table.permute_array(fingerprints) for table in tables]


def permuted_keys(
    tables: Sequence[Table], permute_all: Callable[[int], Sequence[int]], fingerprints: U64Array
) -> tuple[list[U64Array], list[tuple[int, ...]]]:
    """Every query's permuted key in every table: per table (the columns a
    batch search reads) and per query (the rows the delta reads)."""
    if len(fingerprints) >= FEW_QUERIES:
        columns = permute_columns(tables, fingerprints)
        return columns, rows_of(columns)
    rows = [tuple(permute_all(fingerprint)) for fingerprint in fingerprints.tolist()]
    keys = np.array(rows, dtype=np.uint64).reshape(len(rows), len(tables))
    return list(np.ascontiguousarray(keys.T)), rows


def rows_of(columns: Sequence[U64Array]) -> list[tuple[int, ...]]:
    """Per-table columns of keys as one tuple of Python ints per query."""
    if not columns or not len(columns[0]):
        return []
    return list(zip(*(column.tolist() for column in columns), strict=True))
