"""The table format: a permutation table's entries packed in buckets.

A permutation table (one LMDB sub-database) holds one or more *runs*. A run is
an immutable sorted set of entries, one per document, written whole by one
bulk write or merge (or built piece by piece by a compaction). It is cut into
*buckets*: every entry whose permuted fingerprint has the same leading
``bucket_bits`` bits is in one bucket, stored as one LMDB value under the key
``run id (4 bytes) + bucket index (4 bytes)``, both big-endian, so a run's
buckets lie in the table's key order.

A bucket value is a kind byte, a CRC-32 of the key and payload, then the
entries as two packed columns sorted by permuted key: every entry's *tag*
(``tag_bytes`` big-endian bytes: the permuted key's bits right after the
bucket bits) and then every entry's document id (``id_bytes`` big-endian
bytes). An entry so records the first ``known_bits`` bits of the permuted
fingerprint: the table's prefix and a few *filter* bits after it. A query's
prefix range lies inside one bucket (``bucket_bits`` never passes the
prefix), where a binary search over the tags finds it; the filter bits throw
out most candidates that share the prefix but not the rest; the candidates
left are checked against their documents' full fingerprints (the store's
records). At about 32 entries a bucket, an entry costs ``tag_bytes +
id_bytes`` (5 or 6 bytes for the default layout) plus about half a byte of
LMDB node, against 34 for an LMDB node per entry.

Nothing here does I/O.
"""

from __future__ import annotations

import bisect
import operator
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.errors import CorruptStoreError
from simstore.index.permute import FINGERPRINT_BITS, MAX_FINGERPRINT, U64Array

#: Entries a bucket holds on average, at least: fewer buckets cost fewer LMDB
#: nodes (about 18 bytes each), more entries cost a longer search per probe.
BUCKET_TARGET = 32
#: Bits after the prefix every entry records, at least, as a filter.
MIN_FILTER_BITS = 4
#: Tag widths in bytes: those numpy reads as one big-endian integer (``_BIG_ENDIAN``).
TAG_WIDTHS = (1, 2, 4, 8)

BUCKET_KIND = 1
KEY = struct.Struct(">II")
HEADER = struct.Struct(">BI")
MAX_RUN_ID = (1 << 32) - 1

IdArray = npt.NDArray[np.unsignedinteger[Any]]


@dataclass(frozen=True)
class Geometry:
    """How one run packs its entries in one table.

    Attributes:
        prefix_bits: the table's prefix: a query's candidates share these bits.
        bucket_bits: leading bits that pick the bucket (at most ``prefix_bits``).
        tag_bytes: bytes of each entry's tag, the bits after the bucket bits.
        known_bits: leading bits of the permuted key an entry records (bucket
            and tag bits, less any tag bits past what the run was built from).
        id_bytes: bytes of each entry's document id.
    """

    prefix_bits: int
    bucket_bits: int
    tag_bytes: int
    known_bits: int
    id_bytes: int

    def __post_init__(self) -> None:
        if not 0 <= self.bucket_bits <= min(self.prefix_bits, 32):
            raise CorruptStoreError(
                f"a run has {self.bucket_bits} bucket bits for a {self.prefix_bits}-bit prefix"
            )
        if self.tag_bytes not in TAG_WIDTHS or not 1 <= self.id_bytes <= 8:
            raise CorruptStoreError(f"a run has {self.tag_bytes}-byte tags and {self.id_bytes}-byte ids")
        if (
            not self.prefix_bits
            <= self.known_bits
            <= min(FINGERPRINT_BITS, self.bucket_bits + 8 * self.tag_bytes)
        ):
            raise CorruptStoreError(
                f"a run records {self.known_bits} bits of a {self.prefix_bits}-bit prefix"
            )

    @property
    def entry_bytes(self) -> int:
        return self.tag_bytes + self.id_bytes

    @property
    def filter_bits(self) -> int:
        return self.known_bits - self.prefix_bits

    def as_list(self) -> list[int]:
        return [self.prefix_bits, self.bucket_bits, self.tag_bytes, self.known_bits, self.id_bytes]

    @classmethod
    def from_list(cls, values: object) -> Geometry:
        if (
            not isinstance(values, list | tuple)
            or len(values) != 5
            or not all(isinstance(v, int) for v in values)
        ):
            raise CorruptStoreError(f"a run's geometry is damaged: {values!r}")
        return cls(*values)


def filter_bits_for(k: int) -> int:
    """The filter bits runs of a store answering up to ``k`` record beyond
    each table's prefix, at least.

    An entry that shares a query's prefix but not its neighbourhood passes a
    filter of ``f`` bits with the probability that ``f`` fair coin flips show
    at most ``k`` heads, and costs a record read when it does. Up to k = 3,
    ``MIN_FILTER_BITS``: at k = 3 and 10M documents, 12 bits (4-byte tags)
    took the query p50 from 25.5 to 23.5 µs for 17% more bytes per
    document (A/B, one process). Beyond, ``2k + 8`` bits, which let under
    5-8% of such entries through (at k = 5, 10 bits let 62% through).

    >>> [filter_bits_for(k) for k in (0, 3, 4, 5, 8)]
    [4, 4, 16, 18, 24]
    """
    return MIN_FILTER_BITS if k <= 3 else 2 * k + 8


def choose_geometry(
    entries: int,
    prefix_bits: int,
    max_id: int,
    known_limit: int = FINGERPRINT_BITS,
    filter_bits: int = MIN_FILTER_BITS,
) -> Geometry:
    """The geometry of a run of ``entries`` entries in a table with
    ``prefix_bits`` of prefix, whose largest document id is ``max_id`` and
    whose entries are known to ``known_limit`` bits (64 when built from full
    fingerprints; what its inputs recorded when a compaction rebuilds it).

    >>> choose_geometry(10_000_000, 25, 9_999_999)
    Geometry(prefix_bits=25, bucket_bits=18, tag_bytes=2, known_bits=34, id_bytes=3)
    >>> choose_geometry(10, 25, 9).bucket_bits, choose_geometry(10, 25, 9).tag_bytes
    (0, 4)
    """
    bucket_bits = 0
    if entries >= 2 * BUCKET_TARGET:
        bucket_bits = min(prefix_bits, 32, (entries // BUCKET_TARGET).bit_length() - 1)
    wanted = prefix_bits - bucket_bits + filter_bits
    tag_bytes = next((width for width in TAG_WIDTHS if 8 * width >= wanted), TAG_WIDTHS[-1])
    known = min(FINGERPRINT_BITS, bucket_bits + 8 * tag_bytes, max(known_limit, prefix_bits))
    id_bytes = max(1, (max(max_id, 0).bit_length() + 7) // 8)
    return Geometry(prefix_bits, bucket_bits, tag_bytes, known, id_bytes)


def buckets_of(permuted: U64Array, geometry: Geometry) -> U64Array:
    """:func:`bucket_of` of each permuted key of an array."""
    if geometry.bucket_bits:
        return permuted >> np.uint64(FINGERPRINT_BITS - geometry.bucket_bits)
    return np.zeros(len(permuted), dtype=np.uint64)


def bucket_key(run_id: int, bucket: int) -> bytes:
    return KEY.pack(run_id, bucket)


def run_bounds(run_id: int) -> tuple[bytes, bytes]:
    """The first key of a run's buckets and the first key past them."""
    return KEY.pack(run_id, 0), (run_id + 1).to_bytes(4, "big") + bytes(4)


def bucket_of(permuted_key: int, geometry: Geometry) -> int:
    """The bucket a permuted key falls in."""
    return permuted_key >> (FINGERPRINT_BITS - geometry.bucket_bits) if geometry.bucket_bits else 0


def _tag_shift(geometry: Geometry) -> int:
    """How far a tag lies from the low end of a 64-bit key shifted left by the bucket bits."""
    return FINGERPRINT_BITS - 8 * geometry.tag_bytes


def _unknown_mask(geometry: Geometry) -> int:
    """The tag bits past ``known_bits``: always zero in a stored tag."""
    unknown = geometry.bucket_bits + 8 * geometry.tag_bytes - geometry.known_bits
    return (1 << unknown) - 1


def _checksum(key: bytes, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(key))


def encode_buckets(
    run_id: int, geometry: Geometry, permuted: U64Array, doc_ids: IdArray
) -> Iterator[tuple[bytes, bytes]]:
    """The ``(key, value)`` of every bucket of a run, in key order.

    Args:
        permuted: the entries' permuted keys, sorted ascending (bits past
            ``known_bits`` are ignored).
        doc_ids: the entries' document ids, in the same order.
    """
    count = len(permuted)
    if count == 0:
        return
    buckets = buckets_of(permuted, geometry)
    starts = np.flatnonzero(np.concatenate(([True], buckets[1:] != buckets[:-1])))
    bucket_numbers = buckets[starts]
    del buckets
    # A slice of buckets at a time: the packed columns of a 10M-entry run
    # would otherwise be held whole, twice over, beside the run itself.
    for first in range(0, len(starts), ENCODE_SLICE_BUCKETS):
        past = min(first + ENCODE_SLICE_BUCKETS, len(starts))
        begin = int(starts[first])
        end = int(starts[past]) if past < len(starts) else count
        yield from _encode_slice(
            run_id,
            geometry,
            permuted[begin:end],
            doc_ids[begin:end],
            (starts[first:past] - begin).tolist(),
            bucket_numbers[first:past].tolist(),
        )


#: Buckets encoded together by :func:`encode_buckets` (about 2M entries).
ENCODE_SLICE_BUCKETS = 1 << 16


def _encode_slice(
    run_id: int,
    geometry: Geometry,
    permuted: U64Array,
    doc_ids: IdArray,
    starts: list[int],
    bucket_numbers: list[int],
) -> Iterator[tuple[bytes, bytes]]:
    count = len(permuted)
    tag_bytes, id_bytes = geometry.tag_bytes, geometry.id_bytes
    shifted = permuted << np.uint64(geometry.bucket_bits) if geometry.bucket_bits else permuted
    tags = shifted >> np.uint64(_tag_shift(geometry))
    unknown = _unknown_mask(geometry)
    if unknown:
        tags &= np.uint64(~unknown & MAX_FINGERPRINT)
    tag_blob = tags.astype(f">u{tag_bytes}").tobytes()
    del shifted, tags
    id_blob = np.ascontiguousarray(
        doc_ids.astype(">u8").view(np.uint8).reshape(count, 8)[:, 8 - id_bytes :]
    ).tobytes()
    ends = [*starts[1:], count]
    for bucket, start, end in zip(bucket_numbers, starts, ends, strict=True):
        key = KEY.pack(run_id, bucket)
        yield (
            key,
            seal(
                key,
                tag_blob[start * tag_bytes : end * tag_bytes] + id_blob[start * id_bytes : end * id_bytes],
            ),
        )


def _entry_count(key: bytes, value: bytes, entry_bytes: int) -> int:
    """The entries of the bucket ``value`` stored under ``key``, whose entries
    are ``entry_bytes`` long, once its header, length and checksum are found
    sound; else :class:`CorruptStoreError` saying which is not."""
    if len(value) < HEADER.size or value[0] != BUCKET_KIND:
        raise CorruptStoreError(f"bucket {key.hex()} of a table is damaged (no bucket header)")
    count, rest = divmod(len(value) - HEADER.size, entry_bytes)
    if rest or not count:
        raise CorruptStoreError(
            f"bucket {key.hex()} of a table is damaged ({len(value) - HEADER.size} bytes of entries)"
        )
    # _checksum written out, over a copy of the payload: a call and a
    # memoryview cost more than copying a bucket's few hundred bytes.
    if int.from_bytes(value[1:5], "big") != zlib.crc32(value[HEADER.size :], zlib.crc32(key)):
        raise CorruptStoreError(f"bucket {key.hex()} of a table is damaged (checksum mismatch)")
    return count


_PAYLOAD = operator.itemgetter(slice(HEADER.size, None))
_STORED_CHECKSUM = operator.itemgetter(slice(1, HEADER.size))


def _entry_counts(keys: Sequence[bytes], values: Sequence[bytes], entry_bytes: int) -> npt.NDArray[np.int64]:
    """:func:`_entry_count` of many buckets, with C-level loops (``map``):
    a call per bucket cost about 1 µs, a third of reading a run."""
    count = len(values)
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=count)
    if count == 0:
        return lengths
    if int(lengths.min()) < HEADER.size:  # a bucket too short for its header
        checked = [_entry_count(key, value, entry_bytes) for key, value in zip(keys, values, strict=True)]
        return np.array(checked, dtype=np.int64)
    kinds = np.fromiter(map(operator.itemgetter(0), values), dtype=np.int64, count=count)
    stored = np.frombuffer(b"".join(map(_STORED_CHECKSUM, values)), dtype=">u4")
    computed = np.fromiter(
        map(zlib.crc32, map(_PAYLOAD, values), map(zlib.crc32, keys)), dtype=np.uint32, count=count
    )
    entries, rest = np.divmod(lengths - HEADER.size, entry_bytes)
    damaged = (kinds != BUCKET_KIND) | (rest != 0) | (entries == 0) | (stored != computed)
    if bool(damaged.any()):
        first = int(np.flatnonzero(damaged)[0])
        _entry_count(keys[first], values[first], entry_bytes)  # raises, saying what is wrong
        raise AssertionError("a bucket found damaged passed its check")
    return entries


def _payload(key: bytes, value: bytes, geometry: Geometry) -> tuple[memoryview, int]:
    """A bucket value's payload and entry count, after checking it."""
    count = _entry_count(key, value, geometry.entry_bytes)
    return memoryview(value)[HEADER.size :], count


def decode_bucket(key: bytes, value: bytes, geometry: Geometry) -> tuple[U64Array, U64Array]:
    """A bucket's entries as ``(known keys, document ids)``: each permuted key
    with the bits past ``known_bits`` zero, in stored order."""
    payload, count = _payload(key, value, geometry)
    tag_bytes, id_bytes = geometry.tag_bytes, geometry.id_bytes
    raw = np.frombuffer(payload, dtype=np.uint8)
    tags = raw[: count * tag_bytes].view(f">u{tag_bytes}").astype(np.uint64)
    id_columns = np.zeros((count, 8), dtype=np.uint8)
    id_columns[:, 8 - id_bytes :] = raw[count * tag_bytes :].reshape(count, id_bytes)
    doc_ids = id_columns.view(">u8").reshape(count).astype(np.uint64)
    bucket = KEY.unpack(key)[1]
    keys = tags << np.uint64(_tag_shift(geometry))
    if geometry.bucket_bits:
        keys >>= np.uint64(geometry.bucket_bits)
        keys |= np.uint64(bucket) << np.uint64(FINGERPRINT_BITS - geometry.bucket_bits)
    return keys, doc_ids


def decode_buckets(keys: list[bytes], values: list[bytes], geometry: Geometry) -> tuple[U64Array, U64Array]:
    """:func:`check_bucket` over consecutive buckets of one run at once (the
    bulk path of compaction): their entries as ``(known keys, document
    ids)``, checked for damage and for order across all of them."""
    if not values:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    blob, tag_at, id_at, counts = _entry_offsets(keys, values, geometry.tag_bytes, geometry.id_bytes)
    tags = _gather_big_endian(blob, tag_at, geometry.tag_bytes)
    doc_ids = _gather_big_endian(blob, id_at, geometry.id_bytes)
    known = tags << np.uint64(_tag_shift(geometry))
    if geometry.bucket_bits:
        buckets = np.frombuffer(b"".join(keys), dtype=">u4").reshape(len(keys), 2)[:, 1].astype(np.uint64)
        known >>= np.uint64(geometry.bucket_bits)
        known |= np.repeat(buckets, counts) << np.uint64(FINGERPRINT_BITS - geometry.bucket_bits)
    if len(known) > 1 and bool(np.any(known[1:] < known[:-1])):
        raise CorruptStoreError(f"buckets from {keys[0].hex()} of a table are damaged (entries out of order)")
    return known, doc_ids


def probe_buckets(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    tag_bytes: int,
    id_bytes: int,
    query_tags: Sequence[int],
    prefix_masks: Sequence[int],
    filter_masks: Sequence[int],
    k: int,
) -> list[int]:
    """:func:`probe` of many buckets at once, each read for a query of its
    own (all one query's, so far): the candidates' document ids.

    Bucket ``i`` holds the query's tag ``query_tags[i]`` (:func:`probe`'s
    ``query_tag``); an entry is a candidate when its tag agrees with it under
    ``prefix_masks[i]`` (the prefix) and differs in at most ``k`` bits under
    ``filter_masks[i]`` (see :func:`probe_masks`). The buckets' runs all pack
    ``tag_bytes``-byte tags and ``id_bytes``-byte ids.
    """
    entry_bytes = tag_bytes + id_bytes
    tag_columns = []
    counts = []
    for key, value in zip(keys, values, strict=True):
        count = _entry_count(key, value, entry_bytes)
        # Joined as bytes and read by numpy once: an array a bucket cost
        # about 0.4 µs each, 21 buckets a query at k = 5.
        tag_columns.append(value[HEADER.size : HEADER.size + count * tag_bytes])
        counts.append(count)
    if not counts:
        return []
    # Each bucket's query tag and masks, repeated for its entries.
    entry_query_tags, entry_prefix_masks, entry_filter_masks = np.repeat(
        np.array((query_tags, prefix_masks, filter_masks), dtype=np.uint64), counts, axis=1
    )
    differ = np.frombuffer(b"".join(tag_columns), dtype=_BIG_ENDIAN[tag_bytes]) ^ entry_query_tags
    passing = ((differ & entry_prefix_masks) == 0) & (np.bitwise_count(differ & entry_filter_masks) <= k)
    wanted = np.flatnonzero(passing)
    if not len(wanted):
        return []
    ends = np.cumsum(counts)
    firsts = (ends - counts).tolist()
    buckets = np.searchsorted(ends, wanted, side="right").tolist()
    doc_ids = []
    for entry, bucket in zip(wanted.tolist(), buckets, strict=True):
        count = counts[bucket]
        start = HEADER.size + count * tag_bytes + (entry - firsts[bucket]) * id_bytes
        doc_ids.append(int.from_bytes(values[bucket][start : start + id_bytes], "big"))
    return doc_ids


def probe_masks(plan: ProbePlan) -> tuple[int, int]:
    """The prefix and filter masks :func:`probe_buckets` applies to the tags
    of runs with probe ``plan``."""
    _, _, prefix_shift, filter_mask, tag_bytes, _ = plan
    return ((1 << (8 * tag_bytes)) - 1) ^ ((1 << prefix_shift) - 1), filter_mask


def _entry_offsets(
    keys: Sequence[bytes], values: Sequence[bytes], tag_bytes: int, id_bytes: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Buckets' values checked for damage and joined, and where each entry's
    tag and id start in them: ``(joined, tag offsets, id offsets, entries of
    each bucket)``."""
    entry_bytes = tag_bytes + id_bytes
    counts = _entry_counts(keys, values, entry_bytes)
    lengths = counts * entry_bytes + HEADER.size
    blob = np.frombuffer(b"".join(values), dtype=np.uint8)
    value_at = np.cumsum(lengths) - lengths
    payload_at = value_at + HEADER.size
    first_entry = np.cumsum(counts) - counts
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first_entry, counts)
    tag_at = np.repeat(payload_at, counts) + within * tag_bytes
    id_at = np.repeat(payload_at + counts * tag_bytes, counts) + within * id_bytes
    return blob, tag_at, id_at, counts


def _gather_big_endian(blob: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], width: int) -> U64Array:
    """The ``width``-byte big-endian integers starting at offsets ``at``."""
    result = np.zeros(len(at), dtype=np.uint64)
    for offset in range(width):
        result <<= np.uint64(8)
        result |= blob[at + offset]
    return result


def known_keys(permuted_keys: U64Array, geometry: Geometry) -> U64Array:
    """Permuted keys with the bits past ``known_bits`` cleared, as a run records them."""
    unknown = FINGERPRINT_BITS - geometry.known_bits
    return permuted_keys & np.uint64(MAX_FINGERPRINT ^ ((1 << unknown) - 1))


#: What a probe needs of a run's geometry, flat for the hot path:
#: ``(bucket_shift, tag_shift, prefix_shift, filter_mask, tag_bytes, id_bytes)``.
ProbePlan = tuple[int, int, int, int, int, int]


def probe_plan(geometry: Geometry) -> ProbePlan:
    """The constants :func:`probe` uses for runs of ``geometry``."""
    tag_bits = 8 * geometry.tag_bytes
    prefix_shift = tag_bits - (geometry.prefix_bits - geometry.bucket_bits)
    filter_mask = ((1 << prefix_shift) - 1) & ~_unknown_mask(geometry)
    bucket_shift = FINGERPRINT_BITS - geometry.bucket_bits if geometry.bucket_bits else FINGERPRINT_BITS
    return (
        bucket_shift,
        _tag_shift(geometry),
        prefix_shift,
        filter_mask,
        geometry.tag_bytes,
        geometry.id_bytes,
    )


def probe(key: bytes, value: bytes, plan: ProbePlan, query_key: int, bucket_bits: int, k: int) -> list[int]:
    """The ids of the bucket's entries that share the query's prefix and
    whose filter bits are within ``k`` of the query's: candidates, each to be
    checked against its full fingerprint.

    Args:
        key, value: the bucket, as stored.
        plan: :func:`probe_plan` of the run's geometry.
        query_key: the query's permuted key in this table.
        bucket_bits: the run's bucket bits.
        k: the largest distance wanted.
    """
    _, tag_shift, prefix_shift, filter_mask, tag_bytes, id_bytes = plan
    # _entry_count's checks, written out: the call cost 0.22 of a probe's 1.6 µs.
    if len(value) < HEADER.size or value[0] != BUCKET_KIND:
        raise CorruptStoreError(f"bucket {key.hex()} of a table is damaged (no bucket header)")
    count, rest = divmod(len(value) - HEADER.size, tag_bytes + id_bytes)
    if (
        rest
        or not count
        or int.from_bytes(value[1:5], "big") != zlib.crc32(value[HEADER.size :], zlib.crc32(key))
    ):
        raise CorruptStoreError(f"bucket {key.hex()} of a table is damaged (checksum mismatch)")
    query_tag = ((query_key << bucket_bits) & MAX_FINGERPRINT) >> tag_shift
    low = query_tag >> prefix_shift << prefix_shift
    high = low + (1 << prefix_shift)
    # The tags are sorted big-endian, so their first bytes are sorted too:
    # bisecting those (a strided slice, no int made per tag) finds the few
    # entries that can share the prefix. Unpacking every tag of a bucket
    # cost 0.75 of a probe's 2.1 µs at 10M documents.
    tags_end = HEADER.size + count * tag_bytes
    first_bytes = value[HEADER.size : tags_end : tag_bytes]
    top_shift = 8 * tag_bytes - 8
    first = bisect.bisect_left(first_bytes, low >> top_shift)
    past = bisect.bisect_right(first_bytes, (high - 1) >> top_shift, first)
    if past - first >= VECTOR_PROBE:
        return _probe_range(value, count, first, past, plan, query_tag, k)
    found: list[int] = []
    for position in range(first, past):
        at = HEADER.size + position * tag_bytes
        tag = int.from_bytes(value[at : at + tag_bytes], "big")
        if low <= tag < high and ((tag ^ query_tag) & filter_mask).bit_count() <= k:
            start = tags_end + position * id_bytes
            found.append(int.from_bytes(value[start : start + id_bytes], "big"))
    return found


def _probe_range(
    value: bytes, count: int, first: int, past: int, plan: ProbePlan, query_tag: int, k: int
) -> list[int]:
    """:func:`probe`'s test of the entries at positions ``first`` to ``past - 1``
    of a bucket of ``count``, in numpy: the ids of those that share the
    query's prefix and whose filter bits are within ``k``."""
    tag_bytes, id_bytes = plan[4], plan[5]
    prefix_mask, filter_mask = probe_masks(plan)
    tags = np.frombuffer(
        value, dtype=_BIG_ENDIAN[tag_bytes], count=past - first, offset=HEADER.size + first * tag_bytes
    ).astype(np.uint64)
    differ = tags ^ np.uint64(query_tag)
    shares_prefix = (differ & np.uint64(prefix_mask)) == 0
    passing = np.flatnonzero(shares_prefix & (np.bitwise_count(differ & np.uint64(filter_mask)) <= k))
    ids_at = HEADER.size + count * tag_bytes
    if id_bytes in _BIG_ENDIAN:
        ids = np.frombuffer(
            value, dtype=_BIG_ENDIAN[id_bytes], count=past - first, offset=ids_at + first * id_bytes
        )
        found: list[int] = ids[passing].tolist()
        return found
    blob = np.frombuffer(value, dtype=np.uint8)
    return _gather_big_endian(blob, ids_at + (passing + first) * id_bytes, id_bytes).tolist()  # type: ignore[no-any-return]


_BIG_ENDIAN = {width: np.dtype(f">u{width}") for width in TAG_WIDTHS}
#: Entries sharing a query's prefix from which :func:`probe` tests them in
#: numpy rather than one at a time (a bucket crowded by copies of one text).
VECTOR_PROBE = 24


def check_bucket(key: bytes, value: bytes, geometry: Geometry) -> tuple[U64Array, U64Array]:
    """:func:`decode_bucket`, also checking that the entries are in order and
    in the bucket the key names."""
    keys, doc_ids = decode_bucket(key, value, geometry)
    if len(keys) > 1 and bool(np.any(keys[1:] < keys[:-1])):
        raise CorruptStoreError(f"bucket {key.hex()} of a table is damaged (entries out of order)")
    return keys, doc_ids


def seal(key: bytes, payload: bytes) -> bytes:
    """A bucket value holding ``payload`` (packed tags, then ids) under ``key``."""
    return bytes([BUCKET_KIND]) + _checksum(key, payload).to_bytes(4, "big") + payload


def without_entry(key: bytes, value: bytes, geometry: Geometry, doc_id: int) -> bytes | bool | None:
    """The bucket with document ``doc_id``'s entry taken out: the new value,
    ``None`` when no entry is left, ``False`` when the bucket has none of it."""
    payload, count = _payload(key, value, geometry)
    tag_bytes, id_bytes = geometry.tag_bytes, geometry.id_bytes
    raw = bytes(payload)
    ids_at = count * tag_bytes
    target = doc_id.to_bytes(id_bytes, "big") if doc_id < 1 << (8 * id_bytes) else None
    if target is None:
        return False
    found = raw.find(target, ids_at)
    while found != -1 and (found - ids_at) % id_bytes:
        found = raw.find(target, found + 1)
    if found == -1:
        return False
    if count == 1:
        return None
    index = (found - ids_at) // id_bytes
    tags = raw[: index * tag_bytes] + raw[(index + 1) * tag_bytes : ids_at]
    return seal(key, tags + raw[ids_at:found] + raw[found + id_bytes :])
