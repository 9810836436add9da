"""The writers' mailbox: a side file where processes hand their single writes
to whichever process commits next.

LMDB lets one process write at a time, and with ``sync=True`` each commit holds
that lock through a flush of the file, so processes that each add one document
at a time pay a flush apiece. The mailbox ``<store>-writers`` lets them share
one: a process with writes to commit posts them in a *slot* and waits for the
*lead*; whoever holds the lead takes every posted write, runs them in one
transaction with its own, commits, flushes, writes each slot's outcome and lets
the lead go. A waiter that then gets the lead finds its outcome there, or leads
the next commit itself. (:mod:`simstore.commit` does the committing; this module
only keeps the file.)

Every lock is a Linux open-file-description lock (``fcntl`` ``F_OFD_*``) on one
byte of the file: held by this process's open file, released by the kernel
when the process dies, so a killed leader or poster never blocks the others.
Where those locks are missing (not Linux) there is no mailbox, and each process
commits its own writes.

A slot's words change only under one of two holds: its owner's (the slot
lock), to post a request into a free slot; or the lead, for everything else.
A request carries its length and CRC, so a leader never takes one half
written, whatever order another core sees the stores in.

Slot states:

- ``FREE``: nobody's.
- ``POSTED``: a request waiting for a leader.
- ``TAKEN``: a leader put the request in its group and wrote its outcome
  beside it, before committing. If that leader dies holding the lead, the
  next leader asks the store whether that group committed (the group's number
  is written in the same transaction; no other group can commit in between)
  and says ``COMMITTED`` or posts the request again.
- ``COMMITTED``: the group committed; the leader let the lead go and flushes,
  holding the group's *token* (a lock byte of its own), so that the next group
  commits meanwhile. The request's process waits for that token, not for the
  lead. A committed slot whose token nobody holds lost its leader: the next
  leader flushes and says ``DONE``.
- ``DONE``: the outcome is final (and, for a write, on the disk). Written by
  the token's holder, then the token is let go.

"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator

MAGIC = b"simstore-writers"
VERSION = 1
HEADER_BYTES = 4096
SLOTS = 32
SLOT_BYTES = 32 * 1024
SLOT_HEADER_BYTES = 32
#: The largest request (msgpack of a process's writes) a slot takes; the rest
#: of the slot holds the outcome. A bigger request is committed by its process.
MAX_REQUEST_BYTES = 16 * 1024 - SLOT_HEADER_BYTES
MAX_RESPONSE_BYTES = SLOT_BYTES - SLOT_HEADER_BYTES - MAX_REQUEST_BYTES
FILE_BYTES = HEADER_BYTES + SLOTS * SLOT_BYTES

FREE, POSTED, TAKEN, COMMITTED, DONE = 0, 1, 2, 3, 4

# The bytes the locks stand on (lock bytes; the data beside them is unaffected).
_LEAD_BYTE = 0
_INIT_BYTE = 1
_FIRST_SLOT_BYTE = 64
_FIRST_TOKEN_BYTE = 256
TOKENS = 64

_HEADER = struct.Struct("<16sIII")
# state, request length, request CRC, response length, group, token.
_SLOT = struct.Struct("<IIIIQI")

_OFD = hasattr(fcntl, "F_OFD_SETLKW")


def mailbox_path(store_path: str) -> str:
    """The mailbox beside a store file."""
    return store_path + "-writers"


def _flock(kind: int, start: int) -> bytes:
    # struct flock on Linux (x86-64 and arm64): type, whence, start, len, pid
    # (0 for open-file-description locks), padded to 32 bytes.
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, start, 1, 0)


class Mailbox:
    """This process's open handle on a store's mailbox (one per open engine).

    Only one thread of a process uses it at a time (the group commit's
    leader), so it needs no lock of its own, but for :meth:`close`.
    """

    def __init__(self, descriptor: int, view: mmap.mmap) -> None:
        self._descriptor = descriptor
        self._view = view
        self._owned: int | None = None  # the slot this process holds, if any
        self._tokens: set[int] = set()  # the tokens this process's groups hold
        self._guard = threading.Lock()  # for _tokens, _rounds and _closing
        self._rounds = 0  # rounds (and tokens) in progress: the file stays open
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
            fcntl.fcntl(descriptor, fcntl.F_OFD_SETLKW, _flock(fcntl.F_WRLCK, _INIT_BYTE))
            try:
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
                    fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, _INIT_BYTE))
        except OSError:
            with contextlib.suppress(OSError):
                os.close(descriptor)
            return None
        if _HEADER.unpack_from(view, 0) != (MAGIC, VERSION, SLOTS, SLOT_BYTES):
            view.close()
            os.close(descriptor)
            return None
        return cls(descriptor, view)

    # ------------------------------------------------------------------ locks

    def _lock(self, byte: int, *, wait: bool, kind: int = fcntl.F_WRLCK) -> bool:
        command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
        try:
            fcntl.fcntl(self._descriptor, command, _flock(kind, byte))
        except (BlockingIOError, PermissionError):
            return False
        return True

    def _unlock(self, byte: int) -> None:
        fcntl.fcntl(self._descriptor, fcntl.F_OFD_SETLK, _flock(fcntl.F_UNLCK, byte))

    def _held_elsewhere(self, byte: int) -> bool:
        """Whether another open file (another process) holds the lock on ``byte``."""
        answer = fcntl.fcntl(self._descriptor, fcntl.F_OFD_GETLK, _flock(fcntl.F_WRLCK, byte))
        return bool(struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK)

    def try_lead(self) -> bool:
        """Take the lead if nobody holds it."""
        return self._lock(_LEAD_BYTE, wait=False)

    def wait_lead(self) -> None:
        """Take the lead, waiting for the process holding it."""
        self._lock(_LEAD_BYTE, wait=True)

    def release_lead(self) -> None:
        self._unlock(_LEAD_BYTE)

    def take_token(self) -> int:
        """A token for a group this process leads, held until :meth:`release_token`."""
        start = os.getpid() % TOKENS
        while True:
            for step in range(TOKENS):
                token = (start + step) % TOKENS
                with self._guard:
                    if token in self._tokens:
                        continue
                if self._lock(_FIRST_TOKEN_BYTE + token, wait=False):
                    with self._guard:
                        self._tokens.add(token)
                        self._rounds += 1
                    return token
            # Every token is held by groups still flushing: wait for one.
            self._lock(_FIRST_TOKEN_BYTE + start, wait=True, kind=fcntl.F_RDLCK)
            self._unlock(_FIRST_TOKEN_BYTE + start)

    def release_token(self, token: int) -> None:
        self._unlock(_FIRST_TOKEN_BYTE + token)
        with self._guard:
            self._tokens.discard(token)
        self._end_round()

    def wait_token(self, token: int) -> None:
        """Wait until the group holding ``token`` lets it go (without the lead)."""
        self._lock(_FIRST_TOKEN_BYTE + token, wait=True, kind=fcntl.F_RDLCK)
        self._unlock(_FIRST_TOKEN_BYTE + token)

    # ------------------------------------------------------------------ slots

    def _offset(self, slot: int) -> int:
        return HEADER_BYTES + slot * SLOT_BYTES

    def _header(self, slot: int) -> tuple[int, int, int, int, int, int]:
        return _SLOT.unpack_from(self._view, self._offset(slot))

    def post(self, request: bytes) -> bool:
        """Post ``request`` in a free slot, which this process then holds;
        ``False`` if it is too big or no slot is free."""
        if len(request) > MAX_REQUEST_BYTES:
            return False
        start = os.getpid() % SLOTS  # processes start their search apart
        for step in range(SLOTS):
            slot = (start + step) % SLOTS
            if not self._lock(_FIRST_SLOT_BYTE + slot, wait=False):
                continue
            if self._header(slot)[0] != FREE:
                # Left by a process gone since: a leader frees it.
                self._unlock(_FIRST_SLOT_BYTE + slot)
                continue
            offset = self._offset(slot)
            self._view[offset + SLOT_HEADER_BYTES : offset + SLOT_HEADER_BYTES + len(request)] = request
            _SLOT.pack_into(self._view, offset, POSTED, len(request), zlib.crc32(request), 0, 0, 0)
            self._owned = slot
            return True
        return False

    def own_state(self) -> tuple[int, int]:
        """The state of this process's slot, and the token of the group
        holding it (``FREE`` if it holds none)."""
        if self._owned is None:
            return FREE, 0
        state, _, _, _, _, token = self._header(self._owned)
        return state, token

    def outcome(self) -> bytes | None:
        """This process's outcome if its request is done (the slot is then
        freed and let go), else ``None``. Needs no lead: only the token's
        holder writes a slot it took, and it is done with it."""
        slot = self._owned
        if slot is None:
            return None
        state, _, _, length, _, _ = self._header(slot)
        if state != DONE:
            return None
        start = self._offset(slot) + SLOT_HEADER_BYTES + MAX_REQUEST_BYTES
        response = bytes(self._view[start : start + length])
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

    def _free_own(self) -> None:
        slot = self._owned
        assert slot is not None
        _SLOT.pack_into(self._view, self._offset(slot), FREE, 0, 0, 0, 0, 0)
        self._owned = None
        self._unlock(_FIRST_SLOT_BYTE + slot)

    def states(self) -> list[int]:
        """Every slot's state (for ``simstore check``-like diagnostics and tests)."""
        return [self._header(slot)[0] for slot in range(SLOTS)]

    def posted(self) -> Iterator[tuple[int, bytes]]:
        """With the lead held: every other process's posted request, as
        ``(slot, request)``. Slots whose owner is gone are freed on the way."""
        for slot in range(SLOTS):
            if slot == self._owned:
                continue
            state, length, crc, _, _, _ = self._header(slot)
            if state in (FREE, TAKEN, COMMITTED):
                continue  # see orphans()
            if not self._held_elsewhere(_FIRST_SLOT_BYTE + slot):
                # Its owner is gone (or, for POSTED, just letting go): nobody
                # waits for this outcome, and nobody may find it later.
                if not self._lock(_FIRST_SLOT_BYTE + slot, wait=False):
                    continue  # a poster took it just now
                try:
                    if self._header(slot)[0] != FREE:
                        _SLOT.pack_into(self._view, self._offset(slot), FREE, 0, 0, 0, 0, 0)
                finally:
                    self._unlock(_FIRST_SLOT_BYTE + slot)
                continue
            if state != POSTED:
                continue  # DONE, for an owner that has not come for it yet
            start = self._offset(slot) + SLOT_HEADER_BYTES
            request = bytes(self._view[start : start + length])
            if zlib.crc32(request) != crc:
                continue  # still being written: the next group takes it
            yield slot, request

    def settle_orphans(self, latest_group: Callable[[], int], flush: Callable[[], None]) -> None:
        """With the lead held: settle the slots whose group lost its leader.

        One whose leader died holding the lead (``TAKEN``) committed if its
        group is ``latest_group()``, the latest the store holds (no group can
        commit after it before this); one whose leader died flushing
        (``COMMITTED``, its token free) did commit. Those are flushed and said
        ``DONE``; the others are posted again. A ``COMMITTED`` slot is judged
        holding its token, so that its leader cannot answer it meanwhile (and
        its owner then reuse it).
        """
        held: list[int] = []
        orphans: list[tuple[int, bool]] = []  # (slot, committed for sure)
        try:
            taken = []
            for slot in range(SLOTS):
                state, _, _, _, group, token = self._header(slot)
                if state == TAKEN:
                    taken.append((slot, group))
                elif state == COMMITTED:
                    with self._guard:
                        if token in self._tokens:
                            continue  # this process's own group, flushing
                    if token not in held:
                        if not self._lock(_FIRST_TOKEN_BYTE + token, wait=False):
                            continue  # its leader is at work
                        held.append(token)
                    if self._header(slot)[0] == COMMITTED and self._header(slot)[5] == token:
                        orphans.append((slot, True))
            if taken:
                latest = latest_group()
                orphans.extend((slot, group == latest) for slot, group in taken)
            if any(done for _, done in orphans):
                flush()
            for slot, done in orphans:
                self.set_state(slot, DONE if done else POSTED)
        finally:
            for token in held:
                self._unlock(_FIRST_TOKEN_BYTE + token)

    def respond(self, slot: int, response: bytes, group: int, token: int, *, state: int) -> bool:
        """Write a slot's outcome and state (``TAKEN`` with the lead held,
        ``DONE`` with the token held); ``False`` if it is too big."""
        if len(response) > MAX_RESPONSE_BYTES:
            return False
        _, length, crc, _, _, _ = self._header(slot)
        start = self._offset(slot) + SLOT_HEADER_BYTES + MAX_REQUEST_BYTES
        self._view[start : start + len(response)] = response
        _SLOT.pack_into(self._view, self._offset(slot), state, length, crc, len(response), group, token)
        return True

    def set_state(self, slot: int, state: int) -> None:
        """Change a slot's state, keeping its contents."""
        _, length, crc, response_length, group, token = self._header(slot)
        _SLOT.pack_into(self._view, self._offset(slot), state, length, crc, response_length, group, token)

    # -------------------------------------------------------------- lifecycle

    def begin_round(self) -> bool:
        """Keep the file open for one round of the group commit; ``False``
        (and no round begun) once it is closing."""
        with self._guard:
            if self._closing:
                return False
            self._rounds += 1
            return True

    def _end_round(self) -> None:
        with self._guard:
            self._rounds -= 1
            close = self._closing and not self._rounds
        if close:
            self._close_now()

    def end_round(self) -> None:
        self._end_round()

    def close(self) -> None:
        """Close the file now, or once the rounds in progress end (one may be
        waiting for the store's lock that the closing caller holds)."""
        with self._guard:
            self._closing = True
            close = not self._rounds
        if close:
            self._close_now()

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
