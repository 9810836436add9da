"""Per-table occupancy bitmaps: which leading prefixes a table holds at all.

Most probes of a well-laid-out table find nothing: at 1M documents a table
with a 25-bit prefix holds 3% of its prefixes, yet each probe costs an LMDB
``set_range`` (a B-tree descent, ~1.5-2 µs). A bitmap over the leading
``bits`` bits of the permuted keys answers "certainly empty" for most probes
in a fraction of that, so a query descends only into tables that may hold a
candidate. The bitmap may claim too much (removals leave their bits set) but
never too little, so skipping a probe it rules out never loses a match.

A second bitmap of the same shape marks the *crowded* slots: those that more
than one entry has ever been marked in. A slot that is occupied but not
crowded holds exactly one entry, so once a query has examined that entry in
an earlier table (a near-duplicate sits in most of the tables its query
probes) the probe can be skipped: measured at 1M documents, near-duplicate
queries probed 4.9 tables each without it, 2.1 with it. Crowded bits are never cleared either, so
"not crowded" is only ever claimed of a slot that truly holds one entry.

Sizing: ``bits`` grows with the table so that at most about one bitmap bit
in ``2**SPARSITY_BITS`` is set, from ``MIN_BITS`` up to ``MAX_BITS`` (8 MiB a
bitmap) and never past the table's own prefix. A store of so many tables that
its bitmaps at ``MAX_BITS`` would pass ``BITMAP_BUDGET_BYTES`` stops at
``BUDGETED_MAX_BITS`` (4 MiB) instead. The default 10-table layout's bitmaps
come to 128 MiB at 10M documents and beyond: 26 bits for its six tables with
26-bit prefixes, 25 for the rest. At 25 bits they were a quarter full at 10M,
and 26 bits cut a 10M store's p50 by about 3 µs for near-duplicate and for
random queries (``benchmarks/ab_bitmap_bits.py``). A store reads its bitmaps
(one copy) a table at a time, one table after each query, so that a reopened
store answers at once.

Validity: each stored bitmap carries the merge epoch it was written at.
Every write to the tables (merge, bulk add, re-layout) moves the epoch on and
rewrites the bitmaps in the same transaction, so a bitmap whose epoch is not
the store's current one was left behind by a writer that did not maintain
it (an older simstore), and is ignored rather than trusted.

Nothing here does I/O.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import numpy.typing as npt

from simstore.errors import CorruptStoreError
from simstore.permute import FINGERPRINT_BITS, U64Array

MIN_BITS = 12
MAX_BITS = 26
#: Where bitmaps stop in a store of so many tables that ``MAX_BITS`` would
#: take its two bitmaps per table past ``BITMAP_BUDGET_BYTES``.
BUDGETED_MAX_BITS = 25
BITMAP_BUDGET_BYTES = 256 << 20
#: Aim for at most one set bit in 2**SPARSITY_BITS.
SPARSITY_BITS = 3

# Stored as the bitmap then a trailer, so that the value read from LMDB is
# used as the bitmap in place: slot ``i`` is bit ``i & 7`` of byte ``i >> 3``.
_TRAILER = struct.Struct(">BQ")  # bits, merge epoch

Bitmap = npt.NDArray[np.uint8]


def max_bits(tables: int) -> int:
    """The most bits a bitmap of a store of ``tables`` tables grows to.

    >>> max_bits(10), max_bits(16), max_bits(17), max_bits(210)
    (26, 26, 25, 25)
    """
    if tables * 2 * bitmap_bytes(MAX_BITS) <= BITMAP_BUDGET_BYTES:
        return MAX_BITS
    return BUDGETED_MAX_BITS


def bits_for(entries: int, prefix_bits: int, tables: int) -> int:
    """Bitmap bits for a table of ``entries`` entries with ``prefix_bits``-bit
    prefixes, in a store of ``tables`` tables.

    >>> bits_for(1_000_000, 26, 10), bits_for(10, 26, 10), bits_for(10**9, 40, 10)
    (23, 12, 26)
    >>> bits_for(10**7, 25, 10), bits_for(10**7, 26, 210), bits_for(10**6, 16, 10)
    (25, 25, 16)
    """
    wanted = max(MIN_BITS, max(entries, 1).bit_length() + SPARSITY_BITS)
    return min(wanted, max_bits(tables), prefix_bits)


def expected_descents(entries: float, prefix_bits: int, tables: int) -> float:
    """The chance that a random query's slot is occupied in the bitmap of a
    table of ``entries`` random entries (one of ``tables`` tables), i.e. that
    the query descends into it.

    >>> round(expected_descents(1e6, 26, 10), 3), expected_descents(1e6, 12, 10)
    (0.112, 1.0)
    """
    bits = bits_for(int(entries), prefix_bits, tables)
    return -math.expm1(-entries / 2.0**bits)


def empty(bits: int) -> Bitmap:
    """An all-clear bitmap of ``2**bits`` bits."""
    return np.zeros(bitmap_bytes(bits), dtype=np.uint8)


def _set(bitmap: Bitmap, sorted_slots: npt.NDArray[np.unsignedinteger]) -> None:
    """Set the bits of ``sorted_slots`` (ascending, repeats allowed) in place."""
    if not len(sorted_slots):
        return
    byte_index = (sorted_slots >> 3).astype(np.int64)
    bit_values = np.left_shift(np.uint8(1), (sorted_slots & 7).astype(np.uint8))
    # Slots are sorted, so those sharing a byte are adjacent: OR them
    # together first, then each byte is written once (no slow ufunc.at).
    starts = np.flatnonzero(np.r_[True, byte_index[1:] != byte_index[:-1]])
    bitmap[byte_index[starts]] |= np.bitwise_or.reduceat(bit_values, starts)


def built(bits: int, permuted: U64Array) -> Bitmap:
    """A bitmap marking every key of ``permuted``."""
    return _from_slots(bits, permuted >> np.uint64(FINGERPRINT_BITS - bits))


def _sorted_slots(bits: int, permuted: U64Array) -> npt.NDArray[np.uint32]:
    """The slots of ``permuted`` in a bitmap of ``bits`` bits, sorted, repeats
    kept (adjacent). np.sort, not np.unique: numpy 2.4's unique of a million
    uint64 takes seconds (measured); a sort of 10M uint32 takes ~60 ms here."""
    # Shifted straight into uint32 and sorted in place: no uint64 temporary.
    slots = np.empty(permuted.shape, dtype=np.uint32)
    np.right_shift(permuted, np.uint64(FINGERPRINT_BITS - bits), out=slots, casting="unsafe")
    slots.sort()
    return slots


def built_with_crowded(bits: int, permuted: U64Array) -> tuple[Bitmap, Bitmap]:
    """The occupancy bitmap of ``permuted`` and its crowded bitmap: the slots
    that more than one key falls in."""
    slots = _sorted_slots(bits, permuted)
    repeated = slots[1:][slots[1:] == slots[:-1]]
    return _from_slots(bits, slots), _from_slots(bits, repeated)


def mark_with_crowded(bitmap: Bitmap, crowded: Bitmap, bits: int, permuted: U64Array) -> None:
    """Mark the keys of ``permuted`` in ``bitmap``, and mark as crowded every slot
    they fall in that was occupied already or that several of them share."""
    if not len(permuted):
        return
    slots = _sorted_slots(bits, permuted)
    held = are_set(bitmap, slots)
    repeated = np.zeros(len(slots), dtype=bool)
    repeated[1:] = slots[1:] == slots[:-1]
    _set(crowded, slots[held | repeated])
    _set(bitmap, slots)


def _from_slots(bits: int, slots: npt.NDArray[np.unsignedinteger]) -> Bitmap:
    """A bitmap of ``2**bits`` bits with ``slots`` set."""
    if (1 << bits) < 8:
        bitmap = empty(bits)
        _set(bitmap, np.sort(slots))
        return bitmap
    # One flag per slot, packed: ~10 ms for a million slots, where sorting
    # them (as _set needs) takes several times that.
    flags = np.zeros(1 << bits, dtype=bool)
    flags[slots] = True
    return np.packbits(flags, bitorder="little")


def is_set(bitmap: bytes, slot: int) -> bool:
    """Whether ``slot``'s bit is set."""
    return bool((bitmap[slot >> 3] >> (slot & 7)) & 1)


def are_set(bitmap: Bitmap | bytes, slots: npt.NDArray[np.unsignedinteger]) -> npt.NDArray[np.bool_]:
    """Whether each slot's bit is set (``bitmap`` may be a stored record,
    read in place)."""
    held = np.frombuffer(bitmap, dtype=np.uint8)[(slots >> 3).astype(np.intp)]
    return ((held >> (slots & 7).astype(np.uint8)) & 1).astype(bool)


def may_hold(bitmap: bytes, shift: int, permuted_key: int) -> bool:
    """``False`` when no stored key shares the leading bits of ``permuted_key``;
    ``shift`` is ``64 - bits``.

    >>> bitmap = built(12, np.array([5 << 52], dtype=np.uint64)).tobytes()
    >>> may_hold(bitmap, 52, (5 << 52) | 12345), may_hold(bitmap, 52, 6 << 52)
    (True, False)
    """
    return is_set(bitmap, permuted_key >> shift)


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


#: A table's stored occupancy and crowded bitmap records, as read (or ``None``).
StoredPair = tuple[bytes | None, bytes | None]


def trusted_pair(stored: StoredPair, merge_epoch: int) -> tuple[bytes, bytes | None, int] | None:
    """``(bitmap, crowded, shift)`` of a table's stored records that queries
    may trust, or ``None`` when the occupancy bitmap may not be trusted;
    ``crowded`` is ``None`` when only the crowded bitmap may not (a store
    last written by a simstore that kept none). Raises
    :class:`CorruptStoreError` for a damaged record."""
    raw, raw_crowded = stored
    occupied = trusted(raw, merge_epoch)
    if occupied is None:
        return None
    bitmap, shift = occupied
    crowded = trusted(raw_crowded, merge_epoch)
    return bitmap, (crowded[0] if crowded is not None and crowded[1] == shift else None), shift


def updatable(stored: StoredPair, merge_epoch: int, bits: int) -> tuple[int, Bitmap, Bitmap] | None:
    """``(bits, bitmap, crowded)``, writable copies of a table's stored
    records, when both are current (written at ``merge_epoch``), of equal
    size and at least ``bits`` bits; else ``None``: they must be rebuilt.
    Raises :class:`CorruptStoreError` for a damaged record."""
    raw, raw_crowded = stored
    if raw is None or raw_crowded is None:
        return None
    stored_bits, epoch, _ = decode(raw)
    crowded_bits, crowded_epoch, _ = decode(raw_crowded)
    if not epoch == crowded_epoch == merge_epoch or not stored_bits == crowded_bits >= bits:
        return None
    return stored_bits, as_array(raw, stored_bits), as_array(raw_crowded, stored_bits)


def bitmap_bytes(bits: int) -> int:
    """Bytes of a bitmap of ``2**bits`` bits."""
    return max(1, (1 << bits) // 8)


def as_array(raw: bytes, bits: int) -> Bitmap:
    """A writable copy of the bitmap in a stored record."""
    return np.frombuffer(raw, dtype=np.uint8, count=bitmap_bytes(bits)).copy()


def record_key(generation: int, table_index: int) -> bytes:
    """The ``meta`` sub-database key of a table's bitmap."""
    return f"occupancy:{generation}:{table_index:03d}".encode()


def crowded_record_key(generation: int, table_index: int) -> bytes:
    """The ``meta`` sub-database key of a table's crowded bitmap (stored like
    the occupancy bitmap, and trusted only beside one of the same epoch).
    A separate record, so that a simstore that keeps no crowded bitmaps still
    reads the occupancy bitmap of a store written by one that does."""
    return f"crowded:{generation}:{table_index:03d}".encode()


def record_keys(generation: int, table_index: int) -> tuple[bytes, bytes]:
    """The keys of a table's occupancy and crowded bitmaps."""
    return record_key(generation, table_index), crowded_record_key(generation, table_index)
