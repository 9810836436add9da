"""What a store holds and whether it is sound: ``Store.stats`` and
``Store.check`` (and ``simstore stats`` / ``simstore check``)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from simstore import _lmdb, occupancy, runs
from simstore.catalog import Catalog, Run
from simstore.choose import layout_name
from simstore.delta import Delta
from simstore.errors import CorruptStoreError
from simstore.format import CATALOG_KEY, FORMAT_VERSION, STATE_KEY, State
from simstore.inputs import store_sketch
from simstore.permute import FINGERPRINT_BITS, Table
from simstore.reads import all_documents
from simstore.records import decode_id, decode_record, lookup_key, unpack_key
from simstore.results import Stats
from simstore.skew import degenerate_fingerprints, table_skew
from simstore.tables import TableSet

if TYPE_CHECKING:
    from simstore.engine import Engine


def store_stats(engine: Engine, skew: bool) -> Stats:
    """``Store.stats``: sizes and layout from one snapshot; with ``skew``,
    also how evenly each table's prefixes fill (reads every fingerprint)."""
    with engine.read() as txn:
        docs = int(txn.stat(engine.handles.keys)["entries"])
        sketches = engine.handles.sketches
        sketched_docs = 0 if sketches is None else int(txn.stat(sketches)["entries"])
        delta_docs = len(engine.delta)
        # Every document outside the delta has one entry in every table.
        table_entries = (docs - delta_docs,) * len(engine.tables)
        fingerprints = all_documents(engine, txn)[1] if skew else None
        catalog = engine.tableset.catalog
    table_skew_list = None
    degenerate = None
    if fingerprints is not None:
        table_skew_list = tuple(
            table_skew(np.sort(table.permute_array(fingerprints)), table.prefix_bits)
            for table in engine.tables
        )
        degenerate = degenerate_fingerprints(fingerprints)
    params = engine.params
    sketch = store_sketch(engine)
    return Stats(
        path=engine.path,
        docs=docs,
        delta_docs=delta_docs,
        tables=len(engine.tables),
        k=params.k,
        blocks=params.blocks,
        prefix_bits=tuple(table.prefix_bits for table in engine.tables),
        layout=tuple(table.bit_order for table in engine.tables),
        table_entries=table_entries,
        bytes_on_disk=file_bytes(engine.path),
        bytes_used=engine.env.used_bytes(),
        map_size=engine.env.map_size(),
        format_version=FORMAT_VERSION,
        readonly=engine.readonly,
        layout_name=layout_name(params.k, params.layout),
        skew=table_skew_list,
        degenerate=degenerate,
        runs=len(catalog.runs),
        compacting=catalog.compaction is not None,
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
        fingerprint_of = _records(txn, handles, state, problems)
        _check_sketches(txn, handles, fingerprint_of, problems)
        for doc_id, fingerprint in replayed_delta.items():
            if fingerprint_of.get(doc_id) != fingerprint:
                problems.append(f"delta document {doc_id} does not match its record")
        try:
            catalog = Catalog.decode(txn.get(CATALOG_KEY, db=handles.meta), len(engine.tables))
        except CorruptStoreError as exc:
            return [*problems, f"run catalog: {exc}"]
        tabled = {doc_id: fp for doc_id, fp in fingerprint_of.items() if doc_id not in replayed_delta}
        for index, table in enumerate(engine.tables):
            _check_table(txn, engine.tableset, catalog, index, table, tabled, problems)
    return problems


def _records(txn: _lmdb.Txn, handles: _lmdb.Handles, state: State, problems: list[str]) -> dict[int, int]:
    """``{doc_id: fingerprint}`` of every sound record; the unsound ones are problems."""
    fingerprint_of: dict[int, int] = {}
    for id_bytes, raw in txn.cursor(handles.docs):
        doc_id = decode_id(id_bytes)
        try:
            fingerprint, packed = decode_record(raw)
            key_found_by = lookup_key(packed)
            unpack_key(packed)
        except CorruptStoreError as exc:
            problems.append(f"document {doc_id}: {exc}")
            continue
        fingerprint_of[doc_id] = fingerprint
        if doc_id >= state.next_id:
            problems.append(f"document {doc_id} is not below next_id {state.next_id}")
        if txn.get(key_found_by, db=handles.keys) != id_bytes:
            problems.append(f"document {doc_id}'s key does not map back to it")
    key_count = int(txn.stat(handles.keys)["entries"])
    if key_count != len(fingerprint_of):
        problems.append(f"{key_count} keys but {len(fingerprint_of)} document records")
    return fingerprint_of


def _check_sketches(
    txn: _lmdb.Txn, handles: _lmdb.Handles, fingerprint_of: Mapping[int, int], problems: list[str]
) -> None:
    """Every sketch belongs to a stored document, and all have one width."""
    if handles.sketches is None:
        return
    widths: set[int] = set()
    for id_bytes, raw in txn.cursor(handles.sketches):
        doc_id = decode_id(id_bytes)
        if doc_id not in fingerprint_of:
            problems.append(f"a sketch is stored for document {doc_id}, which has no record")
        widths.add(len(raw))
    if len(widths) > 1:
        problems.append(f"stored sketches have several widths: {sorted(widths)}")


def _check_table(
    txn: _lmdb.Txn,
    tableset: TableSet,
    catalog: Catalog,
    index: int,
    table: Table,
    tabled: Mapping[int, int],
    problems: list[str],
) -> None:
    """Table ``index`` holds exactly ``tabled``, each where the catalog says."""
    seen: set[int] = set()
    building = catalog.compaction.output.run_id if catalog.compaction else None
    answering = catalog.table_runs(index)
    known_runs = {run.run_id for run in catalog.runs} | ({building} if building is not None else set())
    for run, low, high in answering:
        bitmaps = None if run.run_id == building else _run_bitmaps(txn, tableset, index, run, problems)
        for key, keys, ids in _buckets(tableset, txn, index, run, low, high, problems):
            # A compaction step leaves an input's bucket that straddles its
            # cursor holding the entries past the cursor only.
            if len(keys) and (int(keys[0]) < low or int(keys[-1]) >= high):
                problems.append(f"table {index}: bucket {key.hex()} holds entries outside its run's range")
            for doc_id, known in zip(ids.tolist(), keys.tolist(), strict=True):
                expected = tabled.get(doc_id)
                if expected is None:
                    problems.append(f"table {index} holds document {doc_id}, which should not be there")
                elif runs.known_key(table.permute(expected), run.geometries[index]) != known:
                    problems.append(f"table {index} holds document {doc_id} under a wrong key")
                if doc_id in seen:
                    problems.append(f"table {index} holds document {doc_id} twice")
                seen.add(doc_id)
            if bitmaps is not None:
                _check_slots(bitmaps, run.bitmap_bits[index], index, run, keys, key, problems)
    missing = len(tabled) - len(seen & tabled.keys())
    if missing:
        problems.append(f"table {index} lacks {missing} documents")
    _check_leftovers(txn, tableset.databases[index], index, answering, known_runs, problems)


def _buckets(
    tableset: TableSet,
    txn: _lmdb.Txn,
    index: int,
    run: Run,
    low: int,
    high: int,
    problems: list[str],
) -> Iterator[tuple[bytes, np.ndarray, np.ndarray]]:
    """The run's sound buckets in the range; damaged ones are problems."""
    geometry = run.geometries[index]
    for key, value in tableset.buckets(txn, index, run, low, high):
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
        yield key, keys, ids


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
    keys: np.ndarray,
    bucket_key: bytes,
    problems: list[str],
) -> None:
    """A finished run's bitmaps mark every entry's slot (and a slot two
    entries share as crowded)."""
    occupied, crowded = bitmaps
    slots = keys >> np.uint64(FINGERPRINT_BITS - bits)
    if not bool(occupancy.are_set(occupied, slots).all()):
        problems.append(
            f"table {index}'s occupancy bitmap of run {run.run_id} lacks a slot of bucket {bucket_key.hex()}"
        )
    repeated = slots[1:][slots[1:] == slots[:-1]]
    if len(repeated) and not bool(occupancy.are_set(crowded, repeated).all()):
        problems.append(
            f"table {index}'s crowded bitmap of run {run.run_id} lacks a slot of bucket {bucket_key.hex()}"
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
    for key in txn.cursor(db).iternext(keys=True, values=False):
        if len(key) != runs.KEY.size:
            if len(key) == 13 and key[:4] == occupancy.BITMAP_RUN.to_bytes(4, "big"):
                chunk_run = int.from_bytes(key[4:8], "big")
                if chunk_run not in known_runs:
                    problems.append(
                        f"table {index} holds bitmap chunks of run {chunk_run}, which the catalog lacks"
                    )
                continue
            problems.append(f"table {index} holds a key of {len(key)} bytes")
            continue
        run_id, bucket = runs.KEY.unpack(key)
        if run_id not in ranges:
            problems.append(f"table {index} holds buckets of run {run_id}, which the catalog lacks")
            continue
        geometry = geometries[run_id]
        shift = FINGERPRINT_BITS - geometry.bucket_bits
        start = bucket << shift if geometry.bucket_bits else 0
        end = (bucket + 1) << shift if geometry.bucket_bits else 1 << FINGERPRINT_BITS
        if not any(start < high and low < end for low, high in ranges[run_id]):
            problems.append(f"table {index} holds bucket {key.hex()} outside the range its run answers for")
