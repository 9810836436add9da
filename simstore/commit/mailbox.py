"""The writers' mailbox: a side file where processes hand their single writes
to whichever process commits next.

LMDB lets one process write at a time, and with ``sync=True`` each commit holds
that lock through a flush of the file, so processes that each add one document
at a time pay a flush apiece. The mailbox ``<store>-writers`` lets them share
one: a process with writes to commit posts them in a *slot* and waits for the
*lead*; whoever holds the lead takes every posted write, runs them in one
transaction with its own, commits, flushes, writes each slot's outcome and lets
the lead go. The waiters of one group read their outcomes together, without
the lead (a leader writing slots holds the *answers* lock alone; a waiter
waits for it shared); a waiter nobody took gets the lead and leads the next
commit itself. (:mod:`simstore.commit.group` does the committing; this module only
keeps the file.)

Every lock is a Linux open-file-description lock (``fcntl`` ``F_OFD_*``) on one
byte of the file: held by this process's open file, released by the kernel
when the process dies, so a killed leader or poster never blocks the others.
An interrupted one lets go of them too: each lock is taken inside the
``try`` whose ``finally`` lets it go (letting go of a lock not held does
nothing), so an interrupt that comes just as a lock is granted leaves none.
Where those locks are missing (not Linux) there is no mailbox, and each process
commits its own writes.

A slot's words change only under one of two holds: its owner's (the slot
lock), to post a request into a free slot and to free it once done; or the
lead with the answers lock, for everything else.
A request carries its length and CRC, so a leader never takes one half
written, whatever order another core sees the stores in.

Slot states:

- ``FREE``: nobody's.
- ``POSTED``: a request waiting for a leader.
- ``TAKEN``: a leader put the request in group ``group`` and wrote its outcome
  beside it, before committing. If that leader dies before it says ``DONE``,
  the next leader asks the store whether group ``group`` committed (the group
  number is written in the same transaction) and says ``DONE`` or posts the
  request again.
- ``DONE``: the outcome is final (and, for a write, on the disk).
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator

from simstore.engine._locks import ofd_flock
from simstore.errors import CorruptStoreError

MAGIC = b"simstore-writers"
VERSION = 3
HEADER_BYTES = 4096
SLOTS = 32
SLOT_BYTES = 32 * 1024
SLOT_HEADER_BYTES = 32
#: The largest request (msgpack of a process's writes) a slot takes; the rest
#: of the slot holds the outcome. A bigger request is committed by its process.
MAX_REQUEST_BYTES = 16 * 1024 - SLOT_HEADER_BYTES
MAX_RESPONSE_BYTES = SLOT_BYTES - SLOT_HEADER_BYTES - MAX_REQUEST_BYTES
FILE_BYTES = HEADER_BYTES + SLOTS * SLOT_BYTES

FREE, POSTED, TAKEN, DONE = 0, 1, 2, 3

# The bytes the locks stand on (lock bytes; the data beside them is unaffected).
_LEAD_BYTE = 0
_INIT_BYTE = 1
# Every process with the mailbox open holds a shared lock here: one that finds
# no other holder commits alone, without the lead.
_PRESENT_BYTE = 2
# A leader holds this one alone while it writes slots (from taking the posted
# requests to answering them); a poster waits for it shared, then reads its
# answer without the lead. So the processes of one group all wake at once when
# their leader answers, instead of one after another through the lead.
_ANSWERS_BYTE = 3
#: How long a process that found itself alone trusts it (seconds). A process
#: that opens the mailbox meanwhile finds the lead free and leads itself.
ALONE_FOR = 0.1
_FIRST_SLOT_BYTE = 64

_HEADER = struct.Struct("<16sIII")
# How many processes the last group held (written by its leader): the next
# leader waits for as many (simstore.commit.group). Zero in a new file: no waiting.
_LAST_GROUP = struct.Struct("<I")
_LAST_GROUP_OFFSET = 32
# Every slot's state again, one byte a slot, written after the slot's own
# header: a leader finds the slots in use with one read instead of 32.
_STATES_OFFSET = 64
# state, request length, request CRC, response length, group, response CRC.
_SLOT = struct.Struct("<IIIIQI")
# A header is written state last (the rest first): whoever sees a new state
# sees what goes with it; the CRCs catch what a weaker memory order shows.
_STATE = struct.Struct("<I")
_REST = struct.Struct("<IIIQI")

_OFD = hasattr(fcntl, "F_OFD_SETLKW")


def mailbox_path(store_path: str) -> str:
    """The mailbox beside a store file."""
    return store_path + "-writers"


class Mailbox:
    """This process's open handle on a store's mailbox (one per open engine).

    Only one thread of a process uses it at a time (the group commit's
    leader), so it needs no lock of its own, but for :meth:`close`.
    """

    def __init__(self, descriptor: int, view: mmap.mmap) -> None:
        self._descriptor = descriptor
        self._view = view
        self._owned: int | None = None  # the slot this process holds, if any
        self._alone_until = 0.0  # (time.monotonic()) when to look again
        self._busy = threading.Lock()
        self._closing = False

    @classmethod
    def open(cls, store_path: str) -> Mailbox | None:
        """The mailbox beside ``store_path``, made if missing; ``None`` when
        this system has no open-file-description locks, or the file cannot be
        made or is not a mailbox (another program's file is never changed)."""
        if not _OFD:
            return None
        path = mailbox_path(store_path)
        try:
            mode = os.stat(store_path).st_mode & 0o666
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        except OSError:
            return None
        try:
            try:
                fcntl.fcntl(descriptor, fcntl.F_OFD_SETLKW, ofd_flock(fcntl.F_WRLCK, _INIT_BYTE))
                size = os.fstat(descriptor).st_size
                if size == 0:
                    # Ours: made just now (or by a rival that died before this).
                    os.ftruncate(descriptor, FILE_BYTES)
                    os.pwrite(descriptor, _HEADER.pack(MAGIC, VERSION, SLOTS, SLOT_BYTES), 0)
                elif size != FILE_BYTES:
                    os.close(descriptor)
                    return None
                view = mmap.mmap(descriptor, FILE_BYTES)
            finally:
                with contextlib.suppress(OSError):
                    fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, ofd_flock(fcntl.F_UNLCK, _INIT_BYTE))
        except OSError:
            with contextlib.suppress(OSError):
                os.close(descriptor)
            return None
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(descriptor)  # (lets go of its locks)
            raise
        if _HEADER.unpack_from(view, 0) != (MAGIC, VERSION, SLOTS, SLOT_BYTES):
            view.close()
            os.close(descriptor)
            return None
        try:
            fcntl.fcntl(descriptor, fcntl.F_OFD_SETLKW, ofd_flock(fcntl.F_RDLCK, _PRESENT_BYTE))
            return cls(descriptor, view)
        except BaseException as exc:
            view.close()
            os.close(descriptor)
            if isinstance(exc, OSError):
                return None
            raise

    # ------------------------------------------------------------------ locks

    def _lock(self, byte: int, *, wait: bool, shared: bool = False) -> bool:
        command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
        try:
            fcntl.fcntl(
                self._descriptor, command, ofd_flock(fcntl.F_RDLCK if shared else fcntl.F_WRLCK, byte)
            )
        except (BlockingIOError, PermissionError):
            return False
        return True

    def _unlock(self, byte: int) -> None:
        fcntl.fcntl(self._descriptor, fcntl.F_OFD_SETLK, ofd_flock(fcntl.F_UNLCK, byte))

    def _held_elsewhere(self, byte: int) -> bool:
        """Whether another open file (another process) holds the lock on ``byte``."""
        answer = fcntl.fcntl(self._descriptor, fcntl.F_OFD_GETLK, ofd_flock(fcntl.F_WRLCK, byte))
        return bool(struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK)

    def alone(self) -> bool:
        """Whether no other process has the mailbox open (looked at once
        every :data:`ALONE_FOR` seconds while it is so)."""
        now = time.monotonic()
        if now < self._alone_until:
            return True
        if self._held_elsewhere(_PRESENT_BYTE):
            return False
        self._alone_until = now + ALONE_FOR
        return True

    def try_lead(self) -> bool:
        """Take the lead if nobody holds it."""
        return self._lock(_LEAD_BYTE, wait=False)

    def wait_lead(self) -> None:
        """Take the lead, waiting for the process holding it."""
        self._lock(_LEAD_BYTE, wait=True)

    def release_lead(self) -> None:
        self._unlock(_LEAD_BYTE)

    def let_go_of_locks(self) -> None:
        """After an interrupt in this process's round: let go of the lead
        and the answers lock, whichever it holds (the thread of the round is
        the only one of its process that takes them)."""
        for byte in (_ANSWERS_BYTE, _LEAD_BYTE):
            with contextlib.suppress(OSError):
                self._unlock(byte)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """With the lead held: hold the answers lock alone, for writing slots
        (posters reading their answers hold it shared, briefly)."""
        try:
            self._lock(_ANSWERS_BYTE, wait=True)
            yield
        finally:
            self._unlock(_ANSWERS_BYTE)

    def answered(self) -> bytes | None:
        """Without the lead: wait while a leader writes answers, then this
        process's outcome if its request is done (as :meth:`outcome`)."""
        try:
            self._lock(_ANSWERS_BYTE, wait=True, shared=True)
            return self.outcome()
        finally:
            self._unlock(_ANSWERS_BYTE)

    # ------------------------------------------------------------------ slots

    def _offset(self, slot: int) -> int:
        return HEADER_BYTES + slot * SLOT_BYTES

    def _header(self, slot: int) -> tuple[int, int, int, int, int, int]:
        return _SLOT.unpack_from(self._view, self._offset(slot))

    def _write_header(self, slot: int, state: int, *rest: int) -> None:
        offset = self._offset(slot)
        _REST.pack_into(self._view, offset + _STATE.size, *rest)
        _STATE.pack_into(self._view, offset, state)
        self._view[_STATES_OFFSET + slot] = state

    def _in_use(self) -> list[int]:
        """The slots not ``FREE``, by the table of states."""
        table = self._view[_STATES_OFFSET : _STATES_OFFSET + SLOTS]
        return [slot for slot, state in enumerate(table) if state]

    def posted_count(self) -> int:
        """How many other processes' requests are posted (by the table of
        states; a request still being written may count)."""
        table = self._view[_STATES_OFFSET : _STATES_OFFSET + SLOTS]
        own = -1 if self._owned is None else self._owned
        return sum(1 for slot, state in enumerate(table) if state == POSTED and slot != own)

    def last_group(self) -> int:
        """How many processes the last group held."""
        return int(_LAST_GROUP.unpack_from(self._view, _LAST_GROUP_OFFSET)[0])

    def set_last_group(self, processes: int) -> None:
        """With the lead held: record how many processes this group holds."""
        _LAST_GROUP.pack_into(self._view, _LAST_GROUP_OFFSET, processes)

    def post(self, request: bytes) -> bool:
        """Post ``request`` in a free slot, which this process then holds;
        ``False`` if it is too big or no slot is free."""
        if len(request) > MAX_REQUEST_BYTES:
            return False
        start = os.getpid() % SLOTS  # processes start their search apart
        for step in range(SLOTS):
            slot = (start + step) % SLOTS
            try:
                if not self._lock(_FIRST_SLOT_BYTE + slot, wait=False):
                    continue
                if self._header(slot)[0] != FREE:
                    # Left by a process gone since: a leader frees it.
                    self._unlock(_FIRST_SLOT_BYTE + slot)
                    continue
                offset = self._offset(slot)
                self._view[offset + SLOT_HEADER_BYTES : offset + SLOT_HEADER_BYTES + len(request)] = request
                self._write_header(slot, POSTED, len(request), zlib.crc32(request), 0, 0, 0)
                self._owned = slot
                return True
            except BaseException:
                if self._owned != slot:
                    # (A request left posted without its owner: a leader frees it.)
                    self._unlock(_FIRST_SLOT_BYTE + slot)
                raise
        return False

    def outcome(self) -> bytes | None:
        """With the lead or the answers lock held: this process's outcome if
        its request is done (the slot is then freed and let go), else ``None``.

        Raises:
            CorruptStoreError: the outcome does not match its CRC.
        """
        slot = self._owned
        if slot is None:
            return None
        state, _, _, length, _, crc = self._header(slot)
        if state != DONE:
            return None
        start = self._offset(slot) + SLOT_HEADER_BYTES + MAX_REQUEST_BYTES
        response = bytes(self._view[start : start + length])
        if zlib.crc32(response) != crc:
            raise CorruptStoreError("an outcome in the writers' mailbox does not match its CRC")
        self._free_own()
        return response

    def withdraw(self) -> None:
        """With the lead held: take back this process's request, to run it in
        the group this process leads (or not at all)."""
        if self._owned is not None and self._header(self._owned)[0] == POSTED:
            self._free_own()

    def let_go(self) -> None:
        """Let go of this process's slot without the lead (the call was
        interrupted): its state stays, and a leader frees it."""
        if self._owned is not None:
            slot, self._owned = self._owned, None
            self._unlock(_FIRST_SLOT_BYTE + slot)

    def take_back(self) -> tuple[bool, bytes | None]:
        """Without the lead, after an interrupt: settle this process's
        request. Waits while a leader answers (no leader takes requests
        meanwhile), then takes the request back if it is still posted
        (``(True, None)``: nobody ran it), or reads its outcome if it is done
        (``(False, outcome)``, as :meth:`outcome`). Otherwise a leader that
        died (or was interrupted) took it, and its successor settles it; the
        slot is let go: ``(False, None)``, as when nothing is posted."""
        slot = self._owned
        if slot is None:
            return False, None
        try:
            self._lock(_ANSWERS_BYTE, wait=True, shared=True)
            state = self._header(slot)[0]
            if state == POSTED:
                self._free_own()
                return True, None
            if state == DONE:
                return False, self.outcome()
            return False, None
        finally:
            self._unlock(_ANSWERS_BYTE)
            self.let_go()  # (nothing, once freed)

    def _free_own(self) -> None:
        slot = self._owned
        assert slot is not None
        self._write_header(slot, FREE, 0, 0, 0, 0, 0)
        self._owned = None
        self._unlock(_FIRST_SLOT_BYTE + slot)

    def states(self) -> list[int]:
        """Every slot's state (for ``simstore check``-like diagnostics and tests)."""
        return [self._header(slot)[0] for slot in range(SLOTS)]

    def posted(self) -> Iterator[tuple[int, bytes]]:
        """With the lead held: every other process's posted request, as
        ``(slot, request)``. Slots whose owner is gone are freed on the way."""
        for slot in self._in_use():
            if slot == self._owned:
                continue
            state, length, crc, _, _, _ = self._header(slot)
            if state in (FREE, TAKEN):
                continue  # TAKEN: see taken()
            if not self._held_elsewhere(_FIRST_SLOT_BYTE + slot):
                # Its owner is gone (or, for POSTED, just letting go): nobody
                # waits for this outcome, and nobody may find it later.
                try:
                    if self._lock(_FIRST_SLOT_BYTE + slot, wait=False) and self._header(slot)[0] != FREE:
                        self._write_header(slot, FREE, 0, 0, 0, 0, 0)
                finally:
                    self._unlock(_FIRST_SLOT_BYTE + slot)  # (nothing, if a poster took it just now)
                continue
            if state != POSTED:
                continue  # DONE, for an owner that has not come for it yet
            start = self._offset(slot) + SLOT_HEADER_BYTES
            request = bytes(self._view[start : start + length])
            if not length or zlib.crc32(request) != crc:
                continue  # still being written: the next group takes it
            yield slot, request

    def taken(self) -> list[tuple[int, int]]:
        """With the lead held: the slots a leader took but never said done
        (it died), as ``(slot, group)``; one's own included."""
        found = []
        for slot in self._in_use():
            state, _, _, _, group, _ = self._header(slot)
            if state == TAKEN:
                found.append((slot, group))
        return found

    def respond(self, slot: int, response: bytes, group: int, *, state: int) -> bool:
        """With the lead held: write a slot's outcome and state (``TAKEN``
        with the group it is in, or ``DONE``); ``False`` if it is too big."""
        if len(response) > MAX_RESPONSE_BYTES:
            return False
        _, length, crc, _, _, _ = self._header(slot)
        start = self._offset(slot) + SLOT_HEADER_BYTES + MAX_REQUEST_BYTES
        self._view[start : start + len(response)] = response
        self._write_header(slot, state, length, crc, len(response), group, zlib.crc32(response))
        return True

    def set_state(self, slot: int, state: int) -> None:
        """With the lead held: change a slot's state, keeping its contents."""
        _, *rest = self._header(slot)
        self._write_header(slot, state, *rest)

    # -------------------------------------------------------------- lifecycle

    @contextlib.contextmanager
    def using(self) -> Iterator[bool]:
        """Hold the mailbox open for one round; yields ``False`` once it is closing."""
        with self._busy:
            try:
                yield not self._closing
            finally:
                if self._closing:
                    self._close_now()

    def close(self) -> None:
        """Close the file now, or after the round in progress (which may be
        waiting for the store's lock that the closing caller holds)."""
        self._closing = True
        if self._busy.acquire(blocking=False):
            try:
                self._close_now()
            finally:
                self._busy.release()

    def _close_now(self) -> None:
        if self._descriptor < 0:
            return
        descriptor, self._descriptor = self._descriptor, -1
        self._owned = None
        with contextlib.suppress(BufferError, ValueError):
            self._view.close()
        os.close(descriptor)  # lets go of every lock this process holds on it

    def forget(self) -> None:
        """In a forked child: drop the inherited handle without touching the
        parent's locks (they belong to the open file both share, and an
        unlock here would release the parent's)."""
        if self._descriptor >= 0:
            with contextlib.suppress(BufferError, ValueError):
                self._view.close()
            with contextlib.suppress(OSError):
                os.close(self._descriptor)
            self._descriptor = -1
