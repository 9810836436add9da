"""What a store holds and whether it is sound: ``Store.stats`` and
``Store.check`` (and ``simstore stats`` / ``simstore check``)."""

from __future__ import annotations

import functools
import itertools
import operator
import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np
import numpy.typing as npt

from simstore.engine import _lmdb, columns, occupancy, runs
from simstore.engine.band_tables import view_band_run
from simstore.engine.catalog import Catalog, Run
from simstore.engine.column_tables import view_run
from simstore.engine.column_tableset import ColumnTableSet
from simstore.engine.delta import Delta
from simstore.engine.format import CATALOG_KEY, STATE_KEY, State
from simstore.engine.prepared_join import JOINING_KEY, Joining
from simstore.engine.reads import all_documents
from simstore.engine.records import decode_id, decode_record, lookup_key
from simstore.engine.settings import store_sketch
from simstore.engine.tableset import TableSet
from simstore.errors import CorruptStoreError
from simstore.index.band_runs import packed_entries
from simstore.index.permute import FINGERPRINT_BITS, MAX_FINGERPRINT, Table, U64Array
from simstore.index.skew import degenerate_fingerprints, table_skew
from simstore.keys import KEY_TYPES, unpack_key
from simstore.layout.choose import layout_name
from simstore.results import Stats

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def store_stats(engine: Engine, skew: bool) -> Stats:
    """``Store.stats``: sizes and layout from one snapshot; with ``skew``,
    also how evenly each table's prefixes fill (reads every fingerprint)."""
    with engine.read() as txn:
        docs = int(txn.stat(engine.handles.keys)["entries"])
        sketches = engine.handles.sketches
        sketched_docs = 0 if sketches is None else int(txn.stat(sketches)["entries"])
        delta_docs = len(engine.delta)
        # Every document outside the delta has one entry in every table
        # (format 3: and documents taken out have theirs until a join).
        scheme = engine.params.scheme
        if scheme is None:
            table_entries = (docs - delta_docs,) * len(engine.tables)
        else:
            table_entries = (sum(run.entries for run in engine.tableset.catalog.runs),) * scheme.tables
        fingerprints = all_documents(engine, txn)[1] if skew else None
        catalog = engine.tableset.catalog
        # (Format 3: a join being prepared in steps, by any process.)
        joining = scheme is not None and txn.get(JOINING_KEY, db=engine.handles.meta) is not None
        bytes_live = engine.env.live_bytes(txn, engine.handles)
    table_skew_list = None
    degenerate = None
    # The tables the file holds (format 3: the scheme's rotations; the Manku
    # layout in engine.tables then serves only the delta and pair searches).
    stored_tables = engine.tables if scheme is None else scheme.as_tables()
    if fingerprints is not None:
        table_skew_list = tuple(
            table_skew(np.sort(table.permute_array(fingerprints)), table.prefix_bits)
            for table in stored_tables
        )
        degenerate = degenerate_fingerprints(fingerprints)
    params = engine.params
    sketch = store_sketch(engine)
    return Stats(
        path=engine.path,
        docs=docs,
        delta_docs=delta_docs,
        tables=params.stored_tables,
        k=params.k,
        blocks=params.blocks,
        prefix_bits=tuple(table.prefix_bits for table in stored_tables),
        layout=tuple(table.bit_order for table in stored_tables),
        table_entries=table_entries,
        bytes_on_disk=file_bytes(engine.path),
        bytes_used=engine.env.used_bytes(),
        map_size=engine.env.map_size(),
        format_version=params.version,
        readonly=engine.readonly,
        layout_name=layout_name(params.k, params.layout),
        skew=table_skew_list,
        degenerate=degenerate,
        runs=len(catalog.runs),
        bytes_live=bytes_live,
        compacting=catalog.compaction is not None or joining,
        sketched_docs=sketched_docs,
        sketch_bytes=0 if sketch is None else sketch.nbytes,
        min_similarity=params.min_similarity,
    )


def file_bytes(path: str) -> int:
    """Bytes the store file occupies on disk (allocated blocks, not its length)."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def check_store(engine: Engine) -> list[str]:
    """Every broken invariant of the store, described; empty when sound.

    Every key maps to a record whose key maps back; ids are below the next
    id; the delta log replays to the in-memory delta and matches the
    records; the run catalog is sound; every document outside the delta has
    exactly one entry in every table, in the run that answers for its
    permuted key, recording its fingerprint's leading bits; nothing else has
    an entry; every bucket's checksum and order hold, and every finished
    run's bitmaps mark every entry's slot.
    """
    problems: list[str] = []
    with engine.read() as txn:
        handles = engine.handles
        state = State.decode(txn.get(STATE_KEY, db=handles.meta))
        replayed = Delta(engine.tables)
        cursor = txn.cursor(handles.delta)
        cursor.first()
        try:
            replayed.apply(cursor.iternext())
        except CorruptStoreError as exc:
            problems.append(f"delta log: {exc}")
        replayed_delta = replayed.as_dict()
        if replayed_delta != engine.delta.as_dict():
            problems.append("the in-memory delta differs from the delta log")
        documents = _records(txn, handles, state, problems)
        _check_sketches(txn, handles, documents[0], problems)
        for doc_id, fingerprint in replayed_delta.items():
            if _fingerprint_of(documents, doc_id) != fingerprint:
                problems.append(f"delta document {doc_id} does not match its record")
        tableset = engine.tableset
        if isinstance(tableset, ColumnTableSet):
            tabled = _Tabled(_without(documents, replayed_delta.keys()))
            _check_columns(txn, tableset, handles.meta, tabled, state, problems)
            return problems
        try:
            catalog = Catalog.decode(txn.get(CATALOG_KEY, db=handles.meta), len(engine.tables))
        except CorruptStoreError as exc:
            return [*problems, f"run catalog: {exc}"]
        tabled = _Tabled(_without(documents, replayed_delta.keys()))
        del documents
        assert isinstance(tableset, TableSet)
        for index, table in enumerate(engine.tables):
            _check_table(txn, tableset, catalog, index, table, tabled, problems)
    return problems


#: Documents as two arrays: their ids, ascending, and their fingerprints.
Documents = tuple[U64Array, U64Array]


def _fingerprint_of(documents: Documents, doc_id: int) -> int | None:
    ids, fingerprints = documents
    at = int(np.searchsorted(ids, np.uint64(doc_id)))
    return int(fingerprints[at]) if at < len(ids) and int(ids[at]) == doc_id else None


def _without(documents: Documents, doc_ids: Iterable[int]) -> Documents:
    """The documents but those of ``doc_ids``."""
    left_out = np.fromiter(doc_ids, dtype=np.uint64)
    ids, fingerprints = documents
    if not len(left_out):
        return documents
    kept = ~np.isin(ids, left_out)
    return ids[kept], fingerprints[kept]


class _Tabled:
    """The documents the tables should hold, and where to find each by id."""

    def __init__(self, documents: Documents) -> None:
        self.ids, self.fingerprints = documents
        # Where each id is, by id: a gather instead of a binary search per
        # entry, unless ids are sparse (then 4 bytes an id would not pay).
        # (The largest id, not the last: a damaged record's id may be out of order.)
        top = int(self.ids.max()) + 1 if len(self.ids) else 0
        self.dense: npt.NDArray[np.int32] | None = None
        if top <= 4 * len(self.ids) + (1 << 20) and len(self.ids) < 2**31:
            self.dense = np.full(top, -1, dtype=np.int32)
            self.dense[self.ids] = np.arange(len(self.ids), dtype=np.int32)

    def positions(self, doc_ids: U64Array) -> npt.NDArray[np.int64]:
        """Where each of ``doc_ids`` is in ``ids``, or -1."""
        found = np.full(len(doc_ids), -1, dtype=np.int64)
        if self.dense is not None:
            inside = doc_ids < np.uint64(len(self.dense))
            found[inside] = self.dense[doc_ids[inside]]
            return found
        if not len(self.ids):
            return found
        # Searched in id order, then put back: three times faster than
        # searching in the entries' random order.
        order = np.argsort(doc_ids)
        at = np.minimum(np.searchsorted(self.ids, doc_ids[order]), len(self.ids) - 1)
        hit = self.ids[at] == doc_ids[order]
        found[order[hit]] = at[hit]
        return found


#: Document records :func:`_records` checks together.
RECORD_SLICE = 1 << 16


def _records(txn: _lmdb.Txn, handles: _lmdb.Handles, state: State, problems: list[str]) -> Documents:
    """Every document with a sound record; the unsound ones are problems.

    Kept as arrays, not a dict: a dict of 100M ints would take about 10 GB.
    Checked a slice at a time, with C-level loops: each key unpacked from
    one msgpack stream and looked up with ``map``.
    """
    id_parts: list[U64Array] = []
    fingerprint_parts: list[U64Array] = []
    stored = txn.cursor(handles.docs).iternext()
    while chunk := list(itertools.islice(stored, RECORD_SLICE)):
        id_bytes, records = zip(*chunk, strict=True)
        if min(map(len, records)) < 9 or not _keys_sound(records):
            # Damage in this slice: find it a record at a time.
            ids, fingerprints = _records_one_by_one(txn, handles, chunk, problems)
        else:
            ids = np.frombuffer(b"".join(id_bytes), dtype=">u8").astype(np.uint64)
            fingerprints = np.frombuffer(b"".join(raw[:8] for raw in records), dtype=">u8").astype(np.uint64)
            found_by = map(lookup_key, (raw[8:] for raw in records))
            mapped = map(functools.partial(txn.get, db=handles.keys), found_by)
            for doc_id, maps_back in zip(ids.tolist(), map(operator.eq, mapped, id_bytes), strict=True):
                if not maps_back:
                    problems.append(f"document {doc_id}'s key does not map back to it")
        for doc_id in ids[ids >= np.uint64(state.next_id)].tolist():
            problems.append(f"document {doc_id} is not below next_id {state.next_id}")
        id_parts.append(ids)
        fingerprint_parts.append(fingerprints)
    count = sum(map(len, id_parts))
    key_count = int(txn.stat(handles.keys)["entries"])
    if key_count != count:
        problems.append(f"{key_count} keys but {count} document records")
    if not id_parts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    # The cursor gave them in id order (big-endian keys).
    return np.concatenate(id_parts), np.concatenate(fingerprint_parts)


def _keys_sound(records: Sequence[bytes]) -> bool:
    """Whether the key of every record (past its 8 bytes of fingerprint) is
    one msgpack value of a key's type, read as one stream: a damaged key
    shifts the values that follow, and so changes their count or types."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=0)
    unpacker.feed(b"".join(raw[8:] for raw in records))
    try:
        keys = list(unpacker)
    except Exception:  # msgpack raises several unrelated types on bad input
        return False
    return len(keys) == len(records) and set(map(type, keys)) <= set(KEY_TYPES)


def _records_one_by_one(
    txn: _lmdb.Txn, handles: _lmdb.Handles, chunk: Sequence[tuple[bytes, bytes]], problems: list[str]
) -> tuple[U64Array, U64Array]:
    """:func:`_records` of a slice holding damage, a record at a time."""
    ids = array("Q")
    fingerprints = array("Q")
    for id_bytes, raw in chunk:
        doc_id = decode_id(id_bytes)
        try:
            fingerprint, packed = decode_record(raw)
            key_found_by = lookup_key(packed)
            unpack_key(packed)
        except CorruptStoreError as exc:
            problems.append(f"document {doc_id}: {exc}")
            continue
        ids.append(doc_id)
        fingerprints.append(fingerprint)
        if txn.get(key_found_by, db=handles.keys) != id_bytes:
            problems.append(f"document {doc_id}'s key does not map back to it")
    return np.frombuffer(ids, dtype=np.uint64), np.frombuffer(fingerprints, dtype=np.uint64)


def _check_sketches(txn: _lmdb.Txn, handles: _lmdb.Handles, doc_ids: U64Array, problems: list[str]) -> None:
    """Every sketch belongs to a stored document (``doc_ids``, ascending),
    and all have one width."""
    if handles.sketches is None:
        return
    widths: set[int] = set()
    sketched = array("Q")
    for id_bytes, raw in txn.cursor(handles.sketches):
        sketched.append(decode_id(id_bytes))
        widths.add(len(raw))
    sketched_ids = np.frombuffer(sketched, dtype=np.uint64)
    for doc_id in sketched_ids[~_members(sketched_ids, doc_ids)].tolist():
        problems.append(f"a sketch is stored for document {doc_id}, which has no record")
    if len(widths) > 1:
        problems.append(f"stored sketches have several widths: {sorted(widths)}")


#: Buckets :func:`_check_table` decodes and checks together (about a
#: million entries at the default layouts).
CHECK_SLICE_BUCKETS = 1 << 15


def _check_table(
    txn: _lmdb.Txn,
    tableset: TableSet,
    catalog: Catalog,
    index: int,
    table: Table,
    tabled: _Tabled,
    problems: list[str],
) -> None:
    """Table ``index`` holds exactly the ``tabled`` documents, each where
    the catalog says.

    The buckets are decoded and checked a slice at a time in numpy: a check
    per entry in Python took 50 s a table at 10M documents.
    """
    building = catalog.compaction.output.run_id if catalog.compaction else None
    answering = catalog.table_runs(index)
    known_runs = {run.run_id for run in catalog.runs} | ({building} if building is not None else set())
    held: list[U64Array] = []
    foreign: list[U64Array] = []
    for run, low, high in answering:
        geometry = run.geometries[index]
        bitmaps = None if run.run_id == building else _run_bitmaps(txn, tableset, index, run, problems)
        for bucket_keys, keys, ids, counts in _bucket_slices(tableset, txn, index, run, low, high, problems):
            owner = np.repeat(np.arange(len(counts)), counts)
            # A compaction step leaves an input's bucket that straddles its
            # cursor holding the entries past the cursor only.
            outside = keys < np.uint64(low)
            if high <= MAX_FINGERPRINT:
                outside |= keys >= np.uint64(high)
            for bucket in _sorted_unique(owner[outside]).tolist():
                problems.append(
                    f"table {index}: bucket {bucket_keys[bucket].hex()} holds entries outside its run's range"
                )
            foreign.append(_check_entries(table, geometry, index, keys, ids, tabled, problems))
            if bitmaps is not None:
                _check_slots(bitmaps, run.bitmap_bits[index], index, run, keys, owner, bucket_keys, problems)
            held.append(ids)
    seen = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.uint64)
    del held
    repeated = seen[1:] == seen[:-1]
    for doc_id in _sorted_unique(seen[1:][repeated]).tolist():
        problems.append(f"table {index} holds document {doc_id} twice")
    distinct = int(np.count_nonzero(~repeated)) + 1 if len(seen) else 0
    strangers = len(_sorted_unique(np.sort(np.concatenate(foreign)))) if foreign else 0
    missing = len(tabled.ids) - (distinct - strangers)
    if missing:
        problems.append(f"table {index} lacks {missing} documents")
    _check_leftovers(txn, tableset.databases[index], index, answering, known_runs, problems)


def _check_columns(
    txn: _lmdb.Txn,
    tableset: ColumnTableSet,
    meta: _lmdb.Database,
    tabled: _Tabled,
    state: State,
    problems: list[str],
) -> None:
    """A format-3 store's tables: every run's values sound (checksums, order,
    directories, every table holding the same fingerprints), every document
    outside the delta with an entry of its recorded fingerprint, no entry of
    an id never given, and no value of a run the catalog lacks (but the
    run of a join being prepared). (Entries of
    documents taken out or given a new fingerprint since are allowed: they
    wait for a join.)"""
    try:
        catalog = tableset.decode_catalog(txn.get(CATALOG_KEY, db=meta))
    except CorruptStoreError as exc:
        problems.append(f"run catalog: {exc}")
        return
    covered: list[U64Array] = []
    banded: list[tuple[int, U64Array]] = []
    for run in catalog.runs:
        try:
            viewed = view_run(txn, tableset.databases, tableset.scheme, run.run_id, run.entries, verify=True)
        except CorruptStoreError as exc:
            problems.append(str(exc))
            continue
        ids = viewed.ids.astype(np.uint64)
        fingerprints = viewed.fingerprints.astype(np.uint64)
        if len(ids) and int(ids.max()) >= state.next_id:
            problems.append(f"run {run.run_id} holds an entry of an id never given")
        at = tabled.positions(ids)
        live = at >= 0
        live[live] = tabled.fingerprints[at[live]] == fingerprints[live]
        covered.append(ids[live])
        banded.append((run.run_id, ids[live]))
    if tableset.bands is not None:
        # A document's bands are those of the newest run holding it live: a
        # replacement that kept the fingerprint but not the sketch is in two.
        for run_id, owned in _newest_holders(banded):
            _check_band_run(txn, tableset, run_id, owned, problems)
    held = _sorted_unique(np.sort(np.concatenate(covered))) if covered else np.zeros(0, dtype=np.uint64)
    missing = len(tabled.ids) - len(held)
    if missing:
        problems.append(f"the tables lack {missing} documents")
    named = {run.run_id for run in catalog.runs}
    raw_joining = txn.get(JOINING_KEY, db=meta)
    if raw_joining is not None:
        # The run of a join being prepared (or left behind by a crash, for
        # the next join begun to drop): not in the catalog yet, nor read.
        try:
            joining = Joining.decode(bytes(raw_joining))
        except CorruptStoreError as exc:
            problems.append(str(exc))
        else:
            if joining.run_id < catalog.next_run_id and joining.run_id not in named:
                named.add(joining.run_id)
            else:
                problems.append(f"the join being prepared names run {joining.run_id}, which it cannot own")
    for index, database in enumerate(tableset.databases):
        for key in txn.cursor(database).iternext(keys=True, values=False):
            try:
                run_id, _kind = columns.parse_key(bytes(key))
            except CorruptStoreError:
                problems.append(f"table {index} holds a key {bytes(key).hex()} of no run value")
                continue
            if run_id not in named:
                problems.append(f"table {index} holds a value of run {run_id}, which the catalog lacks")


def _newest_holders(runs: list[tuple[int, U64Array]]) -> Iterator[tuple[int, U64Array]]:
    """For each ``(run id, live ids)`` of ``runs`` (oldest first), the ids
    no newer run holds too."""
    if not runs:
        return
    ids = np.concatenate([live for _, live in runs])
    run_of = np.concatenate([np.full(len(live), index) for index, (_, live) in enumerate(runs)])
    order = np.lexsort((run_of, ids))
    ids, run_of = ids[order], run_of[order]
    last = np.ones(len(ids), dtype=bool)
    last[:-1] = ids[1:] != ids[:-1]
    for index, (run_id, _) in enumerate(runs):
        yield run_id, ids[last & (run_of == index)]


def _check_band_run(
    txn: _lmdb.Txn, tableset: ColumnTableSet, run_id: int, live_ids: U64Array, problems: list[str]
) -> None:
    """A run's band keys sound (checksums, order) and holding every key of
    the sketch of each document the run holds a live entry of."""
    assert tableset.bands is not None
    try:
        band_run = view_band_run(txn, tableset.databases[0], run_id, verify=True)
    except CorruptStoreError as exc:
        problems.append(str(exc))
        return
    expected = tableset.bands.run_of(txn, live_ids)
    wanted = packed_entries(expected.keys, expected.ids)
    held = packed_entries(band_run.keys, band_run.ids)
    lacking = int(np.count_nonzero(~np.isin(wanted, held)))
    if lacking:
        problems.append(f"run {run_id}'s band table lacks {lacking} band keys of its documents")


def _sorted_unique(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The distinct values of an ascending array (``np.unique`` hashes and
    sorts again: seconds a table at 10M)."""
    if not len(values):
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def _members(values: U64Array, sorted_set: U64Array) -> npt.NDArray[np.bool_]:
    """Whether each of ``values`` is in ``sorted_set`` (ascending)."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return np.asarray(sorted_set[at] == values)


def _check_entries(
    table: Table,
    geometry: runs.Geometry,
    index: int,
    keys: U64Array,
    ids: U64Array,
    tabled: _Tabled,
    problems: list[str],
) -> U64Array:
    """Every entry is a tabled document's, under the leading bits of its
    permuted fingerprint. Returns the ids that are no tabled document's."""
    at = tabled.positions(ids)
    belongs = at >= 0
    strangers = ids[~belongs]
    for doc_id in strangers.tolist():
        problems.append(f"table {index} holds document {doc_id}, which should not be there")
    expected = runs.known_keys(table.permute_array(tabled.fingerprints[at[belongs]]), geometry)
    for doc_id in ids[belongs][expected != keys[belongs]].tolist():
        problems.append(f"table {index} holds document {doc_id} under a wrong key")
    return strangers


def _bucket_slices(
    tableset: TableSet,
    txn: _lmdb.Txn,
    index: int,
    run: Run,
    low: int,
    high: int,
    problems: list[str],
) -> Iterator[tuple[list[bytes], U64Array, U64Array, npt.NDArray[np.int64]]]:
    """The run's sound buckets in the range, a slice at a time: their keys,
    their entries' known keys and ids, and each one's entry count. Damaged
    buckets are problems, and left out."""
    geometry = run.geometries[index]
    entry_bytes = geometry.tag_bytes + geometry.id_bytes
    stored = tableset.buckets(txn, index, run, low, high)
    while chunk := list(itertools.islice(stored, CHECK_SLICE_BUCKETS)):
        bucket_keys = [key for key, _ in chunk]
        values = [value for _, value in chunk]
        try:
            keys, ids = runs.decode_buckets(bucket_keys, values, geometry)
        except CorruptStoreError:
            # Find the damaged buckets one at a time, and keep the sound ones.
            yield from _one_by_one(bucket_keys, values, geometry, index, problems)
        else:
            counts = np.array([len(value) for value in values], dtype=np.int64) - runs.HEADER.size
            yield bucket_keys, keys, ids, counts // entry_bytes


def _one_by_one(
    bucket_keys: list[bytes], values: list[bytes], geometry: runs.Geometry, index: int, problems: list[str]
) -> Iterator[tuple[list[bytes], U64Array, U64Array, npt.NDArray[np.int64]]]:
    """:func:`_bucket_slices` for a slice holding damage: each sound bucket alone."""
    for key, value in zip(bucket_keys, values, strict=True):
        try:
            keys, ids = runs.check_bucket(key, value, geometry)
        except CorruptStoreError as exc:
            problems.append(f"table {index}: {exc}")
            continue
        bucket = runs.KEY.unpack(key)[1]
        if geometry.bucket_bits and bool(
            np.any(keys >> np.uint64(FINGERPRINT_BITS - geometry.bucket_bits) != bucket)
        ):
            problems.append(f"table {index}: bucket {key.hex()} holds entries of another bucket")
        yield [key], keys, ids, np.array([len(keys)], dtype=np.int64)


def _run_bitmaps(
    txn: _lmdb.Txn, tableset: TableSet, index: int, run: Run, problems: list[str]
) -> tuple[bytes, bytes] | None:
    """A run's stored bitmaps in a table, or ``None`` (none, or damaged: a problem)."""
    if not run.bitmap_bits[index]:
        return None
    try:
        loaded = tableset.load_bitmaps(txn, index, run)
    except CorruptStoreError as exc:
        problems.append(f"table {index}'s bitmaps of run {run.run_id}: {exc}")
        return None
    return None if loaded is None else (loaded[0], loaded[1])


def _check_slots(
    bitmaps: tuple[bytes, bytes],
    bits: int,
    index: int,
    run: Run,
    keys: U64Array,
    owner: npt.NDArray[np.int64],
    bucket_keys: Sequence[bytes],
    problems: list[str],
) -> None:
    """A finished run's bitmaps mark every entry's slot (and a slot two
    entries of one bucket share as crowded); ``owner`` is each entry's
    bucket, in ``bucket_keys``."""
    occupied, crowded = bitmaps
    slots = keys >> np.uint64(FINGERPRINT_BITS - bits)
    for bucket in _sorted_unique(owner[~occupancy.are_set(occupied, slots)]).tolist():
        problems.append(
            f"table {index}'s occupancy bitmap of run {run.run_id} lacks a slot of bucket "
            f"{bucket_keys[bucket].hex()}"
        )
    shared = np.flatnonzero((slots[1:] == slots[:-1]) & (owner[1:] == owner[:-1])) + 1
    unmarked = shared[~occupancy.are_set(crowded, slots[shared])]
    for bucket in _sorted_unique(owner[unmarked]).tolist():
        problems.append(
            f"table {index}'s crowded bitmap of run {run.run_id} lacks a slot of bucket "
            f"{bucket_keys[bucket].hex()}"
        )


def _check_leftovers(
    txn: _lmdb.Txn,
    db: _lmdb.Database,
    index: int,
    answering: Sequence[tuple[Run, int, int]],
    known_runs: set[int],
    problems: list[str],
) -> None:
    """No bucket of a run the catalog does not name, and none of an answering
    run outside the key range it answers for."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for run, low, high in answering:
        ranges.setdefault(run.run_id, []).append((low, high))
    geometries = {run.run_id: run.geometries[index] for run, _, _ in answering}
    stored = list(txn.cursor(db).iternext(keys=True, values=False))
    for key in stored:
        if len(key) == runs.KEY.size:
            continue
        if len(key) == 13 and key[:4] == occupancy.BITMAP_RUN.to_bytes(4, "big"):
            chunk_run = int.from_bytes(key[4:8], "big")
            if chunk_run not in known_runs:
                problems.append(
                    f"table {index} holds bitmap chunks of run {chunk_run}, which the catalog lacks"
                )
            continue
        problems.append(f"table {index} holds a key of {len(key)} bytes")
    bucket_keys = [key for key in stored if len(key) == runs.KEY.size]
    del stored
    if not bucket_keys:
        return
    fields = np.frombuffer(b"".join(bucket_keys), dtype=">u4").reshape(len(bucket_keys), 2)
    run_ids = fields[:, 0].astype(np.int64)  # ascending: the keys are
    buckets = fields[:, 1].astype(np.int64)
    for run_id in _sorted_unique(run_ids).tolist():
        first, past = np.searchsorted(run_ids, [run_id, run_id + 1]).tolist()
        if run_id not in ranges:
            problems.append(
                f"table {index} holds {past - first} buckets of run {run_id}, which the catalog lacks"
            )
            continue
        geometry = geometries[run_id]
        if not geometry.bucket_bits:
            continue  # one bucket spans every key
        shift = FINGERPRINT_BITS - geometry.bucket_bits
        numbers = buckets[first:past]
        # Bucket b spans [b << shift, (b + 1) << shift): it meets [low, high)
        # when low >> shift <= b <= (high - 1) >> shift.
        meets = np.zeros(len(numbers), dtype=bool)
        for low, high in ranges[run_id]:
            meets |= (numbers >= low >> shift) & (numbers <= (high - 1) >> shift)
        for at in np.flatnonzero(~meets).tolist():
            problems.append(
                f"table {index} holds bucket {bucket_keys[first + at].hex()} "
                "outside the range its run answers for"
            )
