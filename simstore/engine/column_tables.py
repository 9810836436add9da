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

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.engine import columns
from simstore.engine._lmdb import Database, Txn, spanning_words
from simstore.errors import CorruptStoreError, InvalidValueError
from simstore.index import column_merge
from simstore.index.column_search import (
    ColumnRun,
    Directory,
    IdArray,
    RunPlace,
    Snapshot,
    build_directory,
    directory_bits,
    directory_dtype,
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
    make: columns.MakeValue = bytearray,
) -> int:
    """Write a run of ``fingerprints`` (``ids[j]`` the id of ``fingerprints[j]``)
    under ``run_id`` in every table, each value built in a buffer ``make``
    gives; returns its entry count."""
    check_tables(databases, scheme)
    fingerprints = np.asarray(fingerprints, dtype=np.uint64)
    ids = np.asarray(ids)
    if fingerprints.ndim != 1 or ids.shape != fingerprints.shape:
        raise InvalidValueError(f"one id per fingerprint: {fingerprints.shape} fingerprints, {ids.shape} ids")
    # As build_run lays a run out, but each column sorted straight into the
    # value put, one table's at a time (a 10M batch held every column and
    # its encoded copy at once: some 50 bytes an entry).
    entries = len(fingerprints)
    order = column_merge.fingerprint_then_id_order(fingerprints, ids)
    keys_value, keys = columns.allocate(entries, 8, make)
    np.take(fingerprints, order, out=keys)
    ids_value, sorted_ids = columns.allocate(entries, columns.id_width(ids), make)
    np.take(ids, order, out=sorted_ids)
    del order
    _put_table(txn, databases[0], scheme, 0, run_id, keys_value, keys, make)
    put_value(txn, databases[0], 0, run_id, columns.IDS, columns.seal(ids_value, columns.IDS, sorted_ids))
    del keys_value, keys, ids_value, sorted_ids
    for table in range(1, scheme.tables):
        keys_value, keys = columns.allocate(entries, 8, make)
        column_merge.rotated_column(scheme, table, fingerprints, keys, column_merge.CHUNK_ENTRIES)
        _put_table(txn, databases[table], scheme, table, run_id, keys_value, keys, make)
        del keys_value, keys
    return entries


#: A run value a join has finished: ``(table, kind, value)``, sealed, to be put.
Finished = tuple[int, int, columns.ValueBuffer]
#: :func:`join_values`: yields the values finished at each step and is sent
#: the runs viewed afresh; returns the join's entry count.
JoinSteps = Generator[list[Finished], Sequence[ColumnRun], int]


def join_run(
    txn: Txn,
    databases: Sequence[Database],
    scheme: MultiIndex,
    run_id: int,
    sources: Sequence[ColumnRun],
    kept: Sequence[npt.NDArray[np.bool_] | None],
    make: columns.MakeValue = bytearray,
) -> int:
    """Write under ``run_id`` the join of ``sources`` (runs of the scheme,
    oldest first), keeping the entries ``kept[i]`` keeps of ``sources[i]``
    (``None``: all of them) and one of each ``(fingerprint, id)``; returns
    its entry count (0: nothing written). :func:`join_values`, every step at
    once, each value put as soon as it is finished."""
    check_tables(databases, scheme)

    def put(finished: Finished) -> None:
        table, kind, value = finished
        put_value(txn, databases[table], table, run_id, kind, value)

    return columns.put_each_step(join_values(scheme, sources, kept, make), sources, put)


def join_values(
    scheme: MultiIndex,
    sources: Sequence[ColumnRun],
    kept: Sequence[npt.NDArray[np.bool_] | None],
    make: columns.MakeValue = bytearray,
) -> JoinSteps:
    """The values of the join :func:`join_run` writes, made a stretch of
    about :data:`~simstore.index.column_merge.CHUNK_ENTRIES` entries at a
    time. Each ``yield`` gives the values finished since the last (sealed,
    in buffers ``make`` gives) and takes the same runs viewed afresh: a step
    reads only its stretch of them, so the runs may be viewed in a new
    transaction at every step (a step holds no view past its end). Returns
    the entry count (0: nothing to write).

    The sources' columns are sorted already, so each joined column is a
    merge (:mod:`simstore.index.column_merge`), filled in place in its value;
    one value is alive at a time (with table 0's keys while rotated columns
    are made afresh) once the caller lets go of those it was given."""
    fingerprints = [run.fingerprints for run in sources]
    total = sum(
        len(run) if keep is None else int(np.count_nonzero(keep))
        for run, keep in zip(sources, kept, strict=True)
    )
    whole_entries = sum(len(run) for run in sources)
    chunk = column_merge.CHUNK_ENTRIES
    cuts = column_merge.stretch_cuts(fingerprints, chunk)
    id_bytes = column_merge.id_bytes_kept([run.ids for run in sources], kept, chunk)
    del fingerprints
    ids_value, sorted_ids = columns.allocate(total, id_bytes, make)
    entries = 0
    repeated: list[bool] = []
    for stretch in range(column_merge.stretch_count(cuts)):
        left, twice = column_merge.ids_stretch_into(
            *_columns_of(sources), kept, cuts, stretch, sorted_ids, entries
        )
        repeated.append(twice)
        entries += left
        sources = yield []
    if not entries:
        return 0
    # (A document held twice under one fingerprint, rarely, leaves fewer entries than total.)
    finished: list[Finished] = [
        (0, columns.IDS, columns.seal_filled(ids_value, columns.IDS, sorted_ids, entries, make))
    ]
    del ids_value, sorted_ids
    sources = yield finished
    del finished
    # The keys in a second pass, so that the ids' value and theirs are not held at once.
    keys_value, keys = columns.allocate(entries, 8, make)
    filled = 0
    for stretch in range(column_merge.stretch_count(cuts)):
        filled += column_merge.keys_stretch_into(
            *_columns_of(sources), kept, cuts, stretch, keys, filled, repeated[stretch]
        )
        sources = yield []
    # Whole columns of the sources merge as they are; once an entry was
    # dropped, a rotated column (whose keys carry no id) is made afresh from
    # table 0's keys, the fingerprints sorted (a view of its value, kept).
    sorted_fingerprints: U64Array | None = None if entries == whole_entries else keys
    finished = _table_values(scheme, 0, keys_value, keys, make)
    del keys_value, keys
    sources = yield finished
    del finished
    for table in range(1, scheme.tables):
        keys_value, keys = columns.allocate(entries, 8, make)
        if sorted_fingerprints is None:
            rotated_cuts = column_merge.stretch_cuts([run.rotated[table - 1] for run in sources], chunk)
            at = 0
            for stretch in range(column_merge.stretch_count(rotated_cuts)):
                at += column_merge.rotated_stretch_into(
                    [run.rotated[table - 1] for run in sources], rotated_cuts, stretch, keys, at
                )
                sources = yield []
        else:
            column_merge.rotated_column(scheme, table, sorted_fingerprints, keys, chunk)
        finished = _table_values(scheme, table, keys_value, keys, make)
        del keys_value, keys
        sources = yield finished
        del finished
    return entries


def _columns_of(sources: Sequence[ColumnRun]) -> tuple[list[U64Array], list[IdArray]]:
    """The runs' table-0 columns: their fingerprints, and their ids."""
    return [run.fingerprints for run in sources], [run.ids for run in sources]


def _table_values(
    scheme: MultiIndex, table: int, keys_value: columns.ValueBuffer, keys: U64Array, make: columns.MakeValue
) -> list[Finished]:
    """One table's sorted ``keys`` (the payload of ``keys_value``) sealed,
    and their directory, counted straight into its value."""
    bits = directory_bits(len(keys), scheme.widths[table])
    value, positions = columns.allocate((1 << bits) + 1, directory_dtype(len(keys)).itemsize, make)
    build_directory(keys, bits, out=positions)
    return [
        (table, columns.KEYS, columns.seal(keys_value, columns.KEYS, keys)),
        (table, columns.DIRECTORY, columns.seal(value, columns.DIRECTORY, positions, bits=bits)),
    ]


def _put_table(
    txn: Txn,
    database: Database,
    scheme: MultiIndex,
    table: int,
    run_id: int,
    keys_value: columns.ValueBuffer,
    keys: U64Array,
    make: columns.MakeValue = bytearray,
) -> None:
    """Put one table's sorted ``keys`` (the payload of ``keys_value``, sealed
    here) and their directory."""
    for _table, kind, value in _table_values(scheme, table, keys_value, keys, make):
        put_value(txn, database, table, run_id, kind, value)


def put_value(
    txn: Txn, database: Database, table: int, run_id: int, kind: int, value: columns.ValueBuffer
) -> None:
    """Put a run's value of ``kind`` into ``table``'s sub-database (``database``);
    ``CorruptStoreError`` if it holds one already."""
    if not txn.put(columns.run_key(run_id, kind), value, db=database, overwrite=False):
        raise CorruptStoreError(f"table {table} already holds run {run_id}")


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
    txn: Txn, databases: Sequence[Database], scheme: MultiIndex, runs: Sequence[tuple[int, ...]]
) -> Snapshot:
    """A snapshot of ``runs`` (``(run id, entries)`` each) whose buffer is
    LMDB's map itself (:func:`simstore.engine._lmdb.spanning_words`): no value
    is copied. Valid while ``txn`` (which reads buffers) stays open.

    Raises:
        CorruptStoreError: a value is missing, damaged, or not 8-byte
            aligned in the map (values under 2 KiB sit in leaf pages).
    """
    viewed = [view_run(txn, databases, scheme, run[0], run[1]) for run in runs]
    arrays = [run.ids for run in viewed]
    for run in viewed:
        arrays += [run.column(table) for table in range(scheme.tables)]
        arrays += [directory.positions for directory in run.directories]
    words, address = spanning_words(arrays)
    places = []
    for run, (_run_id, entries, *_stamp) in zip(viewed, runs, strict=True):
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
