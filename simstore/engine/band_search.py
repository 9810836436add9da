"""Stored documents found by text for a batch of queries: those whose
verification sketch shares a band key with a query's sketch
(:mod:`simstore.fingerprinting.bands`) and whose estimated similarity reaches
the threshold, however far apart the fingerprints are (issue 36).

The store keeps no table of band keys yet, so this is a batch join: every
stored sketch is read once, in chunks, banded, and matched against the
batch's band keys in numpy. Its cost grows with the store, not the batch
(about 4 µs a stored document), which is why ``query_many(bands=True)`` and
``dedup --against --bands`` take it and a single ``query`` does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from simstore.engine import _lmdb
from simstore.engine.records import decode_record, encode_id
from simstore.engine.settings import store_sketch
from simstore.errors import CorruptStoreError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, U8Array, estimate_jaccard
from simstore.index.permute import U64Array
from simstore.index.shared_keys import KeyIndex

__all__ = ["band_matches", "beyond_k", "stored_sketches"]

#: Stored sketches read and banded at a time (8 MiB of sketches at 128 bytes).
SCAN_CHUNK = 1 << 16

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
