"""Exact Hamming search over a run's sorted columns, every probe at once.

A *run* of a multi-index scheme (:mod:`simstore.index.multi_index`) is an
immutable set of documents held as one sorted column per table: table 0's
column is the fingerprints themselves in ascending order (its segment leads
already), with each one's document id beside it; table ``i``'s is the
fingerprints rotated left by segment ``i``'s start, sorted. A rotated key
holds the whole fingerprint, so a candidate is verified from the column it
was found in, and only the matches go back to table 0 for their ids.

A batch of queries costs a fixed number of numpy calls per table, whatever
the number of probes or queries: every probe's range by two vectorised
binary searches, every candidate gathered, un-rotated and popcounted in one
pass. Each match is reported once: by the first table whose segment it
agrees with within that table's radius (the probes of one table are distinct
segment values, so a key answers at most one of them).

The columns are plain arrays: built in memory here, or views of a store's
values mapped from disk. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidValueError
from simstore.index.multi_index import MultiIndex
from simstore.index.permute import FINGERPRINT_BITS, MAX_FINGERPRINT, U64Array

IntArray = npt.NDArray[np.int64]
IdArray = npt.NDArray[np.unsignedinteger[Any]]


@dataclass(frozen=True)
class ColumnRun:
    """One run's columns.

    Attributes:
        fingerprints: table 0's column, ascending (ties in id order).
        ids: the document id of each entry of ``fingerprints``.
        rotated: the sorted columns of tables 1 and up.
    """

    fingerprints: U64Array
    ids: IdArray
    rotated: tuple[U64Array, ...]

    def __len__(self) -> int:
        return len(self.fingerprints)

    def column(self, table: int) -> U64Array:
        """Table ``table``'s sorted keys."""
        return self.fingerprints if table == 0 else self.rotated[table - 1]


@dataclass(frozen=True)
class Matches:
    """Pairs of (query, stored document) within the distance asked, in no
    particular order: ``queries[j]`` is the position of the query in its
    batch, ``ids[j]`` the document's id, ``distances[j]`` their Hamming
    distance."""

    queries: IntArray
    ids: IdArray
    distances: IntArray

    def __len__(self) -> int:
        return len(self.queries)


def build_run(scheme: MultiIndex, fingerprints: U64Array, ids: IdArray) -> ColumnRun:
    """The columns of a run holding ``fingerprints`` (``ids[j]`` is the id of
    ``fingerprints[j]``)."""
    fingerprints = np.asarray(fingerprints, dtype=np.uint64)
    ids = np.asarray(ids)
    if fingerprints.ndim != 1 or ids.shape != fingerprints.shape:
        raise InvalidValueError(f"one id per fingerprint: {fingerprints.shape} fingerprints, {ids.shape} ids")
    order = np.lexsort((ids, fingerprints))
    rotated = []
    for table in range(1, scheme.tables):
        keys = scheme.rotate(fingerprints, table)
        keys.sort()
        rotated.append(keys)
    return ColumnRun(fingerprints[order], ids[order], tuple(rotated))


def search(scheme: MultiIndex, run: ColumnRun, queries: U64Array, k: int) -> Matches:
    """Every document of ``run`` within ``k`` bits of each of ``queries``.

    Raises:
        InvalidValueError: ``k`` is past what the scheme answers exactly.
    """
    if not 0 <= k <= scheme.k:
        raise InvalidValueError(f"the scheme {scheme.label()} answers k up to {scheme.k}, not {k}")
    queries = np.asarray(queries, dtype=np.uint64).reshape(-1)
    found_rows: list[IntArray] = []
    found_fingerprints: list[U64Array] = []
    found_distances: list[IntArray] = []
    table0_positions: IntArray = np.empty(0, dtype=np.int64)
    table0_rows: IntArray = np.empty(0, dtype=np.int64)
    table0_distances: IntArray = np.empty(0, dtype=np.int64)
    if len(run) and len(queries):
        for table in range(scheme.tables):
            rows, positions, fingerprints, distances = _table_matches(scheme, run, queries, k, table)
            if table == 0:
                table0_rows, table0_positions, table0_distances = rows, positions, distances
            else:
                found_rows.append(rows)
                found_fingerprints.append(fingerprints)
                found_distances.append(distances)
    # Matches of later tables are fingerprints: their ids are in table 0,
    # one entry per document holding that fingerprint.
    fingerprints = np.concatenate(found_fingerprints) if found_fingerprints else np.empty(0, np.uint64)
    first = np.searchsorted(run.fingerprints, fingerprints, side="left")
    past = np.searchsorted(run.fingerprints, fingerprints, side="right")
    positions, owner = _expand(first, past)
    later_rows = np.concatenate(found_rows)[owner] if found_rows else np.empty(0, np.int64)
    later_distances = np.concatenate(found_distances)[owner] if found_distances else np.empty(0, np.int64)
    rows = np.concatenate([table0_rows, later_rows])
    distances = np.concatenate([table0_distances, later_distances])
    all_positions = np.concatenate([table0_positions, positions])
    return Matches(rows.astype(np.int64), run.ids[all_positions], distances.astype(np.int64))


def _table_matches(
    scheme: MultiIndex, run: ColumnRun, queries: U64Array, k: int, table: int
) -> tuple[IntArray, IntArray, U64Array, IntArray]:
    """The matches table ``table`` answers for: query rows, positions in its
    column, fingerprints, distances."""
    column = run.column(table)
    lows = scheme.probe_keys(queries, table)
    probes = lows.shape[1]
    lows = lows.reshape(-1)
    highs = lows | np.uint64(MAX_FINGERPRINT ^ scheme.prefix_mask(table))
    first = np.searchsorted(column, lows, side="left")
    past = np.searchsorted(column, highs, side="right")
    positions, probe_of = _expand(first, past)
    rows = probe_of // probes
    fingerprints = column[positions]
    if table:
        fingerprints = scheme.unrotate(fingerprints, table)
    differ = fingerprints ^ queries[rows]
    distances = np.bitwise_count(differ).astype(np.int64)
    near = distances <= k
    if table:
        # Reported by the first table whose segment is within its radius, and
        # once per fingerprint (its ids come from table 0, all at once).
        near &= ~_found_earlier(scheme, differ, table)
        near &= (positions == 0) | (column[positions - 1] != column[positions])
    return rows[near], positions[near], fingerprints[near], distances[near]


def _found_earlier(scheme: MultiIndex, differ: U64Array, table: int) -> npt.NDArray[np.bool_]:
    """Whether some table before ``table`` also finds each difference."""
    earlier = np.zeros(differ.shape, dtype=bool)
    for before in range(table):
        width, start = scheme.widths[before], scheme.starts[before]
        segment_mask = ((1 << width) - 1) << (FINGERPRINT_BITS - start - width)
        earlier |= np.bitwise_count(differ & np.uint64(segment_mask)) <= scheme.radii[before]
    return earlier


def _expand(first: IntArray, past: IntArray) -> tuple[IntArray, IntArray]:
    """Every position in the ranges ``[first[j], past[j])``, and the ``j`` of each."""
    counts = (past - first).astype(np.int64)
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    if total == 0:
        return np.empty(0, dtype=np.int64), owner
    # Position = range start + offset inside the range: offsets are a running
    # count that restarts at every range.
    starts_before = np.cumsum(counts) - counts
    positions = np.arange(total, dtype=np.int64) - starts_before[owner] + first[owner]
    return positions, owner
