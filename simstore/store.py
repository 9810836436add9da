"""The Store facade and :func:`open`.

A store is one LMDB file holding a meta record, a key table (user key ->
internal id), document records (internal id -> fingerprint and key),
per-document metadata, a delta log, and one permutation table per block
combination (see :mod:`simstore.permute`). Writes go through
:meth:`Store._write`, which keeps the in-memory delta in step with the file;
reads go through :meth:`Store._read`, which brings the delta up to date with
the snapshot before any table is consulted.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from simstore import _lmdb
from simstore.batch import BatchMixin
from simstore.catalog import Catalog
from simstore.checking import check_store
from simstore.choose import layout_name
from simstore.commit import CommitMixin
from simstore.delta import Delta, encode_add, encode_remove, encode_seq
from simstore.errors import (
    CorruptStoreError,
    InvalidTypeError,
    InvalidValueError,
    KeyNotFoundError,
    ReadOnlyError,
    StoreClosedError,
)
from simstore.format import (
    CATALOG_KEY,
    FORMAT_VERSION,
    META_KEY,
    STATE_KEY,
    State,
    StoredParams,
    decode_meta,
)
from simstore.frames import as_column
from simstore.maintenance import Change as _Change
from simstore.maintenance import MaintenanceMixin
from simstore.packed import IntArray, PackedKeys, Positions
from simstore.params import Options
from simstore.permute import (
    Table,
    U64Array,
    as_fingerprint_array,
    check_fingerprint,
    tables_permuter,
    validate_k,
)
from simstore.query import permute_columns, rows_of
from simstore.records import (
    Key,
    KeyLike,
    big_endian_sliced,
    decode_id,
    decode_record,
    encode_id,
    encode_record,
    lookup_key,
    pack_key,
    pack_meta,
    record_pairs,
    rows_sliced,
    sliced,
    unpack_key,
    unpack_meta,
)
from simstore.results import (
    Match,
    Record,
    SegmenterChangedWarning,
    Stats,
    match_order,
)
from simstore.runs import filter_bits_for
from simstore.simhash import UNRECORDED_SETTINGS, Fingerprinter
from simstore.sketch import Sketch, U8Array, check_similarity, estimate_jaccard
from simstore.skew import degenerate_fingerprints, table_skew
from simstore.tables import TableSet
from simstore.text import segmenter_info

T = TypeVar("T")


# How often one call follows re-layouts by other processes before giving up.
# Each retry waits for the re-layout in progress, so only a process that
# re-lays the store out back to back, winning the writer lock every time,
# can exhaust them.
LAYOUT_RETRIES = 100

# A query_many of at least this many queries reads every table's bitmaps
# before it starts (single queries read one table's after their answer).
BATCH_READS_BITMAPS = 64


class _LayoutChangedError(Exception):
    """Internal: the snapshot's meta record differs from the one this Store
    uses, because another process re-laid the store out."""


@dataclass
class _Batch:
    """A validated add_many batch: ``positions`` holds the position of each
    distinct key's last occurrence in the batch, in the order of their first
    occurrences (``range(len(batch))`` when no key repeats);
    ``positions[key_order]`` are in the key table's order of their lookups
    (``key_order`` is ``None`` when ``positions`` are so already)."""

    packed_keys: PackedKeys
    positions: Positions
    key_order: IntArray | None
    fingerprints: U64Array
    metas: list[bytes | None] | None
    #: One verification sketch a document (a row of bytes), if the batch came as text.
    sketches: U8Array | None = None

    def meta(self, position: int) -> bytes | None:
        return None if self.metas is None else self.metas[position]

    def sketch(self, position: int) -> bytes | None:
        """The sketch at ``position``; an all-zero row means none."""
        if self.sketches is None or not self.sketches[position].any():
            return None
        return bytes(self.sketches[position].tobytes())


def _subset(
    positions: Positions, key_order: IntArray | None, indices: IntArray
) -> tuple[Positions, IntArray | None]:
    """``(positions, key_order)`` (as :class:`_Batch` holds them) of the
    ``indices`` of ``positions`` alone."""
    kept_positions = np.asarray(positions)[indices]
    if key_order is None:
        return kept_positions, None
    kept = np.zeros(len(positions), dtype=bool)
    kept[indices] = True
    renumbered = np.cumsum(kept) - 1
    return kept_positions, renumbered[key_order[kept[key_order]]]


# Every open Store, so that fork() can wait for the calls in progress and a
# forked child can give each store a fresh lock.
_open_stores: weakref.WeakSet[Store] = weakref.WeakSet()
# The locks _before_fork took, released again in the parent after fork().
_held_over_fork: list[threading.RLock] = []


def _before_fork() -> None:
    # Wait for every call in progress in another thread to finish, and keep
    # new ones out until fork() returns. A child forked in the middle of a
    # call would inherit py-lmdb's count of operations in flight, which only
    # that call (absent from the child) could bring back to zero, so the
    # child's close of its inherited environment would wait for ever
    # (tests/reliability/test_concurrency.py::test_fork_while_another_thread_is_inside_the_store).
    # Locks are taken in one order (by id), so two forking threads cannot deadlock.
    for store in sorted(_open_stores, key=id):
        store._lock.acquire()
        _held_over_fork.append(store._lock)


def _after_fork_in_parent() -> None:
    while _held_over_fork:
        _held_over_fork.pop().release()


def _after_fork_in_child() -> None:
    _held_over_fork.clear()
    for store in list(_open_stores):
        store._lock = threading.RLock()
        store._init_commit()  # no other thread's writes are waiting in the child
        store._needs_reload = True  # reopen the file at the child's first call


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


def _table_count_and_generation(raw_meta: bytes) -> tuple[int, int]:
    params = decode_meta(raw_meta)
    return len(params.tables), params.generation


class Store(MaintenanceMixin, BatchMixin, CommitMixin):
    """An open simstore store. Use :func:`simstore.open` to make one.

    A ``Store`` may be shared between threads: every operation holds an
    internal lock, so calls are serialised. After ``fork()`` the child must
    not use the parent's ``Store``; it is reopened on first use in the child.
    """

    def __init__(
        self,
        path: str,
        env: _lmdb.Environment,
        handles: _lmdb.Handles,
        params: StoredParams,
        options: Options,
        raw_meta: bytes,
    ) -> None:
        self.path = path
        self._env = env
        self._readonly = env.readonly
        self._options = options
        self._fingerprinter: Fingerprinter | None = None
        self._needs_reload = False
        self._adopt_layout(params, handles, raw_meta)
        self._lock = threading.RLock()
        self._closed = False
        self._pid = os.getpid()
        self._init_commit()
        _open_stores.add(self)
        with self._read():
            pass  # loads the delta from the log

    def _adopt_layout(self, params: StoredParams, handles: _lmdb.Handles, raw_meta: bytes) -> None:
        """Use ``params`` (decoded from ``raw_meta``) and ``handles`` from now
        on, with a delta to match.

        ``raw_meta`` must be the very record ``params`` came from: reading it
        again could see a later re-layout and pair new meta with old tables.
        """
        self._params = params
        self._handles = handles
        self._tables: tuple[Table, ...] = params.tables
        self._permute_all = tables_permuter(self._tables)
        self._delta = Delta(self._tables)
        # The snapshot (LMDB transaction id) a read last brought the delta up
        # to; a read of the same snapshot skips the sync.
        self._synced_snapshot = -1
        # The tables' runs and bitmaps, for the catalog version in _catalog_version.
        self._tableset = TableSet(self._tables, handles.tables, filter_bits_for(params.k))
        self._catalog_version = -1
        self._meta_raw = bytes(raw_meta)
        # Compaction work this process owes for the documents it wrote (entries).
        self._compaction_credit = 0

    def _reload_layout(self) -> None:
        """Another process re-laid the store out: reopen the file and adopt
        its new meta record and tables.

        The environment is reopened rather than only the new tables opened,
        because LMDB cannot close the handles of the dropped tables: a
        long-lived store that followed many re-layouts would run out of them.
        Until this succeeds the store stays marked for reloading, so a failure
        here is retried by the next call instead of leaving a closed file.
        """
        self._needs_reload = True
        self._env.close()
        self._env = self._open_environment()
        for attempt in range(1, LAYOUT_RETRIES + 1):
            try:
                raw_meta, handles = self._env.open_current(_table_count_and_generation)
            except CorruptStoreError:
                if attempt == LAYOUT_RETRIES:
                    raise
                time.sleep(0.001 * attempt)  # a read-only store raced another re-layout
                continue
            self._adopt_layout(decode_meta(raw_meta), handles, raw_meta)
            self._needs_reload = False
            return

    def _open_environment(self) -> _lmdb.Environment:
        env = _lmdb.Environment(
            self.path,
            readonly=self.readonly,
            sync=self._options.sync_each_commit,
            map_size=None,
            max_map_size=self._options.max_map_size,
            defer_meta_sync=self._options.sync_each_commit,  # simstore.commit flushes the meta page
        )
        try:
            env.use_writable_map()  # the file is this store's
        except BaseException:
            env.close()
            raise
        return env

    # ------------------------------------------------------------------ basics

    @property
    def k(self) -> int:
        """The largest distance this store answers."""
        return self._params.k

    @property
    def blocks(self) -> int | None:
        """Blocks of a one-level layout; ``None`` for other layouts."""
        return self._params.blocks

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def tables(self) -> tuple[Table, ...]:
        return self._tables

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.readonly else "open")
        return f"<simstore.Store {self.path!r} k={self.k} blocks={self.blocks} {state}>"

    def close(self) -> None:
        """Merge the delta (unless ``merge_on_close=False``) and close the file.

        Safe to call more than once.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if (
                    os.getpid() == self._pid
                    and not self.readonly
                    and self._options.merge_on_close
                    and len(self._delta)
                ):
                    self.merge()
            finally:
                self._closed = True
                if os.getpid() == self._pid:
                    try:
                        self._flush()  # sync="interval": what the last interval committed
                    finally:
                        self._env.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the store {self.path!r} is closed")
        # The fork hook sets _needs_reload in a child, so the common path
        # tests one attribute instead of calling os.getpid() on every call.
        if self._needs_reload:
            if os.getpid() != self._pid:
                self._reopen_after_fork()
            else:
                self._reload_layout()

    def _reopen_after_fork(self) -> None:
        # LMDB forbids using an environment across fork(). The child closes
        # the inherited one (safe: simstore keeps no transaction open between
        # calls and no spare ones, so closing touches none of the parent's
        # reader slots, and fcntl locks are not inherited) and opens afresh.
        self._pid = os.getpid()
        self._reload_layout()

    # ------------------------------------------------------------ transactions

    def _sync_delta(self, txn: _lmdb.Txn) -> State:
        """Bring the in-memory delta and run catalog to the snapshot ``txn`` sees."""
        raw_state = txn.get(STATE_KEY, db=self._handles.meta)
        delta = self._delta
        if raw_state is not None and raw_state == delta.state_bytes:
            return delta.state  # the common case: nothing written since
        state = State.decode(raw_state)
        if txn.get(META_KEY, db=self._handles.meta) != self._meta_raw:
            raise _LayoutChangedError
        if state.merge_epoch != delta.merge_epoch:
            delta.clear()
            cursor = txn.cursor(self._handles.delta)
            cursor.first()
            delta.apply(cursor.iternext())
        elif state.next_seq != delta.next_seq:
            cursor = txn.cursor(self._handles.delta)
            if cursor.set_range(encode_seq(delta.next_seq)):
                delta.apply(cursor.iternext())
        delta.adopt(state)
        if state.catalog_version != self._catalog_version:
            raw_catalog = txn.get(CATALOG_KEY, db=self._handles.meta)
            self._tableset.adopt(Catalog.decode(raw_catalog, len(self._tables)))
            self._catalog_version = state.catalog_version
        return state

    class _Reading:
        """The read context: lock, fresh snapshot, delta in step with it.

        A plain class rather than ``contextlib.contextmanager`` because it sits
        on the single-query hot path, where a generator costs microseconds.
        """

        __slots__ = ("store", "txn")

        def __init__(self, store: Store) -> None:
            self.store = store

        def __enter__(self) -> _lmdb.Txn:
            store = self.store
            store._lock.acquire()
            try:
                store._check_usable()
                for attempt in range(1, LAYOUT_RETRIES + 1):
                    self.txn = txn = store._env.begin_read()
                    snapshot = txn.id()
                    if snapshot == store._synced_snapshot:
                        break  # no commit since the last read: nothing to sync
                    try:
                        store._sync_delta(txn)
                        store._synced_snapshot = snapshot
                        break
                    except _LayoutChangedError:
                        self.txn.abort()
                        if attempt == LAYOUT_RETRIES:
                            raise CorruptStoreError(f"{store.path}: the layout keeps changing") from None
                        store._reload_layout()
                    except BaseException as exc:
                        self.txn.abort()
                        if _lmdb.is_lmdb_error(exc):
                            raise _lmdb.translate(exc, store.path) from exc
                        raise
            except BaseException:
                store._lock.release()
                raise
            return self.txn

        def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc: BaseException | None,
            traceback: TracebackType | None,
        ) -> None:
            try:
                self.txn.abort()
            finally:
                self.store._lock.release()
            if exc is not None and _lmdb.is_lmdb_error(exc):
                # Cursor walks run in the caller's body; translate here, once.
                raise _lmdb.translate(exc, self.store.path) from exc

    def _read(self) -> Store._Reading:
        """A read transaction with the delta in step with its snapshot."""
        return Store._Reading(self)

    def _write(self, body: Callable[[_lmdb.Txn, State], tuple[T, State, _Change]]) -> T:
        """Run ``body`` in one write transaction, then apply its delta change.

        ``body`` gets the transaction and the stored state, and returns its
        result, the state to store, and the change to the delta (and catalog).
        It may run more than once (the map may have to grow), so it must not
        touch the in-memory delta or catalog.
        """
        with self._lock:
            self._check_usable()
            if self.readonly:
                raise ReadOnlyError(f"the store {self.path!r} is open read-only")

            def in_txn(txn: _lmdb.Txn) -> tuple[T, State, bytes | None, _Change]:
                state = self._sync_delta(txn)
                result, new_state, change = body(txn, state)
                if change.catalog is not None:
                    txn.put(CATALOG_KEY, change.catalog.encode(), db=self._handles.meta)
                    new_state = new_state._replace(catalog_version=state.catalog_version + 1)
                if new_state == state:
                    return result, new_state, None, change
                raw_state = new_state.encode()
                txn.put(STATE_KEY, raw_state, db=self._handles.meta)
                return result, new_state, raw_state, change

            attempt = 0
            while True:
                try:
                    result, new_state, raw_state, change = self._env.write(in_txn)
                    break
                except _LayoutChangedError:
                    attempt += 1
                    if attempt == LAYOUT_RETRIES:
                        raise CorruptStoreError(f"{self.path}: the layout keeps changing") from None
                    self._reload_layout()
            delta = self._delta
            if change.merged:
                delta.clear()
            for doc_id in change.removed:
                delta.discard(doc_id)
            if len(change.puts) == 1:
                delta.put(*change.puts[0])
            elif change.puts:
                doc_ids = [doc_id for doc_id, _ in change.puts]
                fingerprints = np.array([fingerprint for _, fingerprint in change.puts], dtype=np.uint64)
                delta.put_many(doc_ids, fingerprints)
            delta.adopt(new_state, raw_state)
            if change.catalog is not None:
                self._tableset.adopt(change.catalog)
                self._catalog_version = new_state.catalog_version
            self._committed()
            return result

    # ------------------------------------------------------------------ writes

    @property
    def fingerprinter(self) -> Fingerprinter:
        """The text fingerprinter whose settings are stored in the file."""
        if self._fingerprinter is None:
            stored = self._params.fingerprinter
            fingerprinter = Fingerprinter.from_settings(UNRECORDED_SETTINGS if stored is None else stored)
            self._warn_if_segmenter_changed()
            self._fingerprinter = fingerprinter
        return self._fingerprinter

    def _warn_if_segmenter_changed(self) -> None:
        stored = self._params.segmenter
        if stored is None:
            return
        current = segmenter_info()
        changed = sorted(name for name in set(stored) | set(current) if stored.get(name) != current.get(name))
        if changed:
            listed = ", ".join(
                f"{name}: stored {stored.get(name)!r}, now {current.get(name)!r}" for name in changed
            )
            warnings.warn(
                f"{self.path}: text fingerprints were made with a different segmenter ({listed}); "
                "Chinese text may fingerprint differently from documents already stored",
                SegmenterChangedWarning,
                stacklevel=4,
            )

    @property
    def sketch(self) -> Sketch | None:
        """The verification sketch this store keeps beside each document
        added as text (``None``: it keeps none, so no similarity is known)."""
        if self._handles.sketches is None:
            return None
        return self.fingerprinter.sketch

    def _fingerprint_and_sketch_of(self, text: object, fingerprint: object) -> tuple[int, bytes | None]:
        """The fingerprint of one document, and its sketch if it came as
        text and this store keeps sketches."""
        if (text is None) == (fingerprint is None):
            raise InvalidTypeError("pass exactly one of text= or fingerprint=")
        if text is None:
            return check_fingerprint(fingerprint), None
        if self.sketch is None:
            return self.fingerprinter.fingerprint(text), None  # type: ignore[arg-type]
        return self.fingerprinter.fingerprint_and_sketch(text)  # type: ignore[arg-type]

    def _fingerprints_and_sketches_of(
        self, texts: object, fingerprints: object, processes: int | None = 1, sketches: object = None
    ) -> tuple[U64Array, U8Array | None]:
        """Fingerprints from ``texts`` or ``fingerprints``, and their sketches:
        made from the texts, or given as ``sketches`` beside fingerprints."""
        if (texts is None) == (fingerprints is None):
            raise InvalidTypeError("pass exactly one of texts= or fingerprints=")
        if texts is None:
            values = as_fingerprint_array(fingerprints)
            return values, (None if sketches is None else self._checked_sketches(sketches, len(values)))
        if sketches is not None:
            raise InvalidTypeError("sketches= goes with fingerprints=; from texts= they are made here")
        if isinstance(texts, str | bytes):
            raise InvalidTypeError("texts must be an iterable of texts, not a single str or bytes")
        if self.sketch is None:
            return self.fingerprinter.fingerprint_many(texts, processes), None  # type: ignore[arg-type]
        return self.fingerprinter.fingerprints_and_sketches(texts, processes)  # type: ignore[arg-type]

    def _checked_sketches(self, sketches: object, count: int) -> U8Array:
        """Given sketches, checked against this store's: one row of bytes a document."""
        sketch = self.sketch
        if sketch is None:
            raise InvalidValueError(f"the store {self.path!r} keeps no sketches; pass none")
        if not isinstance(sketches, np.ndarray) or sketches.dtype != np.uint8 or sketches.ndim != 2:
            raise InvalidTypeError(
                "sketches must be a 2-D uint8 array (Fingerprinter.fingerprints_and_sketches makes one)"
            )
        if sketches.shape != (count, sketch.nbytes):
            raise InvalidValueError(
                f"sketches must be {count} rows of {sketch.nbytes} bytes (the store's "
                f"{sketch.bins} bins of {sketch.bits} bits); got {sketches.shape[0]} of {sketches.shape[1]}"
            )
        return sketches

    @property
    def min_similarity(self) -> float | None:
        """The similarity threshold calls apply unless they pass their own
        (stored in the file; ``None``: none)."""
        return self._params.min_similarity

    def _threshold(self, min_similarity: object, query_sketch: object) -> float | None:
        """The similarity threshold of a call, checked: ``None`` if none
        applies. The store's own applies where the query has a sketch."""
        if min_similarity is None:
            return self._params.min_similarity if query_sketch is not None else None
        threshold = check_similarity(min_similarity)
        if self.sketch is None:
            raise InvalidValueError(
                f"min_similarity needs verification sketches, and the store {self.path!r} keeps none "
                "(it was made before sketches existed, or with Fingerprinter(sketch=None))"
            )
        if query_sketch is None:
            raise InvalidValueError(
                "min_similarity needs the query's text (a bare fingerprint has no sketch to compare)"
            )
        return threshold

    def add(
        self,
        key: KeyLike,
        text: str | None = None,
        *,
        fingerprint: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store a document under ``key``, replacing any document already there.

        Returns:
            The document's fingerprint.
        Raises:
            InvalidTypeError, InvalidValueError: bad key, fingerprint or meta;
                nothing is written.
            ReadOnlyError: the store is open read-only.
        """
        fp, sketch = self._fingerprint_and_sketch_of(text, fingerprint)
        packed = pack_key(key)
        packed_meta = pack_meta(meta)

        def body(txn: _lmdb.Txn, state: State) -> tuple[int, State, _Change]:
            new_state, change = self._put_one(txn, state, packed, fp, packed_meta, sketch)
            return fp, new_state, change

        result = self._write_grouped(body)
        self._maintain(1)
        return result

    def add_if_new(
        self,
        key: KeyLike,
        text: str | None = None,
        *,
        fingerprint: int | None = None,
        k: int | None = None,
        meta: Mapping[str, Any] | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
    ) -> list[Match]:
        """Insert the document only if nothing stored is within ``k`` bits
        (and, with ``min_similarity``, at least that similar; see :meth:`query`).

        The look-up and the insert run in one write transaction, so two
        processes racing with the same near-duplicate never both insert it.
        If ``key`` is already stored, its current document counts like any
        other: re-adding a key whose fingerprint is within ``k`` returns it as
        a match and changes nothing.

        Returns:
            The matches, sorted by ``(distance, key)``; an empty list means the
            document was inserted.
        """
        fp, sketch = self._fingerprint_and_sketch_of(text, fingerprint)
        k = self._check_k(k)
        threshold = self._threshold(min_similarity, sketch)
        packed = pack_key(key)
        packed_meta = pack_meta(meta)

        def body(txn: _lmdb.Txn, state: State) -> tuple[list[Match], State, _Change]:
            permuted = self._permute_all(fp)
            records: dict[int, bytes] = {}
            found = self._find(txn, permuted, fp, k, records)
            if self._tableset.bitmaps_unread:
                self._tableset.read_bitmaps(txn)
            if found:
                matches = self._resolve(txn, found, with_meta, records, sketch, threshold)
                if matches:
                    return matches, state, _Change([], [])
            new_state, change = self._put_one(txn, state, packed, fp, packed_meta, sketch)
            return [], new_state, change

        result = self._write_grouped(body)
        if not result:
            self._maintain(1)
        return result

    def _put_one(
        self,
        txn: _lmdb.Txn,
        state: State,
        packed: bytes,
        fp: int,
        packed_meta: bytes | None,
        sketch: bytes | None = None,
    ) -> tuple[State, _Change]:
        """Write one document (new or replacing) inside a write transaction."""
        handles = self._handles
        found_by = lookup_key(packed)
        existing = txn.get(found_by, db=handles.keys)
        next_id = state.next_id
        if existing is None:
            doc_id = next_id
            next_id += 1
            id_bytes = encode_id(doc_id)
            txn.put(found_by, id_bytes, db=handles.keys)
            txn.put(id_bytes, encode_record(fp, packed), db=handles.docs, append=True)
            if sketch is not None and handles.sketches is not None:
                txn.put(id_bytes, sketch, db=handles.sketches, append=True)
        else:
            doc_id = decode_id(existing)
            id_bytes = existing
            old_fp = self._record_fingerprint(txn, doc_id)
            txn.put(id_bytes, encode_record(fp, packed), db=handles.docs)
            self._put_sketch(txn, id_bytes, sketch)
            if old_fp == fp:
                self._put_meta(txn, id_bytes, packed_meta)
                return state, _Change([], [])
            if doc_id not in self._delta:
                self._tableset.delete(txn, self._tableset.catalog, [doc_id], [old_fp])
        if existing is not None or packed_meta is not None:
            # A new id has no meta to delete: ids are never reused.
            self._put_meta(txn, id_bytes, packed_meta)
        txn.put(encode_seq(state.next_seq), encode_add(doc_id, fp), db=handles.delta, append=True)
        return state._replace(next_id=next_id, next_seq=state.next_seq + 1), _Change([(doc_id, fp)], [])

    def add_many(
        self,
        keys: Iterable[KeyLike],
        fingerprints: object = None,
        *,
        texts: Iterable[str] | None = None,
        metas: Iterable[Mapping[str, Any] | None] | None = None,
        processes: int | None = 1,
        sketches: U8Array | None = None,
    ) -> U64Array:
        """Store many documents in one transaction: all of them or none.

        A key that appears more than once keeps its last fingerprint (and
        meta). Large batches (together with the delta, at least
        ``merge_threshold`` documents) are written straight into the tables
        in one sorted pass per table. Int keys counting up (``range(n)``, a
        sorted id column) are the cheapest: they need neither the test for
        repeats nor a sort, and are never all held as objects at once.

        Args:
            keys: the documents' keys.
            fingerprints: a uint64 array (or iterable of ints), one per key;
                or give ``texts``.
            metas: optional metadata dicts (or ``None``), one per key.
            processes: with ``texts``, how many processes fingerprint them:
                1 (the default) starts none; see
                :meth:`Fingerprinter.fingerprint_many`.
            sketches: with ``fingerprints`` made elsewhere by this store's
                fingerprinter, their verification sketches (the array
                :meth:`Fingerprinter.fingerprints_and_sketches` returns); a
                row of zeros stands for a document without one.

        Returns:
            The fingerprints, as a uint64 array in the order given.
        """
        packed_keys, fps, meta_list, checked_sketches = self._checked_batch(
            keys, fingerprints, texts, metas, processes, sketches
        )
        self._add_packed(packed_keys, fps, meta_list, checked_sketches)
        return fps

    def _checked_batch(
        self,
        keys: object,
        fingerprints: object,
        texts: object,
        metas: object,
        processes: int | None = 1,
        sketches: object = None,
    ) -> tuple[PackedKeys, U64Array, list[bytes | None] | None, U8Array | None]:
        """``add_many``'s arguments, checked and packed: ``(keys,
        fingerprints, packed metas or None, sketches or None)``. Raises
        before anything is written."""
        keys, texts, fingerprints = as_column(keys), as_column(texts), as_column(fingerprints)
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise InvalidTypeError("keys must be an iterable of keys, not a single key")
        if isinstance(keys, np.ndarray) and keys.ndim != 1:
            raise InvalidTypeError(f"keys must be a one-dimensional array, got {keys.ndim} dimensions")
        packed_keys = PackedKeys.of(keys)
        fps, checked_sketches = self._fingerprints_and_sketches_of(texts, fingerprints, processes, sketches)
        if len(packed_keys) != len(fps):
            raise InvalidValueError(f"got {len(packed_keys)} keys but {len(fps)} fingerprints")
        meta_list: list[bytes | None] | None = None
        if metas is not None:
            if isinstance(metas, Mapping) or not isinstance(metas, Iterable):
                raise InvalidTypeError("metas must be an iterable of dicts (or None), one per key")
            meta_list = [pack_meta(meta) for meta in metas]
            if len(meta_list) != len(packed_keys):
                raise InvalidValueError(f"got {len(packed_keys)} keys but {len(meta_list)} metas")
        return packed_keys, fps, meta_list, checked_sketches

    def _add_packed(
        self,
        packed_keys: PackedKeys,
        fps: U64Array,
        meta_list: list[bytes | None] | None,
        sketches: U8Array | None = None,
    ) -> None:
        """Store a checked batch (see :meth:`_checked_batch`) in one transaction."""
        if not len(packed_keys):
            return
        batch = _Batch(packed_keys, *packed_keys.distinct(), fps, meta_list, sketches)
        carried = len(self._delta) + len(batch.positions)
        self._reserve_for(
            len(batch.positions),
            packed_keys.total_bytes,
            run_entries=carried if carried >= self._merge_threshold() else 0,
        )
        self._write(lambda txn, state: self._add_batch(txn, state, batch))
        self._maintain(len(batch.positions), pay_all=True)

    def _add_batch(self, txn: _lmdb.Txn, state: State, batch: _Batch) -> tuple[None, State, _Change]:
        handles = self._handles
        existing: dict[bytes, bytes] = {}
        position_of: dict[bytes, int] = {}
        new_positions, new_key_order = batch.positions, batch.key_order
        if state.next_id:
            # A slice's lookups are made once, for the key table and for
            # telling its new keys from the stored ones.
            cursor = txn.cursor(handles.keys)
            new_indices: list[IntArray] = []  # of batch.positions, a slice at a time
            for part in sliced(len(batch.positions)):
                chunk = batch.positions[part]
                lookups = batch.packed_keys.lookups(chunk)
                found = dict(cursor.getmulti(lookups))
                first = part.start
                if not found:
                    new_indices.append(np.arange(first, first + len(chunk)))
                    continue
                existing.update(found)
                fresh: list[int] = []
                for index, (lookup, position) in enumerate(zip(lookups, chunk, strict=True), start=first):
                    if lookup in found:
                        position_of[lookup] = position
                    else:
                        fresh.append(index)
                new_indices.append(np.array(fresh, dtype=np.int64))
            if existing:
                new_positions, new_key_order = _subset(
                    batch.positions, batch.key_order, np.concatenate(new_indices)
                )
        first_id = state.next_id
        next_id = first_id + len(new_positions)
        placed_ids = np.arange(first_id, next_id, dtype=np.uint64)
        if isinstance(new_positions, range):  # every document, in order
            placed_fps = batch.fingerprints[new_positions.start : new_positions.stop]
        else:
            placed_fps = batch.fingerprints[new_positions]
        if len(new_positions):
            self._insert_new(
                txn,
                batch,
                (new_positions, new_key_order),
                placed_ids,
                placed_fps,
                append_keys=not state.next_id,
            )
        removed_from_delta: list[int] = []
        replaced_ids: list[int] = []
        replaced_fps: list[int] = []
        tabled_ids: list[int] = []  # replaced documents the tables hold, and their old fingerprints
        tabled_fps: list[int] = []
        fp_list = batch.fingerprints.tolist() if existing else []
        for found_by, id_bytes in existing.items():
            position = position_of[found_by]
            doc_id = decode_id(id_bytes)
            new_fp = fp_list[position]
            old_fp = self._record_fingerprint(txn, doc_id)
            txn.put(id_bytes, encode_record(new_fp, batch.packed_keys.at(position)), db=handles.docs)
            self._put_meta(txn, id_bytes, batch.meta(position))
            self._put_sketch(txn, id_bytes, batch.sketch(position))
            if old_fp == new_fp:
                continue
            if doc_id in self._delta:
                removed_from_delta.append(doc_id)
            else:
                tabled_ids.append(doc_id)
                tabled_fps.append(old_fp)
            replaced_ids.append(doc_id)
            replaced_fps.append(new_fp)
        if tabled_ids:
            self._tableset.delete(txn, self._tableset.catalog, tabled_ids, tabled_fps)
        if replaced_ids:
            placed_ids = np.concatenate([placed_ids, np.array(replaced_ids, dtype=np.uint64)])
            placed_fps = np.concatenate([placed_fps, np.array(replaced_fps, dtype=np.uint64)])
        delta = self._delta
        if len(delta) + len(placed_ids) >= self._merge_threshold():
            # Big enough to go straight to the tables, together with the delta.
            carried_ids, carried_fps = delta.arrays()
            if removed_from_delta:
                kept = ~np.isin(carried_ids, np.array(removed_from_delta, dtype=np.uint64))
                carried_ids, carried_fps = carried_ids[kept], carried_fps[kept]
            all_ids, all_fps = placed_ids, placed_fps
            if len(carried_ids):  # no copies of a first load's million ids and fingerprints
                all_ids = np.concatenate([carried_ids, placed_ids])
                all_fps = np.concatenate([carried_fps, placed_fps])
            catalog = self._tableset.write_run(txn, self._tableset.catalog, all_ids, all_fps)
            txn.drop(handles.delta, delete=False)
            merged = state._replace(next_id=next_id, merge_epoch=state.merge_epoch + 1)
            return None, merged, _Change([], [], merged=True, catalog=catalog)
        seq = state.next_seq
        placed = list(zip(placed_ids.tolist(), placed_fps.tolist(), strict=True))
        ops = []
        for doc_id, fingerprint in placed:
            ops.append((encode_seq(seq), encode_add(doc_id, fingerprint)))
            seq += 1
        txn.cursor(handles.delta).putmulti(ops, append=True)
        return None, state._replace(next_id=next_id, next_seq=seq), _Change(placed, removed_from_delta)

    def _insert_new(
        self,
        txn: _lmdb.Txn,
        batch: _Batch,
        chosen: tuple[Positions, IntArray | None],
        doc_ids: U64Array,
        fingerprints: U64Array,
        *,
        append_keys: bool,
    ) -> None:
        """Write key-table entries, records and metadata of new documents:
        those at ``positions`` of ``batch``, where ``chosen`` is ``(positions,
        key_order)`` as :class:`_Batch` holds them; ``doc_ids`` follow
        ``positions``."""
        handles = self._handles
        packed_keys = batch.packed_keys
        positions, key_order = chosen
        # In key order, so that into an empty key table the entries may be
        # appended without a search.
        keyed_positions, keyed_ids = positions, doc_ids
        if key_order is not None:
            keyed_positions, keyed_ids = np.asarray(positions)[key_order], doc_ids[key_order]
        key_entries = zip(
            packed_keys.sliced_lookups(keyed_positions), big_endian_sliced(keyed_ids), strict=True
        )
        txn.cursor(handles.keys).putmulti(key_entries, append=append_keys)
        records = record_pairs(doc_ids, fingerprints, packed_keys.record_values, positions)
        txn.cursor(handles.docs).putmulti(records, append=True)
        if batch.sketches is not None and handles.sketches is not None:
            # Ids are new and ascending with positions: appended, no search.
            if isinstance(positions, range):
                rows = batch.sketches[positions.start : positions.stop]
            else:
                rows = batch.sketches[positions]
            sketched_ids = doc_ids
            present = rows.any(axis=1)  # an all-zero row (no bin filled) stands for no sketch
            if not present.all():
                rows, sketched_ids = rows[present], doc_ids[present]
            entries = zip(big_endian_sliced(sketched_ids), rows_sliced(rows), strict=True)
            txn.cursor(handles.sketches).putmulti(entries, append=True)
        if batch.metas is not None:
            for doc_id, position in zip(doc_ids.tolist(), positions, strict=True):
                packed_meta = batch.metas[position]
                if packed_meta is not None:
                    txn.put(encode_id(doc_id), packed_meta, db=handles.docmeta)

    def remove(self, key: KeyLike) -> None:
        """Remove the document stored under ``key``.

        Raises:
            KeyNotFoundError: no document has this key (also a ``KeyError``).
        """
        found_by = lookup_key(pack_key(key))

        def body(txn: _lmdb.Txn, state: State) -> tuple[None, State, _Change]:
            handles = self._handles  # read inside: a retry may follow a re-layout
            id_bytes = txn.get(found_by, db=handles.keys)
            if id_bytes is None:
                raise KeyNotFoundError(f"no document with key {key!r}")
            doc_id = decode_id(id_bytes)
            fingerprint = self._record_fingerprint(txn, doc_id)
            txn.delete(found_by, db=handles.keys)
            txn.delete(id_bytes, db=handles.docs)
            txn.delete(id_bytes, db=handles.docmeta)
            if handles.sketches is not None:
                txn.delete(id_bytes, db=handles.sketches)
            if doc_id in self._delta:
                txn.put(encode_seq(state.next_seq), encode_remove(doc_id), db=handles.delta, append=True)
                return None, state._replace(next_seq=state.next_seq + 1), _Change([], [doc_id])
            self._tableset.delete(txn, self._tableset.catalog, [doc_id], [fingerprint])
            return None, state, _Change([], [])

        self._write_grouped(body)
        self._maintain(0)

    def _record_fingerprint(self, txn: _lmdb.Txn, doc_id: int) -> int:
        raw = txn.get(encode_id(doc_id), db=self._handles.docs)
        if raw is None:
            raise CorruptStoreError(f"document {doc_id} is in the key table but has no record")
        return decode_record(raw)[0]

    def _put_sketch(self, txn: _lmdb.Txn, id_bytes: bytes, sketch: bytes | None) -> None:
        """Store a replaced document's sketch (or drop its old one: a
        document re-added as a bare fingerprint has none)."""
        sketches = self._handles.sketches
        if sketches is None:
            return
        if sketch is None:
            txn.delete(id_bytes, db=sketches)
        else:
            txn.put(id_bytes, sketch, db=sketches)

    def _put_meta(self, txn: _lmdb.Txn, id_bytes: bytes, packed_meta: bytes | None) -> None:
        if packed_meta is None:
            txn.delete(id_bytes, db=self._handles.docmeta)
        else:
            txn.put(id_bytes, packed_meta, db=self._handles.docmeta)

    # ------------------------------------------------------------------- reads

    def _check_k(self, k: object) -> int:
        if k is None:
            return self._params.k
        k = validate_k(k)
        if k > self._params.k:
            raise InvalidValueError(
                f"k={k} is larger than the store's k={self._params.k}; "
                "the tables only guarantee finding documents within the store's k"
            )
        return k

    def query(
        self,
        fingerprint: int | None = None,
        *,
        text: str | None = None,
        k: int | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
    ) -> list[Match]:
        """Every stored document within ``k`` bits of the query, sorted by
        ``(distance, key)``.

        A query by ``text`` in a store that keeps verification sketches
        gives each match its estimated Jaccard ``similarity`` (of word
        3-shingles) with the query; otherwise ``similarity`` is ``None``.

        Args:
            fingerprint: the query fingerprint (or give ``text``).
            k: the largest distance returned; defaults to the store's ``k``
                and may not exceed it.
            with_meta: fill each match's ``meta`` with the document's metadata.
            min_similarity: keep only matches whose estimated similarity is
                at least this (0 to 1); needs ``text``. A stored document
                added as a bare fingerprint has no sketch: it is kept, with
                ``similarity`` ``None``, as it cannot be judged.
        """
        query, sketch = self._fingerprint_and_sketch_of(text, fingerprint)
        k = self._check_k(k)
        return self._query(query, sketch, k, with_meta, self._threshold(min_similarity, sketch))

    def _query(
        self, query: int, sketch: bytes | None, k: int, with_meta: bool, threshold: float | None
    ) -> list[Match]:
        """:meth:`query` of a fingerprint and its sketch, arguments checked."""
        with self._read() as txn:
            # Permute inside the read: it may have adopted another process's new layout.
            permuted = self._permute_all(query)
            records: dict[int, bytes] = {}
            found = self._find(txn, permuted, query, k, records)
            matches = self._resolve(txn, found, with_meta, records, sketch, threshold)
            if self._tableset.bitmaps_unread:
                self._tableset.read_bitmaps(txn)
            return matches

    def query_many(
        self,
        fingerprints: object = None,
        *,
        texts: Iterable[str] | None = None,
        k: int | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
        sketches: U8Array | None = None,
    ) -> list[list[Match]]:
        """:meth:`query` for a batch, against one snapshot: one list per query.

        Nothing is inserted, so this deduplicates a new batch against the
        stored corpus: result ``i`` holds the stored documents near query ``i``.

        Args:
            fingerprints: a uint64 array (or iterable of ints); or give ``texts``.
            k: as for :meth:`query`.
            with_meta: as for :meth:`query`.
            min_similarity: as for :meth:`query`.
            sketches: with ``fingerprints``, their sketches (see :meth:`add_many`).
        """
        queries, sketches = self._fingerprints_and_sketches_of(
            as_column(texts), as_column(fingerprints), 1, sketches
        )
        k = self._check_k(k)
        return self._query_many(queries, sketches, k, with_meta, self._threshold(min_similarity, sketches))

    def _query_many(
        self, queries: U64Array, sketches: U8Array | None, k: int, with_meta: bool, threshold: float | None
    ) -> list[list[Match]]:
        """:meth:`query_many` of fingerprints and their sketches, arguments checked."""
        results: list[list[Match]] = []
        with self._read() as txn:
            # A batch may as well read every bitmap first.
            self._tableset.read_bitmaps(txn, 1 << 30 if len(queries) >= BATCH_READS_BITMAPS else 1)
            columns = permute_columns(self._tables, queries)
            query_list = queries.tolist()
            founds = [
                self._delta.matches(permuted, query, k)
                for query, permuted in zip(query_list, rows_of(columns), strict=True)
            ]
            records: list[dict[int, bytes]] = [{} for _ in query_list]
            self._tableset.find_many(
                txn, columns, query_list, k, founds, records, self._handles.docs, self._permute_all
            )
            for index, (found, found_records) in enumerate(zip(founds, records, strict=True)):
                sketch = None if sketches is None else sketches[index].tobytes()
                results.append(self._resolve(txn, found, with_meta, found_records, sketch, threshold))
        return results

    def _find(
        self, txn: _lmdb.Txn, permuted: Sequence[int], query: int, k: int, records: dict[int, bytes]
    ) -> dict[int, int]:
        """``{doc_id: distance}`` of everything within ``k`` bits, delta
        included; ``records`` gets the record of each table match (read to
        check its distance), for :meth:`_resolve`."""
        found = self._delta.matches(permuted, query, k)
        self._tableset.find(txn, permuted, query, k, found, records, self._handles.docs, self._permute_all)
        return found

    def _resolve(
        self,
        txn: _lmdb.Txn,
        found: dict[int, int],
        with_meta: bool = False,
        records: dict[int, bytes] | None = None,
        sketch: bytes | None = None,
        threshold: float | None = None,
    ) -> list[Match]:
        """The matches of ``found`` (``{doc_id: distance}``), sorted, with
        their similarity to the query's ``sketch`` (if given), and without
        those less similar than ``threshold``."""
        if not found:
            return []
        docs = self._handles.docs
        docmeta = self._handles.docmeta
        similarities: dict[int, float] = {}
        if sketch is not None and self._handles.sketches is not None:
            similarities = self._similarities(txn, found, sketch)
        matches = []
        for doc_id, distance in found.items():
            similarity = similarities.get(doc_id)
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

    def _similarities(self, txn: _lmdb.Txn, found: dict[int, int], sketch: bytes) -> dict[int, float]:
        """The estimated similarity to ``sketch`` of each document of
        ``found`` that has a sketch."""
        sketches = self._handles.sketches
        store_sketch = self.sketch
        assert sketches is not None
        assert store_sketch is not None
        doc_ids: list[int] = []
        rows: list[bytes] = []
        for doc_id in found:
            raw = txn.get(encode_id(doc_id), db=sketches)
            if raw is not None:
                doc_ids.append(doc_id)
                rows.append(raw)
        if not rows:
            return {}
        stored = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), -1)
        if stored.shape[1] != store_sketch.nbytes:
            raise CorruptStoreError(
                f"a stored sketch is {stored.shape[1]} bytes, not the store's {store_sketch.nbytes}"
            )
        estimates = estimate_jaccard(np.frombuffer(sketch, dtype=np.uint8), stored, store_sketch)
        return dict(zip(doc_ids, estimates.tolist(), strict=True))

    def sketch_of(self, key: KeyLike) -> bytes | None:
        """The verification sketch stored for ``key`` (see :attr:`sketch`
        for its geometry), or ``None`` if the document has none (it was added
        as a bare fingerprint, or the store keeps no sketches).

        Raises:
            KeyNotFoundError: no document has this key.
        """
        found_by = lookup_key(pack_key(key))
        with self._read() as txn:
            id_bytes = txn.get(found_by, db=self._handles.keys)
            if id_bytes is None:
                raise KeyNotFoundError(f"no document with key {key!r}")
            sketches = self._handles.sketches
            raw = None if sketches is None else txn.get(id_bytes, db=sketches)
            return None if raw is None else bytes(raw)

    def get(self, key: KeyLike, default: Record | None = None) -> Record | None:
        """The record stored under ``key``, or ``default`` if there is none."""
        found_by = lookup_key(pack_key(key))
        with self._read() as txn:
            id_bytes = txn.get(found_by, db=self._handles.keys)
            if id_bytes is None:
                return default
            raw = txn.get(id_bytes, db=self._handles.docs)
            if raw is None:
                raise CorruptStoreError(f"key {key!r} is in the key table but has no record")
            fingerprint, packed = decode_record(raw)
            meta = unpack_meta(txn.get(id_bytes, db=self._handles.docmeta))
            return Record(unpack_key(packed), fingerprint, meta)

    def __getitem__(self, key: KeyLike) -> Record:
        record = self.get(key)
        if record is None:
            raise KeyNotFoundError(f"no document with key {key!r}")
        return record

    def __contains__(self, key: object) -> bool:
        try:
            found_by = lookup_key(pack_key(key))
        except (InvalidTypeError, InvalidValueError):
            return False
        with self._read() as txn:
            return txn.get(found_by, db=self._handles.keys) is not None

    def __len__(self) -> int:
        with self._read() as txn:
            return int(txn.stat(self._handles.keys)["entries"])

    def __iter__(self) -> Iterator[Key]:
        """The keys, in the order their documents were first added."""
        return iter(self.keys())

    def keys(self) -> list[Key]:
        with self._read() as txn:
            cursor = txn.cursor(self._handles.docs)
            return [unpack_key(decode_record(raw)[1]) for raw in cursor.iternext(keys=False, values=True)]

    def items(self) -> Iterator[tuple[Key, int]]:
        """``(key, fingerprint)`` pairs in insertion order, from one snapshot."""
        with self._read() as txn:
            cursor = txn.cursor(self._handles.docs)
            pairs = []
            for raw in cursor.iternext(keys=False, values=True):
                fingerprint, packed = decode_record(raw)
                pairs.append((unpack_key(packed), fingerprint))
        return iter(pairs)

    def fingerprints(self) -> U64Array:
        """Every stored fingerprint, in insertion order."""
        with self._read() as txn:
            return self._stored_fingerprints(txn)

    def stats(self, *, skew: bool = False) -> Stats:
        """Sizes and layout, from one snapshot.

        Args:
            skew: also measure how evenly each table's prefix ranges fill
                (largest and 99th-percentile range, the hot prefixes) and find
                degenerate fingerprints (all zeros, all ones, or shared by many
                documents). This reads every fingerprint, so it takes time in
                proportion to the store (about a second per million documents).
        """
        with self._read() as txn:
            docs = int(txn.stat(self._handles.keys)["entries"])
            sketches = self._handles.sketches
            sketched_docs = 0 if sketches is None else int(txn.stat(sketches)["entries"])
            delta_docs = len(self._delta)
            # Every document outside the delta has one entry in every table.
            table_entries = (docs - delta_docs,) * len(self._tables)
            fingerprints = self._all_documents(txn)[1] if skew else None
            catalog = self._tableset.catalog
        table_skew_list = None
        degenerate = None
        if fingerprints is not None:
            table_skew_list = tuple(
                table_skew(np.sort(table.permute_array(fingerprints)), table.prefix_bits)
                for table in self._tables
            )
            degenerate = degenerate_fingerprints(fingerprints)
        return Stats(
            path=self.path,
            docs=docs,
            delta_docs=delta_docs,
            tables=len(self._tables),
            k=self._params.k,
            blocks=self._params.blocks,
            prefix_bits=tuple(table.prefix_bits for table in self._tables),
            layout=tuple(table.bit_order for table in self._tables),
            table_entries=table_entries,
            bytes_on_disk=file_bytes(self.path),
            bytes_used=self._env.used_bytes(),
            map_size=self._env.map_size(),
            format_version=FORMAT_VERSION,
            readonly=self.readonly,
            layout_name=layout_name(self._params.k, self._params.layout),
            skew=table_skew_list,
            degenerate=degenerate,
            runs=len(catalog.runs),
            compacting=catalog.compaction is not None,
            sketched_docs=sketched_docs,
            sketch_bytes=0 if self.sketch is None else self.sketch.nbytes,
            min_similarity=self._params.min_similarity,
        )

    def check(self) -> list[str]:
        """Verify the store's invariants; returns the problems found (empty when sound).

        Reads every record and every table entry, so it takes time in
        proportion to documents times tables.
        """
        return check_store(self)


def file_bytes(path: str) -> int:
    """Bytes the store file occupies on disk (allocated blocks, not its length)."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0
