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
from simstore.clusters import components, groups, pick_longest, stars
from simstore.errors import CorruptStoreError, InvalidTypeError, InvalidValueError, StoreClosedError
from simstore.pairs import IntArray, prefix_masks, table_pairs
from simstore.permute import Table, U64Array
from simstore.records import Key, decode_record, encode_id, unpack_key, unpack_meta
from simstore.results import Record
from simstore.sketch import Sketch, check_similarity, estimate_jaccard

#: ``progress(tables_done, tables_total)``, called after each table.
Progress = Callable[[int, int], None]
#: A representative policy: ``"first"``, ``"longest"``, or a callable that
#: gets the members' records in the order they were added and returns the
#: key of the one to keep (or its record).
KeepPolicy = str | Callable[[list[Record]], Key | Record]

KEEP_POLICIES = ("first", "longest")
#: How clusters are formed from pairs: connected components (chains join
#: everything they reach) or stars (every member paired with the kept one).
LINKAGES = ("components", "star")
#: The metadata field ``keep="longest"`` compares (the CLI records each
#: document's text length there).
LENGTH_FIELD = "length"


class Pair(NamedTuple):
    """Two stored documents within ``distance`` bits; ``key_a`` was added
    first. ``similarity`` is their estimated Jaccard similarity (see
    :class:`simstore.Match`), ``None`` if either has no sketch."""

    key_a: Key
    key_b: Key
    distance: int
    similarity: float | None = None


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
    #: The largest distance of a member from the representative.
    worst_distance: int = 0
    #: The least estimated similarity of a member to the representative
    #: (``None`` when no member's can be estimated).
    worst_similarity: float | None = None

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

        @property
        def sketch(self) -> Sketch | None: ...

        @property
        def min_similarity(self) -> float | None: ...

    # ------------------------------------------------------------------ pairs

    def near_duplicate_pairs(
        self, k: int | None = None, *, min_similarity: float | None = None, progress: Progress | None = None
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
            min_similarity: drop pairs whose estimated similarity is below
                this (0 to 1); a pair with a document that has no sketch
                (added as a bare fingerprint) is kept, unjudged.
            progress: called as ``progress(tables_done, tables_total)``.
        """
        k = self._check_k(k)
        threshold = self._batch_threshold(min_similarity)
        return self._pairs(k, threshold, progress)

    def _batch_threshold(self, min_similarity: object) -> float | None:
        """The threshold of a pairs or clusters call: its own or the store's."""
        if min_similarity is None:
            return self.min_similarity
        threshold = check_similarity(min_similarity)
        if self.sketch is None:
            raise InvalidValueError(
                f"min_similarity needs verification sketches, and the store {self.path!r} keeps none"
            )
        return threshold

    def _pairs(self, k: int, threshold: float | None, progress: Progress | None) -> Iterator[Pair]:
        snapshot = self._snapshot()
        try:
            for left, right, distance in self._position_pairs(snapshot, k, progress):
                first = np.minimum(left, right)
                second = np.maximum(left, right)
                ids_a = snapshot.doc_ids[first]
                ids_b = snapshot.doc_ids[second]
                similarity = self._pair_similarities(snapshot.txn, ids_a, ids_b)
                bits = distance.astype(np.int64)
                if threshold is not None:
                    kept = ~(similarity < threshold)  # NaN (unjudged) is kept
                    ids_a, ids_b, bits, similarity = ids_a[kept], ids_b[kept], bits[kept], similarity[kept]
                id_list_a, id_list_b = ids_a.tolist(), ids_b.tolist()
                keys = self._keys_of(snapshot.txn, set(id_list_a) | set(id_list_b))
                judged = [None if value != value else value for value in similarity.tolist()]
                for id_a, id_b, pair_bits, pair_similarity in zip(
                    id_list_a, id_list_b, bits.tolist(), judged, strict=True
                ):
                    yield Pair(keys[id_a], keys[id_b], pair_bits, pair_similarity)
        finally:
            snapshot.txn.abort()

    def _pair_similarities(self, txn: _lmdb.Txn, ids_a: U64Array, ids_b: U64Array) -> np.ndarray:
        """The estimated similarity of each pair of documents (float64; NaN
        where either has no sketch, or the store keeps none)."""
        similarity = np.full(len(ids_a), np.nan)
        sketch = self.sketch
        if sketch is None or not len(ids_a):
            return similarity
        wanted = np.unique(np.concatenate([ids_a, ids_b]))
        rows, present = self._sketch_rows(txn, wanted, sketch)
        where_a = np.searchsorted(wanted, ids_a)
        where_b = np.searchsorted(wanted, ids_b)
        both = present[where_a] & present[where_b]
        if both.any():
            similarity[both] = estimate_jaccard(rows[where_a[both]], rows[where_b[both]], sketch)
        return similarity

    def _sketch_rows(
        self, txn: _lmdb.Txn, doc_ids: U64Array, sketch: Sketch
    ) -> tuple[np.ndarray, np.ndarray]:
        """The sketches of ``doc_ids`` as rows (zeros where missing), and
        which documents have one."""
        database = self._handles.sketches
        rows = np.zeros((len(doc_ids), sketch.nbytes), dtype=np.uint8)
        present = np.zeros(len(doc_ids), dtype=np.bool_)
        if database is None:
            return rows, present
        with self._lock:
            self._check_open()
            for index, doc_id in enumerate(doc_ids.tolist()):
                raw = txn.get(encode_id(doc_id), db=database)
                if raw is not None:
                    if len(raw) != sketch.nbytes:
                        raise CorruptStoreError(f"document {doc_id}'s sketch is {len(raw)} bytes")
                    rows[index] = np.frombuffer(raw, dtype=np.uint8)
                    present[index] = True
        return rows, present

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
        self,
        k: int | None = None,
        keep: KeepPolicy = "first",
        *,
        linkage: str = "components",
        min_similarity: float | None = None,
        progress: Progress | None = None,
    ) -> list[Cluster]:
        """Clusters of the near-duplicate pair graph.

        With ``linkage="components"`` (the default), two documents are in one
        cluster when a chain of pairs, each within ``k`` bits, joins them: if
        A~B and B~C then A, B and C form one cluster even when A and C are
        further apart than ``k``. With ``linkage="star"``, documents are taken
        in the order ``keep`` prefers (added first, or longest first), and
        each joins the first kept document it is paired with, or is kept
        itself: every member is within ``k`` bits (and ``min_similarity``)
        of its cluster's representative. Documents with no near-duplicate
        are in no cluster; documents with one fingerprint are always together.

        Args:
            k: the largest distance of a pair; the store's ``k`` by default.
            keep: which member represents the cluster: ``"first"`` (added
                first), ``"longest"`` (largest ``meta["length"]``, as the
                command line records it; missing counts as 0, ties go to
                the first added), or (components only) a callable taking
                the members' :class:`~simstore.Record` objects in the order
                added and returning the key of the one to keep (or its record).
            linkage: ``"components"`` or ``"star"``.
            min_similarity: pairs whose estimated similarity is below this
                do not link (see :meth:`near_duplicate_pairs`).
            progress: called as ``progress(tables_done, tables_total)``.

        Returns:
            The clusters, sorted by ``cluster_id`` (the internal id of the
            member added first, stable from run to run), each with the
            largest distance and least similarity of a member to the
            representative.
        """
        k = self._check_k(k)
        if not (callable(keep) or keep in KEEP_POLICIES):
            raise InvalidValueError(f"keep must be 'first', 'longest' or a callable, got {keep!r}")
        if linkage not in LINKAGES:
            raise InvalidValueError(f"linkage must be one of {', '.join(LINKAGES)}; got {linkage!r}")
        if linkage == "star" and callable(keep):
            raise InvalidValueError("keep= as a callable needs linkage='components'")
        threshold = self._batch_threshold(min_similarity)
        snapshot = self._snapshot()
        try:
            unique, inverse, left, right = self._linked(snapshot, k, threshold, progress)
            if linkage == "components":
                component = components(len(unique), left, right)[inverse]
                leaders = None
            else:
                rank = self._star_rank(snapshot, unique, inverse, left, right, keep)
                component = stars(len(unique), left, right, rank)[inverse]
                leaders = component
            if len(unique) != len(inverse):
                # Label by the smallest document position of each group instead.
                first = np.full(len(unique), len(inverse), dtype=np.int64)
                np.minimum.at(first, component, np.arange(len(inverse), dtype=np.int64))
                component = first[component]
            clusters = self._make_clusters(snapshot, groups(component), keep, leaders, inverse)
            return clusters
        finally:
            snapshot.txn.abort()

    def _linked(
        self, snapshot: _Snapshot, k: int, threshold: float | None, progress: Progress | None
    ) -> tuple[U64Array, IntArray, IntArray, IntArray]:
        """``(unique fingerprints, each document's, left, right)``: the pairs
        of distinct fingerprints within ``k`` (and ``threshold``, judged on
        the first document of each)."""
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
        left = np.concatenate(lefts) if lefts else empty
        right = np.concatenate(rights) if rights else empty
        if threshold is not None and len(left):
            first = _first_positions(len(unique), inverse)
            similarity = self._pair_similarities(
                snapshot.txn, snapshot.doc_ids[first[left]], snapshot.doc_ids[first[right]]
            )
            kept = ~(similarity < threshold)  # NaN (unjudged) links
            left, right = left[kept], right[kept]
        return unique, inverse, left, right

    def _star_rank(
        self,
        snapshot: _Snapshot,
        unique: U64Array,
        inverse: IntArray,
        left: IntArray,
        right: IntArray,
        keep: KeepPolicy,
    ) -> IntArray:
        """Each distinct fingerprint's place in the star order: by its first
        document, or (``keep="longest"``) by its longest document first."""
        first = _first_positions(len(unique), inverse)
        if keep != "longest" or not len(left):
            return np.argsort(np.argsort(first, kind="stable"), kind="stable")
        length = np.zeros(len(unique), dtype=np.int64)
        linked = np.zeros(len(unique), dtype=np.bool_)
        linked[left] = linked[right] = True
        positions = np.flatnonzero(linked[inverse])  # only documents in some pair need a length
        records = self._records_of(snapshot.txn, snapshot.doc_ids[positions].tolist())
        lengths = [_length_of(record) for record in records]
        np.maximum.at(length, inverse[positions], np.array(lengths, dtype=np.int64))
        order = np.lexsort((first, -length))
        rank = np.empty(len(unique), dtype=np.int64)
        rank[order] = np.arange(len(unique))
        return rank

    def _make_clusters(
        self,
        snapshot: _Snapshot,
        member_groups: list[IntArray],
        keep: KeepPolicy,
        leaders: IntArray | None,
        inverse: IntArray,
    ) -> list[Cluster]:
        clusters: list[Cluster] = []
        for positions in member_groups:
            ids = snapshot.doc_ids[positions].tolist()
            with self._lock:
                self._check_open()
                if keep == "first" and leaders is None:
                    keys = self._keys_of(snapshot.txn, ids)
                    members = [keys[doc_id] for doc_id in ids]
                    chosen = 0
                else:
                    records = self._records_of(snapshot.txn, ids)
                    members = [record.key for record in records]
                    candidates = list(range(len(records)))
                    if leaders is not None:  # a star: its leader's documents only
                        leader = leaders[positions[0]]
                        candidates = np.flatnonzero(inverse[positions] == leader).tolist()
                    if keep == "first":
                        chosen = candidates[0]
                    else:
                        picked = choose_representative([records[i] for i in candidates], keep)
                        chosen = next(i for i in candidates if records[i].key is picked)
            worst_distance, worst_similarity = self._spread(snapshot, positions, chosen)
            clusters.append(Cluster(ids[0], members[chosen], members, worst_distance, worst_similarity))
        return clusters

    def _spread(self, snapshot: _Snapshot, positions: IntArray, chosen: int) -> tuple[int, float | None]:
        """The largest distance and least similarity of a member to member ``chosen``."""
        fingerprints = snapshot.fingerprints[positions]
        worst_distance = int(np.bitwise_count(fingerprints ^ fingerprints[chosen]).max())
        others = np.delete(snapshot.doc_ids[positions], chosen)
        representative = np.full(len(others), snapshot.doc_ids[positions[chosen]], dtype=np.uint64)
        similarity = self._pair_similarities(snapshot.txn, representative, others)
        judged = similarity[~np.isnan(similarity)]
        return worst_distance, (float(judged.min()) if len(judged) else None)

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


def _first_positions(count: int, inverse: IntArray) -> IntArray:
    """For each of ``count`` distinct fingerprints, its first document's position."""
    first = np.full(count, len(inverse), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(inverse), dtype=np.int64))
    return first


def _length_of(record: Record) -> int:
    length = None if record.meta is None else record.meta.get(LENGTH_FIELD)
    return length if isinstance(length, int) and not isinstance(length, bool) else 0


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
