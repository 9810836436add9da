"""Every document's id and fingerprint at once, read from the records
sub-database with C-level loops (no Python work per document)."""

from __future__ import annotations

import itertools
import operator

import numpy as np

from simstore.engine._lmdb import Database, Txn
from simstore.errors import CorruptStoreError
from simstore.fingerprinting.sketch import Sketch, U8Array
from simstore.index.permute import U64Array


def id_and_fingerprint_arrays(txn: Txn, docs: Database) -> tuple[U64Array, U64Array]:
    """``(internal ids, fingerprints)`` of every record in ``docs``, in id order."""
    # Two passes of C-level loops (join over the cursor's iterator), not
    # one Python loop: 0.48 s instead of 0.55 s for a million records.
    id_bytes = b"".join(txn.cursor(docs).iternext(keys=True, values=False))
    fingerprints = fingerprint_array(txn, docs)
    if len(fingerprints) * 8 != len(id_bytes):
        raise CorruptStoreError("a document id is not 8 bytes; the store may be damaged")
    return np.frombuffer(id_bytes, dtype=">u8").astype(np.uint64), fingerprints


def fingerprint_array(txn: Txn, docs: Database) -> U64Array:
    """Every record's fingerprint (its first 8 bytes), in id order."""
    first_eight = operator.itemgetter(slice(0, 8))
    records = txn.cursor(docs).iternext(keys=False, values=True)
    count = int(txn.stat(docs)["entries"])
    fingerprint_bytes = b"".join(map(first_eight, records))
    if len(fingerprint_bytes) != 8 * count:
        raise CorruptStoreError("a document record is too short; the store may be damaged")
    return np.frombuffer(fingerprint_bytes, dtype=">u8").astype(np.uint64)


#: Fewer ids than this are looked up one by one (``getmulti``), never read
#: by a pass over their range.
FEW_IDS = 16


def sketch_rows(txn: Txn, sketches: Database, sketch: Sketch, doc_ids: U64Array) -> tuple[U64Array, U8Array]:
    """``(ids, rows)``: the documents of ``doc_ids`` that keep a sketch in
    ``sketches``, and their sketches as rows. Ids that fill most of their
    range (a batch's new documents) are read by one cursor pass over it,
    the others looked up."""
    doc_ids = np.asarray(doc_ids, dtype=np.uint64)
    if not len(doc_ids):
        return doc_ids, np.zeros((0, sketch.nbytes), dtype=np.uint8)
    first, last = int(doc_ids.min()), int(doc_ids.max())
    cursor = txn.cursor(sketches)
    # (A few are looked up whatever their range: the pass's filter costs more.)
    ranged = len(doc_ids) >= FEW_IDS and last - first < 2 * len(doc_ids)
    if ranged:
        found = []
        if cursor.set_range(first.to_bytes(8, "big")):
            found = list(itertools.islice(cursor.iternext(keys=True, values=True), last - first + 1))
    else:
        found = cursor.getmulti([int(doc_id).to_bytes(8, "big") for doc_id in doc_ids.tolist()])
    if not found:
        return np.zeros(0, dtype=np.uint64), np.zeros((0, sketch.nbytes), dtype=np.uint8)
    keys, values = zip(*found, strict=True)
    raw = b"".join(values)  # (bytes, or a buffer transaction's memoryviews)
    if len(raw) != len(found) * sketch.nbytes:
        raise CorruptStoreError(f"a stored sketch is not the store's {sketch.nbytes} bytes")
    ids = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(len(found), sketch.nbytes)
    if ranged:
        # The pass read the range: only the documents asked for.
        wanted = (ids <= np.uint64(last)) & np.isin(ids, doc_ids)
        if not wanted.all():
            ids, rows = ids[wanted], rows[wanted]
    return ids, rows
