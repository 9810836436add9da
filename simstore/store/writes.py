"""Writing to an open store: single adds and removes (through the group
commit), ``add_if_new``, and ``add_many`` batches.

Functions of an open engine (:mod:`simstore.engine.core`). A write puts the
document's key-table entry, record, sketch and metadata, and either logs it
in the delta (single writes, small batches) or, for a batch that fills the
delta, writes the delta and the batch into the tables as one new run.
Arguments are checked before (:mod:`simstore.store.arguments`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simstore.commit.group import group_commit
from simstore.commit.queue import Body, Spec
from simstore.engine import _lmdb
from simstore.engine.closest import closest_in
from simstore.engine.column_tableset import GivenSketches
from simstore.engine.delta import Change, encode_add, encode_remove, encode_seq
from simstore.engine.format import State
from simstore.engine.packed import IntArray, PackedKeys, Positions
from simstore.engine.reads import add_banded, find, resolve
from simstore.engine.records import (
    big_endian_sliced,
    decode_id,
    decode_record,
    encode_id,
    encode_record,
    lookup_key,
    record_pairs,
    rows_sliced,
    sliced,
)
from simstore.errors import CorruptStoreError, InvalidTypeError, InvalidValueError, KeyNotFoundError
from simstore.fingerprinting.sketch import U8Array
from simstore.index.permute import U64Array
from simstore.keys import KeyLike, pack_key, unpack_key
from simstore.results import Match
from simstore.store.maintenance import maintain, merge_threshold
from simstore.store.room import reserve_for

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def add(
    engine: Engine, packed_key: bytes, fingerprint: int, packed_meta: bytes | None, sketch: bytes | None
) -> None:
    """``Store.add`` of a checked document: one single write of the group commit."""
    spec = ["add", packed_key, fingerprint, packed_meta, sketch]
    group_commit(engine).write(engine, _add_body(engine, spec), spec)
    maintain(engine, 1)


def _add_body(engine: Engine, spec: Spec) -> Body[None]:
    _, packed_key, fingerprint, packed_meta, sketch = spec

    def body(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
        new_state, change = put_one(engine, txn, state, packed_key, fingerprint, packed_meta, sketch)
        return None, new_state, change

    return body


def add_if_new(
    engine: Engine,
    packed_key: bytes,
    fingerprint: int,
    packed_meta: bytes | None,
    sketch: bytes | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    limit: int | None = None,
) -> list[Match]:
    """``Store.add_if_new`` of a checked document: the look-up and the insert
    in one write transaction (shared with other threads' single writes).

    Raises:
        InvalidValueError: called on the store while a batch is open in this
            thread: its answer is not known until the batch commits.
    """
    if group_commit(engine).in_batch_through_store():
        raise InvalidValueError(
            "store.add_if_new inside a batch cannot say whether it inserted: the batch "
            "commits at the end of the block. Call batch.add_if_new, whose result() "
            "gives the near-duplicates after the block, or call add_if_new outside the batch"
        )
    # The layout's generation: k was checked against it.
    spec = [
        "add_if_new", packed_key, fingerprint, packed_meta, sketch, k, with_meta, threshold, limit,
        engine.params.generation,
    ]  # fmt: skip
    result: list[Match] = group_commit(engine).write(engine, _add_if_new_body(engine, spec), spec)
    if not result:
        maintain(engine, 1)
    return result


def _add_if_new_body(engine: Engine, spec: Spec) -> Body[list[Match]]:
    if len(spec) == 9:
        # Logged (or posted) by simstore before limit=, whose add_if_new
        # counted the key's own document as a match: replayed as it ran.
        _, packed_key, fingerprint, packed_meta, sketch, k, with_meta, threshold, _ = spec
        limit, own_excluded = None, False
    else:
        _, packed_key, fingerprint, packed_meta, sketch, k, with_meta, threshold, limit, _ = spec
        own_excluded = True

    def body(txn: _lmdb.Txn, state: State) -> tuple[list[Match], State, Change]:
        own = txn.get(lookup_key(packed_key), db=engine.handles.keys) if own_excluded else None
        own_id = None if own is None else decode_id(own)
        matches = _others_near(engine, txn, fingerprint, sketch, k, with_meta, threshold, limit, own_id)
        if matches:
            return matches, state, Change([], [])
        new_state, change = put_one(engine, txn, state, packed_key, fingerprint, packed_meta, sketch)
        return [], new_state, change

    return body


def _others_near(
    engine: Engine,
    txn: _lmdb.Txn,
    fingerprint: int,
    sketch: bytes | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    limit: int | None,
    own_id: int | None,
) -> list[Match]:
    """``add_if_new``'s look-up: the matches (the closest ``limit``, or all)
    of the documents other than ``own_id``, the one stored under the key."""
    records: dict[int, bytes] = {}
    if limit is None:
        found = find(engine, txn, engine.permute_all(fingerprint), fingerprint, k, records)
        known = add_banded(engine, txn, fingerprint, sketch, k, threshold, found, records)
        if own_id is not None:
            found.pop(own_id, None)
        matches = (
            resolve(engine, txn, found, with_meta, records, sketch, threshold, known=known) if found else []
        )
    else:
        matches = closest_in(
            engine, txn, fingerprint, sketch, k, with_meta, threshold, limit, records, own_id
        )
    if engine.tableset.bitmaps_unread:
        engine.tableset.read_bitmaps(txn)
    return matches


def body_of(engine: Engine, spec: Spec) -> Body[Any] | None:
    """The body of a single write another process posted in the writers'
    mailbox (the spec :func:`add`, :func:`add_if_new` or :func:`remove`
    made, already checked there); ``None`` if it must run in its own process
    (an ``add_if_new`` checked against another layout than this one's).

    Raises:
        CorruptStoreError: not a spec of this version.
    """
    make = _BODIES.get(spec[0]) if isinstance(spec[0], str) else None
    if make is not None:
        try:
            body = make(engine, spec)
        except ValueError:  # a spec of another length
            pass
        else:
            return None if spec[0] == "add_if_new" and spec[-1] != engine.params.generation else body
    raise CorruptStoreError(f"a writer's request is not a write of this simstore version: {spec!r:.200}")


@dataclass
class _Batch:
    """A validated add_many batch: ``positions`` holds the position of each
    distinct key's last occurrence in the batch, in the order of their first
    occurrences (``range(len(batch))`` when no key repeats);
    ``positions[key_order]`` are in the key table's order of their lookups
    (``key_order`` is ``None`` when ``positions`` are so already)."""

    packed_keys: PackedKeys
    positions: Positions
    key_order: IntArray | None
    fingerprints: U64Array
    metas: list[bytes | None] | None
    #: One verification sketch a document (a row of bytes), if the batch came as text.
    sketches: U8Array | None = None

    def meta(self, position: int) -> bytes | None:
        return None if self.metas is None else self.metas[position]

    def sketch_rows(self, positions: Positions) -> U8Array:
        """The sketch rows at ``positions`` (the batch holds sketches)."""
        assert self.sketches is not None
        if isinstance(positions, range):  # a slice: no copy
            return self.sketches[positions.start : positions.stop]
        return self.sketches[positions]

    def sketch(self, position: int) -> bytes | None:
        """The sketch at ``position``; an all-zero row means none."""
        if self.sketches is None or not self.sketches[position].any():
            return None
        return bytes(self.sketches[position].tobytes())


def _subset(
    positions: Positions, key_order: IntArray | None, indices: IntArray
) -> tuple[Positions, IntArray | None]:
    """``(positions, key_order)`` (as :class:`_Batch` holds them) of the
    ``indices`` of ``positions`` alone."""
    kept_positions = np.asarray(positions)[indices]
    if key_order is None:
        return kept_positions, None
    kept = np.zeros(len(positions), dtype=bool)
    kept[indices] = True
    renumbered = np.cumsum(kept) - 1
    return kept_positions, renumbered[key_order[kept[key_order]]]


def put_one(
    engine: Engine,
    txn: _lmdb.Txn,
    state: State,
    packed: bytes,
    fp: int,
    packed_meta: bytes | None,
    sketch: bytes | None = None,
) -> tuple[State, Change]:
    """Write one document (new or replacing) inside a write transaction."""
    handles = engine.handles
    found_by = lookup_key(packed)
    existing = txn.get(found_by, db=handles.keys)
    next_id = state.next_id
    if existing is None:
        doc_id = next_id
        next_id += 1
        id_bytes = encode_id(doc_id)
        txn.put(found_by, id_bytes, db=handles.keys)
        txn.put(id_bytes, encode_record(fp, packed), db=handles.docs, append=True)
        if sketch is not None and handles.sketches is not None:
            txn.put(id_bytes, sketch, db=handles.sketches, append=True)
    else:
        doc_id = decode_id(existing)
        id_bytes = existing
        old_fp = record_fingerprint(engine, txn, doc_id)
        txn.put(id_bytes, encode_record(fp, packed), db=handles.docs)
        if not put_sketch(engine, txn, id_bytes, sketch) and old_fp == fp:
            put_meta(engine, txn, id_bytes, packed_meta)
            return state, Change([], [])
        if doc_id not in engine.delta:
            engine.tableset.delete(txn, engine.tableset.catalog, [doc_id], [old_fp])
    if existing is not None or packed_meta is not None:
        # A new id has no meta to delete: ids are never reused.
        put_meta(engine, txn, id_bytes, packed_meta)
    txn.put(encode_seq(state.next_seq), encode_add(doc_id, fp), db=handles.delta, append=True)
    # (Built whole: half the time of _replace, on every single add.)
    new_state = State(next_id, state.next_seq + 1, state.merge_epoch, state.catalog_version)
    return new_state, Change([(doc_id, fp)], [])


def add_packed(
    engine: Engine,
    packed_keys: PackedKeys,
    fps: U64Array,
    meta_list: list[bytes | None] | None,
    sketches: U8Array | None = None,
) -> int:
    """Store a checked batch (see :func:`simstore.store.arguments.checked_batch`)
    in one transaction; returns how many documents it wrote. The caller then
    lets go of the batch and calls :func:`maintain` with that count (``pay_all``),
    so that a join the batch pays for does not hold the batch's arrays too."""
    if not len(packed_keys):
        return 0
    batch = _Batch(packed_keys, *packed_keys.distinct(), fps, meta_list, sketches)
    carried = len(engine.delta) + len(batch.positions)
    sketch_rows = 0 if sketches is None else len(batch.positions)
    meta_sizes = [len(meta) for meta in meta_list if meta is not None] if meta_list is not None else []
    run_entries = carried if carried >= merge_threshold(engine) else 0
    bands = engine.params.bands
    reserve_for(
        engine,
        len(batch.positions),
        packed_keys.total_bytes,
        run_entries=run_entries,
        # (Bare fingerprints have no band keys; the delta's documents may.)
        band_entries=None if bands is None or not run_entries else (len(engine.delta) + sketch_rows) * bands,
        extra_values=(
            sketch_rows + len(meta_sizes),
            sketch_rows * (0 if sketches is None else sketches.shape[1]) + sum(meta_sizes),
        ),
    )
    engine.write(lambda txn, state: add_batch(engine, txn, state, batch))
    return len(batch.positions)


def add_batch(engine: Engine, txn: _lmdb.Txn, state: State, batch: _Batch) -> tuple[None, State, Change]:
    handles = engine.handles
    existing: dict[bytes, bytes] = {}
    position_of: dict[bytes, int] = {}
    new_positions, new_key_order = batch.positions, batch.key_order
    if state.next_id:
        # A slice's lookups are made once, for the key table and for
        # telling its new keys from the stored ones.
        cursor = txn.cursor(handles.keys)
        new_indices: list[IntArray] = []  # of batch.positions, a slice at a time
        for part in sliced(len(batch.positions)):
            chunk = batch.positions[part]
            lookups = batch.packed_keys.lookups(chunk)
            found = dict(cursor.getmulti(lookups))
            first = part.start
            if not found:
                new_indices.append(np.arange(first, first + len(chunk)))
                continue
            existing.update(found)
            fresh: list[int] = []
            for index, (lookup, position) in enumerate(zip(lookups, chunk, strict=True), start=first):
                if lookup in found:
                    position_of[lookup] = position
                else:
                    fresh.append(index)
            new_indices.append(np.array(fresh, dtype=np.int64))
        if existing:
            new_positions, new_key_order = _subset(
                batch.positions, batch.key_order, np.concatenate(new_indices)
            )
    first_id = state.next_id
    next_id = first_id + len(new_positions)
    placed_ids = np.arange(first_id, next_id, dtype=np.uint64)
    if isinstance(new_positions, range):  # every document, in order
        placed_fps = batch.fingerprints[new_positions.start : new_positions.stop]
    else:
        placed_fps = batch.fingerprints[new_positions]
    if len(new_positions):
        insert_new(
            engine,
            txn,
            batch,
            (new_positions, new_key_order),
            placed_ids,
            placed_fps,
            append_keys=not state.next_id,
        )
    removed_from_delta: list[int] = []
    replaced_ids: list[int] = []
    replaced_fps: list[int] = []
    tabled_ids: list[int] = []  # replaced documents the tables hold, and their old fingerprints
    tabled_fps: list[int] = []
    fp_list = batch.fingerprints.tolist() if existing else []
    for found_by, id_bytes in existing.items():
        position = position_of[found_by]
        doc_id = decode_id(id_bytes)
        new_fp = fp_list[position]
        old_fp = record_fingerprint(engine, txn, doc_id)
        txn.put(id_bytes, encode_record(new_fp, batch.packed_keys.at(position)), db=handles.docs)
        put_meta(engine, txn, id_bytes, batch.meta(position))
        if not put_sketch(engine, txn, id_bytes, batch.sketch(position)) and old_fp == new_fp:
            continue
        if doc_id in engine.delta:
            removed_from_delta.append(doc_id)
        else:
            tabled_ids.append(doc_id)
            tabled_fps.append(old_fp)
        replaced_ids.append(doc_id)
        replaced_fps.append(new_fp)
    if tabled_ids:
        engine.tableset.delete(txn, engine.tableset.catalog, tabled_ids, tabled_fps)
    if replaced_ids:
        placed_ids = np.concatenate([placed_ids, np.array(replaced_ids, dtype=np.uint64)])
        placed_fps = np.concatenate([placed_fps, np.array(replaced_fps, dtype=np.uint64)])
    delta = engine.delta
    if len(delta) + len(placed_ids) >= merge_threshold(engine):
        # Big enough to go straight to the tables, together with the delta.
        carried_ids, carried_fps = delta.arrays()
        if removed_from_delta:
            kept = ~np.isin(carried_ids, np.array(removed_from_delta, dtype=np.uint64))
            carried_ids, carried_fps = carried_ids[kept], carried_fps[kept]
        all_ids, all_fps = placed_ids, placed_fps
        if len(carried_ids):  # no copies of a first load's million ids and fingerprints
            all_ids = np.concatenate([carried_ids, placed_ids])
            all_fps = np.concatenate([carried_fps, placed_fps])
        catalog = engine.tableset.write_run(
            txn, engine.tableset.catalog, all_ids, all_fps, _given_sketches(batch, new_positions, first_id)
        )
        txn.drop(handles.delta, delete=False)
        merged = state._replace(next_id=next_id, merge_epoch=state.merge_epoch + 1)
        return None, merged, Change([], [], merged=True, catalog=catalog)
    seq = state.next_seq
    placed = list(zip(placed_ids.tolist(), placed_fps.tolist(), strict=True))
    ops = []
    for doc_id, fingerprint in placed:
        ops.append((encode_seq(seq), encode_add(doc_id, fingerprint)))
        seq += 1
    txn.cursor(handles.delta).putmulti(ops, append=True)
    return None, state._replace(next_id=next_id, next_seq=seq), Change(placed, removed_from_delta)


def insert_new(
    engine: Engine,
    txn: _lmdb.Txn,
    batch: _Batch,
    chosen: tuple[Positions, IntArray | None],
    doc_ids: U64Array,
    fingerprints: U64Array,
    *,
    append_keys: bool,
) -> None:
    """Write key-table entries, records and metadata of new documents:
    those at ``positions`` of ``batch``, where ``chosen`` is ``(positions,
    key_order)`` as :class:`_Batch` holds them; ``doc_ids`` follow
    ``positions``."""
    handles = engine.handles
    packed_keys = batch.packed_keys
    positions, key_order = chosen
    # In key order, so that into an empty key table the entries may be
    # appended without a search.
    keyed_positions, keyed_ids = positions, doc_ids
    if key_order is not None:
        keyed_positions, keyed_ids = np.asarray(positions)[key_order], doc_ids[key_order]
    key_entries = zip(packed_keys.sliced_lookups(keyed_positions), big_endian_sliced(keyed_ids), strict=True)
    txn.cursor(handles.keys).putmulti(key_entries, append=append_keys)
    records = record_pairs(doc_ids, fingerprints, packed_keys.record_values, positions)
    txn.cursor(handles.docs).putmulti(records, append=True)
    if batch.sketches is not None and handles.sketches is not None:
        # Ids are new and ascending with positions: appended, no search.
        rows = batch.sketch_rows(positions)
        sketched_ids = doc_ids
        present = rows.any(axis=1)  # an all-zero row (no bin filled) stands for no sketch
        if not present.all():
            rows, sketched_ids = rows[present], doc_ids[present]
        entries = zip(big_endian_sliced(sketched_ids), rows_sliced(rows), strict=True)
        txn.cursor(handles.sketches).putmulti(entries, append=True)
    if batch.metas is not None:
        for doc_id, position in zip(doc_ids.tolist(), positions, strict=True):
            packed_meta = batch.metas[position]
            if packed_meta is not None:
                txn.put(encode_id(doc_id), packed_meta, db=handles.docmeta)


def remove(engine: Engine, key: KeyLike) -> None:
    """Remove the document stored under ``key``.

    Raises:
        KeyNotFoundError: no document has this key (also a ``KeyError``).
    """
    spec = ["remove", pack_key(key)]
    group_commit(engine).write(engine, _remove_body(engine, spec), spec)
    maintain(engine, 0)


def _remove_body(engine: Engine, spec: Spec) -> Body[None]:
    _, packed_key = spec
    found_by = lookup_key(packed_key)

    def body(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
        handles = engine.handles  # read inside: a retry may follow a re-layout
        id_bytes = txn.get(found_by, db=handles.keys)
        if id_bytes is None:
            raise KeyNotFoundError(f"no document with key {unpack_key(packed_key)!r}")
        doc_id, fingerprint = take_out_records(engine, txn, found_by, id_bytes)
        if doc_id in engine.delta:
            txn.put(encode_seq(state.next_seq), encode_remove(doc_id), db=handles.delta, append=True)
            return None, state._replace(next_seq=state.next_seq + 1), Change([], [doc_id])
        engine.tableset.delete(txn, engine.tableset.catalog, [doc_id], [fingerprint])
        return None, state, Change([], [])

    return body


#: The body maker of each kind of single write, by the verb its spec starts with.
_BODIES: dict[str, Callable[[Engine, Spec], Body[Any]]] = {
    "add": _add_body,
    "add_if_new": _add_if_new_body,
    "remove": _remove_body,
}


def remove_many(engine: Engine, keys: Iterable[KeyLike], missing_ok: bool) -> int:
    """``Store.remove_many``: every key checked before the transaction, then
    the documents taken out in it; the number removed."""
    if isinstance(keys, str | bytes):
        raise InvalidTypeError("keys must be an iterable of keys, not one str or bytes key")
    try:
        key_list = list(keys)
    except TypeError as exc:
        raise InvalidTypeError(f"keys must be an iterable of keys, got {type(keys).__name__}") from exc
    # Each document once, by its key's look-up form (1 and "1" stay two keys).
    by_lookup = {lookup_key(pack_key(key)): key for key in key_list}
    if not by_lookup:
        return 0
    # Removals rewrite the pages they touch (LMDB copies them): at most every
    # page holding data, less the free pages the copies can take. A map that
    # fills reruns the whole transaction; one reserved beyond need is file
    # the disk holds for nothing.
    with engine.read() as txn:
        live = engine.env.live_bytes(txn, engine.handles)
    touched = min(len(by_lookup) * (len(engine.tables) + 4) * engine.env.page_size(), live)
    free = engine.env.used_bytes() - live
    reserve_for(engine, 0, 0, run_entries=0, extra_values=(0, max(0, touched - free)))

    def body(txn: _lmdb.Txn, state: State) -> tuple[int, State, Change]:
        handles = engine.handles  # read inside: a retry may follow a re-layout
        get = txn.get
        found: list[tuple[bytes, bytes]] = []
        missing = []
        for found_by, key in by_lookup.items():
            id_bytes = get(found_by, db=handles.keys)
            if id_bytes is None:
                missing.append(key)
            else:
                found.append((found_by, id_bytes))
        if missing and not missing_ok:
            shown = ", ".join(map(repr, missing[:5])) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise KeyNotFoundError(f"no document with key {shown}; nothing was removed")
        tabled_ids: list[int] = []
        tabled_fingerprints: list[int] = []
        delta_ids: list[int] = []
        next_seq = state.next_seq
        for found_by, id_bytes in found:
            doc_id, fingerprint = take_out_records(engine, txn, found_by, id_bytes)
            if doc_id in engine.delta:
                txn.put(encode_seq(next_seq), encode_remove(doc_id), db=handles.delta, append=True)
                next_seq += 1
                delta_ids.append(doc_id)
            else:
                tabled_ids.append(doc_id)
                tabled_fingerprints.append(fingerprint)
        if tabled_ids:
            engine.tableset.delete(txn, engine.tableset.catalog, tabled_ids, tabled_fingerprints)
        return len(found), state._replace(next_seq=next_seq), Change([], delta_ids)

    removed = engine.write(body)
    maintain(engine, 0)
    return removed


def take_out_records(engine: Engine, txn: _lmdb.Txn, found_by: bytes, id_bytes: bytes) -> tuple[int, int]:
    """Delete a document's key-table entry, record, metadata and sketch (not
    its table entries or delta row); its internal id and fingerprint."""
    handles = engine.handles
    doc_id = decode_id(id_bytes)
    fingerprint = record_fingerprint(engine, txn, doc_id)
    txn.delete(found_by, db=handles.keys)
    txn.delete(id_bytes, db=handles.docs)
    txn.delete(id_bytes, db=handles.docmeta)
    if handles.sketches is not None:
        txn.delete(id_bytes, db=handles.sketches)
    return doc_id, fingerprint


def record_fingerprint(engine: Engine, txn: _lmdb.Txn, doc_id: int) -> int:
    raw = txn.get(encode_id(doc_id), db=engine.handles.docs)
    if raw is None:
        raise CorruptStoreError(f"document {doc_id} is in the key table but has no record")
    return decode_record(raw)[0]


def _given_sketches(batch: _Batch, new_positions: Positions, first_id: int) -> GivenSketches | None:
    """The new documents' sketches (ids from ``first_id``), as the batch
    holds them: what a run writing them bands without reading them back."""
    if batch.sketches is None or not len(new_positions):
        return None
    return GivenSketches(first_id, batch.sketch_rows(new_positions))


def put_sketch(engine: Engine, txn: _lmdb.Txn, id_bytes: bytes, sketch: bytes | None) -> bool:
    """Store a replaced document's sketch (or drop its old one: a
    document re-added as a bare fingerprint has none). Returns whether a
    band table must band the document again: it keeps one and the sketch
    changed (its runs hold the old sketch's bands)."""
    sketches = engine.handles.sketches
    if sketches is None:
        return False
    rebanded = False
    if engine.delta_bands is not None:
        old = txn.get(id_bytes, db=sketches)
        rebanded = (None if old is None else bytes(old)) != sketch
    if sketch is None:
        txn.delete(id_bytes, db=sketches)
    else:
        txn.put(id_bytes, sketch, db=sketches)
    return rebanded


def put_meta(engine: Engine, txn: _lmdb.Txn, id_bytes: bytes, packed_meta: bytes | None) -> None:
    if packed_meta is None:
        txn.delete(id_bytes, db=engine.handles.docmeta)
    else:
        txn.put(id_bytes, packed_meta, db=engine.handles.docmeta)
