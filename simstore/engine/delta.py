"""The delta: documents added since the last merge, in memory and in a log.

Every change that the permutation tables do not hold yet is one record of the
``delta`` sub-database, keyed by an 8-byte big-endian sequence number and
written in the same transaction as the document record, so the delta is as
durable as anything else in the store. A record is ``b"a" + id + fingerprint``
(the document now has this fingerprint and is not in the tables) or
``b"r" + id`` (the document left the delta). Replaying the log in order gives
the delta; a merge writes the delta into the tables and empties the log.

In memory the delta has two tiers, both indexed like the tables by each
table's leading prefix, so that a query consults them with a few look-ups per
table rather than a scan:

- the *recent* tier, in dicts: the last few thousand changes. A single add is
  one dict insert; its table prefixes are computed only when a query first
  needs them (so a run of adds without queries never permutes anything in
  Python), in one numpy pass when there are many.
- the *sorted* tier, in numpy arrays, which the recent tier is folded into
  once it holds ``RECENT_LIMIT`` documents: per table, the prefixes in sorted
  order with the row of each, and a bitmap of the prefixes present so that
  most probes cost one bit test. It holds a document in about 120 bytes for
  ten tables, against about 850 in dicts, so a delta of a million documents
  (the merge threshold of a store of 8 million) stays near 120 MiB.

A document is in at most one place: putting it again first takes it out of
wherever it was.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.engine.format import State
from simstore.errors import CorruptStoreError
from simstore.index.permute import Table, U64Array

ADD_OP = b"a"
REMOVE_OP = b"r"
_ADD = struct.Struct(">cQQ")
_REMOVE = struct.Struct(">cQ")
_SEQ = struct.Struct(">Q")

# Below this many documents a batch is indexed one document at a time.
SMALL_BATCH = 32

# The recent tier is folded into the sorted tier when it holds this many
# documents. A fold copies the sorted tier's arrays once: for 1.25 million
# documents in ten tables it took 59 ms for 16K new documents and 96 ms for
# 64K (measured), so a large limit makes folds rarer. A pending document
# costs about 100 bytes, an indexed one about 850, so a query folds rather
# than index more than a sixteenth of the limit, and a quarter of the limit
# indexed (16 MiB) also folds.
RECENT_LIMIT = 65_536

# Bits of a prefix bitmap per sorted document: at 8, about one probe in nine
# that misses still pays for a binary search.
BITMAP_BITS_PER_DOC = 8
MIN_BITMAP_BITS = 1 << 13

UIntArray = npt.NDArray[np.unsignedinteger[Any]]
RowArray = npt.NDArray[np.uint32]


@dataclass
class Change:
    """What a write transaction did to the delta (and the run catalog),
    applied to memory after its commit: documents put (``(doc_id,
    fingerprint)``), documents taken out, whether the delta was merged into
    the tables, and the catalog of the tables' runs if it changed."""

    puts: list[tuple[int, int]]
    removed: list[int]
    merged: bool = False
    #: (format 2's Catalog or format 3's ColumnCatalog: what encode() stores)
    catalog: Any = None


def encode_seq(seq: int) -> bytes:
    return _SEQ.pack(seq)


def encode_add(doc_id: int, fingerprint: int) -> bytes:
    return _ADD.pack(ADD_OP, doc_id, fingerprint)


def encode_remove(doc_id: int) -> bytes:
    return _REMOVE.pack(REMOVE_OP, doc_id)


def decode_op(raw: bytes) -> tuple[int, int | None]:
    """``(doc_id, fingerprint)`` for an add, ``(doc_id, None)`` for a removal."""
    if len(raw) == _ADD.size and raw[:1] == ADD_OP:
        _, doc_id, fingerprint = _ADD.unpack(raw)
        return doc_id, fingerprint
    if len(raw) == _REMOVE.size and raw[:1] == REMOVE_OP:
        _, doc_id = _REMOVE.unpack(raw)
        return doc_id, None
    raise CorruptStoreError(f"a delta log record is damaged: {bytes(raw)!r}")


# A bucket maps a table prefix to the delta documents under it: the id itself
# when there is one (almost always: a delta is far smaller than 2**prefix_bits),
# a list of ids when several share the prefix. Storing a bare int avoids one
# list per document, which for a reload of a large delta measured 60 ms per
# table in allocations and garbage-collector passes.
Bucket = dict[int, "int | list[int]"]


def _bucket_add(bucket: Bucket, prefix: int, doc_id: int) -> None:
    present = bucket.get(prefix)
    if present is None:
        bucket[prefix] = doc_id
    elif isinstance(present, int):
        bucket[prefix] = [present, doc_id]
    else:
        present.append(doc_id)


def _bucket_remove(bucket: Bucket, prefix: int, doc_id: int) -> None:
    present = bucket.get(prefix)
    if present is None:
        return
    if isinstance(present, int):
        if present == doc_id:
            del bucket[prefix]
        return
    if doc_id in present:
        present.remove(doc_id)
        if len(present) == 1:
            bucket[prefix] = present[0]


def _fill_bucket(bucket: Bucket, prefix_array: U64Array, doc_ids: Sequence[int]) -> None:
    """Add ``doc_ids`` under their prefixes: one C-level ``dict.update`` for a
    fresh bucket, then the rare repeated prefixes get their lists."""
    prefixes = prefix_array.tolist()
    if bucket:
        for prefix, doc_id in zip(prefixes, doc_ids, strict=True):
            _bucket_add(bucket, prefix, doc_id)
        return
    bucket.update(zip(prefixes, doc_ids, strict=True))
    if len(bucket) == len(prefixes):
        return
    unique, counts = np.unique(prefix_array, return_counts=True)
    repeated = set(unique[counts > 1].tolist())
    for prefix in repeated:
        del bucket[prefix]
    for prefix, doc_id in zip(prefixes, doc_ids, strict=True):
        if prefix in repeated:
            _bucket_add(bucket, prefix, doc_id)


_ADD_RECORD = np.dtype([("op", "S1"), ("id", ">u8"), ("fingerprint", ">u8")])


def _net_effect(ops: list[bytes]) -> dict[int, int | None]:
    """``{doc_id: fingerprint, or None if removed}`` after replaying ``ops`` in order."""
    if all(len(op) == _ADD.size for op in ops):
        # Only additions (the common log): decode them all at once.
        records = np.frombuffer(b"".join(ops), dtype=_ADD_RECORD)
        if bool(np.all(records["op"] == ADD_OP)):
            return dict(zip(records["id"].tolist(), records["fingerprint"].tolist(), strict=True))
    final: dict[int, int | None] = {}
    for op in ops:
        doc_id, fingerprint = decode_op(op)
        final[doc_id] = fingerprint
    return final


def _bitmap_bits(rows: int, prefix_bits: int) -> int:
    """Bits of a prefix bitmap for ``rows`` documents: a power of two, and no
    more than there are prefixes (then the bitmap is exact)."""
    wanted = max(MIN_BITMAP_BITS, BITMAP_BITS_PER_DOC * rows)
    return min(1 << (wanted - 1).bit_length(), 1 << prefix_bits)


class _TableIndex:
    """One table's view of the sorted tier: prefixes in order, the row of
    each, and a bitmap with bit ``prefix & mask`` set for every prefix held."""

    __slots__ = ("bitmap", "mask", "prefix_bits", "prefixes", "rows", "scalar", "suffix_bits", "table")

    def __init__(self, table: Table) -> None:
        self.table = table
        self.prefix_bits = table.prefix_bits
        self.suffix_bits = table.suffix_bits
        dtype = np.uint32 if table.prefix_bits <= 32 else np.uint64
        self.prefixes: UIntArray = np.empty(0, dtype=dtype)
        self.scalar: type[np.unsignedinteger[Any]] = dtype
        self.rows: RowArray = np.empty(0, dtype=np.uint32)
        self.bitmap = bytearray(1)
        self.mask = 0

    def prefixes_of(self, fingerprints: U64Array) -> UIntArray:
        permuted = self.table.permute_array(fingerprints) >> np.uint64(self.suffix_bits)
        return permuted.astype(self.prefixes.dtype)

    def insert(self, fingerprints: U64Array, rows: RowArray, total_rows: int) -> None:
        """Index documents at ``rows`` with these fingerprints; ``total_rows``
        is the tier's row count afterwards (it sizes the bitmap)."""
        prefixes = self.prefixes_of(fingerprints)
        order = np.argsort(prefixes)
        prefixes = prefixes[order]
        if len(self.prefixes):
            positions = np.searchsorted(self.prefixes, prefixes, side="right")
            self.prefixes = np.insert(self.prefixes, positions, prefixes)
            self.rows = np.insert(self.rows, positions, rows[order])
        else:
            self.prefixes = prefixes
            self.rows = rows[order]
        bits = _bitmap_bits(total_rows, self.prefix_bits)
        if bits - 1 != self.mask:
            self.mask = bits - 1
            self.bitmap = bytearray(max(bits // 8, 1))
            prefixes = self.prefixes  # a new size: every prefix sets its bit again
        positions_set = prefixes.astype(np.uint64) & np.uint64(self.mask)
        view = np.frombuffer(self.bitmap, dtype=np.uint8)
        np.bitwise_or.at(
            view,
            (positions_set >> np.uint64(3)).astype(np.intp),
            (np.uint8(1) << (positions_set & np.uint64(7)).astype(np.uint8)),
        )

    def nbytes(self) -> int:
        return int(self.prefixes.nbytes + self.rows.nbytes + len(self.bitmap))


class _SortedTier:
    """Delta documents in numpy arrays. Row ``r`` holds ``ids[r]`` with
    ``fingerprints[r]``; rows are only appended, and a document taken out
    leaves a dead row behind until the tier is rebuilt."""

    def __init__(self, tables: Sequence[Table]) -> None:
        self.ids: U64Array = np.empty(0, dtype=np.uint64)
        self.fingerprints: U64Array = np.empty(0, dtype=np.uint64)
        self.id_order: U64Array = np.empty(0, dtype=np.uint64)  # ids, sorted
        self.id_rows: RowArray = np.empty(0, dtype=np.uint32)  # the row of each
        self.dead: set[int] = set()
        self.max_id = -1  # no id above this was ever in the tier
        self.indexes = [_TableIndex(table) for table in tables]

    def __len__(self) -> int:
        return len(self.ids) - len(self.dead)

    def row_of(self, doc_id: int) -> int | None:
        """The live row of ``doc_id``, or ``None``."""
        if doc_id > self.max_id:
            return None  # the common case: a new document has a new id
        id_order = self.id_order
        # A numpy scalar: with a Python int, numpy would convert the whole array.
        position = int(id_order.searchsorted(np.uint64(doc_id)))
        # A document taken out and folded in again has a dead row as well.
        while position < len(id_order) and int(id_order[position]) == doc_id:
            row = int(self.id_rows[position])
            if row not in self.dead:
                return row
            position += 1
        return None

    def add(self, doc_ids: U64Array, fingerprints: U64Array) -> None:
        """Append distinct documents, none of them live in the tier already."""
        first_row = len(self.ids)
        rows = np.arange(first_row, first_row + len(doc_ids), dtype=np.uint32)
        self.ids = np.concatenate([self.ids, doc_ids])
        self.fingerprints = np.concatenate([self.fingerprints, fingerprints])
        order = np.argsort(doc_ids)
        sorted_ids = doc_ids[order]
        positions = np.searchsorted(self.id_order, sorted_ids)
        self.id_order = np.insert(self.id_order, positions, sorted_ids)
        self.id_rows = np.insert(self.id_rows, positions, rows[order])
        if len(doc_ids):
            self.max_id = max(self.max_id, int(sorted_ids[-1]))
        for index in self.indexes:
            index.insert(fingerprints, rows, len(self.ids))

    def arrays(self) -> tuple[U64Array, U64Array]:
        """The live ``(doc_ids, fingerprints)``."""
        if not self.dead:
            return self.ids, self.fingerprints
        alive = np.ones(len(self.ids), dtype=bool)
        alive[np.fromiter(self.dead, dtype=np.intp, count=len(self.dead))] = False
        return self.ids[alive], self.fingerprints[alive]

    def matches(self, query_permuted: Sequence[int], query: int, k: int, found: dict[int, int]) -> None:
        """Add every live document within ``k`` bits of ``query`` to ``found``."""
        for permuted, index in zip(query_permuted, self.indexes, strict=True):
            prefix = permuted >> index.suffix_bits
            bit = prefix & index.mask
            if not (index.bitmap[bit >> 3] >> (bit & 7)) & 1:
                continue
            prefixes = index.prefixes
            # A numpy scalar: with a Python int, numpy would convert the whole array.
            position = int(prefixes.searchsorted(index.scalar(prefix)))
            end = len(prefixes)
            while position < end and prefixes.item(position) == prefix:
                row = index.rows.item(position)
                position += 1
                if row in self.dead:
                    continue
                distance = (self.fingerprints.item(row) ^ query).bit_count()
                if distance <= k:
                    found[self.ids.item(row)] = distance

    def nbytes(self) -> int:
        arrays = self.ids.nbytes + self.fingerprints.nbytes + self.id_order.nbytes + self.id_rows.nbytes
        return int(arrays) + sum(index.nbytes() for index in self.indexes)


class Delta:
    """The in-memory delta, kept in step with one snapshot of the log.

    ``next_seq`` and ``merge_epoch`` name the snapshot this delta reflects: the
    store compares them with the stored state to decide whether to replay new
    log records (same epoch) or reload from scratch (a merge happened).

    Args:
        tables: the store's permutation tables.
        recent_limit: documents the recent tier holds before it is folded
            into the sorted tier (``None``: ``RECENT_LIMIT``).
    """

    def __init__(self, tables: Sequence[Table], recent_limit: int | None = None) -> None:
        self.tables = tuple(tables)
        self.recent_limit = RECENT_LIMIT if recent_limit is None else recent_limit
        self._suffix_bits = [table.suffix_bits for table in self.tables]
        # The recent tier: documents not yet indexed, and those indexed in buckets.
        self._pending: dict[int, int] = {}
        self._indexed: dict[int, int] = {}
        self._buckets: list[Bucket] = [{} for _ in self.tables]
        self._sorted = _SortedTier(self.tables)
        # The documents put since the band table's in-memory part last took
        # them (simstore.engine.delta_bands), if one keeps it; ``era`` counts clears.
        self.touched: list[int] | None = None
        self.era = 0
        self.next_seq = 0
        self.merge_epoch = -1  # matches no stored epoch, so the first read loads
        self.state = State(0, 0, -1)
        self.state_bytes = b""

    def adopt(self, state: State, state_bytes: bytes | None = None) -> None:
        """Record that this delta now reflects the stored ``state``."""
        self.state = state
        self.state_bytes = state.encode() if state_bytes is None else state_bytes
        self.next_seq = state.next_seq
        self.merge_epoch = state.merge_epoch

    def __len__(self) -> int:
        return len(self._pending) + len(self._indexed) + len(self._sorted)

    def __contains__(self, doc_id: int) -> bool:
        return self.get(doc_id) is not None

    def get(self, doc_id: int) -> int | None:
        """The fingerprint the delta holds for ``doc_id``, or ``None``."""
        fingerprint = self._pending.get(doc_id)
        if fingerprint is None:
            fingerprint = self._indexed.get(doc_id)
        if fingerprint is None:
            row = self._sorted.row_of(doc_id)
            if row is not None:
                fingerprint = int(self._sorted.fingerprints[row])
        return fingerprint

    def clear(self) -> None:
        self.era += 1
        if self.touched is not None:
            self.touched = []
        self._pending.clear()
        self._indexed.clear()
        for bucket in self._buckets:
            bucket.clear()
        self._sorted = _SortedTier(self.tables)

    def put(self, doc_id: int, fingerprint: int) -> None:
        """Record that ``doc_id`` has ``fingerprint`` (replacing any earlier one)."""
        if self.touched is not None:
            self.touched.append(doc_id)
        self.discard(doc_id)
        self._pending[doc_id] = fingerprint
        if len(self._pending) + len(self._indexed) >= self.recent_limit:
            self._fold()

    def put_many(self, doc_ids: Sequence[int], fingerprints: U64Array) -> None:
        """:meth:`put` for a batch of distinct documents."""
        if len(doc_ids) < SMALL_BATCH:
            for doc_id, fingerprint in zip(doc_ids, fingerprints.tolist(), strict=True):
                self.put(doc_id, fingerprint)
            return
        if self.touched is not None:
            self.touched.extend(doc_ids)
        self._discard_many(doc_ids)
        if len(doc_ids) >= self.recent_limit:
            # A reload or a big batch goes straight to the sorted tier, in numpy.
            self._add_sorted(np.array(doc_ids, dtype=np.uint64), fingerprints.astype(np.uint64))
            return
        self._pending.update(zip(doc_ids, fingerprints.tolist(), strict=True))
        if len(self._pending) + len(self._indexed) >= self.recent_limit:
            self._fold()

    def discard(self, doc_id: int) -> None:
        """Forget ``doc_id`` if the delta holds it."""
        if self._pending.pop(doc_id, None) is not None:
            return
        fingerprint = self._indexed.pop(doc_id, None)
        if fingerprint is not None:
            for table, suffix_bits, bucket in zip(self.tables, self._suffix_bits, self._buckets, strict=True):
                _bucket_remove(bucket, table.permute(fingerprint) >> suffix_bits, doc_id)
            return
        row = self._sorted.row_of(doc_id)
        if row is not None:
            self._sorted.dead.add(row)

    def _discard_many(self, doc_ids: Sequence[int]) -> None:
        if self._pending or self._indexed:
            for doc_id in doc_ids:
                if doc_id in self._pending or doc_id in self._indexed:
                    self.discard(doc_id)
        tier = self._sorted
        if not len(tier):
            return
        ids = np.array(doc_ids, dtype=np.uint64)
        candidates = ids[ids <= np.uint64(tier.max_id)] if tier.max_id >= 0 else ids[:0]
        if not len(candidates):
            return
        if len(candidates) < SMALL_BATCH:
            for doc_id in candidates.tolist():
                row = tier.row_of(doc_id)
                if row is not None:
                    tier.dead.add(row)
            return
        # Every row (dead ones too) whose id is a candidate; then keep the live ones.
        wanted = np.isin(tier.id_order, candidates)
        tier.dead.update(tier.id_rows[wanted].tolist())

    def _index_pending(self) -> None:
        """Put the pending documents into the recent tier's buckets."""
        pending = self._pending
        if len(pending) < SMALL_BATCH:
            for doc_id, fingerprint in pending.items():
                for table, suffix_bits, bucket in zip(
                    self.tables, self._suffix_bits, self._buckets, strict=True
                ):
                    _bucket_add(bucket, table.permute(fingerprint) >> suffix_bits, doc_id)
        else:
            doc_ids = list(pending)
            fingerprints = np.fromiter(pending.values(), dtype=np.uint64, count=len(pending))
            for table, suffix_bits, bucket in zip(self.tables, self._suffix_bits, self._buckets, strict=True):
                _fill_bucket(bucket, table.permute_array(fingerprints) >> np.uint64(suffix_bits), doc_ids)
        self._indexed.update(pending)
        pending.clear()

    def _fold(self) -> None:
        """Move the recent tier into the sorted tier."""
        recent = {**self._indexed, **self._pending}
        self._pending.clear()
        self._indexed.clear()
        for bucket in self._buckets:
            bucket.clear()
        doc_ids = np.fromiter(recent.keys(), dtype=np.uint64, count=len(recent))
        fingerprints = np.fromiter(recent.values(), dtype=np.uint64, count=len(recent))
        self._add_sorted(doc_ids, fingerprints)

    def _add_sorted(self, doc_ids: U64Array, fingerprints: U64Array) -> None:
        tier = self._sorted
        if len(tier.dead) > len(tier):
            # Mostly dead rows (replacements): rebuild from the live ones
            # rather than keep copying the dead along.
            live_ids, live_fingerprints = tier.arrays()
            doc_ids = np.concatenate([live_ids, doc_ids])
            fingerprints = np.concatenate([live_fingerprints, fingerprints])
            tier = self._sorted = _SortedTier(self.tables)
        tier.add(doc_ids, fingerprints)

    def apply(self, records: Iterable[tuple[bytes, bytes]]) -> None:
        """Replay log records ``(seq, op)`` in order.

        The records are folded into their net effect first, so that a long
        log (a reopen with a full delta) is indexed in one vectorised pass
        instead of one permutation per table per record.
        """
        entries = list(records)
        if not entries:
            return
        final = _net_effect([op for _, op in entries])
        removed = [doc_id for doc_id, fingerprint in final.items() if fingerprint is None]
        if len(self):
            self._discard_many(removed)
        added = [(doc_id, fingerprint) for doc_id, fingerprint in final.items() if fingerprint is not None]
        if added:
            doc_ids = [doc_id for doc_id, _ in added]
            fingerprints = np.array([fingerprint for _, fingerprint in added], dtype=np.uint64)
            self.put_many(doc_ids, fingerprints)
        self.next_seq = _SEQ.unpack(entries[-1][0])[0] + 1

    def matches(self, query_permuted: Sequence[int], query: int, k: int) -> dict[int, int]:
        """Documents within ``k`` bits of ``query``: ``{doc_id: distance}``.

        ``query_permuted`` holds the query's permuted key for every table.
        """
        found: dict[int, int] = {}
        pending = len(self._pending)
        if pending:
            limit = self.recent_limit
            if pending >= limit // 16 or pending + len(self._indexed) >= limit // 4:
                self._fold()
            else:
                self._index_pending()
        if self._indexed:
            fingerprints = self._indexed
            for permuted, suffix_bits, bucket in zip(
                query_permuted, self._suffix_bits, self._buckets, strict=True
            ):
                members = bucket.get(permuted >> suffix_bits)
                if members is None:
                    continue
                for doc_id in (members,) if isinstance(members, int) else members:
                    distance = (fingerprints[doc_id] ^ query).bit_count()
                    if distance <= k:
                        found[doc_id] = distance
        if len(self._sorted):
            self._sorted.matches(query_permuted, query, k, found)
        return found

    def arrays(self) -> tuple[U64Array, U64Array]:
        """The delta's ``(doc_ids, fingerprints)`` as uint64 arrays, in no particular order."""
        recent = {**self._indexed, **self._pending}
        recent_ids = np.fromiter(recent.keys(), dtype=np.uint64, count=len(recent))
        recent_fingerprints = np.fromiter(recent.values(), dtype=np.uint64, count=len(recent))
        sorted_ids, sorted_fingerprints = self._sorted.arrays()
        return (
            np.concatenate([sorted_ids, recent_ids]),
            np.concatenate([sorted_fingerprints, recent_fingerprints]),
        )

    def as_dict(self) -> dict[int, int]:
        """``{doc_id: fingerprint}`` for every document in the delta."""
        doc_ids, fingerprints = self.arrays()
        return dict(zip(doc_ids.tolist(), fingerprints.tolist(), strict=True))

    def sorted_bytes(self) -> int:
        """Bytes held by the sorted tier's arrays."""
        return self._sorted.nbytes()
