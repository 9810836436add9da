"""Every document's id and fingerprint at once, read from the records
sub-database with C-level loops (no Python work per document)."""

from __future__ import annotations

import operator

import numpy as np

from simstore.engine._lmdb import Database, Txn
from simstore.errors import CorruptStoreError
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
