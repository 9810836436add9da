"""Per-table occupancy bitmaps: which leading prefixes a table holds at all.

Most probes of a well-laid-out table find nothing: at 1M documents a table
with a 25-bit prefix holds 3% of its prefixes, yet each probe costs an LMDB
``set_range`` (a B-tree descent, ~1.5-2 µs). A bitmap over the leading
``bits`` bits of the permuted keys answers "certainly empty" for most probes
in a fraction of that, so a query descends only into tables that may hold a
candidate. The bitmap may claim too much (removals leave their bits set) but
never too little, so skipping a probe it rules out never loses a match.

Sizing: ``bits`` grows with the table so that at most about one bitmap bit
in ``2**SPARSITY_BITS`` is set, between ``MIN_BITS`` and ``MAX_BITS`` (4 MiB a
table) and never past the table's own prefix. 4 MiB a table keeps a 10-table
store's bitmaps at 40 MiB, which a reopened store reads (one copy) before its
first answer: about 10 ms from the page cache.

Validity: each stored bitmap carries the merge epoch it was written at.
Every write to the tables (merge, bulk add, re-layout) moves the epoch on and
rewrites the bitmaps in the same transaction, so a bitmap whose epoch is not
the store's current one was left behind by a writer that did not maintain
it (an older simstore), and is ignored rather than trusted.

Nothing here does I/O.
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from simstore.errors import CorruptStoreError
from simstore.permute import FINGERPRINT_BITS, U64Array

MIN_BITS = 12
MAX_BITS = 25
#: Aim for at most one set bit in 2**SPARSITY_BITS.
SPARSITY_BITS = 3

# Stored as the bitmap then a trailer, so that the value read from LMDB is
# used as the bitmap in place: slot ``i`` is bit ``i & 7`` of byte ``i >> 3``.
_TRAILER = struct.Struct(">BQ")  # bits, merge epoch

Bitmap = npt.NDArray[np.uint8]


def bits_for(entries: int, prefix_bits: int) -> int:
    """Bitmap bits for a table of ``entries`` entries with ``prefix_bits``-bit prefixes.

    >>> bits_for(1_000_000, 26), bits_for(10, 26), bits_for(10**9, 40), bits_for(10**6, 16)
    (23, 12, 25, 16)
    """
    wanted = max(MIN_BITS, max(entries, 1).bit_length() + SPARSITY_BITS)
    return min(wanted, MAX_BITS, prefix_bits)


def empty(bits: int) -> Bitmap:
    """An all-clear bitmap of ``2**bits`` bits."""
    return np.zeros(bitmap_bytes(bits), dtype=np.uint8)


def mark(bitmap: Bitmap, bits: int, permuted: U64Array) -> None:
    """Set the bits of the leading ``bits`` bits of every permuted key, in place."""
    if not len(permuted):
        return
    # np.sort, not np.unique: numpy 2.4's unique of a million uint64 takes
    # seconds (measured), a sort ~0.1 s; repeats are harmless here.
    slots = np.sort(permuted >> np.uint64(FINGERPRINT_BITS - bits))
    byte_index = (slots >> np.uint64(3)).astype(np.int64)
    bit_values = np.left_shift(np.uint8(1), (slots & np.uint64(7)).astype(np.uint8))
    # Slots are sorted, so those sharing a byte are adjacent: OR them
    # together first, then each byte is written once (no slow ufunc.at).
    starts = np.flatnonzero(np.r_[True, byte_index[1:] != byte_index[:-1]])
    bitmap[byte_index[starts]] |= np.bitwise_or.reduceat(bit_values, starts)


def built(bits: int, permuted: U64Array) -> Bitmap:
    """A bitmap marking every key of ``permuted``."""
    if (1 << bits) < 8:
        bitmap = empty(bits)
        mark(bitmap, bits, permuted)
        return bitmap
    # One flag per slot, packed: ~10 ms for a million keys, where sorting
    # them (as mark does) takes several times that.
    flags = np.zeros(1 << bits, dtype=bool)
    flags[permuted >> np.uint64(FINGERPRINT_BITS - bits)] = True
    return np.packbits(flags, bitorder="little")


def may_hold(bitmap: bytes, shift: int, permuted_key: int) -> bool:
    """``False`` when no stored key shares the leading bits of ``permuted_key``;
    ``shift`` is ``64 - bits``.

    >>> bitmap = built(12, np.array([5 << 52], dtype=np.uint64)).tobytes()
    >>> may_hold(bitmap, 52, (5 << 52) | 12345), may_hold(bitmap, 52, 6 << 52)
    (True, False)
    """
    slot = permuted_key >> shift
    return bool((bitmap[slot >> 3] >> (slot & 7)) & 1)


def fill_ratio(bitmap: Bitmap) -> float:
    """The share of bits set (what a random probe's chance of a descent is)."""
    return float(np.unpackbits(bitmap).mean()) if bitmap.size else 0.0


def encode(bitmap: Bitmap, bits: int, merge_epoch: int) -> bytes:
    return bitmap.tobytes() + _TRAILER.pack(bits, merge_epoch)


def decode(raw: bytes) -> tuple[int, int, bytes]:
    """``(bits, merge_epoch, raw)`` of a stored bitmap, checked; the bitmap is
    the first ``2**bits / 8`` bytes of ``raw`` (returned as is, not copied:
    :func:`may_hold` reads it in place)."""
    if len(raw) < _TRAILER.size + 1:
        raise CorruptStoreError("an occupancy bitmap record is too short")
    bits, merge_epoch = _TRAILER.unpack_from(raw, len(raw) - _TRAILER.size)
    if not 1 <= bits <= MAX_BITS:
        raise CorruptStoreError(f"an occupancy bitmap claims {bits} bits")
    if len(raw) - _TRAILER.size != bitmap_bytes(bits):
        raise CorruptStoreError(f"an occupancy bitmap of {bits} bits holds {len(raw) - _TRAILER.size} bytes")
    return bits, merge_epoch, raw


def trusted(raw: bytes | None, merge_epoch: int) -> tuple[bytes, int] | None:
    """``(bitmap, shift)`` of a stored record that queries may trust (written
    at ``merge_epoch``), or ``None``: no record, or one another writer left
    behind. Raises :class:`CorruptStoreError` for a damaged record."""
    if raw is None:
        return None
    bits, epoch, bitmap = decode(raw)
    return (bitmap, FINGERPRINT_BITS - bits) if epoch == merge_epoch else None


def bitmap_bytes(bits: int) -> int:
    """Bytes of a bitmap of ``2**bits`` bits."""
    return max(1, (1 << bits) // 8)


def as_array(raw: bytes, bits: int) -> Bitmap:
    """A writable copy of the bitmap in a stored record."""
    return np.frombuffer(raw, dtype=np.uint8, count=bitmap_bytes(bits)).copy()


def record_key(generation: int, table_index: int) -> bytes:
    """The ``meta`` sub-database key of a table's bitmap."""
    return f"occupancy:{generation}:{table_index:03d}".encode()
