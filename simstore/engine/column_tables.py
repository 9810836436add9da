"""Format 3's runs at the LMDB boundary: writing a multi-index run's
columns into the table sub-databases, viewing them in place, checking and
dropping them.

Every function takes an open transaction and the tables' sub-databases (one
per segment of the scheme, in order). :func:`view_run` needs a transaction
begun with ``buffers=True``: its arrays are views of LMDB's map, valid until
that transaction ends or the map is resized; the caller keeps them inside the
engine and copies out what it returns (:func:`simstore.index.column_search.search`
does: fancy indexing copies).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.engine import columns
from simstore.engine._lmdb import Database, Txn, spanning_words
from simstore.errors import CorruptStoreError
from simstore.index.column_search import (
    ColumnRun,
    Directory,
    IdArray,
    RunPlace,
    Snapshot,
    build_directory,
    build_run,
)
from simstore.index.multi_index import MultiIndex
from simstore.index.permute import U64Array


def write_run(
    txn: Txn,
    databases: Sequence[Database],
    scheme: MultiIndex,
    run_id: int,
    fingerprints: U64Array,
    ids: IdArray,
) -> int:
    """Write a run of ``fingerprints`` (``ids[j]`` the id of ``fingerprints[j]``)
    under ``run_id`` in every table; returns its entry count."""
    check_tables(databases, scheme)
    built = build_run(scheme, fingerprints, ids)
    id_dtype = np.dtype("<u4") if columns.id_width(built.ids) == 4 else np.dtype("<u8")
    for table, database in enumerate(databases):
        keys = built.column(table)
        directory = built.directories[table]
        values = [
            (columns.KEYS, columns.encode(columns.KEYS, keys)),
            (columns.DIRECTORY, columns.encode(columns.DIRECTORY, directory.positions, bits=directory.bits)),
        ]
        if table == 0:
            values.append((columns.IDS, columns.encode(columns.IDS, built.ids.astype(id_dtype))))
        for kind, value in values:
            if not txn.put(columns.run_key(run_id, kind), value, db=database, overwrite=False):
                raise CorruptStoreError(f"table {table} already holds run {run_id}")
    return len(built)


def view_run(
    txn: Txn,
    databases: Sequence[Database],
    scheme: MultiIndex,
    run_id: int,
    entries: int,
    *,
    verify: bool = False,
) -> ColumnRun:
    """Run ``run_id``'s columns and directories, viewed in place (``txn`` reads buffers).

    Raises:
        CorruptStoreError: a value is missing, damaged or disagrees with
            ``entries``; with ``verify``, also a CRC that fails or keys out of
            order (what ``check()`` asks).
    """
    check_tables(databases, scheme)
    keys: list[U64Array] = []
    directories: list[Directory] = []
    ids: IdArray | None = None
    for table, database in enumerate(databases):
        column, _bits = columns.decode(
            _get(txn, database, run_id, columns.KEYS, table), columns.KEYS, verify=verify
        )
        if len(column) != entries or column.dtype.itemsize != 8:
            raise CorruptStoreError(f"table {table} holds {len(column)} keys of run {run_id}, not {entries}")
        if verify and entries and not bool(np.all(column[1:] >= column[:-1])):
            raise CorruptStoreError(f"table {table}'s keys of run {run_id} are out of order")
        directory = columns.decode_directory(
            _get(txn, database, run_id, columns.DIRECTORY, table), entries, verify=verify
        )
        if directory.bits > scheme.widths[table]:
            raise CorruptStoreError(f"table {table}'s directory of run {run_id} is wider than its segment")
        if verify and not bool(
            np.array_equal(directory.positions, build_directory(column, directory.bits).positions)
        ):
            raise CorruptStoreError(f"table {table}'s directory of run {run_id} disagrees with its keys")
        keys.append(column)
        directories.append(directory)
        if table == 0:
            ids, _bits = columns.decode(
                _get(txn, database, run_id, columns.IDS, table), columns.IDS, verify=verify
            )
            if len(ids) != entries:
                raise CorruptStoreError(f"run {run_id} holds {len(ids)} ids for {entries} keys")
    assert ids is not None
    if verify:
        _check_same_fingerprints(scheme, keys, run_id)
    return ColumnRun(keys[0], ids, tuple(keys[1:]), tuple(directories))


def snapshot_in_place(
    txn: Txn, databases: Sequence[Database], scheme: MultiIndex, runs: Sequence[tuple[int, int]]
) -> Snapshot:
    """A snapshot of ``runs`` (``(run id, entries)`` each) whose buffer is
    LMDB's map itself (:func:`simstore.engine._lmdb.spanning_words`): no value
    is copied. Valid while ``txn`` (which reads buffers) stays open.

    Raises:
        CorruptStoreError: a value is missing, damaged, or not 8-byte
            aligned in the map (values under 2 KiB sit in leaf pages).
    """
    viewed = [view_run(txn, databases, scheme, run_id, entries) for run_id, entries in runs]
    arrays = [run.ids for run in viewed]
    for run in viewed:
        arrays += [run.column(table) for table in range(scheme.tables)]
        arrays += [directory.positions for directory in run.directories]
    words, address = spanning_words(arrays)
    places = []
    for run, (_run_id, entries) in zip(viewed, runs, strict=True):
        id_bytes = run.ids.dtype.itemsize
        places.append(
            RunPlace(
                entries,
                tuple(_index(run.column(table), address, 8) for table in range(scheme.tables)),
                tuple(directory.bits for directory in run.directories),
                tuple(_index(directory.positions, address, 4) for directory in run.directories),
                _index(run.ids, address, id_bytes),
                id_bytes,
            )
        )
    return Snapshot(scheme, words, places)


def _index(array: npt.NDArray[Any], address: int, item_size: int) -> int:
    """``array``'s first item as an index of ``item_size``-byte items from ``address``."""
    offset = array.ctypes.data - address
    if offset % item_size:
        raise CorruptStoreError(f"a run value at map offset {offset} is not {item_size}-byte aligned")
    return offset // item_size


def drop_run(txn: Txn, databases: Sequence[Database], run_id: int) -> None:
    """Delete run ``run_id``'s values from every table (those present)."""
    for database in databases:
        for kind in columns.KINDS:
            txn.delete(columns.run_key(run_id, kind), db=database)


def _get(txn: Txn, database: Database, run_id: int, kind: int, table: int) -> memoryview:
    value = txn.get(columns.run_key(run_id, kind), db=database)
    if value is None:
        raise CorruptStoreError(f"table {table} lacks value {kind} of run {run_id}")
    return memoryview(value)


def check_tables(databases: Sequence[Database], scheme: MultiIndex) -> None:
    """One sub-database per table of ``scheme``, or ``ValueError``."""
    if len(databases) != scheme.tables:
        raise ValueError(f"the scheme {scheme.label()} has {scheme.tables} tables, not {len(databases)}")


def _check_same_fingerprints(scheme: MultiIndex, keys: Sequence[U64Array], run_id: int) -> None:
    """Every table holds the same fingerprints (each rotated its own way)."""
    for table in range(1, scheme.tables):
        fingerprints = scheme.unrotate(keys[table], table)
        fingerprints.sort()
        if not np.array_equal(fingerprints, keys[0]):
            raise CorruptStoreError(f"table {table} of run {run_id} holds other fingerprints than table 0")
