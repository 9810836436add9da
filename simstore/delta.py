"""The delta: documents added since the last merge, in memory and in a log.

Every change that the permutation tables do not hold yet is one record of the
``delta`` sub-database, keyed by an 8-byte big-endian sequence number and
written in the same transaction as the document record, so the delta is as
durable as anything else in the store. A record is ``b"a" + id + fingerprint``
(the document now has this fingerprint and is not in the tables) or
``b"r" + id`` (the document left the delta). Replaying the log in order gives
the delta; a merge writes the delta into the tables and empties the log.

In memory the delta is indexed like the tables, by each table's leading
prefix, so a query consults it with one dict look-up per table rather than a
scan.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import numpy as np

from simstore.errors import CorruptStoreError
from simstore.format import State
from simstore.permute import Table, U64Array

ADD_OP = b"a"
REMOVE_OP = b"r"
_ADD = struct.Struct(">cQQ")
_REMOVE = struct.Struct(">cQ")
_SEQ = struct.Struct(">Q")

# Below this many documents a batch is indexed one document at a time.
SMALL_BATCH = 32


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


class Delta:
    """The in-memory delta, kept in step with one snapshot of the log.

    ``next_seq`` and ``merge_epoch`` name the snapshot this delta reflects: the
    store compares them with the stored state to decide whether to replay new
    log records (same epoch) or reload from scratch (a merge happened).
    """

    def __init__(self, tables: Sequence[Table]) -> None:
        self.tables = tuple(tables)
        self._suffix_bits = [table.suffix_bits for table in self.tables]
        self.fingerprints: dict[int, int] = {}
        self.buckets: list[Bucket] = [{} for _ in self.tables]
        self.next_seq = 0
        self.merge_epoch = -1  # matches no stored epoch, so the first read loads
        self.state = State(0, 0, -1)
        self.state_bytes = b""

    def adopt(self, state: State) -> None:
        """Record that this delta now reflects the stored ``state``."""
        self.state = state
        self.state_bytes = state.encode()
        self.next_seq = state.next_seq
        self.merge_epoch = state.merge_epoch

    def __len__(self) -> int:
        return len(self.fingerprints)

    def clear(self) -> None:
        self.fingerprints.clear()
        for bucket in self.buckets:
            bucket.clear()

    def put(self, doc_id: int, fingerprint: int) -> None:
        """Record that ``doc_id`` has ``fingerprint`` (replacing any earlier one)."""
        self.discard(doc_id)
        self.fingerprints[doc_id] = fingerprint
        for table, suffix_bits, bucket in zip(self.tables, self._suffix_bits, self.buckets, strict=True):
            _bucket_add(bucket, table.permute(fingerprint) >> suffix_bits, doc_id)

    def put_many(self, doc_ids: Sequence[int], fingerprints: U64Array) -> None:
        """:meth:`put` for a batch, with the prefixes computed in numpy."""
        if len(doc_ids) < SMALL_BATCH:
            # numpy's per-call overhead outweighs its speed for a few documents.
            for doc_id, fingerprint in zip(doc_ids, fingerprints.tolist(), strict=True):
                self.put(doc_id, fingerprint)
            return
        for doc_id in doc_ids:
            self.discard(doc_id)
        self.fingerprints.update(zip(doc_ids, fingerprints.tolist(), strict=True))
        for table, suffix_bits, bucket in zip(self.tables, self._suffix_bits, self.buckets, strict=True):
            prefix_array = table.permute_array(fingerprints) >> np.uint64(suffix_bits)
            _fill_bucket(bucket, prefix_array, doc_ids)

    def discard(self, doc_id: int) -> None:
        """Forget ``doc_id`` if the delta holds it."""
        fingerprint = self.fingerprints.pop(doc_id, None)
        if fingerprint is None:
            return
        for table, suffix_bits, bucket in zip(self.tables, self._suffix_bits, self.buckets, strict=True):
            _bucket_remove(bucket, table.permute(fingerprint) >> suffix_bits, doc_id)

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
        if self.fingerprints:
            for doc_id in final:
                self.discard(doc_id)
        last_seq = entries[-1][0]
        added = [(doc_id, fingerprint) for doc_id, fingerprint in final.items() if fingerprint is not None]
        if added:
            doc_ids = [doc_id for doc_id, _ in added]
            fingerprints = np.array([fingerprint for _, fingerprint in added], dtype=np.uint64)
            self.put_many(doc_ids, fingerprints)
        self.next_seq = _SEQ.unpack(last_seq)[0] + 1

    def matches(self, query_permuted: Sequence[int], query: int, k: int) -> dict[int, int]:
        """Documents within ``k`` bits of ``query``: ``{doc_id: distance}``.

        ``query_permuted`` holds the query's permuted key for every table.
        """
        found: dict[int, int] = {}
        fingerprints = self.fingerprints
        if not fingerprints:
            return found
        for permuted, suffix_bits, bucket in zip(
            query_permuted, self._suffix_bits, self.buckets, strict=True
        ):
            members = bucket.get(permuted >> suffix_bits)
            if members is None:
                continue
            for doc_id in (members,) if isinstance(members, int) else members:
                distance = (fingerprints[doc_id] ^ query).bit_count()
                if distance <= k:
                    found[doc_id] = distance
        return found

    def arrays(self) -> tuple[U64Array, U64Array]:
        """The delta's ``(doc_ids, fingerprints)`` as uint64 arrays."""
        doc_ids = np.fromiter(self.fingerprints.keys(), dtype=np.uint64, count=len(self.fingerprints))
        fingerprints = np.fromiter(self.fingerprints.values(), dtype=np.uint64, count=len(self.fingerprints))
        return doc_ids, fingerprints
