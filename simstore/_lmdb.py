"""The LMDB boundary: the environment, its sub-databases, transactions, map
growth and error translation.

Every call into py-lmdb that can fail in a way a user should understand goes
through this module, which turns LMDB's errors into simstore's hierarchy once,
with ``raise ... from``. Nothing above this module imports :mod:`lmdb`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard, TypeVar

import lmdb

from simstore.errors import (
    CorruptStoreError,
    NotAStoreError,
    SimstoreError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
)
from simstore.format import META_KEY
from simstore.permute import MAX_TABLES

if TYPE_CHECKING:
    # py-lmdb's stubs make transactions generic in what they return; simstore
    # never asks for buffers, so every value is bytes.
    Txn = lmdb.Transaction[bytes]
    Database = lmdb._Database
    Cursor = lmdb.Cursor[bytes]
else:
    Txn = lmdb.Transaction
    Database = object
    Cursor = lmdb.Cursor

#: How long an opener waits before measuring a short file again.
PAD_RACE_SECONDS = 0.05

DB_META = b"meta"
DB_KEYS = b"keys"
DB_DOCS = b"docs"
DB_DOCMETA = b"docmeta"
DB_DELTA = b"delta"
FIXED_DB_NAMES = (DB_META, DB_KEYS, DB_DOCS, DB_DOCMETA, DB_DELTA)

# Table sub-databases map 8-byte permuted fingerprints to 8-byte internal ids.
# dupsort + dupfixed measured faster than 16-byte composite keys with empty
# values for a sorted bulk load (0.19 s against 0.27 s per million keys) at
# the same page count, and several documents may share one fingerprint.
TABLE_DB_FLAGS = {"dupsort": True, "dupfixed": True}

INITIAL_MAP_SIZE = 1 << 30
# The lock file LMDB makes for 126 readers (measured: 8192 bytes).
LOCK_FILE_BYTES = 8192
# Below this much free space an I/O error from a commit is taken as a full disk.
FULL_FILESYSTEM_BYTES = 1 << 20
MAX_GROWTH_STEP = 16 << 30

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


class Environment:
    """One LMDB environment in one file, with map growth and error translation.

    Args:
        path: the store file.
        readonly: open without write access.
        sync: flush to disk at every commit (durable across power loss).
        map_size: initial map size in bytes; the map doubles when full.
        max_map_size: never grow the map beyond this; ``None`` for no limit.
    """

    def __init__(
        self,
        path: str,
        *,
        readonly: bool,
        sync: bool,
        map_size: int | None,
        max_map_size: int | None,
    ) -> None:
        self.path = path
        self.readonly = readonly
        self.max_map_size = max_map_size
        file_size = os.path.getsize(path) if os.path.exists(path) else 0
        requested_map = map_size if map_size is not None else max(INITIAL_MAP_SIZE, 2 * file_size)
        if max_map_size is not None:
            requested_map = min(requested_map, max(max_map_size, file_size))
        lock_existed = os.path.exists(lock_path(path))
        if not lock_existed and not readonly:
            _preallocate_lock(path)
        try:
            self.env = lmdb.open(
                path,
                subdir=False,
                readonly=readonly,
                create=not readonly,
                sync=sync,
                metasync=sync,
                map_size=requested_map,
                max_dbs=len(FIXED_DB_NAMES) + MAX_TABLES,
                # No cached read transactions: a forked child that closes its
                # inherited copy of the environment would otherwise reset the
                # parent's reader slots (measured: no query cost at 1M docs).
                max_spare_txns=0,
                lock=True,
            )
        except lmdb.InvalidError as exc:
            self._drop_new_lock(lock_existed)
            raise NotAStoreError(f"{path} is not an LMDB file, so not a simstore store") from exc
        except lmdb.VersionMismatchError as exc:
            self._drop_new_lock(lock_existed)
            raise NotAStoreError(f"{path} was written by an incompatible LMDB version") from exc
        except lmdb.LockError as exc:
            raise StoreLockedError(f"cannot lock {path}: {exc}") from exc
        except lmdb.Error as exc:
            if "already open in this process" in str(exc):
                # LMDB allows one environment per file per process.
                raise StoreLockedError(
                    f"{path} is already open in this process; share that Store object "
                    "(it is safe to use from several threads) instead of opening the file again"
                ) from exc
            self._drop_new_lock(lock_existed)
            raise translate(exc, path) from exc
        self._lock_existed = lock_existed
        self._psize = 0  # the page size, read once
        self._known_size = 0  # bytes the data file is known to hold at least
        self._check_not_truncated(file_size)
        # A killed process leaves its reader slot behind; reclaim such slots
        # now, or enough kills would make every later open fail.
        self._reclaim_readers()

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
        # before its meta page, so a writer in another process can only make
        # the file longer than the meta page needs, never shorter; except for
        # the few microseconds in which a simstore writer pads a commit that
        # left its last pages unwritten (see _pad_to_last_page), so a short
        # file is measured once more before it is called truncated.
        if not file_size:
            return
        for attempt in range(2):
            needed = self._pages_needed()
            file_size = os.path.getsize(self.path)
            if file_size >= needed:
                return
            if attempt == 0:
                time.sleep(PAD_RACE_SECONDS)
        self.close()
        raise CorruptStoreError(
            f"{self.path} is truncated: it holds {file_size} bytes but its pages need {needed}"
        )

    def _pages_needed(self) -> int:
        """Bytes the last committed meta page says the file spans."""
        if not self._psize:
            self._psize = int(self.env.stat()["psize"])
        return (int(self.env.info()["last_pgno"]) + 1) * self._psize

    def _pad_to_last_page(self) -> None:
        """Extend the file to the pages the commit just made claims.

        A transaction that allocates pages at the end of the file and frees
        them again before committing (LMDB's "loose" pages; a re-layout that
        drops tables does) commits a last page number past the last page it
        wrote, so the file ends short of it. Those pages are free, never
        read, so zeros are as good as anything there; padding keeps "file
        shorter than its pages" meaning "truncated" for the check above.
        """
        needed = self._pages_needed()
        if needed <= self._known_size:
            return  # the common case, for ~1 µs: LMDB never shrinks the file
        size = os.path.getsize(self.path)
        if size < needed:
            os.truncate(self.path, needed)
            size = needed
        self._known_size = size

    def fail_open(self) -> None:
        """Close after an open that found a foreign file, removing the lock
        file if this open created it."""
        self.close()
        self._drop_new_lock(self._lock_existed)

    def close(self) -> None:
        self.env.close()

    def named_databases(self) -> list[bytes]:
        """Names in the main database (sub-databases or a foreign program's keys)."""
        with self.read() as txn:
            return [bytes(key) for key, _ in txn.cursor()]

    def open_existing(self, table_count: int, generation: int = 0) -> Handles:
        """Open the store's sub-databases, which must all exist."""
        try:
            return self._open_handles(table_count, generation, create=False)
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

    def create_handles(self, txn: Txn, table_count: int) -> Handles:
        """Create every sub-database inside the write transaction ``txn``."""
        return self._open_handles(table_count, 0, create=True, txn=txn)

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

        return Handles(
            meta=open_db(DB_META),
            keys=open_db(DB_KEYS),
            docs=open_db(DB_DOCS),
            docmeta=open_db(DB_DOCMETA),
            delta=open_db(DB_DELTA),
            tables=[
                open_db(table_db_name(index, generation), **TABLE_DB_FLAGS) for index in range(table_count)
            ],
        )

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
            return self.env.open_db(DB_META, create=False)
        except lmdb.NotFoundError:
            return None
        except lmdb.IncompatibleError as exc:
            raise NotAStoreError(f"{self.path} holds a key named 'meta' that is not simstore's") from exc

    def begin_read(self) -> Txn:
        """A read-only transaction on the latest committed snapshot; the caller aborts it."""
        return self._begin(write=False)

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

    def write(self, body: Callable[[Txn], T]) -> T:
        """Run ``body`` in a write transaction and commit it.

        If the map fills, the transaction is aborted, the map grows and
        ``body`` runs again from the start, so ``body`` must not change any
        state outside the transaction. Any exception aborts: nothing of a
        failed ``body`` reaches the file.
        """
        while True:
            txn = self._begin(write=True)
            try:
                result = body(txn)
                txn.commit()
                self._pad_to_last_page()
                return result
            except lmdb.MapFullError:
                txn.abort()
                self._grow()
            except lmdb.Error as exc:
                txn.abort()
                raise translate(exc, self.path) from exc
            except BaseException:
                txn.abort()
                raise

    def _begin(self, *, write: bool) -> Txn:
        for _attempt in range(3):
            try:
                return self.env.begin(write=write)
            except lmdb.MapResizedError:
                # Another process grew the map; adopt its size and retry.
                self.env.set_mapsize(0)
            except lmdb.ReadersFullError:
                self._reclaim_readers()
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc
        raise CorruptStoreError(f"{self.path}: the map kept changing size while opening a transaction")

    def reserve(self, extra_bytes: int) -> None:
        """Grow the map ahead of a write expected to add ``extra_bytes``.

        Growing on ``MapFullError`` alone would rerun a large transaction
        once per doubling; a bulk load reserves what it needs up front.
        """
        current = self.map_size()
        needed = self.used_bytes() + extra_bytes
        if needed <= current:
            return
        target = max(needed, current * 2)
        if self.max_map_size is not None:
            target = min(target, max(self.max_map_size, current))
        if target > current:
            try:
                self.env.set_mapsize(target)
            except lmdb.Error as exc:
                raise translate(exc, self.path) from exc

    def _grow(self) -> None:
        current = self.env.info()["map_size"]
        grown = current + min(current, MAX_GROWTH_STEP)
        if self.max_map_size is not None:
            if current >= self.max_map_size:
                raise StoreFullError(
                    f"{self.path} reached max_map_size ({self.max_map_size} bytes); "
                    "the operation was not applied"
                )
            grown = min(grown, self.max_map_size)
        try:
            self.env.set_mapsize(grown)
        except lmdb.Error as exc:
            raise translate(exc, self.path) from exc

    def last_txnid(self) -> int:
        """The id of the last committed transaction (0 for a file never written)."""
        return int(self.env.info()["last_txnid"])

    def map_size(self) -> int:
        return int(self.env.info()["map_size"])

    def page_size(self) -> int:
        return int(self.env.stat()["psize"])

    def used_bytes(self) -> int:
        """Bytes of the file in use by the latest snapshot."""
        return (int(self.env.info()["last_pgno"]) + 1) * self.page_size()


def _preallocate_lock(path: str) -> None:
    """Create the lock file with its blocks allocated.

    LMDB maps its lock file; on a full filesystem the first write to a page
    of a sparse lock file kills the process with SIGBUS. Allocating the
    blocks first turns that into an ``ENOSPC`` we can report.
    """
    try:
        descriptor = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
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
    return SimstoreError(f"{path}: LMDB error: {message}")
