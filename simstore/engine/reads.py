"""Reading an open store: near-duplicate queries, and the documents by key.

Functions of an open engine (:mod:`simstore.engine.core`). A query consults the
delta (:meth:`simstore.engine.delta.Delta.matches`) and then the tables
(:meth:`simstore.engine.tableset.TableSet.find`) in one snapshot, and turns the
internal ids it found into :class:`~simstore.Match` results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from simstore.engine import _lmdb, band_search
from simstore.engine.record_scan import fingerprint_array, id_and_fingerprint_arrays, sketch_rows
from simstore.engine.records import decode_record, encode_id, lookup_key
from simstore.engine.settings import store_sketch
from simstore.errors import CorruptStoreError, InvalidTypeError, InvalidValueError, KeyNotFoundError
from simstore.fingerprinting.sketch import HeldSketch, U8Array, estimate_jaccard, estimate_jaccard_one
from simstore.index.permute import U64Array
from simstore.keys import Key, KeyLike, pack_key, unpack_key, unpack_meta
from simstore.results import Match, Record, match_order

if TYPE_CHECKING:
    from simstore.engine.core import Engine

# A query_many of at least this many queries reads every table's bitmaps
# before it starts (single queries read one table's after their answer).
BATCH_READS_BITMAPS = 64


# ------------------------------------------------------------------ queries


def query(
    engine: Engine, fingerprint: int, sketch: bytes | None, k: int, with_meta: bool, threshold: float | None
) -> list[Match]:
    """``Store.query`` of a fingerprint and its sketch, arguments checked."""
    with engine.read(query=True) as txn:
        # Permute inside the read: it may have adopted another process's new layout.
        permuted = engine.permuted_for_query(fingerprint)
        records: dict[int, bytes] = {}
        found = find(engine, txn, permuted, fingerprint, k, records)
        known = add_banded(engine, txn, fingerprint, sketch, k, threshold, found, records)
        matches = resolve(engine, txn, found, with_meta, records, sketch, threshold, known=known)
        if engine.tableset.bitmaps_unread:
            engine.tableset.read_bitmaps(txn)
        return matches


def query_many(
    engine: Engine,
    queries: U64Array,
    sketches: U8Array | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    bands: bool = False,
) -> list[list[Match]]:
    """``Store.query_many`` of fingerprints and their sketches, arguments
    checked; with ``bands`` (which needs ``sketches`` and ``threshold``) the
    documents sharing a sketch band with a query are added
    (:mod:`simstore.engine.band_search`)."""
    results: list[list[Match]] = []
    with engine.read(query=True) as txn:
        # A batch may as well read every bitmap first.
        engine.tableset.read_bitmaps(txn, 1 << 30 if len(queries) >= BATCH_READS_BITMAPS else 1)
        columns, rows = engine.permuted_for_queries(queries)
        query_list = queries.tolist()
        founds = [
            engine.delta.matches(permuted, query, k) for query, permuted in zip(query_list, rows, strict=True)
        ]
        records: list[dict[int, bytes]] = [{} for _ in query_list]
        engine.tableset.find_many(
            txn, columns, query_list, k, founds, records, engine.handles.docs, engine.permute_all
        )
        matched = None
        if bands and sketches is not None and threshold is not None:
            matched = band_search.band_matches(engine, txn, sketches, threshold)
            for found, found_records, (distances, band_records) in zip(
                founds, records, band_search.beyond_k(engine, txn, query_list, matched, k), strict=True
            ):
                found.update(distances)
                found_records.update(band_records)
        known = None if sketches is None else batch_similarities(engine, txn, founds, sketches, matched)
        for index, (found, found_records) in enumerate(zip(founds, records, strict=True)):
            sketch = None if sketches is None else sketches[index].tobytes()
            similarity_of = None if known is None else known[index]
            results.append(
                resolve(engine, txn, found, with_meta, found_records, sketch, threshold, similarity_of)
            )
    return results


def find(
    engine: Engine,
    txn: _lmdb.Txn,
    permuted: Sequence[int],
    fingerprint: int,
    k: int,
    records: dict[int, bytes],
) -> dict[int, int]:
    """``{doc_id: distance}`` of everything within ``k`` bits, delta
    included; ``records`` gets the record of each table match (read to
    check its distance), for :func:`resolve`."""
    found = engine.delta.matches(permuted, fingerprint, k)
    engine.tableset.find(
        txn, permuted, fingerprint, k, found, records, engine.handles.docs, engine.permute_all
    )
    return found


def add_banded(
    engine: Engine,
    txn: _lmdb.Txn,
    fingerprint: int,
    sketch: bytes | None,
    k: int,
    threshold: float | None,
    found: dict[int, int],
    records: dict[int, bytes],
) -> dict[int, float]:
    """Add to ``found`` (and their records to ``records``) the documents
    more than ``k`` bits away that the store's band table finds for
    ``sketch`` at ``threshold``: nothing where the store keeps no band table
    (:mod:`simstore.engine.band_search`) or the query has no sketch or
    threshold. Returns the estimated similarity of every document the
    bands found, within ``k`` or not (for :func:`resolve`'s ``known``)."""
    if engine.delta_bands is None or sketch is None or threshold is None:
        return {}
    [matched] = band_search.band_matches(
        engine, txn, np.frombuffer(sketch, dtype=np.uint8).reshape(1, -1), threshold
    )
    distances, band_records = band_search.beyond_k(engine, txn, [fingerprint], [matched], k)[0]
    found.update(distances)
    records.update(band_records)
    return matched


def resolve(
    engine: Engine,
    txn: _lmdb.Txn,
    found: dict[int, int],
    with_meta: bool = False,
    records: dict[int, bytes] | None = None,
    sketch: bytes | None = None,
    threshold: float | None = None,
    similarity_of: dict[int, float] | None = None,
    known: dict[int, float] | None = None,
) -> list[Match]:
    """The matches of ``found`` (``{doc_id: distance}``), sorted, with
    their similarity to the query's ``sketch`` (if given; ``similarity_of``
    if the caller estimated them all already, ``known`` if some), and
    without those less similar than ``threshold``."""
    if not found:
        return []
    docs = engine.handles.docs
    docmeta = engine.handles.docmeta
    if similarity_of is None:
        similarity_of = dict(known) if known else {}
        if sketch is not None and engine.handles.sketches is not None:
            missing = [doc_id for doc_id in found if doc_id not in similarity_of]
            if missing:
                similarity_of.update(similarities(engine, txn, missing, sketch))
    matches = []
    for doc_id, distance in found.items():
        similarity = similarity_of.get(doc_id)
        if threshold is not None and similarity is not None and similarity < threshold:
            continue
        id_bytes = encode_id(doc_id)
        raw = records.get(doc_id) if records else None
        if raw is None:
            raw = txn.get(id_bytes, db=docs)
        if raw is None:
            raise CorruptStoreError(f"document {doc_id} is indexed but has no record")
        fingerprint, packed = decode_record(raw)
        meta = unpack_meta(txn.get(id_bytes, db=docmeta)) if with_meta else None
        matches.append(Match(unpack_key(packed), distance, fingerprint, meta, similarity))
    if len(matches) > 1:
        matches.sort(key=match_order)
    return matches


#: Up to this many (query, document) pairs are estimated one at a time in
#: Python integers rather than in one numpy pass: 1 / 3 / 8 / 16 pairs took
#: 4 / 13 / 35 / 124 µs so against 29 / 33 / 46 / 87.
FEW_PAIRS = 8


def batch_similarities(
    engine: Engine,
    txn: _lmdb.Txn,
    founds: Sequence[dict[int, int]],
    sketches: U8Array,
    known: Sequence[dict[int, float]] | None = None,
) -> list[dict[int, float]] | None:
    """:func:`similarities` of a batch: for each query (a row of
    ``sketches``), the estimated similarity of each document of its
    ``founds`` entry that has a sketch; each stored sketch read once and
    every pair estimated in one pass (``None``: the store keeps no sketches).
    ``known[i]`` holds estimates query ``i`` has already (its band matches',
    made from the same snapshot's sketches): they are taken, not made again."""
    geometry = store_sketch(engine)
    if engine.handles.sketches is None or geometry is None:
        return None
    out: list[dict[int, float]] = [{} for _ in founds] if known is None else [dict(given) for given in known]
    wanted = [
        [doc_id for doc_id in found if doc_id not in given] for found, given in zip(founds, out, strict=True)
    ]
    doc_ids, stored = _stored_sketches(engine, txn, sorted({doc_id for found in wanted for doc_id in found}))
    row_of = {doc_id: row for row, doc_id in enumerate(doc_ids)}
    pairs = [(query, doc_id) for query, found in enumerate(wanted) for doc_id in found if doc_id in row_of]
    if not pairs:
        return out
    if len(pairs) <= FEW_PAIRS:  # (the same values, in Python integers)
        estimates = [
            estimate_jaccard_one(sketches[query].tobytes(), stored[row_of[doc_id]].tobytes(), geometry)
            for query, doc_id in pairs
        ]
    else:
        queries = np.array([query for query, _ in pairs], dtype=np.int64)
        at = np.array([row_of[doc_id] for _, doc_id in pairs], dtype=np.int64)
        estimates = estimate_jaccard(np.asarray(sketches)[queries], stored[at], geometry).tolist()
    for (query, doc_id), estimate in zip(pairs, estimates, strict=True):
        out[query][doc_id] = estimate
    return out


def similarities(engine: Engine, txn: _lmdb.Txn, found: Iterable[int], sketch: bytes) -> dict[int, float]:
    """The estimated similarity to ``sketch`` of each document of
    ``found`` (internal ids) that has a sketch."""
    doc_ids, stored = _stored_sketches(engine, txn, found)
    if not doc_ids:
        return {}
    geometry = store_sketch(engine)
    assert geometry is not None
    if len(doc_ids) <= FEW_PAIRS:
        held = HeldSketch(sketch, geometry)
        return {
            doc_id: held.estimate_bytes(row.tobytes()) for doc_id, row in zip(doc_ids, stored, strict=True)
        }
    estimates = estimate_jaccard(np.frombuffer(sketch, dtype=np.uint8), stored, geometry)
    return dict(zip(doc_ids, estimates.tolist(), strict=True))


def _stored_sketches(engine: Engine, txn: _lmdb.Txn, found: Iterable[int]) -> tuple[list[int], U8Array]:
    """The documents of ``found`` that keep a sketch, and their sketches as rows."""
    database = engine.handles.sketches
    geometry = store_sketch(engine)
    assert database is not None
    assert geometry is not None
    ids, rows = sketch_rows(txn, database, geometry, np.fromiter(found, dtype=np.uint64))
    return ids.tolist(), rows


# ---------------------------------------------------------------- documents


def record_of(engine: Engine, key: KeyLike) -> Record | None:
    """The record stored under ``key``, or ``None``."""
    found_by = lookup_key(pack_key(key))
    with engine.read() as txn:
        id_bytes = txn.get(found_by, db=engine.handles.keys)
        if id_bytes is None:
            return None
        raw = txn.get(id_bytes, db=engine.handles.docs)
        if raw is None:
            raise CorruptStoreError(f"key {key!r} is in the key table but has no record")
        fingerprint, packed = decode_record(raw)
        meta = unpack_meta(txn.get(id_bytes, db=engine.handles.docmeta))
        return Record(unpack_key(packed), fingerprint, meta)


def sketch_of(engine: Engine, key: KeyLike) -> bytes | None:
    """The verification sketch stored for ``key``, or ``None`` if it has none.

    Raises:
        KeyNotFoundError: no document has this key.
    """
    found_by = lookup_key(pack_key(key))
    with engine.read() as txn:
        id_bytes = txn.get(found_by, db=engine.handles.keys)
        if id_bytes is None:
            raise KeyNotFoundError(f"no document with key {key!r}")
        database = engine.handles.sketches
        raw = None if database is None else txn.get(id_bytes, db=database)
        return None if raw is None else bytes(raw)


def contains(engine: Engine, key: object) -> bool:
    """Whether a document is stored under ``key`` (``False`` for what cannot be a key)."""
    try:
        found_by = lookup_key(pack_key(key))
    except (InvalidTypeError, InvalidValueError):
        return False
    with engine.read() as txn:
        return txn.get(found_by, db=engine.handles.keys) is not None


def document_count(engine: Engine) -> int:
    with engine.read() as txn:
        return int(txn.stat(engine.handles.keys)["entries"])


def keys(engine: Engine) -> list[Key]:
    """Every key, in the order its document was first added."""
    with engine.read() as txn:
        cursor = txn.cursor(engine.handles.docs)
        return [unpack_key(decode_record(raw)[1]) for raw in cursor.iternext(keys=False, values=True)]


def items(engine: Engine) -> list[tuple[Key, int]]:
    """``(key, fingerprint)`` pairs in insertion order, from one snapshot."""
    with engine.read() as txn:
        pairs = []
        for raw in txn.cursor(engine.handles.docs).iternext(keys=False, values=True):
            fingerprint, packed = decode_record(raw)
            pairs.append((unpack_key(packed), fingerprint))
    return pairs


def fingerprints(engine: Engine) -> U64Array:
    """Every stored fingerprint, in insertion order."""
    with engine.read() as txn:
        return stored_fingerprints(engine, txn)


def all_documents(engine: Engine, txn: _lmdb.Txn) -> tuple[U64Array, U64Array]:
    """Every document's ``(internal id, fingerprint)`` from the records."""
    return id_and_fingerprint_arrays(txn, engine.handles.docs)


def stored_fingerprints(engine: Engine, txn: _lmdb.Txn) -> U64Array:
    """Every document's fingerprint, in id order, from the records."""
    return fingerprint_array(txn, engine.handles.docs)
