"""An open store's lifecycle: the file, its layout, the delta, and the
transactions every operation runs in.

An :class:`Engine` holds what one process knows of an open store file: the
LMDB environment and sub-database handles, the stored parameters and tables,
the in-memory delta, the tables' run catalog and bitmaps, the lock that
serialises calls, and the group commit. Writes go through :meth:`Engine.write`,
which keeps the delta in step with the file; reads through
:meth:`Engine.read`, which brings the delta up to date with the snapshot
before any table is consulted. Both follow a re-layout by another process
(the meta record changed) by reopening the file, and a fork by reopening it
in the child.

The operations themselves live in modules of their own (:mod:`simstore.store.writes`,
:mod:`simstore.engine.reads`, :mod:`simstore.store.maintenance`, :mod:`simstore.store.dedup`),
each a set of functions of an engine; :class:`simstore.Store` is the facade
over them. Nothing here imports the facade.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Protocol, TypeVar

import numpy as np

from simstore.engine import _lmdb
from simstore.engine.delta import Change, Delta, encode_seq
from simstore.engine.delta_bands import DeltaBands
from simstore.engine.format import (
    CATALOG_KEY,
    META_KEY,
    STATE_KEY,
    LayoutChangedError,
    State,
    StoredParams,
    decode_meta,
)
from simstore.engine.query import permuted_keys
from simstore.engine.stored_tables import tableset_for
from simstore.engine.wal import WRITE_AHEAD_LOG
from simstore.errors import CorruptStoreError, ReadOnlyError, StoreClosedError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index.permute import Table, U64Array, tables_permuter
from simstore.options import Options

T = TypeVar("T")


class CommitHooks(Protocol):
    """What the engine calls of the group commit its writes go through
    (:class:`simstore.commit.group.GroupCommit`). The opener builds the group
    commit and hands it in, so that the engine does not import the layer
    above it; the operations above reach it with
    :func:`simstore.commit.group.group_commit`."""

    def committed(self, engine: Engine) -> None:
        """After each commit of this engine (``sync="interval"`` counts them)."""
        ...

    def flush_pending(self, engine: Engine) -> None:
        """On close: make what the last interval committed durable."""
        ...

    def close_mailbox(self) -> None: ...

    def forget_mailbox(self) -> None:
        """In the child of a ``fork()``: drop the parent's mailbox unclosed."""
        ...

    def renewed(self) -> CommitHooks:
        """A new group commit for the child of a ``fork()``: no other
        thread's writes wait there."""
        ...


# How often one call follows re-layouts by other processes before giving up.
# Each retry waits for the re-layout in progress, so only a process that
# re-lays the store out back to back, winning the writer lock every time,
# can exhaust them.
LAYOUT_RETRIES = 100


# Every open engine, so that fork() can wait for the calls in progress and a
# forked child can give each a fresh lock.
_open_engines: weakref.WeakSet[Engine] = weakref.WeakSet()
# The locks _before_fork took, released again in the parent after fork().
_held_over_fork: list[threading.RLock] = []


def open_in_this_process(path: str) -> bool:
    """Whether a store of this process (not one a forked child inherited)
    has the file at ``path`` open."""
    for engine in list(_open_engines):
        with contextlib.suppress(OSError):
            if not engine.closed and engine.owns_file() and os.path.samefile(engine.path, path):
                return True
    return False


def release_inherited(path: str) -> None:
    """Let a forked child open the store at ``path`` afresh: close the
    environment each store it inherited on that file holds, and close those
    stores in this process (the parent's stay open).

    LMDB allows one environment per file per process, and a child may not use
    its parent's. Closing it is safe here for the reasons
    :meth:`Engine.check_usable` gives; the inherited store then says it is
    closed instead of failing to reopen a file opened again beside it.
    """
    for engine in list(_open_engines):
        if engine.closed or engine.owns_file():
            continue
        same = False
        with contextlib.suppress(OSError):
            same = os.path.samefile(engine.path, path)
        if not same:
            continue
        with engine.lock:
            engine.closed = True
            engine.env.close()
            for retired in engine.retired:
                retired.close_flush_descriptor()
            engine.retired.clear()


def _before_fork() -> None:
    # Wait for every call in progress in another thread to finish, and keep
    # new ones out until fork() returns. A child forked in the middle of a
    # call would inherit py-lmdb's count of operations in flight, which only
    # that call (absent from the child) could bring back to zero, so the
    # child's close of its inherited environment would wait for ever
    # (tests/reliability/test_concurrency.py::test_fork_while_another_thread_is_inside_the_store).
    # Locks are taken in one order (by id), so two forking threads cannot deadlock.
    for engine in sorted(_open_engines, key=id):
        engine.lock.acquire()
        _held_over_fork.append(engine.lock)
        engine.tableset.release()  # a child closing its inherited environment would end it
        logger = engine.env.log_writer
        if logger is not None:
            # No commit or checkpoint in flight either, and no pin: a child
            # closing its inherited environment would end the pin, whose
            # reader slot it shares with this process. The next commit here
            # checkpoints (and pins) again.
            for lock in logger.locks_over_fork():
                lock.acquire()
                _held_over_fork.append(lock)
            logger.let_pin_go()


def _after_fork_in_parent() -> None:
    while _held_over_fork:
        _held_over_fork.pop().release()


def _after_fork_in_child() -> None:
    _held_over_fork.clear()
    for engine in list(_open_engines):
        engine.lock = threading.RLock()
        engine.commit.forget_mailbox()  # the parent's: an unlock here would release its locks
        engine.commit = engine.commit.renewed()  # no other thread's writes are waiting in the child
        engine.needs_reload = True  # reopen the file at the child's first call


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


def _table_count_and_generation(raw_meta: bytes) -> tuple[int, int]:
    params = decode_meta(raw_meta)
    return params.stored_tables, params.generation


class Engine:
    """One process's view of an open store file (see the module docstring).

    Attributes that a re-layout replaces (``params``, ``handles``,
    ``tables``, ``delta``, ``tableset``) must be read again inside each
    transaction, never kept across calls.
    """

    def __init__(
        self,
        path: str,
        env: _lmdb.Environment,
        handles: _lmdb.Handles,
        params: StoredParams,
        options: Options,
        raw_meta: bytes,
        commit: CommitHooks,
    ) -> None:
        self.path = path
        self.env = env
        # Environments replaced by reloads, whose flush descriptors stay open (reload_layout).
        self.retired: list[_lmdb.Environment] = []
        self.readonly = env.readonly
        self.options = options
        # The text fingerprinter of the stored settings, made at first use.
        self.fingerprinter: Fingerprinter | None = None
        # Whether text was fingerprinted here yet (the segmenter is checked then).
        self.segmenter_checked = False
        self.needs_reload = False
        self.adopt_layout(params, handles, raw_meta)
        self.lock = threading.RLock()
        self.closed = False
        self.pid = os.getpid()
        self.commit = commit
        _open_engines.add(self)
        try:
            with self.read():
                pass  # loads the delta from the log
        except BaseException:
            # A damaged delta log: refused, and the file closed now, so that
            # opening it again in this process is not refused as open already.
            self.closed = True
            self.env.close()
            raise

    # ------------------------------------------------------------------ layout

    def adopt_layout(self, params: StoredParams, handles: _lmdb.Handles, raw_meta: bytes) -> None:
        """Use ``params`` (decoded from ``raw_meta``) and ``handles`` from now
        on, with a delta to match.

        ``raw_meta`` must be the very record ``params`` came from: reading it
        again could see a later re-layout and pair new meta with old tables.
        """
        self.params = params
        self.handles = handles
        self.tables: tuple[Table, ...] = params.tables
        self.permute_all = tables_permuter(self.tables)
        self.delta = Delta(self.tables)
        # The snapshot (LMDB transaction id) a read last brought the delta up
        # to; a read of the same snapshot skips the sync.
        self.synced_snapshot = -1
        # The tables' runs and bitmaps, for the catalog version in catalog_version.
        self.tableset = tableset_for(
            params,
            bytes(raw_meta),
            handles.tables,
            handles.meta,
            handles.docs,
            self._environment,
            self._lock,
            handles.sketches,
        )
        bands = getattr(self.tableset, "bands", None)
        # The band keys of the delta's documents (format 4's band table).
        self.delta_bands = None if bands is None else DeltaBands(bands, self.delta)
        self.env.before_map_change = self.tableset.release
        self.catalog_version = -1
        self.meta_raw = bytes(raw_meta)
        # Compaction work this process owes for the documents it wrote (entries).
        self.compaction_credit = 0
        # Steps of the join being prepared (simstore.engine.prepared_join) this process's writes paid for.
        self.join_step_credit = 0.0

    def _environment(self) -> _lmdb.Environment:
        return self.env

    def _lock(self) -> threading.RLock:
        return self.lock

    def follow_relayout(self, attempt: int) -> None:
        """Adopt the layout another process re-laid the store out in, the
        ``attempt``-th time in a row: ``CorruptStoreError`` at the last."""
        if attempt == LAYOUT_RETRIES:
            raise CorruptStoreError(f"{self.path}: the layout keeps changing") from None
        self.reload_layout()

    def reload_layout(self) -> None:
        """Another process re-laid the store out: reopen the file and adopt
        its new meta record and tables.

        The environment is reopened rather than only the new tables opened,
        because LMDB cannot close the handles of the dropped tables: a
        long-lived store that followed many re-layouts would run out of them.
        Until this succeeds the engine stays marked for reloading, so a
        failure here is retried by the next call instead of leaving a closed file.
        """
        self.needs_reload = True
        self.tableset.release()
        # A group commit's leader flushes outside the store's lock, through
        # the environment it read before this reload: its descriptor stays
        # open until the store closes (closing it now could make that flush
        # fail, or flush whatever file reused the descriptor's number).
        self.env.close(keep_flush_descriptor=True)
        self.retired.append(self.env)
        self.env = self._open_environment()
        for attempt in range(1, LAYOUT_RETRIES + 1):
            try:
                raw_meta, handles = self.env.open_current(_table_count_and_generation)
            except CorruptStoreError:
                if attempt == LAYOUT_RETRIES:
                    raise
                time.sleep(0.001 * attempt)  # a read-only store raced another re-layout
                continue
            self.adopt_layout(decode_meta(raw_meta), handles, raw_meta)
            self.needs_reload = False
            return

    def _open_environment(self) -> _lmdb.Environment:
        env = _lmdb.Environment(
            self.path,
            readonly=self.readonly,
            sync=self.options.sync_each_commit,
            map_size=None,
            max_map_size=self.options.max_map_size,
            defer_meta_sync=self.options.sync_each_commit,  # simstore.commit.group flushes the meta page
            lock=self.options.lock,
            wal=WRITE_AHEAD_LOG,
        )
        try:
            env.use_writable_map()  # the file is this store's
        except BaseException:
            env.close()
            raise
        return env

    # --------------------------------------------------------------- lifecycle

    def owns_file(self) -> bool:
        """Whether this process opened the file (not a child forked since)."""
        return os.getpid() == self.pid

    def check_usable(self) -> None:
        if self.closed:
            raise StoreClosedError(f"the store {self.path!r} is closed")
        # The fork hook sets needs_reload in a child, so the common path
        # tests one attribute instead of calling os.getpid() on every call.
        if self.needs_reload:
            if not self.owns_file():
                # LMDB forbids using an environment across fork(). The child
                # closes the inherited one (safe: simstore keeps no transaction
                # open between calls and no spare ones, so closing touches none
                # of the parent's reader slots, and fcntl locks are not
                # inherited) and opens afresh.
                self.pid = os.getpid()
            self.reload_layout()

    def close(self) -> None:
        """Close the file (the caller holds the lock and has merged what it wants)."""
        self.closed = True
        if self.owns_file():
            self.tableset.release()
            try:
                self.commit.flush_pending(self)  # sync="interval": what the last interval committed
            finally:
                self.commit.close_mailbox()
                self.env.close()
                for retired in self.retired:
                    retired.close_flush_descriptor()
                self.retired.clear()

    # ------------------------------------------------------------ transactions

    def sync_delta(self, txn: _lmdb.Txn) -> State:
        """Bring the in-memory delta and run catalog to the snapshot ``txn`` sees."""
        raw_state = txn.get(STATE_KEY, db=self.handles.meta)
        delta = self.delta
        if raw_state is not None and raw_state == delta.state_bytes:
            return delta.state  # the common case: nothing written since
        state = State.decode(raw_state)
        if txn.get(META_KEY, db=self.handles.meta) != self.meta_raw:
            raise LayoutChangedError
        if state.merge_epoch != delta.merge_epoch:
            delta.clear()
            cursor = txn.cursor(self.handles.delta)
            cursor.first()
            delta.apply(cursor.iternext())
        elif state.next_seq != delta.next_seq:
            cursor = txn.cursor(self.handles.delta)
            if cursor.set_range(encode_seq(delta.next_seq)):
                delta.apply(cursor.iternext())
        delta.adopt(state)
        if state.catalog_version != self.catalog_version:
            raw_catalog = txn.get(CATALOG_KEY, db=self.handles.meta)
            self.tableset.adopt(self.tableset.decode_catalog(raw_catalog))
            self.catalog_version = state.catalog_version
        return state

    def forget_delta(self) -> None:
        """Make the next snapshot reload the whole delta from its log."""
        delta = self.delta
        delta.clear()
        delta.merge_epoch = -1
        delta.state_bytes = b""
        self.synced_snapshot = -1

    def permuted_for_query(self, fingerprint: int) -> Sequence[int]:
        """``fingerprint``'s permuted key for every table, where a query
        reads them (the delta's tables, format 2's); none where nothing
        does (format 3 with an empty delta: a few µs a query saved)."""
        if self._queries_read_permuted_keys():
            return self.permute_all(fingerprint)
        return ()

    def permuted_for_queries(self, fingerprints: U64Array) -> tuple[list[U64Array], list[tuple[int, ...]]]:
        """:meth:`permuted_for_query` of a batch, as
        :func:`simstore.engine.query.permuted_keys` gives it (per table, per
        query); no columns and an empty row a query where nothing reads them."""
        if self._queries_read_permuted_keys():
            return permuted_keys(self.tables, self.permute_all, fingerprints)
        return [], [()] * len(fingerprints)

    def _queries_read_permuted_keys(self) -> bool:
        return self.tableset.reads_permuted_keys or bool(len(self.delta))

    def read(self, *, query: bool = False) -> Reading:
        """A read transaction with the delta in step with its snapshot; for
        a ``query``, with the tables' pinned snapshot in step with it too
        (a format-3 store's, :mod:`simstore.engine.column_tableset`)."""
        return Reading(self, query)

    def write(
        self,
        body: Callable[[_lmdb.Txn, State], tuple[T, State, Change]],
        record: Callable[[], bytes | None] | None = None,
    ) -> T:
        """Run ``body`` in one write transaction, then apply its delta change.

        ``body`` gets the transaction and the stored state, and returns its
        result, the state to store, and the change to the delta (and catalog).
        It may run more than once (the map may have to grow), so it must not
        touch the in-memory delta or catalog. ``record`` describes the writes
        for the write-ahead log (see :meth:`_lmdb.Environment.write`).
        """
        with self.lock:
            self.check_usable()
            if self.readonly:
                raise ReadOnlyError(f"the store {self.path!r} is open read-only")

            def in_txn(txn: _lmdb.Txn) -> tuple[T, State, bytes | None, Change]:
                state = self.sync_delta(txn)
                result, new_state, change = body(txn, state)
                if change.catalog is not None:
                    txn.put(CATALOG_KEY, change.catalog.encode(), db=self.handles.meta)
                    new_state = new_state._replace(catalog_version=state.catalog_version + 1)
                if new_state == state:
                    return result, new_state, None, change
                raw_state = new_state.encode()
                txn.put(STATE_KEY, raw_state, db=self.handles.meta)
                return result, new_state, raw_state, change

            attempt = 0
            while True:
                try:
                    result, new_state, raw_state, change = self.env.write(in_txn, record)
                    break
                except LayoutChangedError:
                    attempt += 1
                    self.follow_relayout(attempt)
            delta = self.delta
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
                self.tableset.adopt(change.catalog)
                self.catalog_version = new_state.catalog_version
            self.commit.committed(self)
            return result

    def check_open(self) -> None:
        """For work on a snapshot outside :meth:`read`: the store is still open."""
        if self.closed:
            raise StoreClosedError(f"the store {self.path!r} was closed while a batch operation used it")


class Reading:
    """The read context: lock, fresh snapshot, delta in step with it.

    A plain class rather than ``contextlib.contextmanager`` because it sits
    on the single-query hot path, where a generator costs microseconds.
    """

    __slots__ = ("engine", "held_already", "query", "txn")

    def __init__(self, engine: Engine, query: bool = False) -> None:
        self.engine = engine
        self.query = query

    def __enter__(self) -> _lmdb.Txn:
        engine = self.engine
        lock = engine.lock
        # The lock is taken inside the try, and only if this thread does not
        # hold it already: an interrupt that comes as it is granted (a
        # signal's handler runs once the wait returns) must not leave it held.
        held_already = True
        try:
            held_already = lock._is_owned()  # type: ignore[attr-defined]  # (C RLock's, not in the stubs)
            if not held_already:
                lock.acquire()
            self.held_already = held_already
            engine.check_usable()
            for attempt in range(1, LAYOUT_RETRIES + 1):
                if self.query:
                    try:
                        engine.tableset.prepare()
                    except LayoutChangedError:  # (the latest commit's layout is another)
                        engine.follow_relayout(attempt)
                        continue
                self.txn = txn = engine.env.begin_read()
                snapshot = txn.id()
                try:
                    if snapshot != engine.synced_snapshot:  # (else no commit since the last read)
                        engine.sync_delta(txn)
                        engine.synced_snapshot = snapshot
                    if not self.query or attempt == LAYOUT_RETRIES or engine.tableset.serves(txn):
                        break
                    # The catalog changed between the pin and this snapshot:
                    # pinned again (the last attempt views the new runs from txn).
                    self.txn.abort()
                    engine.tableset.release()
                except LayoutChangedError:
                    self.txn.abort()
                    engine.follow_relayout(attempt)
                except BaseException as exc:
                    self.txn.abort()
                    if _lmdb.is_lmdb_error(exc):
                        raise _lmdb.translate(exc, engine.path) from exc
                    raise
        except BaseException:
            if not held_already and lock._is_owned():  # type: ignore[attr-defined]
                lock.release()
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
            if not self.held_already:
                self.engine.lock.release()
        if exc is not None and _lmdb.is_lmdb_error(exc):
            # Cursor walks run in the caller's body; translate here, once.
            raise _lmdb.translate(exc, self.engine.path) from exc
