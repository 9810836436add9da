"""Multi-index hashing: a few tables searched with many cheap probes.

Manku's scheme (:mod:`simstore.index.permute`) answers ``k`` exactly by
giving every choice of ``blocks - k`` blocks its own table: 21 tables for
``k = 5``. Multi-index hashing (Greene, Parnas & Yao 1994; Norouzi, Punjani
& Fleet, CVPR 2012; faiss's ``IndexBinaryMultiHash``) cuts the 64 bits into
``m`` contiguous *segments* instead, one table each, and searches table ``i``
with every value within ``r_i`` bits of the query's segment ``i``. By the
generalised pigeonhole principle, two fingerprints that differ in at most
``k`` bits agree within ``r_i`` bits on some segment ``i`` whenever
``sum(r_i + 1) > k``: three tables of 21-22 bits searched at radius 1 answer
``k = 5`` exactly with 67 probes.

A table keeps the fingerprints rotated left by its segment's start, so that
the segment leads and a probe is a range of the sorted column: the keys whose
top ``width`` bits equal the probe's. Tables are bytes on disk and an insert's
work; probes are a few numpy operations per query batch, whatever their
number (:mod:`simstore.index.column_search`). :func:`choose` weighs the two.

Nothing here does I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from simstore.errors import InvalidValueError
from simstore.index.permute import FINGERPRINT_BITS, MAX_FINGERPRINT, Table, U64Array, validate_k

#: Most segments a scheme cuts the fingerprint into: a table costs 8 bytes a
#: document, so more than this is never cheaper than a scan.
MAX_SEGMENTS = 8
#: Widest radius a table is probed at: C(22, 3) = 1,540 probes a table is
#: already past where another table is cheaper.
MAX_RADIUS = 3
#: Narrowest segment: below this a probe's range holds N / 2**width entries,
#: which at 100M is a scan of thousands.
MIN_WIDTH = 8

# Costs of :func:`choose`, per query in a batch, in microseconds: fitted (least
# squares on relative error; median error 9 %, p90 28 %) to 88 schemes for
# k = 2..10 at 1M random fingerprints by
# ``benchmarks/experiments/bench_multi_index.py`` (2-core machine, numpy 2.4,
# batches of 1,000; ``benchmarks/results/multi_index_1M.md``):
#: each table's share of a batch's fixed work
TABLE_US = 0.4
#: each probe: its directory slot and its share of the gather
PROBE_US = 0.12
#: each candidate's load, un-rotation and popcount
CANDIDATE_US = 0.038
#: A table's bytes a document on disk: its sorted column of 8-byte keys.
TABLE_BYTES = 8.0
#: Bytes a document are weighed against microseconds a query by this much
#: when choosing (a store read far more often than it grows still pays for
#: its bytes in page cache).
US_PER_BYTE = 1.0


@dataclass(frozen=True)
class MultiIndex:
    """Segment widths (most significant first, summing to 64) and the radius
    each segment's table is probed at.

    >>> scheme = MultiIndex((21, 21, 22), (1, 1, 1))
    >>> scheme.k, scheme.probe_counts, scheme.probes
    (5, (22, 22, 23), 67)
    """

    widths: tuple[int, ...]
    radii: tuple[int, ...]

    def __post_init__(self) -> None:
        widths, radii = self.widths, self.radii
        if not 1 <= len(widths) <= MAX_SEGMENTS:
            raise InvalidValueError(f"a scheme has 1 to {MAX_SEGMENTS} segments, got {len(widths)}")
        if len(radii) != len(widths):
            raise InvalidValueError(f"one radius per segment: {len(widths)} segments, {len(radii)} radii")
        if sum(widths) != FINGERPRINT_BITS or any(
            not MIN_WIDTH <= width <= FINGERPRINT_BITS for width in widths
        ):
            raise InvalidValueError(
                f"segment widths must be >= {MIN_WIDTH} bits each and sum to {FINGERPRINT_BITS}: {widths}"
            )
        if any(
            not 0 <= radius <= min(MAX_RADIUS, width) for radius, width in zip(radii, widths, strict=True)
        ):
            raise InvalidValueError(
                f"radii must be in 0..{MAX_RADIUS} and at most their segment's width, got {radii}"
            )

    @property
    def tables(self) -> int:
        """Tables (segments) of the scheme."""
        return len(self.widths)

    @property
    def starts(self) -> tuple[int, ...]:
        """Each segment's first bit, counted from the most significant: the
        left rotation that makes it lead its table's keys."""
        return tuple(sum(self.widths[:index]) for index in range(len(self.widths)))

    @property
    def k(self) -> int:
        """The largest distance the scheme answers exactly (pigeonhole)."""
        return sum(radius + 1 for radius in self.radii) - 1

    @property
    def probe_counts(self) -> tuple[int, ...]:
        """Probes of each table per query: the values within its radius."""
        return tuple(_ball(width, radius) for width, radius in zip(self.widths, self.radii, strict=True))

    @property
    def probes(self) -> int:
        """Probes per query, over every table."""
        return sum(self.probe_counts)

    def candidate_rate(self) -> float:
        """The chance that an unrelated (uniformly random) fingerprint is a
        candidate of a query in some table: each probe matches a fraction
        ``2**-width`` of the keys."""
        return sum(count / 2.0**width for count, width in zip(self.probe_counts, self.widths, strict=True))

    def label(self) -> str:
        """A short name, such as ``21/21/22 r1/1/1``."""
        return "/".join(map(str, self.widths)) + " r" + "/".join(map(str, self.radii))

    def rotate(self, fingerprints: U64Array, table: int) -> U64Array:
        """Table ``table``'s keys of ``fingerprints``: rotated so its segment leads."""
        return rotate_left(fingerprints, self.starts[table])

    def as_tables(self) -> tuple[Table, ...]:
        """The scheme's tables as permutations (a rotation each, its prefix
        the segment a probe fixes): what ``Store.stats()`` reports."""
        return tuple(
            Table(
                tuple(
                    (FINGERPRINT_BITS - 1 - bit - start) % FINGERPRINT_BITS for bit in range(FINGERPRINT_BITS)
                ),
                width,
            )
            for start, width in zip(self.starts, self.widths, strict=True)
        )

    def unrotate(self, keys: U64Array, table: int) -> U64Array:
        """The fingerprints of table ``table``'s ``keys``."""
        return rotate_left(keys, FINGERPRINT_BITS - self.starts[table])

    def prefix_mask(self, table: int) -> int:
        """The bits of a key of table ``table`` that a probe fixes: its segment."""
        return _top_mask(self.widths[table])

    def flip_masks(self, table: int) -> U64Array:
        """The masks that turn a query's key of table ``table`` into its probes:
        every set of at most the table's radius bits inside the segment (the
        top bits of the key), the empty set first."""
        return _flip_masks(self.widths[table], self.radii[table])

    def probe_keys(self, fingerprints: U64Array, table: int) -> U64Array:
        """Every probe of table ``table`` for every fingerprint, as the lowest
        key of the probe's range: shape ``(len(fingerprints), probes of the
        table)``. The range's keys are those from this value up to it plus
        ``2**(64 - width) - 1``."""
        keys = self.rotate(fingerprints, table) & np.uint64(self.prefix_mask(table))
        return keys[:, np.newaxis] ^ self.flip_masks(table)[np.newaxis, :]


def rotate_left(values: U64Array, shift: int) -> U64Array:
    """Every 64-bit value rotated left by ``shift`` bits (a new array)."""
    shift %= FINGERPRINT_BITS
    if shift == 0:
        return values.copy()
    return (values << np.uint64(shift)) | (values >> np.uint64(FINGERPRINT_BITS - shift))


def _ball(width: int, radius: int) -> int:
    return sum(math.comb(width, flips) for flips in range(radius + 1))


def _top_mask(width: int) -> int:
    return MAX_FINGERPRINT ^ ((1 << (FINGERPRINT_BITS - width)) - 1)


@functools.lru_cache(maxsize=64)
def _flip_masks(width: int, radius: int) -> U64Array:
    masks = [0]
    for flips in range(1, radius + 1):
        for bits in combinations(range(width), flips):
            masks.append(sum(1 << (FINGERPRINT_BITS - 1 - bit) for bit in bits))
    array = np.array(masks, dtype=np.uint64)
    array.setflags(write=False)
    return array


def balanced_widths(segments: int) -> tuple[int, ...]:
    """``segments`` widths summing to 64 that differ by at most one bit, the
    wider ones last (``(21, 21, 22)``)."""
    base, extra = divmod(FINGERPRINT_BITS, segments)
    return tuple([base] * (segments - extra) + [base + 1] * extra)


def exact_schemes(k: int) -> Iterator[MultiIndex]:
    """Every scheme of balanced widths that answers exactly ``k`` with no
    spare radius (``sum(r_i + 1) == k + 1``), its radii non-decreasing so
    that the wider segments take the larger ones (one of each multiset:
    which equal-width segment takes which radius changes nothing)."""
    k = validate_k(k)
    for segments in range(1, MAX_SEGMENTS + 1):
        widths = balanced_widths(segments)
        if min(widths) < MIN_WIDTH:
            break
        for radii in _radii(segments, k + 1 - segments):
            if all(radius <= min(MAX_RADIUS, width) for radius, width in zip(radii, widths, strict=True)):
                yield MultiIndex(widths, radii)


def _radii(segments: int, extra: int) -> Iterator[tuple[int, ...]]:
    """Non-decreasing tuples of ``segments`` radii summing to ``extra``."""
    if extra < 0:
        return
    if segments == 1:
        yield (extra,)
        return
    for first in range(extra // segments + 1):
        for rest in _radii(segments - 1, extra - first * segments):
            yield (first, *(first + radius for radius in rest))


def query_us(scheme: MultiIndex, docs: float) -> float:
    """The modelled cost of one query (in a batch) against ``docs`` documents:
    the tables' fixed work, the probes, and the unrelated candidates
    verified (near-duplicates add their own, the same in every scheme)."""
    return TABLE_US * scheme.tables + PROBE_US * scheme.probes + CANDIDATE_US * docs * scheme.candidate_rate()


def bytes_per_doc(scheme: MultiIndex) -> float:
    """The scheme's tables' bytes a document (the records are the same in every scheme)."""
    return TABLE_BYTES * scheme.tables


def choose(k: int, docs: float) -> MultiIndex:
    """The exact scheme for ``k`` with the lowest modelled cost at ``docs``
    documents: microseconds a query plus :data:`US_PER_BYTE` per byte a
    document (ties to fewer tables).

    >>> choose(5, 10_000_000).label()
    '21/21/22 r1/1/1'
    """
    if docs < 0 or not math.isfinite(docs):
        raise InvalidValueError(f"docs must be a finite number >= 0, got {docs}")
    schemes = list(exact_schemes(k))
    if not schemes:
        raise InvalidValueError(
            f"no multi-index scheme answers k={k} (at most {MAX_SEGMENTS} segments of radius <= {MAX_RADIUS})"
        )
    return min(
        schemes,
        key=lambda scheme: (query_us(scheme, docs) + US_PER_BYTE * bytes_per_doc(scheme), scheme.tables),
    )
