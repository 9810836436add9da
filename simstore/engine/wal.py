"""Durable commits through the write-ahead log: records, checkpoints, pins and
the roll-back after a restart.

A ``sync=True`` store with a log (:mod:`simstore.engine.writelog`) runs LMDB without
flushes (``MDB_NOSYNC``). Each commit first writes a record of its writes into
the log and flushes that (one sequential page), then commits; the store file is
flushed only at *checkpoints*. A power loss can leave the store file in any
mix of old and new pages, so a restart rolls it back to the last checkpoint
and replays the log's records after it. That is sound because:

- *a checkpoint is whole on the disk*: it notes, under LMDB's writer lock, the
  last commit C and the two meta pages the file holds for it, flushes the
  store file, and only then writes itself into the log;
- *its pages stay*: every process that commits without a flush holds a read
  transaction (a *pin*) on a checkpoint no later than the log's, taken at its
  own checkpoint, so LMDB reuses none of C's pages; a process without one
  checkpoints before it commits;
- *no commit the log does not hold is lost or doubled*: a transaction with no
  record (bulk writes, merges, batches) writes an empty one (a *marker*) and
  is made durable by a checkpoint before its call returns; one by a process
  that writes no records at all (``sync=False``, an older simstore) is caught
  by the next logged commit, which finds that the last logged transaction it
  stores beside the log's position is not its predecessor, and checkpoints
  first;
- *a file written since by something else is left alone*: a record is flushed
  before its commit, so after a power loss the newest meta page on the disk is
  never past the log's last record, unless commits the log does not hold came
  after it (an older simstore writes with LMDB's own flushes). Only a file whose
  newest meta page is no later than the last record is rolled back.

A roll-back happens at the first open after a restart (the log's boot id
differs from this boot's), before LMDB opens the file, under the log's lock
held alone; the replay (in :mod:`simstore.store.opening`) commits the records'
writes again and checkpoints before the lock goes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simstore.engine._lmdb import MapMovedError
from simstore.engine._locks import ofd_flock
from simstore.engine.format import LOG_KEY
from simstore.engine.writelog import MAX_PAYLOAD_BYTES, Checkpoint, WriteLog, boot_id, place, record_bytes
from simstore.errors import AccessDeniedError, FlushError, SimstoreError, StoreLockedError

if TYPE_CHECKING:
    from simstore.engine._lmdb import Database, Environment, Txn


#: Checkpoint at least this often while writing (seconds). A pin keeps LMDB
#: from reusing the pages every commit frees, about 20 a commit, so the file
#: grows by what a pin's lifetime of commits freed; a checkpoint's flush of the
#: store file delays the records' flushes meanwhile. At 0.25 s, eight writer
#: processes saw p99 4.4-6.0 ms; at 1 s, 2.9-3.1 ms, for the same docs/s into
#: 10M (benchmarks/results/writers_notes.md).
CHECKPOINT_INTERVAL = 1.0
#: Or once this share of the ring holds records after the checkpoint.
CHECKPOINT_RING_SHARE = 0.25
#: Tries at taking a pin with no commit in between before giving up.
PIN_ATTEMPTS = 1000
#: A process that has not committed for this long lets its pin go.
IDLE_SECONDS = 1.0

# In the store's meta sub-database, written by every logged commit: the log's
# next position, the last transaction with a record, and the store's salt of
# its records' CRCs (set when the store is made; stores made before the log
# take the log's).
_LOG_STATE = struct.Struct(">QQI")


def new_log_state() -> bytes:
    """A new store's log state: nothing logged yet, a salt of its own."""
    return _LOG_STATE.pack(0, 0, secrets.randbits(32))


def log_in_use(raw: bytes | None) -> bool:
    """Whether the stored log state says a commit was ever logged: then every
    writer of the store takes part in the log (see :class:`LogWriter`)."""
    state = _log_state(raw)
    return state is not None and state[0] != 0


def _log_state(raw: bytes | None) -> tuple[int, int, int] | None:
    """(position, last logged transaction, salt) from the stored state."""
    if raw is None or len(raw) != _LOG_STATE.size:
        return None
    position, last_logged, salt = _LOG_STATE.unpack(raw)
    return position, last_logged, salt


# LMDB's meta page (lmdb 0.9, 64-bit): a 16-byte page header, then the magic
# and version, then the transaction id at offset 128 of the meta record.
_LMDB_MAGIC = 0xBEEFC0DE
_META_MAGIC = struct.Struct("<I")
_META_MAGIC_OFFSET = 16
_META_TXN = struct.Struct("<Q")
_META_TXN_OFFSET = 16 + 128
# Each checkpoint's nonce, in both meta pages past LMDB's meta record (which
# ends at byte 152). LMDB writes a meta page whole only when it makes a file
# (zeros past the record) and afterwards only its record's fields, so what a
# checkpoint writes here stays until the next checkpoint writes its own. It
# ties a log's checkpoint to the file whose history the log holds: a copy of
# the store put over it in place (same inode, same salt) carries the nonce of
# another log's checkpoint and is never rolled back by this one.
_NONCE_MARK = b"simstore-nonce\0\0"
_NONCE = struct.Struct("<16sQ")
NONCE_OFFSET = 256

# The byte of the log the checkpoints' lock stands on (an OFD lock, released
# by the kernel when its process dies).
_LOCK_BYTE = 0


def log_path(store_path: str) -> str:
    """The write-ahead log beside a store file."""
    return store_path + "-log"


def _meta_txns(metas: bytes, page_size: int) -> list[int | None]:
    """The transaction id in each of a store file's two meta pages (its first
    two pages, raw); ``None`` for a page that is not an LMDB meta page."""
    found: list[int | None] = []
    for page in (0, 1):
        base = page * page_size
        whole = len(metas) >= base + _META_TXN_OFFSET + _META_TXN.size
        if whole and _META_MAGIC.unpack_from(metas, base + _META_MAGIC_OFFSET)[0] == _LMDB_MAGIC:
            found.append(int(_META_TXN.unpack_from(metas, base + _META_TXN_OFFSET)[0]))
        else:
            found.append(None)
    return found


def newest_meta_txn(metas: bytes, page_size: int) -> int | None:
    """The transaction id of the newer of a store file's two meta pages;
    ``None`` if neither is an LMDB meta page."""
    return max((txn for txn in _meta_txns(metas, page_size) if txn is not None), default=None)


def meta_nonces(metas: bytes, page_size: int) -> set[int]:
    """The checkpoint nonces a store file's two meta pages carry (none in a
    file no checkpoint of this version wrote into)."""
    found: set[int] = set()
    for page in (0, 1):
        at = page * page_size + NONCE_OFFSET
        if len(metas) >= at + _NONCE.size:
            mark, nonce = _NONCE.unpack_from(metas, at)
            if mark == _NONCE_MARK:
                found.add(int(nonce))
    return found


def with_nonce(metas: bytes, page_size: int, nonce: int) -> bytes:
    """The two meta pages ``metas`` with ``nonce`` written into each."""
    patched = bytearray(metas)
    for page in (0, 1):
        _NONCE.pack_into(patched, page * page_size + NONCE_OFFSET, _NONCE_MARK, nonce)
    return bytes(patched)


def nonce_bytes(nonce: int) -> bytes:
    """What a checkpoint writes at ``NONCE_OFFSET`` of each meta page."""
    return _NONCE.pack(_NONCE_MARK, nonce)


def _new_nonce() -> int:
    return secrets.randbits(63) + 1  # (never 0, which stands for "none")


def _meta_pages_of(metas: bytes, txn_id: int, page_size: int) -> bool:
    """Whether a store file's first two pages are the meta pages of commit
    ``txn_id``: its own in its slot, and an older one in the other."""
    own, other = (_meta_txns(metas, page_size)[slot] for slot in (txn_id % 2, 1 - txn_id % 2))
    return own == txn_id and other is not None and other < txn_id


def history_matches(checkpoint: Checkpoint, metas: bytes, page_size: int) -> bool:
    """Whether the store file whose meta pages are ``metas`` is the one whose
    history the log of ``checkpoint`` holds: its meta pages carry the nonce
    this checkpoint wrote or the one the next was to write. (A version 1
    checkpoint wrote none: only the file's identity speaks for it.)"""
    if not checkpoint.nonce:
        return True
    return bool(meta_nonces(metas, page_size) & {checkpoint.nonce, checkpoint.next_nonce})


def _ofd_lock(descriptor: int) -> None:
    """Take the log's lock alone (waiting for it)."""
    fcntl.fcntl(descriptor, fcntl.F_OFD_SETLKW, ofd_flock(fcntl.F_WRLCK, _LOCK_BYTE))


def _ofd_unlock(descriptor: int) -> None:
    fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, ofd_flock(fcntl.F_UNLCK, _LOCK_BYTE))


def _log_failed(store_path: str, exc: OSError) -> FlushError:
    return FlushError(exc.errno, f"{store_path}: the write-ahead log could not be written ({exc})")


def _identity(descriptor: int) -> tuple[int, int]:
    status = os.fstat(descriptor)
    return status.st_dev, status.st_ino


# --------------------------------------------------------------- the restart


@dataclass
class Rollback:
    """A store file rolled back to its last checkpoint, whose log's records
    are still to be replayed (with the log's lock held alone until then)."""

    log: WriteLog
    records: list[tuple[int, bytes]]

    def release(self) -> None:
        _ofd_unlock(self.log.descriptor)
        self.log.close()


def recover_before_open(store_path: str, *, readonly: bool) -> Rollback | None:
    """Before LMDB opens ``store_path``: roll the file back to its log's last
    checkpoint if the machine restarted since anything was committed after it.

    Returns the records to replay, with the log's lock held (``None``: the
    file stands as it is). Raises ``StoreLockedError`` if a roll-back is due
    and this open is read-only: it cannot write the file.
    """
    path = log_path(store_path)
    this_boot = boot_id()
    if this_boot is None or not os.path.exists(path):
        return None
    try:
        log = WriteLog.open(path, writable=not readonly)
    except (OSError, ValueError):
        return None  # not simstore's, or not ours to write: no log
    keep = False
    try:
        checkpoint = log.checkpoint()
        if checkpoint is None or checkpoint.boot_id == this_boot:
            return None  # this boot's checkpoints: the page cache holds every commit
        if readonly:
            if _records_to_replay(store_path, log, checkpoint) is not None:
                raise StoreLockedError(
                    f"{store_path} was being written when its machine stopped; open it for writing "
                    "once (simstore.open(path, 'w')) to roll it back to its last checkpoint and "
                    "replay its log before reading it"
                )
            return None
        _ofd_lock(log.descriptor)
        checkpoint = log.checkpoint()  # another opener may have recovered meanwhile
        if checkpoint is None or checkpoint.boot_id == this_boot:
            return None
        records = _records_to_replay(store_path, log, checkpoint)
        if records is None:
            log.write_checkpoint(_with_boot(checkpoint, this_boot))  # the file stands as it is
            return None
        _write_back_metas(store_path, checkpoint)
        keep = True
        return Rollback(log, records)
    finally:
        if not keep:
            log.close()  # (closing lets go of the lock)


def _records_to_replay(
    store_path: str, log: WriteLog, checkpoint: Checkpoint
) -> list[tuple[int, bytes]] | None:
    """The records to replay after rolling the file back to ``checkpoint``
    (maybe none); ``None`` if the file stands as it is: the checkpoint is
    another file's, or nothing was committed after it.

    Every writer of a store with a log, whatever its ``sync``, holds a pin no
    later than the log's checkpoint while it commits, so the checkpoint's
    pages are on the disk as it flushed them, whatever else the power loss
    kept: going back to it is always sound. What the log's records hold is
    then committed again; commits after them, or after a commit the log holds
    no record of (a marker), were not acknowledged as durable (``sync=False``
    or ``"interval"`` writers, whose writes may be lost) or were made durable
    by a later checkpoint."""
    descriptor = os.open(store_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _identity(descriptor) != checkpoint.store_identity:
            return None
        page_size = len(checkpoint.metas) // 2
        metas = os.pread(descriptor, 2 * page_size, 0)
    finally:
        os.close(descriptor)
    on_disk = newest_meta_txn(metas, page_size)
    if on_disk is None or on_disk < checkpoint.txn_id or not history_matches(checkpoint, metas, page_size):
        # Earlier than the checkpoint: the file was written over since (a backup
        # copied back), and the log is not its; another nonce: a copy with a
        # history of its own put in its place. (No meta page at all: the file
        # is damaged, and the open says so.)
        return None
    records = [(txn_id, payload) for txn_id, payload, _ in log.records(checkpoint)]
    if on_disk == checkpoint.txn_id and not records:
        return None
    # Up to the first marker: a commit with no record is the last the log can
    # say anything about (a durable one is followed by a checkpoint before the
    # next record; a later record of a writer that does not flush each one was
    # not promised to survive).
    replay: list[tuple[int, bytes]] = []
    for txn_id, payload in records:
        if not payload:
            break
        replay.append((txn_id, payload))
    return replay


def _write_back_metas(store_path: str, checkpoint: Checkpoint) -> None:
    descriptor = os.open(store_path, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.pwrite(descriptor, checkpoint.metas, 0)
        os.fdatasync(descriptor)
    finally:
        os.close(descriptor)


def _with_boot(checkpoint: Checkpoint, this_boot: bytes) -> Checkpoint:
    return Checkpoint(
        checkpoint.sequence + 1,
        checkpoint.txn_id,
        checkpoint.start,
        checkpoint.store_identity,
        this_boot,
        checkpoint.metas,
        checkpoint.salt,
        checkpoint.nonce,
        checkpoint.next_nonce,
    )


# ------------------------------------------------------------ while writing


class LogWriter:
    """One environment's use of its store's log: records before commits,
    checkpoints, and this process's pin.

    Every writer of a store with a log uses it, whatever its ``sync``: each
    commit's record is written before the commit, and a pin no later than the
    log's checkpoint is held while it commits, so that a power loss can always
    be undone by going back to the checkpoint. What ``sync`` decides is when
    the records reach the disk: ``durable`` writers (``sync=True``) flush each
    one before their commit, and make a commit without one durable by a
    checkpoint before it returns; the others leave that to :meth:`make_durable`
    (``sync="interval"``'s flushes) and to the checkpoints, which come every
    ``CHECKPOINT_INTERVAL`` while they write.
    """

    def __init__(
        self, env: Environment, log: WriteLog, meta_db: Database, this_boot: bytes, *, durable: bool = True
    ) -> None:
        self.env = env
        self.durable = durable
        env.identity()  # (opens the store file's descriptor now, before two threads could)
        self.log = log
        self.meta_db = meta_db
        self.boot = this_boot
        self.pin: Txn | None = None
        self.pid = os.getpid()
        self.checkpoints = 0
        self.replaying = False  # the restart's replay: no records, one checkpoint at its end
        self._header = log.checkpoint()
        self._checkpointing = threading.RLock()
        #: Held around the checkpoints' thread's calls into LMDB and around
        #: changes of the map's size, which end every transaction of the process.
        self._pins = threading.RLock()
        self._map_generation = 0
        #: Held by a commit from its pin's check to its end, and by the
        #: checkpoints' thread to let an idle pin go.
        self.committing = threading.RLock()
        self._written_at: int | None = None  # the record of the commit in flight
        self._marker = False  # whether that record is a marker
        # Not durable yet (writers that do not flush each record): records
        # written since the log's last flush, a marker since the last checkpoint.
        self._records_unflushed = False
        self._marker_unflushed = False
        self._ring_used = 0  # bytes of the ring from the checkpoint to the last record
        self._last_commit = time.monotonic()
        self._committed = False  # whether this process committed anything yet
        self._last_checkpoint = 0.0
        self._due = threading.Condition()
        self._closing = False
        self._worker: threading.Thread | None = None
        self._runs_checkpoints = True  # (not a restart's replay: it ends with one)

    @staticmethod
    def open_file(store_path: str) -> tuple[WriteLog, bytes] | None:
        """The log beside a store file (made if missing) and this boot's id;
        ``None`` where there can be none (no boot id, a file by that name that
        is not a log, a folder this process cannot write).

        Raises:
            AccessDeniedError: the log is there but this process may not
                write it. Every writer of a store must use its log (the
                roll-back after a power loss relies on every writer's pin),
                so such a writer is refused rather than let in without it.
        """
        this_boot = boot_id()
        if this_boot is None:
            return None
        path = log_path(store_path)
        log = None
        try:
            if not os.path.exists(path):
                log = WriteLog.make(path, mode=os.stat(store_path).st_mode & 0o666)
            if log is None:
                log = WriteLog.open(path, writable=True)
        except PermissionError as exc:
            if os.path.isfile(path):
                raise AccessDeniedError(
                    errno.EACCES,
                    f"{store_path}: its write-ahead log {path} is not writable by this user, and every "
                    "writer of the store must write it; open the store read-only (mode 'r'), or give "
                    "this user write access to the log",
                ) from exc
            return None
        except (OSError, ValueError):
            return None
        return log, this_boot

    # ----------------------------------------------------------- commits

    def before_commit(self, txn: Txn, txn_id: int, payload: bytes | None) -> bool:
        """Inside a write transaction about to commit: write and flush its
        record (or, for ``None``, its marker). ``False``: a checkpoint must
        come first (a commit the log does not hold came before, or the ring
        is full); the caller aborts, checkpoints and runs the transaction again."""
        if self.replaying:
            return True
        header = self._header
        if header is None or self.pin is None:
            return False  # (the pin went with a map growth since the transaction began)
        stored = _log_state(txn.get(LOG_KEY, db=self.meta_db))
        position, last_logged, salt = stored if stored is not None else (header.start, 0, header.salt)
        data = payload if payload is not None and len(payload) <= MAX_PAYLOAD_BYTES else b""
        if salt != header.salt:
            return False  # the checkpoint is not this store's
        if data and txn_id - 1 > header.txn_id and last_logged != txn_id - 1:
            # A commit came that the log holds no record of: a replay would
            # stop before this record. (A marker needs no such care: a replay
            # stops at it anyway.)
            return False
        size = record_bytes(len(data))
        at = place(position, size, self.log.ring)
        if self.log.room(header.start, at + size) < 0:
            self._header = header = self.log.checkpoint() or header
            if self.log.room(header.start, at + size) < 0:
                return False
        try:
            end = self.log.append(position, txn_id, data, salt)
            self._ring_used = end - header.start
            self._written_at = at
            self._marker = not data
            if self.durable:
                self.log.flush()
        except OSError as exc:
            raise _log_failed(self.env.path, exc) from exc
        txn.put(LOG_KEY, _LOG_STATE.pack(end, txn_id if data else last_logged, salt), db=self.meta_db)
        return True

    def commit_failed(self) -> None:
        """The commit whose record was written did not happen: unmake it."""
        if self._written_at is not None:
            self.log.withdraw(self._written_at)
            self._written_at = None

    def after_commit(self) -> None:
        """After a commit: a durable writer's commit without a record (a
        marker) is made durable now, by a checkpoint; otherwise the
        checkpoints' thread runs."""
        self._written_at = None
        if self.replaying:
            return
        self._last_commit = time.monotonic()
        self._committed = True
        if not self.durable:
            if self._marker:
                self._marker_unflushed = True
            else:
                self._records_unflushed = True
        if self._marker and self.durable:
            self.checkpoint()
        elif self._ring_used > CHECKPOINT_RING_SHARE * self.log.ring:
            with self._due:
                self._due.notify()  # the checkpoints' thread: before the ring fills

    def make_durable(self) -> None:
        """Make every commit of this process so far durable: one flush of the
        log, or a checkpoint if a commit without a record came since the last.
        (A durable writer's commits are durable when they return.)"""
        if self._marker_unflushed:
            self.checkpoint()
        elif self._records_unflushed:
            self._records_unflushed = False
            try:
                self.log.flush()
            except OSError as exc:
                self._records_unflushed = True
                raise _log_failed(self.env.path, exc) from exc

    def ensure_pinned(self) -> None:
        """Before a commit: checkpoint if this process holds no pin."""
        if self.pin is None:
            self.checkpoint()

    # ------------------------------------------------------------ replay

    @classmethod
    def for_replay(cls, env: Environment, rollback: Rollback, meta_db: Database) -> LogWriter:
        """A writer for a restart's replay, through the log the roll-back
        holds locked: its commits write no records, and its pin is the
        checkpoint the file was rolled back to (its pages must stay until the
        replay's own checkpoint, in case the power fails again meanwhile)."""
        this_boot = boot_id()
        assert this_boot is not None, "a roll-back needs a boot id"
        writer = cls(env, rollback.log, meta_db, this_boot)
        writer.replaying = True
        writer._runs_checkpoints = False
        writer.pin = env.begin_read()
        return writer

    def finish_replay(self) -> None:
        """Checkpoint the replayed commits (in this boot) and let the pin go."""
        self.replaying = False
        try:
            self._checkpoint()  # (the roll-back holds the log's lock)
        finally:
            self.let_pin_go()

    def let_pin_go(self) -> None:
        with self._pins:
            if self.pin is not None:
                self.pin.abort()
                self.pin = None

    # -------------------------------------------------------- checkpoints

    def checkpoint(self) -> None:
        """Make every commit so far durable and the log's checkpoint, and pin it."""
        with self._checkpointing:
            _ofd_lock(self.log.descriptor)
            try:
                self._checkpoint()
            finally:
                _ofd_unlock(self.log.descriptor)

    def _checkpoint(self) -> None:
        # What this checkpoint covers: every commit before its pin. (Set
        # again if it fails, or by a commit that comes in meanwhile.)
        unflushed = self._marker_unflushed, self._records_unflushed
        self._marker_unflushed = self._records_unflushed = False
        try:
            header = self._checkpoint_and_pin()
        except BaseException:
            self._marker_unflushed |= unflushed[0]
            self._records_unflushed |= unflushed[1]
            raise
        self._header = header
        self._last_checkpoint = time.monotonic()
        self.checkpoints += 1
        if self._worker is None and self._runs_checkpoints:
            # Whoever holds a pin checkpoints on, and lets it go when idle.
            worker = threading.Thread(target=self._checkpoints, name="simstore-checkpoints", daemon=True)
            self._worker = worker
            worker.start()

    def _checkpoint_and_pin(self) -> Checkpoint:
        while True:
            try:
                pin, last, metas, raw, generation = self._take_pin()
                break
            except MapMovedError:
                if threading.current_thread() is self._worker:
                    raise  # (the checkpoints' thread never changes the map: it tries again later)
                self.env.adopt_grown_map()  # a writer's, holding the store's lock
        try:
            header = self._next_header(last, raw, metas)
            if header is None:
                self.env.flush_file()
                header = self.log.checkpoint()
            else:
                # The nonce first, flushed with the pages it vouches for, and
                # only then the header that names it.
                self.env.write_meta_nonce(nonce_bytes(header.nonce), NONCE_OFFSET)
                self.env.flush_file()
                self.log.write_checkpoint(header)
        except BaseException as exc:
            with self._pins:
                pin.abort()
            if isinstance(exc, OSError) and not isinstance(exc, SimstoreError):
                raise _log_failed(self.env.path, exc) from exc
            raise
        with self._pins:
            if generation == self._map_generation:
                old, self.pin = self.pin, pin
                if old is not None:
                    old.abort()
            # else: the map changed size meanwhile, which ended that pin; the
            # next commit checkpoints again.
        assert header is not None
        return header

    def _take_pin(self) -> tuple[Txn, int, bytes, bytes | None, int]:
        """A read transaction on the latest commit C, with the two meta pages
        the file holds for C and the log's state at C, taken with no commit in
        between (without LMDB's writer lock: checked on the meta pages, and
        tried again if a commit came). Raises ``MapMovedError`` if the map
        changed size (without adopting it)."""
        page_size = self.env.page_size()
        with self._pins:
            generation = self._map_generation
            for _attempt in range(PIN_ATTEMPTS):
                pin = self.env.begin_pin()
                last = int(pin.id())
                metas = self.env.read_meta_pages()
                if _meta_pages_of(metas, last, page_size) and self.env.read_meta_pages() == metas:
                    return pin, last, metas, pin.get(LOG_KEY, db=self.meta_db), generation
                pin.abort()
        raise FlushError(errno.EBUSY, f"{self.env.path}: commits kept coming while a checkpoint was taken")

    def _next_header(self, last: int, raw: bytes | None, metas: bytes) -> Checkpoint | None:
        """The checkpoint at commit ``last`` to write into the log's header;
        ``None`` if the header holds a later one already (then it stays).
        A header that is not this file's is cleared with the records after it."""
        env = self.env
        header = self.log.checkpoint()
        identity = env.identity()
        page_size = env.page_size()
        # The header is this file's if it names this file, no commit this
        # file has not made (a backup copied back in place keeps the inode,
        # and its commits start again lower) and a nonce this file's meta
        # pages carry (a copy with a history of its own, copied back in place).
        with self._pins:  # (a call into LMDB, never beside a change of the map)
            latest = env.last_txn_id()
        ours = (
            header is not None
            and header.store_identity == identity
            and header.txn_id <= latest
            and history_matches(header, env.read_meta_pages(), page_size)
        )
        if header is not None and not ours:
            # Another file's log, or this one's before it was written over:
            # none of its records may pass for this file's.
            self.log.clear()
        stored = _log_state(raw)
        if (
            header is not None
            and ours
            and last < header.txn_id
            and (stored is None or stored[2] == header.salt)
        ):
            return None
        if stored is not None:
            start, _, salt = stored
        elif header is not None and ours:
            start, salt = header.start, header.salt  # (a store made before the log)
        else:
            start, salt = 0, secrets.randbits(32)
        nonce = header.next_nonce if header is not None and ours and header.next_nonce else _new_nonce()
        return Checkpoint(
            (header.sequence + 1) if header is not None else 1,
            last,
            start,
            identity,
            self.boot,
            with_nonce(metas, page_size, nonce),
            salt,
            nonce,
            _new_nonce(),
        )

    def _checkpoints(self) -> None:
        """The checkpoints' thread: checkpoint every ``CHECKPOINT_INTERVAL``
        while commits come, and let the pin go once none came for
        ``IDLE_SECONDS`` (a pin held for ever would keep LMDB from reusing any
        page other processes free)."""
        while True:
            with self._due:
                if self._ring_used <= CHECKPOINT_RING_SHARE * self.log.ring:
                    self._due.wait(CHECKPOINT_INTERVAL)
                if self._closing:
                    return
            try:
                if self._last_commit > self._last_checkpoint:
                    self.checkpoint()
                elif time.monotonic() - self._last_commit > IDLE_SECONDS and self.pin is not None:
                    with self.committing, self._pins:
                        if time.monotonic() - self._last_commit > IDLE_SECONDS and self.pin is not None:
                            self.pin.abort()
                            self.pin = None
            except Exception:  # retried at the next interval; commits go on meanwhile
                continue

    # --------------------------------------------------------------- the end

    def close(self) -> None:
        """Stop the checkpoints' thread, checkpoint what was committed since
        the last one (a clean close leaves the next restart nothing to roll
        back or replay, whatever ``sync`` was), and let the pin go."""
        if os.getpid() != self.pid:
            self.log.close()  # a forked child's (its pin was let go before the fork)
            return
        with self._due:
            self._closing = True
            self._due.notify_all()
        if self._worker is not None:
            self._worker.join()
        try:
            if self._committed and self._last_commit > self._last_checkpoint:
                self.checkpoint()
        finally:
            if self.pin is not None:
                self.pin.abort()
                self.pin = None
            self.log.close()

    def locks_over_fork(self) -> list[threading.RLock]:
        """The locks a fork() waits for (in this order): no commit, no
        checkpoint and no call of the checkpoints' thread into LMDB is then
        in flight."""
        return [self.committing, self._checkpointing, self._pins]

    @contextlib.contextmanager
    def map_changing(self) -> Iterator[None]:
        """Held while the map changes size: py-lmdb then ends every transaction
        of this process, the pin among them (the next commit checkpoints
        first), and no other thread may begin one meanwhile."""
        with self._pins:
            self._map_generation += 1
            self.pin = None
            try:
                yield
            finally:
                self._map_generation += 1


@dataclass
class _OpenedLog:
    """A log file opened for a writer (see :class:`simstore.engine._lmdb.LogFile`)."""

    log: WriteLog
    this_boot: bytes

    def writer(self, env: Environment, meta_db: Database, *, durable: bool) -> LogWriter:
        return LogWriter(env, self.log, meta_db, self.this_boot, durable=durable)

    def close(self) -> None:
        self.log.close()


class _WriteAheadLog:
    """This module as :class:`simstore.engine._lmdb.WriteAheadLog`: what an
    environment calls to recover, to ask whether the log is in use, and to
    open it for a writer."""

    def recover(self, store_path: str, *, readonly: bool) -> Rollback | None:
        return recover_before_open(store_path, readonly=readonly)

    def in_use(self, raw: bytes | None) -> bool:
        return log_in_use(raw)

    def open_file(self, store_path: str) -> _OpenedLog | None:
        opened = LogWriter.open_file(store_path)
        return None if opened is None else _OpenedLog(*opened)


#: What the opener hands every :class:`simstore.engine._lmdb.Environment` of a store.
WRITE_AHEAD_LOG = _WriteAheadLog()
