"""Stored documents found by text for a batch of queries: those whose
verification sketch shares a band key with a query's sketch
(:mod:`simstore.fingerprinting.bands`) and whose estimated similarity reaches
the threshold, however far apart the fingerprints are (issue 36).

A format-4 store keeps a band table (its runs' keys in
:class:`simstore.engine.column_tableset.ColumnTableSet`, the delta's in
:class:`simstore.engine.delta_bands.DeltaBands`): a query's keys are looked up
there, and each document found is verified against its sketch as it is now
(it must still share a key with the query's, and reach the threshold).

A store without one (format 2 or 3) answers by a batch join: every stored
sketch is read once, in chunks, banded, and matched against the batch's band
keys in numpy. Its cost grows with the store, not the batch (about 4 µs a
stored document), which is why only ``query_many(bands=True)`` and ``dedup
--against --bands`` take it there.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from simstore.engine import _lmdb
from simstore.engine.column_tableset import BandSource, ColumnTableSet
from simstore.engine.records import decode_record, encode_id
from simstore.engine.settings import store_sketch
from simstore.errors import CorruptStoreError
from simstore.fingerprinting.bands import KeyedBand, band_keys, band_shared, keyed_bands, shares_band_rows
from simstore.fingerprinting.sketch import HeldSketch, Sketch, U8Array, estimate_jaccard
from simstore.index.permute import U64Array
from simstore.index.shared_keys import KeyIndex, pairs_across

__all__ = ["band_matches", "beyond_k", "stored_sketches"]

#: Stored sketches read and banded at a time (8 MiB of sketches at 128 bytes).
SCAN_CHUNK = 1 << 16
#: A single query's candidates (verified by comparing their bands' bytes
#: with the query's, not by banding them) up to this many are checked in
#: plain Python (band_shared), more in numpy (shares_band_rows).
FEW_CANDIDATES = 16

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def band_matches(
    engine: Engine, txn: _lmdb.Txn, sketches: U8Array, threshold: float
) -> list[dict[int, float]]:
    """For each query sketch (a row of ``sketches``), ``{doc_id: similarity}``
    of the stored documents whose sketches share a band key with it and are
    estimated at least ``threshold`` similar; empty where the store keeps no
    sketches. Reads every stored sketch in ``txn``."""
    found: list[dict[int, float]] = [{} for _ in range(len(sketches))]
    sketch = store_sketch(engine)
    if sketch is None or engine.handles.sketches is None or not len(sketches):
        return found
    if engine.delta_bands is not None:
        return _table_matches(engine, txn, sketches, threshold, engine.delta_bands.source)
    queries = band_keys(sketches, sketch)
    if not len(queries.rows):
        return found
    index = KeyIndex(queries.rows, queries.keys)
    for doc_ids, rows in stored_sketches(engine, txn, sketch):
        stored = band_keys(rows, sketch)
        query_rows, stored_rows = index.pairs_with(stored.rows, stored.keys)
        if not len(query_rows):
            continue
        similarity = estimate_jaccard(sketches[query_rows], rows[stored_rows], sketch)
        kept = similarity >= threshold
        for query, doc_id, value in zip(
            query_rows[kept].tolist(),
            doc_ids[stored_rows[kept]].tolist(),
            similarity[kept].tolist(),
            strict=True,
        ):
            found[query][doc_id] = value
    return found


def _table_matches(
    engine: Engine, txn: _lmdb.Txn, sketches: U8Array, threshold: float, source: BandSource
) -> list[dict[int, float]]:
    """:func:`band_matches` from the store's band table: the documents it
    names under a query's keys, verified against their sketches."""
    found: list[dict[int, float]] = [{} for _ in range(len(sketches))]
    # One query's bands are made once, with their places, for its candidates' check too.
    keyed = keyed_bands(sketches[0], source.sketch, source.per_width) if len(sketches) == 1 else None
    if keyed is not None:
        query_keys = np.array([band.key for band in keyed], dtype=np.uint64)
    else:
        query_rows, query_keys = source.keys_of(sketches)
    if not len(query_keys):
        return found
    assert engine.delta_bands is not None
    engine.delta_bands.refresh(txn)
    tableset = engine.tableset
    assert isinstance(tableset, ColumnTableSet)  # a band table sits beside format 3's runs only
    in_runs = tableset.band_candidates(txn, query_keys)[1]
    in_delta = engine.delta_bands.look_up(query_keys)[1]
    if not len(in_runs) and not len(in_delta):  # (most single queries: no numpy calls for nothing)
        return found
    candidates = np.unique(np.concatenate([in_runs, in_delta]))
    # Only the candidates' sketches as they are now decide: a stale key, or
    # one that matched on its top 32 bits only, finds a document these turn away.
    doc_ids, rows = source.stored_rows(txn, candidates)
    if keyed is not None:
        return [_one_query_matches(sketches[0], keyed, doc_ids, rows, threshold, source.sketch)]
    stored_rows, stored_keys = source.keys_of(rows)
    pair_queries, pair_rows = pairs_across(query_rows, query_keys, stored_rows, stored_keys)
    if not len(pair_queries):
        return found
    similarity = estimate_jaccard(sketches[pair_queries], rows[pair_rows], source.sketch)
    kept = similarity >= threshold
    for query, doc_id, value in zip(
        pair_queries[kept].tolist(), doc_ids[pair_rows[kept]].tolist(), similarity[kept].tolist(), strict=True
    ):
        found[query][doc_id] = value
    return found


def _one_query_matches(
    query: U8Array, keyed: list[KeyedBand], doc_ids: U64Array, rows: U8Array, threshold: float, sketch: Sketch
) -> dict[int, float]:
    """One query's candidates (``doc_ids`` and their sketches) that share one
    of its ``keyed`` bands and reach ``threshold``: checked by comparing band
    bytes rather than banding them, a few in plain Python, more in numpy
    (the same answers)."""
    if len(rows) <= FEW_CANDIDATES:
        # Each candidate's bytes made an integer once, its filled bins counted
        # once, for both the band check and the estimate (about 0.6x the time
        # of checking and estimating apart).
        held = HeldSketch(query.tobytes(), sketch)
        found = {}
        data, size = rows.tobytes(), sketch.nbytes
        for doc_id, start in zip(doc_ids.tolist(), range(0, len(data), size), strict=True):
            raw = data[start : start + size]
            value = int.from_bytes(raw, "little")
            filled = held.filled_of(value)
            if band_shared(keyed, raw, filled) and (estimate := held.estimate(value, filled)) >= threshold:
                found[doc_id] = estimate
        return found
    shared = shares_band_rows(keyed, rows, sketch)
    similarity = estimate_jaccard(query, rows[shared], sketch)
    kept = similarity >= threshold
    return dict(zip(doc_ids[shared][kept].tolist(), similarity[kept].tolist(), strict=True))


def stored_sketches(engine: Engine, txn: _lmdb.Txn, sketch: Sketch) -> Iterator[tuple[U64Array, U8Array]]:
    """Every stored sketch in ``txn``, ``SCAN_CHUNK`` at a time, as
    ``(doc_ids, rows)`` in id order (one pass of a cursor)."""
    database = engine.handles.sketches
    if database is None:
        return
    items = txn.cursor(database).iternext(keys=True, values=True)
    while chunk := list(itertools.islice(items, SCAN_CHUNK)):
        doc_ids = np.frombuffer(b"".join(key for key, _ in chunk), dtype=">u8").astype(np.uint64)
        raw = b"".join(value for _, value in chunk)
        if len(raw) != len(chunk) * sketch.nbytes:
            raise CorruptStoreError(f"{engine.path}: a stored sketch is not {sketch.nbytes} bytes")
        yield doc_ids, np.frombuffer(raw, dtype=np.uint8).reshape(len(chunk), sketch.nbytes)


def beyond_k(
    engine: Engine, txn: _lmdb.Txn, queries: Sequence[int], matches: Sequence[dict[int, float]], k: int
) -> list[tuple[dict[int, int], dict[int, bytes]]]:
    """For each query fingerprint, ``({doc_id: distance}, {doc_id: record})``
    of its band ``matches`` more than ``k`` bits away (those within ``k`` are
    the fingerprint search's), read in ``txn``."""
    out: list[tuple[dict[int, int], dict[int, bytes]]] = []
    docs = engine.handles.docs
    for query, found in zip(queries, matches, strict=True):
        distances: dict[int, int] = {}
        records: dict[int, bytes] = {}
        for doc_id in found:
            raw = txn.get(encode_id(doc_id), db=docs)
            if raw is None:
                raise CorruptStoreError(f"{engine.path}: document {doc_id} has a sketch but no record")
            distance = (decode_record(raw)[0] ^ query).bit_count()
            if distance > k:
                distances[doc_id] = distance
                records[doc_id] = raw
        out.append((distances, records))
    return out
