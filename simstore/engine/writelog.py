"""The write-ahead log beside a store: ``<store>-log``.

With a log, a ``sync=True`` commit is made durable by one flush of a record in
this file, written before LMDB commits, instead of LMDB's two flushes of the
store file; the store file is flushed at checkpoints only. This module keeps
the file: its two checkpoint slots, its ring of records, and a scan of the
records after a checkpoint. (What goes in a record, when to checkpoint and how
to recover are decided by its callers.)

Layout:

- two *checkpoint slots*, ``SLOT_BYTES`` each, at the start: the newer valid
  one (by sequence number, CRC checked) is the checkpoint. A checkpoint names
  the store's last commit it covers, the two meta pages the store file held
  then, where the log's records after it start, the store file it belongs to
  and the boot it was written in, and the *nonce* the checkpoint wrote into the
  store file's meta pages (with the one the next checkpoint will write), which
  ties the checkpoint to that file's history (see :mod:`simstore.engine.wal`).
  Writing the other slot, then flushing, never leaves the file without a valid
  checkpoint.
- the *ring* after them: records at *positions*, byte counts that only grow (a
  record at position ``p`` lies at ``RING_OFFSET + p % ring``). A record is a
  header (CRC, payload length, its own position, the LMDB transaction id) and
  its payload, padded to 8 bytes. A record that would cross the end of the ring
  starts at the next lap instead. Its position is in its CRC, so a record left
  from an earlier lap never passes for a new one.

The whole file is written with zeros (and flushed) when made, so that a flush
of a record never has to allocate blocks or change the file's length.
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

MAGIC = b"simstore-log\0\0\0\1"
#: Version 2 added the nonces; version 1 checkpoints (no nonces) are still read.
VERSION = 2
_VERSIONS = (1, 2)
SLOT_BYTES = 16 * 1024
RING_OFFSET = 2 * SLOT_BYTES
DEFAULT_RING_BYTES = 4 * 1024 * 1024
ALIGN = 8

# magic, version, CRC (of everything after it), sequence, transaction id,
# first record's position, store file's device and inode, boot id, the salt of
# the records' CRCs, length of the meta pages that follow; version 2 then
# holds the nonce in the store file's meta pages and the next checkpoint's.
_CHECKPOINT_V1 = struct.Struct("<16sII QQQ QQ 16s II")
_NONCES = struct.Struct("<QQ")
_CHECKPOINT = struct.Struct(_CHECKPOINT_V1.format + "QQ")
# CRC (of everything after it, payload included), payload length, position,
# transaction id.
_RECORD = struct.Struct("<IIQQ")
RECORD_HEADER_BYTES = _RECORD.size
#: The largest payload a record takes; a bigger write is committed without one.
MAX_PAYLOAD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint slot holds (see the module docstring)."""

    sequence: int
    txn_id: int
    start: int
    store_identity: tuple[int, int]
    boot_id: bytes
    metas: bytes
    #: Seeds every record's CRC: records another store file's log left in
    #: the ring (a store made anew under the same name) never pass the check.
    salt: int
    #: What this checkpoint wrote into the store file's meta pages, and what
    #: the next one will (a checkpoint whose header write was lost to a power
    #: loss left that one there); 0 in a version 1 checkpoint, which wrote none.
    nonce: int = 0
    next_nonce: int = 0


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """A checkpoint slot's bytes (at most ``SLOT_BYTES``)."""
    device, inode = checkpoint.store_identity
    rest = _CHECKPOINT.pack(
        MAGIC,
        VERSION,
        0,
        checkpoint.sequence,
        checkpoint.txn_id,
        checkpoint.start,
        device,
        inode,
        checkpoint.boot_id,
        checkpoint.salt,
        len(checkpoint.metas),
        checkpoint.nonce,
        checkpoint.next_nonce,
    )
    raw = bytearray(rest + checkpoint.metas)
    if len(raw) > SLOT_BYTES:
        raise ValueError(f"a checkpoint of {len(raw)} bytes does not fit a {SLOT_BYTES}-byte slot")
    struct.pack_into("<I", raw, 20, zlib.crc32(raw[24:]))
    return bytes(raw)


def decode_checkpoint(raw: bytes) -> Checkpoint | None:
    """The checkpoint in a slot's bytes; ``None`` if the slot holds none
    (never written, or torn: the CRC does not match)."""
    if len(raw) < _CHECKPOINT.size:
        return None
    fields = _CHECKPOINT_V1.unpack_from(raw)
    magic, version, crc, sequence, txn_id, start, device, inode, boot_id, salt, metas_length = fields
    nonce = next_nonce = 0
    if version == 2:
        nonce, next_nonce = _NONCES.unpack_from(raw, _CHECKPOINT_V1.size)
    header_bytes = _CHECKPOINT.size if version == 2 else _CHECKPOINT_V1.size
    end = header_bytes + metas_length
    if magic != MAGIC or version not in _VERSIONS or end > len(raw) or zlib.crc32(raw[24:end]) != crc:
        return None
    metas = bytes(raw[header_bytes:end])
    return Checkpoint(sequence, txn_id, start, (device, inode), boot_id, metas, salt, nonce, next_nonce)


def record_bytes(payload_length: int) -> int:
    """The room a record with this payload takes in the ring."""
    return -(-(RECORD_HEADER_BYTES + payload_length) // ALIGN) * ALIGN


def place(position: int, size: int, ring: int) -> int:
    """Where a record of ``size`` bytes goes when the ring's next free byte is
    at ``position``: there, or at the next lap if it would cross the ring's end."""
    offset = position % ring
    return position if offset + size <= ring else position - offset + ring


def encode_record(position: int, txn_id: int, payload: bytes, salt: int) -> bytes:
    rest = _RECORD.pack(0, len(payload), position, txn_id)[4:] + payload
    raw = struct.pack("<I", zlib.crc32(rest, salt)) + rest
    return raw.ljust(record_bytes(len(payload)), b"\0")


def boot_id() -> bytes | None:
    """This boot's identity (16 bytes), which changes when the machine restarts;
    ``None`` where the system does not say (then there is no log)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as file:
            return bytes.fromhex(file.read().strip().decode("ascii").replace("-", ""))
    except (OSError, ValueError):
        return None


class WriteLog:
    """An open log file (the descriptor is this process's own)."""

    def __init__(self, descriptor: int, ring: int) -> None:
        self.descriptor = descriptor
        self.ring = ring

    @classmethod
    def make(cls, path: str, ring: int = DEFAULT_RING_BYTES, mode: int = 0o644) -> WriteLog | None:
        """Make the log at ``path``, written with zeros and flushed, unless a
        file is there already (then ``None``: open that one instead). The file
        appears whole or not at all: it is written under a temporary name and
        linked into place."""
        folder = os.path.dirname(os.path.abspath(path))
        temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.making")
        descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            chunk = bytes(1 << 20)
            remaining = RING_OFFSET + ring
            while remaining:
                remaining -= os.write(descriptor, chunk[: min(remaining, len(chunk))])
            os.fsync(descriptor)
            try:
                os.link(temporary, path)
            except FileExistsError:
                os.close(descriptor)
                return None
            _flush_folder(folder)
            return cls(descriptor, ring)
        except BaseException:
            os.close(descriptor)
            raise
        finally:
            os.unlink(temporary)

    @classmethod
    def open(cls, path: str, *, writable: bool = True) -> WriteLog:
        """Open an existing log (its ring's length is the file's, less the slots).

        Raises:
            OSError: the file cannot be opened (for writing, if ``writable``).
            ValueError: the file is not a regular file, or too short to be a log.
        """
        # Non-blocking: a FIFO by that name would make a read-only open wait
        # for a writer for ever. (It is refused below; a log is a regular file.)
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC | os.O_NONBLOCK
        descriptor = os.open(path, flags)
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            os.close(descriptor)
            raise ValueError(f"{path} is not a regular file, so not a simstore log")
        os.set_blocking(descriptor, True)
        ring = status.st_size - RING_OFFSET
        starts = [os.pread(descriptor, len(MAGIC), slot * SLOT_BYTES) for slot in (0, 1)]
        # A log holds a checkpoint in a slot, or none yet (its maker checkpoints next).
        if ring < 4096 or not (MAGIC in starts or starts == [bytes(len(MAGIC))] * 2):
            os.close(descriptor)
            raise ValueError(f"{path} is not a simstore log")
        return cls(descriptor, ring)

    def close(self) -> None:
        os.close(self.descriptor)

    # ------------------------------------------------------------ checkpoints

    def checkpoint(self) -> Checkpoint | None:
        """The newer valid checkpoint; ``None`` if neither slot holds one."""
        slots = (os.pread(self.descriptor, SLOT_BYTES, slot * SLOT_BYTES) for slot in (0, 1))
        valid = [checkpoint for checkpoint in map(decode_checkpoint, slots) if checkpoint is not None]
        return max(valid, key=lambda checkpoint: checkpoint.sequence, default=None)

    def write_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write ``checkpoint`` into its slot (by sequence number, so the
        other slot keeps the one before) and flush the log."""
        raw = encode_checkpoint(checkpoint)
        _write_all(self.descriptor, raw, (checkpoint.sequence % 2) * SLOT_BYTES)
        os.fdatasync(self.descriptor)

    # ---------------------------------------------------------------- records

    def room(self, start: int, position: int) -> int:
        """Bytes left for records from ``position`` on before they would
        overwrite one at ``start`` or after (the checkpoint's first record)."""
        return self.ring - (position - start)

    def append(self, position: int, txn_id: int, payload: bytes, salt: int) -> int:
        """Write a record at ``position`` (or the next lap, see :func:`place`),
        unflushed; returns the position after it. The caller has checked the
        room left (:meth:`room`) for ``place(...) + record_bytes(...)``."""
        size = record_bytes(len(payload))
        at = place(position, size, self.ring)
        _write_all(self.descriptor, encode_record(at, txn_id, payload, salt), RING_OFFSET + at % self.ring)
        return at + size

    def withdraw(self, position: int) -> None:
        """Unmake the record written at ``position`` (its commit failed), so
        that no scan takes it; flushed."""
        _write_all(self.descriptor, bytes(RECORD_HEADER_BYTES), RING_OFFSET + position % self.ring)
        os.fdatasync(self.descriptor)

    def flush(self) -> None:
        os.fdatasync(self.descriptor)

    def clear(self) -> None:
        """Write zeros over the whole ring (flushed): no record is left."""
        chunk = bytes(1 << 20)
        for offset in range(0, self.ring, len(chunk)):
            _write_all(self.descriptor, chunk[: min(len(chunk), self.ring - offset)], RING_OFFSET + offset)
        os.fdatasync(self.descriptor)

    def records(self, checkpoint: Checkpoint) -> Iterator[tuple[int, bytes, int]]:
        """The records after ``checkpoint``, in order, while each is whole and
        carries the next transaction id: ``(txn_id, payload, end position)``."""
        position = checkpoint.start
        expected = checkpoint.txn_id + 1
        while position - checkpoint.start < self.ring:
            found = self._record_at(position, checkpoint.salt)
            if found is None and position % self.ring:
                position += self.ring - position % self.ring  # it may have gone to the next lap
                found = self._record_at(position, checkpoint.salt)
            if found is None or found[0] != expected:
                return
            txn_id, payload = found
            position += record_bytes(len(payload))
            if position - checkpoint.start > self.ring:
                return
            yield txn_id, payload, position
            expected += 1

    def _record_at(self, position: int, salt: int) -> tuple[int, bytes] | None:
        offset = position % self.ring
        if offset + RECORD_HEADER_BYTES > self.ring:
            return None
        header = os.pread(self.descriptor, RECORD_HEADER_BYTES, RING_OFFSET + offset)
        if len(header) < RECORD_HEADER_BYTES:
            return None
        crc, length, stored_position, txn_id = _RECORD.unpack(header)
        if stored_position != position or offset + RECORD_HEADER_BYTES + length > self.ring:
            return None
        payload = os.pread(self.descriptor, length, RING_OFFSET + offset + RECORD_HEADER_BYTES)
        if len(payload) < length or zlib.crc32(header[4:] + payload, salt) != crc:
            return None
        return txn_id, payload


def _write_all(descriptor: int, raw: bytes, offset: int) -> None:
    view = memoryview(raw)
    while view:
        written = os.pwrite(descriptor, view, offset)
        view = view[written:]
        offset += written


def _flush_folder(folder: str) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
