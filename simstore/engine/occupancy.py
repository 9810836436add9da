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
random queries (measured with the format-1 tables). A store reads its bitmaps
(one copy) a table at a time, one table after each query, so that a reopened
store answers at once.

Storage and validity: each run of a table (see ``simstore.engine.runs``) has its
own pair of bitmaps, written in the same transaction as the run and kept in
the table's sub-database under keys that sort before every bucket (run id
``BITMAP_RUN``). They are stored in ``2**CHUNK_BITS``-bit chunks, each with a
CRC32, so a query reads only the chunks it needs and damage is reported as
``CorruptStoreError``. A compaction writes the output run's bitmaps chunk by
chunk as it goes, OR-ing into chunks an earlier step already wrote.

Nothing here does I/O.
"""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np
import numpy.typing as npt

from simstore.errors import CorruptStoreError
from simstore.index.permute import FINGERPRINT_BITS, U64Array

MIN_BITS = 12
MAX_BITS = 26
#: Where bitmaps stop in a store of so many tables that ``MAX_BITS`` would
#: take its two bitmaps per table past ``BITMAP_BUDGET_BYTES``.
BUDGETED_MAX_BITS = 25
BITMAP_BUDGET_BYTES = 256 << 20
#: Aim for at most one set bit in 2**SPARSITY_BITS.
SPARSITY_BITS = 3

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


def bitmap_bytes(bits: int) -> int:
    """Bytes of a bitmap of ``2**bits`` bits."""
    return max(1, (1 << bits) // 8)


# -- storage: chunks of a run's bitmaps ---------------------------------------------------------

#: A stored bitmap is cut into chunks of ``2**CHUNK_BITS`` bits (64 KiB), so
#: that a compaction, which builds a run a key range at a time, rewrites only
#: the chunks of each step's range rather than the whole bitmap (16 MiB for 2**27
#: bits). A chunk and its 4-byte checksum take 17 LMDB overflow pages: 6% more
#: than its bytes (an 8 KiB chunk took three pages, 50% more).
CHUNK_BITS = 19
#: Bitmap chunks live in the table's own sub-database, before every bucket,
#: under this run id (which no run takes): the buckets of the newest run are
#: then the last keys of the table, and LMDB appends them in full pages (a
#: put before a later key splits pages in half: 372 against 228 bytes per
#: 197-byte record, measured).
BITMAP_RUN = 0
OCCUPIED = b"o"
CROWDED = b"c"
_CHUNK_KEY = struct.Struct(">IIcI")


def chunk_count(bits: int) -> int:
    """How many chunks a bitmap of ``2**bits`` bits is stored in."""
    return 1 << max(0, bits - CHUNK_BITS)


def chunk_key(run_id: int, kind: bytes, chunk: int) -> bytes:
    return _CHUNK_KEY.pack(BITMAP_RUN, run_id, kind, chunk)


def run_chunk_bounds(run_id: int) -> tuple[bytes, bytes]:
    """The first key of a run's bitmap chunks and the first key past them."""
    return _CHUNK_KEY.pack(BITMAP_RUN, run_id, b"\x00", 0), _CHUNK_KEY.pack(
        BITMAP_RUN, run_id + 1, b"\x00", 0
    )


def encode_chunks(
    run_id: int, kind: bytes, bits: int, bitmap: Bitmap, first_chunk: int = 0
) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` records of the chunks of ``bitmap`` (a whole bitmap of
    ``2**bits`` bits, or the part of one starting at chunk ``first_chunk``):
    each a CRC-32 and the chunk's bytes."""
    size = bitmap_bytes(min(bits, CHUNK_BITS))
    raw = bitmap.tobytes()
    records = []
    for offset in range(0, len(raw), size):
        part = raw[offset : offset + size]
        key = chunk_key(run_id, kind, first_chunk + offset // size)
        records.append((key, zlib.crc32(part, zlib.crc32(key)).to_bytes(4, "big") + part))
    return records


def decode_chunk(key: bytes, value: bytes, bits: int) -> bytes:
    """A stored chunk's bytes, checked."""
    if len(value) != 4 + bitmap_bytes(min(bits, CHUNK_BITS)):
        raise CorruptStoreError(f"bitmap chunk {key.hex()} is {len(value)} bytes long")
    part = value[4:]
    if int.from_bytes(value[:4], "big") != zlib.crc32(part, zlib.crc32(key)):
        raise CorruptStoreError(f"bitmap chunk {key.hex()} is damaged (checksum mismatch)")
    return bytes(part)


def chunk_range(bits: int, low: int, high: int) -> tuple[int, int]:
    """The chunks whose keys cover the permuted keys ``[low, high)`` exactly
    (``low`` and ``high`` are chunk boundaries)."""
    coverage = FINGERPRINT_BITS - bits + CHUNK_BITS
    if coverage >= FINGERPRINT_BITS:
        return 0, 1
    return low >> coverage, -(-high >> coverage)


def built_range(bits: int, permuted: U64Array, first_chunk: int, past_chunk: int) -> tuple[Bitmap, Bitmap]:
    """The occupancy and crowded bitmaps of ``permuted`` (keys whose slots lie
    in chunks ``[first_chunk, past_chunk)``), those chunks only."""
    chunk_slots = 1 << min(bits, CHUNK_BITS)
    span = (past_chunk - first_chunk) * chunk_slots
    slots = _sorted_slots(bits, permuted) - np.uint32(first_chunk * chunk_slots)
    repeated = slots[1:][slots[1:] == slots[:-1]]
    return _from_slots_span(span, slots), _from_slots_span(span, repeated)


def _from_slots_span(span: int, slots: npt.NDArray[np.unsignedinteger]) -> Bitmap:
    if span < 8:
        bitmap = np.zeros(1, dtype=np.uint8)
        _set(bitmap, np.sort(slots))
        return bitmap
    flags = np.zeros(span, dtype=bool)
    flags[slots] = True
    return np.packbits(flags, bitorder="little")


def chunk_span_bits(bits: int) -> int:
    """Leading key bits a chunk boundary lies on (0: one chunk holds all)."""
    return max(0, bits - CHUNK_BITS)
