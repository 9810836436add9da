"""Batch operations over a whole store: all near-duplicate pairs and clusters.

Kept apart from :mod:`simstore.store` as a mixin so that the per-document
facade and the whole-corpus operations stay in modules of their own. The
algorithms are pure functions in :mod:`simstore.pairs` and
:mod:`simstore.clusters`; this module feeds them one snapshot of the store
and turns internal document ids back into keys.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from simstore import _lmdb
from simstore.clusters import components, groups, pick_longest
from simstore.errors import CorruptStoreError, InvalidTypeError, InvalidValueError, StoreClosedError
from simstore.pairs import IntArray, prefix_masks, table_pairs
from simstore.permute import Table, U64Array
from simstore.records import Key, decode_record, encode_id, unpack_key, unpack_meta
from simstore.results import Record

#: ``progress(tables_done, tables_total)``, called after each table.
Progress = Callable[[int, int], None]
#: A representative policy: ``"first"``, ``"longest"``, or a callable that
#: gets the members' records in the order they were added and returns the
#: key of the one to keep (or its record).
KeepPolicy = str | Callable[[list[Record]], Key | Record]

KEEP_POLICIES = ("first", "longest")
#: The metadata field ``keep="longest"`` compares (the CLI records each
#: document's text length there).
LENGTH_FIELD = "length"


class Pair(NamedTuple):
    """Two stored documents within ``distance`` bits; ``key_a`` was added first."""

    key_a: Key
    key_b: Key
    distance: int


class Cluster(NamedTuple):
    """A connected component of the near-duplicate pair graph.

    ``cluster_id`` is the internal id of the member added first: it does not
    depend on the order pairs were found in, so it is the same on every run
    over the same store, and stays while that member stays. ``members`` lists
    every member's key in the order added, the representative included.
    """

    cluster_id: int
    representative: Key
    members: list[Key]

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def duplicates(self) -> list[Key]:
        """The members other than the representative."""
        return [key for key in self.members if key != self.representative]


@dataclass
class _Snapshot:
    """Every document of one read snapshot: internal ids ascending (the order
    added) and their fingerprints; ``txn`` stays open to resolve keys."""

    txn: _lmdb.Txn
    doc_ids: U64Array
    fingerprints: U64Array


class BatchMixin:
    """Whole-store batch operations, mixed into :class:`simstore.Store`."""

    if TYPE_CHECKING:
        path: str
        _env: _lmdb.Environment
        _handles: _lmdb.Handles
        _tables: tuple[Table, ...]
        _lock: threading.RLock
        _closed: bool

        def _check_usable(self) -> None: ...

        def _check_k(self, k: object) -> int: ...

    # ------------------------------------------------------------------ pairs

    def near_duplicate_pairs(
        self, k: int | None = None, *, progress: Progress | None = None
    ) -> Iterator[Pair]:
        """Every pair of stored documents within ``k`` bits, each pair once.

        Manku's batch mode: for each permutation table, the documents sharing
        the table's prefix are compared with each other (vectorised), and a
        pair is reported by the first table whose prefix it shares. The pairs
        stream out table by table, in no particular order; ``key_a`` is the
        document added first. A fingerprint shared by ``m`` documents gives
        all ``m * (m - 1) / 2`` of their pairs.

        The snapshot is taken when iteration starts and held (an LMDB read
        transaction) until the iterator is exhausted or closed; writers are
        not blocked. Memory: the fingerprints and ids (16 bytes a document)
        plus one table's order (8 bytes a document), never the pairs of more
        than one numpy step.

        Args:
            k: the largest distance reported; the store's ``k`` by default,
                and no larger.
            progress: called as ``progress(tables_done, tables_total)``.
        """
        k = self._check_k(k)
        return self._pairs(k, progress)

    def _pairs(self, k: int, progress: Progress | None) -> Iterator[Pair]:
        snapshot = self._snapshot()
        try:
            for left, right, distance in self._position_pairs(snapshot, k, progress):
                first = np.minimum(left, right)
                second = np.maximum(left, right)
                ids_a = snapshot.doc_ids[first].tolist()
                ids_b = snapshot.doc_ids[second].tolist()
                keys = self._keys_of(snapshot.txn, set(ids_a) | set(ids_b))
                for id_a, id_b, bits in zip(ids_a, ids_b, distance.tolist(), strict=True):
                    yield Pair(keys[id_a], keys[id_b], bits)
        finally:
            snapshot.txn.abort()

    def _position_pairs(
        self, snapshot: _Snapshot, k: int, progress: Progress | None
    ) -> Iterator[tuple[IntArray, IntArray, np.ndarray]]:
        """Pairs as positions into the snapshot's arrays, table by table."""
        tables = self._tables
        masks = prefix_masks(tables)
        for index, table in enumerate(tables):
            yield from table_pairs(snapshot.fingerprints, table, k, masks[:index])
            if progress is not None:
                progress(index + 1, len(tables))

    # --------------------------------------------------------------- clusters

    def clusters(
        self, k: int | None = None, keep: KeepPolicy = "first", *, progress: Progress | None = None
    ) -> list[Cluster]:
        """The connected components of the near-duplicate pair graph.

        Two documents are in one cluster when a chain of pairs, each within
        ``k`` bits, joins them: if A~B and B~C then A, B and C form one
        cluster even when A and C are further apart than ``k``. Documents
        with no near-duplicate are in no cluster.

        Args:
            k: the largest distance of a pair; the store's ``k`` by default.
            keep: which member represents the cluster: ``"first"`` (added
                first), ``"longest"`` (largest ``meta["length"]``, as the
                command line records it; missing counts as 0, ties go to
                the first added), or a callable taking the members'
                :class:`~simstore.Record` objects in the order added and
                returning the key of the one to keep (or its record).
            progress: called as ``progress(tables_done, tables_total)``.

        Returns:
            The clusters, sorted by ``cluster_id`` (the internal id of the
            member added first, stable from run to run).
        """
        k = self._check_k(k)
        if not (callable(keep) or keep in KEEP_POLICIES):
            raise InvalidValueError(f"keep must be 'first', 'longest' or a callable, got {keep!r}")
        snapshot = self._snapshot()
        try:
            member_groups = self._member_groups(snapshot, k, progress)
            return self._make_clusters(snapshot, member_groups, keep)
        finally:
            snapshot.txn.abort()

    def _member_groups(self, snapshot: _Snapshot, k: int, progress: Progress | None) -> list[IntArray]:
        """Clusters as arrays of snapshot positions, each ascending, sorted by first member."""
        # Documents with equal fingerprints are joined directly; pairs are
        # needed only between distinct fingerprints, so a fingerprint shared by
        # thousands of documents costs nothing quadratic here.
        unique, inverse = distinct(snapshot.fingerprints)
        masks = prefix_masks(self._tables)
        lefts: list[IntArray] = []
        rights: list[IntArray] = []
        for index, table in enumerate(self._tables):
            for left, right, _ in table_pairs(unique, table, k, masks[:index]):
                lefts.append(left)
                rights.append(right)
            if progress is not None:
                progress(index + 1, len(self._tables))
        empty = np.zeros(0, dtype=np.int64)
        labels = components(
            len(unique),
            np.concatenate(lefts) if lefts else empty,
            np.concatenate(rights) if rights else empty,
        )
        component = labels[inverse]  # per document: the smallest distinct fingerprint joined to it
        if len(unique) != len(inverse):
            # Relabel by the smallest document position instead.
            first = np.full(len(unique), len(inverse), dtype=np.int64)
            np.minimum.at(first, component, np.arange(len(inverse), dtype=np.int64))
            component = first[component]
        return groups(component)

    def _make_clusters(
        self, snapshot: _Snapshot, member_groups: list[IntArray], keep: KeepPolicy
    ) -> list[Cluster]:
        clusters: list[Cluster] = []
        for positions in member_groups:
            ids = snapshot.doc_ids[positions].tolist()
            with self._lock:
                self._check_open()
                if keep == "first":
                    keys = self._keys_of(snapshot.txn, ids)
                    members = [keys[doc_id] for doc_id in ids]
                    representative = members[0]
                else:
                    records = self._records_of(snapshot.txn, ids)
                    members = [record.key for record in records]
                    representative = choose_representative(records, keep)
            clusters.append(Cluster(ids[0], representative, members))
        return clusters

    # --------------------------------------------------------------- snapshot

    def _snapshot(self) -> _Snapshot:
        """Open a read transaction and read every document's id and fingerprint.

        The transaction is opened outside :meth:`_read` on purpose: it must
        outlive the store lock (a pairs iterator may be consumed slowly, and
        holding the lock would block every other thread), and the document
        records hold every document, delta or not, so no delta is needed.
        """
        with self._lock:
            self._check_usable()
            txn = self._env.begin_read()
            try:
                cursor = txn.cursor(self._handles.docs)
                raw_ids = b"".join(cursor.iternext(keys=True, values=False))
                cursor.first()
                raw_fingerprints = b"".join(raw[:8] for raw in cursor.iternext(keys=False, values=True))
            except BaseException:
                txn.abort()
                raise
        doc_ids = np.frombuffer(raw_ids, dtype=">u8").astype(np.uint64)
        fingerprints = np.frombuffer(raw_fingerprints, dtype=">u8").astype(np.uint64)
        if len(doc_ids) != len(fingerprints):
            txn.abort()
            raise CorruptStoreError("document records changed while they were read")
        return _Snapshot(txn, doc_ids, fingerprints)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the store {self.path!r} was closed while a batch operation used it")

    def _keys_of(self, txn: _lmdb.Txn, doc_ids: Sequence[int] | set[int]) -> dict[int, Key]:
        with self._lock:
            self._check_open()
            docs = self._handles.docs
            keys: dict[int, Key] = {}
            for doc_id in doc_ids:
                raw = txn.get(encode_id(doc_id), db=docs)
                if raw is None:
                    raise CorruptStoreError(f"document {doc_id} vanished from its snapshot")
                keys[doc_id] = unpack_key(decode_record(raw)[1])
            return keys

    def _records_of(self, txn: _lmdb.Txn, doc_ids: Sequence[int]) -> list[Record]:
        docs = self._handles.docs
        docmeta = self._handles.docmeta
        records: list[Record] = []
        for doc_id in doc_ids:
            id_bytes = encode_id(doc_id)
            raw = txn.get(id_bytes, db=docs)
            if raw is None:
                raise CorruptStoreError(f"document {doc_id} vanished from its snapshot")
            fingerprint, packed = decode_record(raw)
            records.append(
                Record(unpack_key(packed), fingerprint, unpack_meta(txn.get(id_bytes, db=docmeta)))
            )
        return records


def distinct(fingerprints: U64Array) -> tuple[U64Array, IntArray]:
    """``(unique, inverse)`` as :func:`numpy.unique` gives them, but without
    its slow inverse when no fingerprint repeats (the common case)."""
    ordered = np.sort(fingerprints)
    if not bool(np.any(ordered[1:] == ordered[:-1])):
        return fingerprints, np.arange(len(fingerprints), dtype=np.int64)
    unique, inverse = np.unique(fingerprints, return_inverse=True)
    return unique, inverse.reshape(-1).astype(np.int64)


def choose_representative(records: list[Record], keep: KeepPolicy) -> Key:
    """The representative's key under a ``"longest"`` or callable policy;
    ``records`` are the cluster's members in the order added."""
    if keep == "longest":
        lengths: list[Any] = [
            None if record.meta is None else record.meta.get(LENGTH_FIELD) for record in records
        ]
        return records[pick_longest(lengths)].key
    if not callable(keep):  # pragma: no cover - checked by clusters()
        raise InvalidValueError(f"unknown keep policy {keep!r}")
    chosen = keep(list(records))
    keys = [record.key for record in records]
    if isinstance(chosen, tuple) and hasattr(chosen, "key"):
        chosen = chosen.key  # a Record was returned rather than its key
    if isinstance(chosen, bool) or not isinstance(chosen, str | bytes | int):
        raise InvalidTypeError(f"keep= must return a member's key, got {type(chosen).__name__}")
    for key in keys:
        if type(key) is type(chosen) and key == chosen:
            return key
    raise InvalidValueError(f"keep= returned {chosen!r}, which is not a member of the cluster {keys!r}")
