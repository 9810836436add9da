"""Format 3's record of the table entries removals left stale (*graves*).

A format-3 removal writes nothing to the runs (they are immutable): the
document's entry stays until a join of its run drops it. To drop it, the join
must know it is stale. Reading every record to find out costs about 0.5 µs a
record (50 s and gigabytes at 100M) for a single removal; so each removal (and
each new fingerprint given to a tabled document) also writes its ``(id,
fingerprint)`` here, under the store's count of removals before it
(:data:`simstore.engine.format.REMOVALS_KEY`).

Runs are stamped with that count when written
(:class:`simstore.engine.column_index.RunEntry`), so an entry of a run stamped
``s`` is stale exactly when a grave of its ``(id, fingerprint)`` lies at a
count ``>= s``: the removal came after the run was written. (A document given
its old fingerprint back has a fresh entry in a run written later, stamped
past the grave, which the grave does not touch.) Graves below every run's
stamp name no entry any more and are deleted.

Graves live in the ``meta`` sub-database under ``GRAVES_PREFIX`` and the
count, 8 bytes big-endian: one value per removing write, its ``(id,
fingerprint)`` pairs as little-endian uint64s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simstore.engine._lmdb import Database, Txn
from simstore.errors import CorruptStoreError
from simstore.index.column_search import IdArray
from simstore.index.permute import U64Array

GRAVES_PREFIX = b"graves:"
_PAIR = np.dtype([("id", "<u8"), ("fingerprint", "<u8")])


def _key(count: int) -> bytes:
    return GRAVES_PREFIX + count.to_bytes(8, "big")


def bury(txn: Txn, meta: Database, count: int, doc_ids: Sequence[int], fingerprints: Sequence[int]) -> None:
    """Record that the entries ``(doc_ids[j], fingerprints[j])`` went stale at
    the store's removal ``count``."""
    pairs = np.empty(len(doc_ids), dtype=_PAIR)
    pairs["id"] = doc_ids
    pairs["fingerprint"] = fingerprints
    txn.put(_key(count), pairs.tobytes(), db=meta)


def graves_since(txn: Txn, meta: Database, count: int) -> tuple[U64Array, U64Array, U64Array]:
    """``(counts, ids, fingerprints)`` of every grave at ``count`` or later.

    Raises:
        CorruptStoreError: a grave's key or value is damaged.
    """
    counts: list[npt.NDArray[np.uint64]] = []
    pairs: list[npt.NDArray[np.void]] = []
    cursor = txn.cursor(db=meta)
    if cursor.set_range(_key(max(count, 0))):
        for raw_key, value in cursor:
            key = bytes(raw_key)
            if not key.startswith(GRAVES_PREFIX):
                break
            if len(key) != len(GRAVES_PREFIX) + 8 or len(value) % _PAIR.itemsize:
                raise CorruptStoreError("a record of removed table entries is damaged")
            held = np.frombuffer(value, dtype=_PAIR)
            pairs.append(held)
            counts.append(np.full(len(held), int.from_bytes(key[len(GRAVES_PREFIX) :], "big"), np.uint64))
    if not pairs:
        empty = np.empty(0, dtype=np.uint64)
        return empty, empty, empty
    joined = np.concatenate(pairs)
    return np.concatenate(counts), joined["id"].astype(np.uint64), joined["fingerprint"].astype(np.uint64)


def forget_below(txn: Txn, meta: Database, count: int | None) -> None:
    """Delete every grave below ``count`` (``None``: every grave)."""
    cursor = txn.cursor(db=meta)
    end = None if count is None else _key(max(count, 0))
    if not cursor.set_range(GRAVES_PREFIX):
        return
    while True:
        key = bytes(cursor.key())
        if not key.startswith(GRAVES_PREFIX) or (end is not None and key >= end):
            return
        if not cursor.delete():  # (it moves to the next key)
            return


def standing(
    ids: IdArray,
    fingerprints: U64Array,
    stamp: int,
    graves: tuple[U64Array, U64Array, U64Array],
) -> npt.NDArray[np.bool_] | None:
    """Which entries of a run stamped ``stamp`` still stand, by ``graves``
    (from :func:`graves_since`); ``None``: every one."""
    counts, grave_ids, grave_fingerprints = graves
    after = counts >= np.uint64(stamp)
    if not after.any():
        return None
    grave_ids, grave_fingerprints = grave_ids[after], grave_fingerprints[after]
    named = np.flatnonzero(np.isin(ids, grave_ids))
    if not len(named):
        return None
    buried = set(zip(grave_ids.tolist(), grave_fingerprints.tolist(), strict=True))
    keep = np.ones(len(ids), dtype=bool)
    for position, doc_id, fingerprint in zip(
        named.tolist(), ids[named].tolist(), fingerprints[named].tolist(), strict=True
    ):
        if (doc_id, fingerprint) in buried:
            keep[position] = False
    return keep
