"""The LMDB boundary: the environment, its sub-databases, transactions, map
growth and error translation.

Every call into py-lmdb that can fail in a way a user should understand goes
through this module, which turns LMDB's errors into simstore's hierarchy once,
with ``raise ... from``. Nothing above this module imports :mod:`lmdb`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, cast

import lmdb
import numpy as np
import numpy.typing as npt

from simstore.engine.format import LOG_KEY, META_KEY
from simstore.errors import (
    AccessDeniedError,
    CorruptStoreError,
    FlushError,
    NotAStoreError,
    SimstoreError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
)
from simstore.index.permute import MAX_TABLES

if TYPE_CHECKING:
    # py-lmdb's stubs make transactions generic in what they return; simstore
    # asks for buffers only where column runs are viewed in place
    # (Environment.begin_buffers), whose readers take any buffer.
    Txn = lmdb.Transaction[bytes]
    Database = lmdb._Database
    Cursor = lmdb.Cursor[bytes]
else:
    Txn = lmdb.Transaction
    Database = object
    Cursor = lmdb.Cursor

#: How long an opener waits before measuring a short file again.
PAD_RACE_SECONDS = 0.05
#: Opens tried while the file keeps being replaced under the opener.
REPLACED_RETRIES = 3
#: Opens begun again when another process grew the map during one.
OPEN_RESIZED_RETRIES = 5

DB_META = b"meta"
DB_KEYS = b"keys"
DB_DOCS = b"docs"
DB_DOCMETA = b"docmeta"
DB_DELTA = b"delta"
FIXED_DB_NAMES = (DB_META, DB_KEYS, DB_DOCS, DB_DOCMETA, DB_DELTA)
#: Each document's verification sketch (simstore.fingerprinting.sketch), under its id: only
#: in stores whose fingerprinter makes sketches (none before they existed).
DB_SKETCHES = b"sketches"
#: Named sub-databases a store may hold: the fixed ones, the sketches, the tables.
MAX_DBS = len(FIXED_DB_NAMES) + 1 + MAX_TABLES

# Table sub-databases hold packed buckets of entries under 8-byte keys (see
# simstore.engine.runs): plain sub-databases, one value per key.
TABLE_DB_FLAGS: dict[str, bool] = {}

# A writer's file is as long as its map and every block of it is allocated
# (see Environment.use_writable_map), so the map starts small and grows by a
# sixteenth of what is in use (at least MIN_MAP_SIZE, at most MAX_GROWTH_STEP)
# when full, and a reservation adds the same sixteenth beyond its need: the
# file stays within about 1.07x of the pages in use. Growth by half, as format
# 1 did, left a 100M store's file up to 1.5x its pages; by an eighth, a 10M
# store's 102 bytes a document for 91 in use (96 now), with no more growths
# in its build or in 200K single adds after it.
INITIAL_MAP_SIZE = 1 << 20
MIN_MAP_SIZE = 1 << 20
MAP_HEADROOM_FRACTION = 16
# The lock file LMDB makes for 126 readers (measured: 8192 bytes).
LOCK_FILE_BYTES = 8192
# Below this much free space an I/O error from a commit is taken as a full disk.
FULL_FILESYSTEM_BYTES = 1 << 20
MAX_GROWTH_STEP = 2 << 30

T = TypeVar("T")


def table_db_name(table_index: int, generation: int = 0) -> bytes:
    """The sub-database name of a permutation table.

    ``generation`` counts re-layouts: the tables of a new layout are built
    beside the old ones under new names, so readers of the old layout are
    never disturbed until one commit switches the meta record over.
    """
    if generation == 0:
        return b"table:%03d" % table_index
    return b"table:%d:%03d" % (generation, table_index)


def _identity(path: str) -> tuple[int, int] | None:
    """Which file ``path`` names now (device and inode), ``None`` if none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def lock_path(path: str) -> str:
    """Where LMDB keeps the lock file of a ``subdir=False`` environment."""
    return path + "-lock"


@dataclass
class Handles:
    """Open sub-database handles."""

    meta: Database
    keys: Database
    docs: Database
    docmeta: Database
    delta: Database
    tables: list[Database]
    sketches: Database | None = None


class MapMovedError(Exception):
    """Another process changed the map's size; this process has not adopted it."""


class CommitLog(Protocol):
    """A writer's side of the store's write-ahead log
    (:class:`simstore.engine.wal.LogWriter`), as the environment calls it
    around each commit: a record before it, pins and checkpoints after."""

    @property
    def durable(self) -> bool:
        """Whether each record is flushed before its commit returns."""
        ...

    @property
    def committing(self) -> AbstractContextManager[Any]:
        """Held from a commit's record to its end."""
        ...

    def before_commit(self, txn: Txn, txn_id: int, payload: bytes | None) -> bool: ...

    def commit_failed(self) -> None: ...

    def after_commit(self) -> None: ...

    def ensure_pinned(self) -> None: ...

    def checkpoint(self) -> None: ...

    def make_durable(self) -> None: ...

    def map_changing(self) -> AbstractContextManager[None]: ...

    def locks_over_fork(self) -> list[Any]: ...

    def let_pin_go(self) -> None: ...

    def close(self) -> None: ...


class Recovered(Protocol):
    """A restart's roll-back to the log's checkpoint, whose records the
    opener replays (:class:`simstore.engine.wal.Rollback`)."""

    records: list[tuple[int, bytes]]

    def release(self) -> None: ...


class LogFile(Protocol):
    """The log file opened for a writer, before the map is writable."""

    def writer(self, env: Environment, meta_db: Database, *, durable: bool) -> CommitLog: ...

    def close(self) -> None: ...


class WriteAheadLog(Protocol):
    """How an environment reaches its store's write-ahead log
    (:data:`simstore.engine.wal.WRITE_AHEAD_LOG`). The opener hands it in,
    so that this boundary does not import the log built on top of it."""

    def recover(self, store_path: str, *, readonly: bool) -> Recovered | None: ...

    def in_use(self, raw: bytes | None) -> bool: ...

    def open_file(self, store_path: str) -> LogFile | None: ...


def spanning_words(values: Sequence[npt.NDArray[Any]]) -> tuple[npt.NDArray[np.uint64], int]:
    """One view, as little-endian 8-byte items, of the part of LMDB's map
    from the first to the last byte of ``values`` (arrays viewing values of
    one read transaction that reads buffers), and its address: no copy.

    LMDB maps the file in one piece, so whatever lies between two values of
    the file is the file too. The view is valid while that transaction stays
    open and the map is not resized in this process.
    """
    spans = [(value.ctypes.data, value.ctypes.data + value.nbytes) for value in values if value.nbytes]
    if not spans:
        return np.zeros(1, dtype=np.dtype("<u8")), 0
    start = min(first for first, _ in spans) & ~7
    # Rounded up to whole items: a value ends inside its last page, which is
    # mapped and in the file whole.
    end = (max(last for _, last in spans) + 7) & ~7
    raw = memoryview((ctypes.c_char * (end - start)).from_address(start)).cast("B")
    words: npt.NDArray[np.uint64] = np.frombuffer(raw, dtype=np.dtype("<u8"))
    return words, start


class Environment:
    """One LMDB environment in one file, with map growth and error translation.

    Args:
        path: the store file.
        readonly: open without write access.
        sync: flush to disk at every commit (durable across power loss).
        map_size: initial map size in bytes; the map doubles when full.
        max_map_size: never grow the map beyond this; ``None`` for no limit.
        defer_meta_sync: with ``sync``, flush a commit's pages before its meta
            page is written (as always) but leave the meta page to the
            caller's next :meth:`flush` (``MDB_NOMETASYNC``) once the map is
            writable: the commit is then atomic and the file sound after a
            power loss, but durable only once :meth:`flush` returns.
    """

    def __init__(
        self,
        path: str,
        *,
        readonly: bool,
        sync: bool,
        map_size: int | None,
        max_map_size: int | None,
        wal: WriteAheadLog,
        defer_meta_sync: bool = False,
        lock: bool = True,
    ) -> None:
        self.path = path
        self._wal = wal
        # Without LMDB's lock file: read-only opens of a store on read-only media.
        self.lock = lock or not readonly
        self.defer_meta_sync = defer_meta_sync and sync and not readonly
        # sync=True writers use the write-ahead log where there can be one;
        # the others join it once the store has one in use (see _write_unlogged
        # and simstore.engine.wal.LogWriter): then every writer holds a pin.
        self._wants_log = defer_meta_sync and sync and not readonly
        self._durable_log = sync
        self._may_join_log = False
        self._log_state_unused = b""  # the latest stored log state found unused
        self._meta_db: Database | None = None
        #: With a write-ahead log (simstore.engine.wal): records before
        #: commits, checkpoints; set once the map is writable.
        self.log_writer: CommitLog | None = None
        #: A restart's roll-back, whose records the opener replays.
        self.rollback: Recovered | None = None
        self._flush_descriptor: int | None = None
        # The id of the latest commit this process made. Kept in Python so
        # that a group commit's flush, outside the store's lock, need not ask
        # LMDB: a fork() in another thread while py-lmdb's call is in flight
        # leaves the child unable to close its inherited environment.
        self.committed_txn = 0
        self.map_changes = 0  # map size changes, each the end of every open transaction
        # Called before this process changes the map's size: lets go of what
        # views the map in place (a format-3 store's pinned snapshot).
        self.before_map_change: Callable[[], None] | None = None
        self.readonly = readonly
        self.max_map_size = max_map_size
        if self.lock:
            _check_lock_file_kind(path)
        if os.path.exists(path):
            self.rollback = wal.recover(path, readonly=readonly)
        file_size = os.path.getsize(path) if os.path.exists(path) else 0
        lock_existed = os.path.exists(lock_path(path))
        if not lock_existed and not readonly:
            _preallocate_lock(path)
        self._lock_existed = lock_existed
        self._psize = 0  # the page size, read once
        # An ordinary open first, with no writable map: it makes a new file's
        # meta pages with plain writes, and it leaves an existing file as it
        # is for the truncation check (a writable map would extend it).
        if readonly:
            first_map = map_size if map_size is not None else max(INITIAL_MAP_SIZE, 2 * file_size)
        else:
            first_map = max(file_size, MIN_MAP_SIZE)
        opened: lmdb.Environment | None = None
        try:
            for attempt in range(1, REPLACED_RETRIES + 1):
                identity = _identity(path)
                opened = self.env = self._open_lmdb(
                    readonly=readonly, sync=sync, map_size=first_map, writemap=False
                )
                if attempt == REPLACED_RETRIES or _identity(path) == identity:
                    break
                # The file was replaced while LMDB waited for its lock (simstore.shrink
                # or mode "n", which hold it meanwhile). A read-only open maps the
                # file before it locks, so it held the old file and, once let in, the
                # lock file set up for the new one: open again.
                opened.close()
                opened = None
            self._check_not_truncated(file_size)
            # A killed process leaves its reader slot behind; reclaim such slots
            # now, or enough kills would make every later open fail.
            if self.lock:
                self._reclaim_readers()
        except BaseException:
            # An error (a truncated file) or an interrupt once LMDB had the file
            # open: closed here, or it stayed open in this process and every
            # later open of it in the process was refused ("already open").
            if opened is not None:
                opened.close()
            raise
        self._sync = sync
        self._requested_map = map_size

    def _open_lmdb(
        self, *, readonly: bool, sync: bool, map_size: int, writemap: bool, metasync: bool | None = None
    ) -> lmdb.Environment:
        path = self.path
        for _attempt in range(OPEN_RESIZED_RETRIES):
            try:
                return self._lmdb_open(
                    readonly=readonly, sync=sync, map_size=map_size, writemap=writemap, metasync=metasync
                )
            except lmdb.MapResizedError:
                # Another process grew the map between LMDB reading the meta
                # pages and beginning the transaction that opens the main
                # database: open again, mapping the file as long as it is now.
                map_size = max(map_size, os.path.getsize(path))
        raise CorruptStoreError(f"{path}: the map kept changing size while opening the store")

    def _lmdb_open(
        self, *, readonly: bool, sync: bool, map_size: int, writemap: bool, metasync: bool | None
    ) -> lmdb.Environment:
        path, lock_existed = self.path, self._lock_existed
        try:
            return lmdb.open(
                path,
                subdir=False,
                readonly=readonly,
                create=not readonly,
                sync=sync,
                metasync=sync if metasync is None else metasync,
                map_size=map_size,
                max_dbs=MAX_DBS,
                # No cached read transactions: a forked child that closes its
                # inherited copy of the environment would otherwise reset the
                # parent's reader slots (measured: no query cost at 1M docs).
                max_spare_txns=0,
                lock=self.lock,
                writemap=writemap,
                # MADV_RANDOM on the map. With readahead, pages faulted in
                # order (a bulk load through the writable map, a compaction, a
                # scan) enter the page cache as large folios, and the kernel
                # writes a dirty folio back whole: a durable single add after
                # a bulk load flushed 529 pages instead of 13, at half the
                # speed (benchmarks/experiments/group_commit_cpu.py, docs/engine.md). The
                # price is paid by sequential scans of a cold cache only.
                readahead=False,
            )
        except lmdb.InvalidError as exc:
            self._drop_new_lock(lock_existed)
            raise NotAStoreError(f"{path} is not an LMDB file, so not a simstore store") from exc
        except lmdb.VersionMismatchError as exc:
            self._drop_new_lock(lock_existed)
            raise NotAStoreError(f"{path} was written by an incompatible LMDB version") from exc
        except lmdb.LockError as exc:
            raise StoreLockedError(f"cannot lock {path}: {exc}") from exc
        except lmdb.MapResizedError:
            raise  # (the caller opens again)
        except lmdb.Error as exc:
            if "already open in this process" in str(exc):
                # LMDB allows one environment per file per process.
                raise StoreLockedError(
                    f"{path} is already open in this process; share that Store object "
                    "(it is safe to use from several threads) instead of opening the file again"
                ) from exc
            self._drop_new_lock(lock_existed)
            raise translate(exc, path) from exc

    def use_writable_map(self) -> None:
        """Reopen for writing with LMDB's writable map (``MDB_WRITEMAP``),
        once the file is known to be a store (this extends it). Database
        handles opened before are dead after this.

        Pages are then written in place in the shared map instead of being
        copied out of private memory at every commit: a single ``add`` into
        a 10M store took 12.0 µs instead of 25.3 µs (p50), and the dirty
        pages of a bulk load are page cache rather than the process's own
        memory (``benchmarks/results/online_10M.md``).

        The price is that the file must hold real blocks for the whole map:
        a write into a hole of a sparse file on a full disk kills the process
        with SIGBUS instead of failing. So every map size is allocated with
        ``posix_fallocate`` before LMDB maps it, and the file is as long as
        the map (``Stats.bytes_on_disk`` against ``Stats.bytes_used``).
        """
        if self.readonly:
            return
        used = self.used_bytes()
        self.env.close()
        with self._resizing():
            if self._requested_map is not None:
                wanted = self._requested_map
            elif used > INITIAL_MAP_SIZE:
                # No headroom here: an open that is then refused (a damaged
                # store) must leave the file as it was. Writes grow the map.
                wanted = used
            else:
                wanted = INITIAL_MAP_SIZE
            # A map_size asked for is allocated whole or refused: halved to
            # what the disk holds, it took most of the disk without a word.
            allocated = self._allocate_map(wanted, least=used if self._requested_map is None else wanted)
            log = self._wal.open_file(self.path) if self._wants_log else None
            self.env = self._open_lmdb(
                readonly=False,
                sync=self._sync and log is None,
                map_size=allocated,
                writemap=True,
                metasync=self._sync and not self.defer_meta_sync,
            )
        meta_db = self.open_meta_only()
        if meta_db is None:  # (a store has one: use_writable_map comes after that is known)
            if log is not None:
                log.close()
            raise CorruptStoreError(f"{self.path} lost its meta sub-database")
        self._meta_db = meta_db
        if log is not None:
            self.log_writer = log.writer(self, meta_db, durable=True)
            # Every commit is durable when it returns: its record was flushed first.
            self.defer_meta_sync = False
        elif not self._durable_log:
            self._may_join_log = True
            with self.read() as txn:
                logged = self._wal.in_use(txn.get(LOG_KEY, db=meta_db))
            if logged:
                self._join_log()

    def _join_log(self) -> None:
        """A writer that does not flush each commit, in a store whose log is
        in use: take part in it (records, a pin, checkpoints), so that its
        commits never overwrite the pages a roll-back after a power loss goes
        back to (see :class:`simstore.engine.wal.LogWriter`). Where no log can
        be had (none may be made here, no boot id), it goes on without one."""
        self._may_join_log = False
        assert self._meta_db is not None
        log = self._wal.open_file(self.path)
        if log is not None:
            self.log_writer = log.writer(self, self._meta_db, durable=False)

    @contextlib.contextmanager
    def _resizing(self) -> Iterator[None]:
        """Hold the lock that every writer takes to change the file's length.

        LMDB sets a writable map's file to the map's length, shorter too; a
        process that did so while another had just grown the file would cut
        pages from under the other's map. ``flock`` on the data file (never
        on the lock file: closing any descriptor of a file drops this
        process's ``fcntl`` locks on it, and LMDB holds one on the lock file).
        """
        descriptor = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # releases the flock

    def _allocate_map(self, size: int, least: int) -> int:
        """Allocate the file's blocks for a map of ``size`` bytes (whole
        pages), or failing that (a full disk) the most that fits of halving
        steps down to ``least``; the size allocated, to map. Never shorter
        than the file, on a full disk too: another process may be using its
        end, and LMDB would cut the file to the map. Called with
        :meth:`_resizing` held."""
        page = self.page_size()
        file_size = os.path.getsize(self.path)
        size = max(-(-size // page) * page, file_size)
        least = max(least, file_size)
        descriptor = os.open(self.path, os.O_RDWR)
        try:
            while True:
                try:
                    os.posix_fallocate(descriptor, 0, size)
                    return size
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EFBIG) or size <= least:
                        raise StoreFullError(
                            errno.ENOSPC, f"{self.path}: no space left to allocate the store ({exc})"
                        ) from exc
                    size = max(least, size // 2)
        finally:
            os.close(descriptor)

    def _reclaim_readers(self) -> None:
        try:
            self.env.reader_check()
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc

    def _drop_new_lock(self, lock_existed: bool) -> None:
        # A failed open must leave a foreign file's folder as it found it.
        if not lock_existed:
            with contextlib.suppress(OSError):
                os.remove(lock_path(self.path))

    def _check_not_truncated(self, file_size: int) -> None:
        # Reading a page past the end of a truncated file would kill the
        # process with SIGBUS, so refuse before any page is touched. The size
        # is taken after the meta page is read: LMDB writes a commit's pages
        # before its meta page, and a writer's file is as long as its map, so
        # a writer in another process can only make the file longer than the
        # meta page needs. Earlier simstore versions wrote without a writable
        # map and padded a commit that left its last pages unwritten a few
        # microseconds after it, so a short file is measured once more
        # before it is called truncated.
        if not file_size:
            return
        for attempt in range(2):
            needed = self.used_bytes()
            file_size = os.path.getsize(self.path)
            if file_size >= needed:
                return
            if attempt == 0:
                time.sleep(PAD_RACE_SECONDS)
        self.close()
        raise CorruptStoreError(
            f"{self.path} is truncated: it holds {file_size} bytes but its pages need {needed}"
        )

    def fail_open(self) -> None:
        """Close after an open that found a foreign file, removing the lock
        file if this open created it."""
        self.close()
        self._drop_new_lock(self._lock_existed)

    def close(self, *, keep_flush_descriptor: bool = False) -> None:
        """Close the environment; its flush descriptor too, unless kept for a
        thread that may be flushing through it (see ``close_flush_descriptor``)."""
        if self.rollback is not None:  # (an open that failed before its replay)
            self.rollback.release()
            self.rollback = None
        logger, self.log_writer = self.log_writer, None
        try:
            if logger is not None:
                # Failing (a map another process grew meanwhile, a flush error),
                # the log's records and checkpoint still hold every commit.
                with contextlib.suppress(SimstoreError, MapMovedError, lmdb.Error, OSError):
                    logger.close()
        finally:
            # Always: py-lmdb refuses to open a file again in a process that
            # has it open, and a reload of the layout opens it anew.
            self.env.close()
            if not keep_flush_descriptor:
                self.close_flush_descriptor()

    def close_flush_descriptor(self) -> None:
        if self._flush_descriptor is not None:
            os.close(self._flush_descriptor)
            self._flush_descriptor = None

    def named_databases(self) -> tuple[list[bytes], int]:
        """Names in the main database (sub-databases or a foreign program's
        keys), and the id of the snapshot they were read from (0 for a file
        nothing was ever committed to), both from one snapshot."""
        with self.read() as txn:
            return [bytes(key) for key, _ in txn.cursor()], int(txn.id())

    def has_named_databases(self, txn: Txn) -> bool:
        """Whether the main database of ``txn``'s snapshot names anything."""
        return txn.cursor().first()

    def open_existing(self, table_count: int, generation: int = 0) -> Handles:
        """Open the store's sub-databases, which must all exist."""
        try:
            return self._adopting_growth(lambda: self._open_handles(table_count, generation, create=False))
        except lmdb.NotFoundError as exc:
            raise CorruptStoreError(f"{self.path} lacks one of simstore's sub-databases") from exc
        except lmdb.IncompatibleError as exc:
            raise NotAStoreError(f"{self.path} holds sub-databases simstore did not write") from exc

    def open_current(self, layout_of: Callable[[bytes], tuple[int, int]]) -> tuple[bytes, Handles]:
        """The meta record and the handles of the tables it names, from one
        consistent state of the file.

        ``layout_of`` maps a raw meta record to ``(table_count, generation)``.
        In a writable environment both are read inside one write transaction
        (which commits nothing), so no re-layout can slip in between. Read-only
        environments cannot do that; the caller retries if the tables vanished.
        """
        if self.readonly:
            raw_meta = self.read_meta_record()
            if raw_meta is None:
                raise CorruptStoreError(f"{self.path} lost its meta record")
            table_count, generation = layout_of(raw_meta)
            return raw_meta, self.open_existing(table_count, generation)
        txn = self._begin(write=True)
        try:
            meta_db = self.env.open_db(DB_META, txn=txn, create=False)
            raw_meta = txn.get(META_KEY, db=meta_db)
            if raw_meta is None:
                raise CorruptStoreError(f"{self.path} lost its meta record")
            table_count, generation = layout_of(bytes(raw_meta))
            handles = self._open_handles(table_count, generation, create=False, txn=txn)
            txn.commit()
        except lmdb.NotFoundError as exc:
            txn.abort()
            raise CorruptStoreError(f"{self.path} lacks one of simstore's sub-databases") from exc
        except BaseException:
            txn.abort()
            raise
        return bytes(raw_meta), handles

    def create_handles(self, txn: Txn, table_count: int, *, sketches: bool) -> Handles:
        """Create every sub-database inside the write transaction ``txn``
        (the sketches' only if ``sketches``)."""
        handles = self._open_handles(table_count, 0, create=True, txn=txn)
        if sketches:
            handles.sketches = self.env.open_db(DB_SKETCHES, txn=txn, create=True)
        return handles

    def open_tables(self, txn: Txn, table_count: int, generation: int) -> list[Database]:
        """Fresh handles of existing tables inside the write transaction ``txn``.

        A write body that drops tables must open them this way rather than
        use handles opened before: LMDB closes a dropped table's handle at
        once, even if the transaction then aborts, and a retried body (the
        map had to grow) would otherwise drop whatever reused that handle.
        """
        return [
            self.env.open_db(table_db_name(index, generation), txn=txn, create=False, **TABLE_DB_FLAGS)
            for index in range(table_count)
        ]

    def create_tables(self, txn: Txn, table_count: int, generation: int) -> list[Database]:
        """Create the empty tables of a new layout inside the write transaction ``txn``."""
        return [
            self.env.open_db(table_db_name(index, generation), txn=txn, create=True, **TABLE_DB_FLAGS)
            for index in range(table_count)
        ]

    def _open_handles(
        self, table_count: int, generation: int, *, create: bool, txn: Txn | None = None
    ) -> Handles:
        def open_db(name: bytes, **flags: bool) -> Database:
            return self.env.open_db(name, txn=txn, create=create, **flags)

        sketches = None
        if not create:
            with contextlib.suppress(lmdb.NotFoundError):  # a store without sketches
                sketches = self.env.open_db(DB_SKETCHES, txn=txn, create=False)
        return Handles(
            sketches=sketches,
            meta=open_db(DB_META),
            keys=open_db(DB_KEYS),
            docs=open_db(DB_DOCS),
            docmeta=open_db(DB_DOCMETA),
            delta=open_db(DB_DELTA),
            tables=[
                open_db(table_db_name(index, generation), **TABLE_DB_FLAGS) for index in range(table_count)
            ],
        )

    def live_bytes(self, txn: Txn, handles: Handles) -> int:
        """The bytes of the pages the snapshot ``txn`` holds data in: every
        sub-database's branch, leaf and overflow pages, the main database's
        and the two meta pages. Unlike ``used_bytes`` (the highest page ever
        used), it falls when removals free pages; free pages are not counted."""
        databases = [
            handles.meta,
            handles.keys,
            handles.docs,
            handles.docmeta,
            handles.delta,
            *handles.tables,
        ]
        if handles.sketches is not None:
            databases.append(handles.sketches)
        stats = [txn.stat(db) for db in databases] + [self.env.stat()]
        pages = sum(
            int(stat["branch_pages"]) + int(stat["leaf_pages"]) + int(stat["overflow_pages"])
            for stat in stats
        )
        return (pages + 2) * self.page_size()

    def read_meta_record(self) -> bytes | None:
        """The raw meta record, or ``None`` if the file has no meta sub-database or record."""
        meta_db = self.open_meta_only()
        if meta_db is None:
            return None
        with self.read() as txn:
            raw_meta = txn.get(META_KEY, db=meta_db)
        return None if raw_meta is None else bytes(raw_meta)

    def open_meta_only(self) -> Database | None:
        """The meta sub-database, or ``None`` if the file has none."""
        try:
            return self._adopting_growth(lambda: self.env.open_db(DB_META, create=False))
        except lmdb.NotFoundError:
            return None
        except lmdb.IncompatibleError as exc:
            raise NotAStoreError(f"{self.path} holds a key named 'meta' that is not simstore's") from exc

    def begin_read(self) -> Txn:
        """A read-only transaction on the latest committed snapshot; the caller aborts it."""
        return self._begin(write=False)

    def begin_buffers(self, *, adopt_growth: bool = True) -> Txn:
        """As :meth:`begin_read`, its values memoryviews into the map (valid
        until it ends): for arrays viewed in place. Without ``adopt_growth``,
        a map another process grew raises ``MapMovedError`` instead of being
        adopted (which would end every transaction this process has open)."""
        if adopt_growth:
            return self._begin(write=False, buffers=True)
        try:
            return cast(Txn, self.env.begin(write=False, buffers=True))
        except lmdb.MapResizedError as exc:
            raise MapMovedError from exc
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc

    def begin_pin(self) -> Txn:
        """As :meth:`begin_read`, but never adopting a map another process
        grew (``MapMovedError``): for the checkpoints' thread, which must not
        change the map under the store's other threads."""
        try:
            return self.env.begin(write=False)
        except lmdb.MapResizedError as exc:
            raise MapMovedError from exc
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc

    def adopt_grown_map(self) -> None:
        """Map the file at the length another process grew it to."""
        self._adopt_grown_map()

    @contextlib.contextmanager
    def read(self) -> Iterator[Txn]:
        """A read-only transaction on the latest committed snapshot."""
        txn = self._begin(write=False)
        try:
            yield txn
        except lmdb.Error as exc:
            # Cursor walks happen in the caller's body; translate them here, once.
            raise translate(exc, self.path) from exc
        finally:
            txn.abort()

    @property
    def shares_commits(self) -> bool:
        """Whether concurrent single writes gain by sharing a commit: each
        commit pays a flush (``sync=True``, with a log or without)."""
        return self.defer_meta_sync or (self.log_writer is not None and self.log_writer.durable)

    def write(self, body: Callable[[Txn], T], record: Callable[[], bytes | None] | None = None) -> T:
        """Run ``body`` in a write transaction and commit it.

        If the map fills, the transaction is aborted, the map grows and
        ``body`` runs again from the start, so ``body`` must not change any
        state outside the transaction. Any exception aborts: nothing of a
        failed ``body`` reaches the file.

        With a write-ahead log, ``record()`` (called after ``body``) describes
        the transaction's writes for a replay after a power loss; without one
        (or if it returns ``None``), the commit is made durable by a
        checkpoint before this returns.
        """
        logger = self.log_writer
        if logger is None:
            if not self._may_join_log:
                return self._write(body)
            try:
                return self._write(self._unless_logged(body))
            except _JoinLogFirstError:
                self._join_log()
                logger = self.log_writer
                if logger is None:
                    return self._write(body)
        with logger.committing:
            while True:
                payload: bytes | None = None

                def logged_body(txn: Txn) -> T:
                    nonlocal payload
                    result = body(txn)
                    payload = record() if record is not None else None
                    if not logger.before_commit(txn, int(txn.id()), payload):
                        raise _CheckpointFirstError
                    return result

                try:
                    # (Pinned before each attempt: a map growth between two lets the pin go.)
                    result = self._write(
                        logged_body, on_failure=logger.commit_failed, before=logger.ensure_pinned
                    )
                except _CheckpointFirstError:
                    logger.checkpoint()
                    continue
                logger.after_commit()
                return result

    def _unless_logged(self, body: Callable[[Txn], T]) -> Callable[[Txn], T]:
        """``body``, run only if the store's log is not in use; otherwise
        ``_JoinLogFirstError`` (the writer joins it and runs ``body`` again).
        Checked in the write transaction, so no logged commit slips in between."""
        meta_db, in_use = self._meta_db, self._wal.in_use

        def checked(txn: Txn) -> T:
            raw = txn.get(LOG_KEY, db=meta_db)
            # (The log state found unused last time, the common case, is not decoded again.)
            if raw is not None and raw != self._log_state_unused:
                if in_use(raw):
                    raise _JoinLogFirstError
                self._log_state_unused = bytes(raw)
            return body(txn)

        return checked

    def _write(
        self,
        body: Callable[[Txn], T],
        on_failure: Callable[[], None] | None = None,
        before: Callable[[], None] | None = None,
    ) -> T:
        while True:
            if before is not None:
                before()
            txn = self._begin(write=True)
            try:
                result = body(txn)
                txn_id = int(txn.id())
                txn.commit()
                self.committed_txn = max(self.committed_txn, txn_id)
                return result
            except lmdb.MapFullError:
                txn.abort()
                self._failed(on_failure)
                self._grow()
            except lmdb.Error as exc:
                txn.abort()
                self._failed(on_failure)
                raise translate(exc, self.path) from exc
            except BaseException:
                txn.abort()
                self._failed(on_failure)
                raise

    @staticmethod
    def _failed(on_failure: Callable[[], None] | None) -> None:
        if on_failure is not None:
            on_failure()

    def flush(self) -> None:
        """Make every commit so far durable: without a write-ahead log, flush
        the store file (every commit by any process); with one, flush the
        log's records of this process's commits, or checkpoint (nothing to do
        with ``sync=True``: every commit is durable when it returns).

        Raises:
            FlushError: the disk reported an error.
        """
        if self.log_writer is None:
            self.flush_file()
        else:
            self.log_writer.make_durable()

    def flush_file(self) -> None:
        """Flush the store file's pages (every commit so far, by any process).

        ``fdatasync`` of the file, not LMDB's ``mdb_env_sync``: with a
        writable map that is an ``msync`` of the map, which a map growth in
        another thread may swap out from under it, while the page cache
        behind the map is the file's, which ``fdatasync`` flushes (Linux).
        Safe to call while another thread writes: pages of a transaction in
        progress are flushed too, but no meta page names them yet.

        Raises:
            FlushError: the disk reported an error.
        """
        try:
            os.fdatasync(self._file_descriptor())
        except OSError as exc:
            message = f"{self.path}: committed writes could not be flushed ({exc})"
            raise FlushError(exc.errno, message) from exc

    def _file_descriptor(self) -> int:
        if self._flush_descriptor is None:
            access = os.O_RDONLY if self.readonly else os.O_RDWR
            self._flush_descriptor = os.open(self.path, access | os.O_CLOEXEC)
        return self._flush_descriptor

    def write_meta_nonce(self, raw: bytes, offset: int) -> None:
        """Write ``raw`` at ``offset`` of both meta pages, past LMDB's meta
        record (a checkpoint's nonce, see :mod:`simstore.engine.wal`);
        unflushed. The page cache is the map's, so LMDB's later writes of the
        record's fields leave it in place."""
        if offset + len(raw) > self.page_size() or offset < 256:
            raise ValueError(f"{offset} is not past LMDB's meta record within a page")
        for page in (0, 1):
            written = os.pwrite(self._file_descriptor(), raw, page * self.page_size() + offset)
            if written != len(raw):
                raise FlushError(errno.EIO, f"{self.path}: a short write into a meta page")

    def read_meta_pages(self) -> bytes:
        """The store file's two meta pages as the page cache holds them."""
        return os.pread(self._file_descriptor(), 2 * self.page_size(), 0)

    def identity(self) -> tuple[int, int]:
        """The store file's device and inode."""
        status = os.fstat(self._file_descriptor())
        return status.st_dev, status.st_ino

    def last_txn_id(self) -> int:
        """The id of the latest commit (by any process)."""
        return int(self.env.info()["last_txnid"])

    def _set_mapsize(self, size: int) -> None:
        # Every transaction of this process dies with the old map: counted,
        # so that a long-lived read (a pairs iterator) knows to begin anew.
        self.map_changes += 1
        if self.before_map_change is not None:
            self.before_map_change()
        if self.log_writer is None:
            self.env.set_mapsize(size)
            return
        with self.log_writer.map_changing():
            self.env.set_mapsize(size)

    def _adopt_grown_map(self) -> None:
        """After ``MapResizedError``: map the file at the length another
        process grew it to. The file's length, not the meta page's map size:
        the file may have grown again since, and the map must not cut it short."""
        with self._resizing():
            self._set_mapsize(os.path.getsize(self.path))

    def _adopting_growth(self, call: Callable[[], T]) -> T:
        """``call()`` (which begins a transaction of its own), retried after
        adopting the map size another process grew the file to."""
        for _attempt in range(3):
            try:
                return call()
            except lmdb.MapResizedError:
                self._adopt_grown_map()
        raise CorruptStoreError(f"{self.path}: the map kept changing size while opening the store")

    def _begin(self, *, write: bool, buffers: bool = False) -> Txn:
        for _attempt in range(3):
            try:
                if buffers:
                    return cast(Txn, self.env.begin(write=write, buffers=True))
                return self.env.begin(write=write)
            except lmdb.MapResizedError:
                self._adopt_grown_map()  # another process grew the map; then retry
            except lmdb.ReadersFullError:
                self._reclaim_readers()
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc
        raise CorruptStoreError(f"{self.path}: the map kept changing size while opening a transaction")

    def reserve(self, extra_bytes: int) -> None:
        """Grow the map ahead of a write expected to add ``extra_bytes``.

        Growing on ``MapFullError`` alone would rerun a large transaction
        once per growth step; a bulk load reserves what it needs up front.
        Advisory: if the disk cannot hold it, the write finds out itself.
        """
        current = self.map_size()
        needed = self.used_bytes() + extra_bytes
        if needed <= current:
            return
        target = needed + max(MIN_MAP_SIZE, needed // MAP_HEADROOM_FRACTION)
        if self.max_map_size is not None:
            target = min(target, max(self.max_map_size, current))
        if target > current:
            with contextlib.suppress(StoreFullError):
                self._set_map_size(target, least=min(needed, target))

    def _grow(self) -> None:
        current = self.env.info()["map_size"]
        # A step of the map, not of what is used: a bulk load into a new store
        # that outgrew its reservation reran its whole transaction once per
        # 1 MiB step (13 times for a 400 MiB run: 157 s instead of 8).
        step = min(max(self.used_bytes(), current) // MAP_HEADROOM_FRACTION, MAX_GROWTH_STEP)
        grown = current + max(MIN_MAP_SIZE, step)
        if self.max_map_size is not None:
            if current >= self.max_map_size:
                raise StoreFullError(
                    f"{self.path} reached max_map_size ({self.max_map_size} bytes); "
                    "the operation was not applied"
                )
            grown = min(grown, self.max_map_size)
        self._set_map_size(grown, least=current + self.page_size())

    def _set_map_size(self, size: int, least: int) -> None:
        """Allocate the file up to ``size`` bytes (down to ``least`` on a full
        disk, else ``StoreFullError``) and map that much."""
        with self._resizing():
            allocated = self._allocate_map(size, least)
            try:
                self._set_mapsize(allocated)
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc

    def copy_compacted(self, path: str) -> None:
        """Write a copy of the latest snapshot to a new file at ``path``, with
        no free pages (LMDB's compacting copy). LMDB creates the file with
        ``O_EXCL``: an existing file is refused, never replaced."""
        try:
            self.env.copy(path, compact=True)
        except lmdb.Error as exc:
            raise translate(exc, path) from exc

    def map_size(self) -> int:
        return int(self.env.info()["map_size"])

    def page_size(self) -> int:
        if not self._psize:  # a file's page size never changes
            self._psize = int(self.env.stat()["psize"])
        return self._psize

    def used_bytes(self) -> int:
        """Bytes of the file in use by the latest snapshot: what the last
        committed meta page says the file spans."""
        return (int(self.env.info()["last_pgno"]) + 1) * self.page_size()


class _JoinLogFirstError(Exception):
    """An unlogged writer found the store's log in use (see Environment._join_log)."""


class _CheckpointFirstError(Exception):
    """A logged commit found it must checkpoint first (see LogWriter.before_commit)."""


def copy_compacted_unlocked(path: str, target: str) -> None:
    """Write the pages in use of the store file ``path`` to the new file
    ``target`` (LMDB's compacting copy), without using the lock file.

    Only for a caller that holds the lock file exclusively, so that no process
    can have the store open: LMDB's lock would turn that hold into a shared
    one (fcntl locks belong to the process, not the descriptor).
    """
    env = _open_read_only(path, lock=False)
    try:
        # Through a descriptor of our own: LMDB's copy to a path writes with
        # O_DIRECT, past the page cache, and the store that replaces the old
        # one then answered its first queries from the disk (p50 245 µs
        # against 32 at 10M, benchmarks/results/removals_10M.md).
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        env.close()
        raise translate(lmdb.Error(str(exc)), target) from exc
    try:
        env.copyfd(descriptor, compact=True)
    except lmdb.Error as exc:
        raise translate(exc, target) from exc
    finally:
        os.close(descriptor)
        env.close()


def rebuild_lock_file(path: str) -> None:
    """Have LMDB set the lock file up afresh from the store file at ``path``.

    Called holding the lock file exclusively, after the store file was
    replaced: the lock file records the last transaction id of the file it
    was set up for, and a process that opens the store while another has it
    open trusts that record. Opening it here, while no other process can,
    makes LMDB rebuild it from the new file (and lets waiting openers in as
    LMDB shares its lock); closing lets go of every lock this process held.
    """
    _open_read_only(path, lock=True).close()


def _open_read_only(path: str, *, lock: bool) -> lmdb.Environment:
    """A bare read-only environment on an existing store file (no map of our
    own, no sub-database handles), for the two calls above."""
    try:
        return lmdb.open(path, subdir=False, readonly=True, lock=lock, create=False, max_dbs=MAX_DBS)
    except lmdb.Error as exc:
        raise translate(exc, path) from exc


def _check_lock_file_kind(path: str) -> None:
    """Refuse a lock file path that holds something other than a regular file
    (a FIFO, a folder): LMDB's own error would be an "Illegal seek".

    Raises:
        StoreLockedError: naming what is there.
    """
    try:
        mode = os.stat(lock_path(path)).st_mode
    except OSError:
        return  # none yet (or unreadable: the open says so)
    if not stat.S_ISREG(mode):
        kind = "folder" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "special file"
        raise StoreLockedError(
            f"cannot lock {path}: {lock_path(path)} is a {kind}, where LMDB keeps the store's lock "
            "file; move it out of the way"
        )


def _preallocate_lock(path: str) -> None:
    """Create the lock file with its blocks allocated.

    LMDB maps its lock file; on a full filesystem the first write to a page
    of a sparse lock file kills the process with SIGBUS. Allocating the
    blocks first turns that into an ``ENOSPC`` we can report.
    """
    try:
        descriptor = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError as exc:
        raise AccessDeniedError(
            errno.EACCES,
            f"cannot create the lock file {lock_path(path)}: no permission to write in its folder",
        ) from exc
    except OSError as exc:
        raise StoreLockedError(f"cannot create the lock file of {path}: {exc}") from exc
    try:
        os.posix_fallocate(descriptor, 0, LOCK_FILE_BYTES)
    except OSError as exc:
        os.close(descriptor)
        with contextlib.suppress(OSError):
            os.remove(lock_path(path))
        if exc.errno == errno.ENOSPC:
            raise StoreFullError(errno.ENOSPC, f"no space left to create the lock file of {path}") from exc
        raise StoreLockedError(f"cannot allocate the lock file of {path}: {exc}") from exc
    os.close(descriptor)


def is_lmdb_error(exc: BaseException) -> TypeGuard[lmdb.Error]:
    return isinstance(exc, lmdb.Error)


def _filesystem_full(path: str) -> bool:
    try:
        stats = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_FILESYSTEM_BYTES


def translate(exc: lmdb.Error, path: str) -> SimstoreError:
    """The simstore error that stands for an LMDB error."""
    message = str(exc)
    # LMDB reports a short write on a full disk as EIO, so a full filesystem
    # decides what an I/O error means.
    disk_full = "Input/output error" in message and _filesystem_full(path)
    if isinstance(exc, lmdb.MapFullError | lmdb.DiskError) or "No space left" in message or disk_full:
        return StoreFullError(errno.ENOSPC, f"{path}: no space left for the store ({message})")
    if "No such file or directory" in message:
        return StoreNotFoundError(errno.ENOENT, f"no simstore store at {path}")
    if isinstance(exc, lmdb.CorruptedError | lmdb.PageNotFoundError | lmdb.PanicError):
        return CorruptStoreError(f"{path} is damaged: {message}")
    if isinstance(exc, lmdb.ReadersFullError):
        return StoreLockedError(f"{path}: too many reader processes ({message})")
    if "Permission denied" in message or "Read-only file system" in message:
        return AccessDeniedError(
            errno.EACCES,
            f"{path}: {'permission denied' if 'Permission' in message else 'a read-only file system'}. "
            f"Even a reader needs to read the file and to read and write its lock file "
            f"{lock_path(path)} (or to create it, in a folder it may write); a store on read-only "
            "media, which no process writes, opens with simstore.open(path, 'r', lock=False)",
        )
    if "not supported by this build" in message:
        # An LMDB lock file (a store's -lock), or another program's file.
        return NotAStoreError(f"{path} is not a simstore store ({message})")
    return SimstoreError(f"{path}: LMDB error: {message}")
