"""What a store hands back: matches, records, statistics, and its warnings.

Plain types with no behaviour beyond ordering, so that every module (the
store, the batch helpers, sharded and partitioned stores) can import them
without importing the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from simstore.keys import Key, sort_key


class SegmenterChangedWarning(UserWarning):
    """The installed jieba (or its dictionary, or Python's Unicode tables)
    differs from the one the store's text fingerprints were made with, so
    Chinese text may fingerprint slightly differently than before."""


class StoreFullWarning(UserWarning):
    """An automatic merge found no room; the documents stay in the delta."""


class MaintenanceWarning(UserWarning):
    """An automatic merge or compaction step after a committed write failed
    (for example at interpreter shutdown); the write stands, its documents
    stay in the delta, and a later write tries again."""


class Match(NamedTuple):
    """A stored document within the query's distance; ``meta`` is filled
    only when the query asks ``with_meta=True``; ``similarity`` is the
    estimated Jaccard similarity of the two texts' word 3-shingles (from
    their verification sketches), ``None`` when either came as a bare
    fingerprint or the store keeps no sketches."""

    key: Key
    distance: int
    fingerprint: int
    meta: dict[str, Any] | None = None
    similarity: float | None = None


class Shrunk(NamedTuple):
    """What :func:`simstore.shrink` did: the store file's size before and after, in bytes."""

    bytes_before: int
    bytes_after: int


class Record(NamedTuple):
    """A stored document: its key, fingerprint and metadata (``None`` if none)."""

    key: Key
    fingerprint: int
    meta: dict[str, Any] | None


@dataclass(frozen=True)
class Stats:
    """A snapshot of a store's size and layout.

    ``runs`` is how many runs each table holds (see docs/engine.md): queries
    probe each; ``compacting`` says a compaction is under way (format 3: a
    join being prepared in steps, by this process or another). ``prefix_bits``
    and ``layout`` describe the tables in the file, one entry a table: for a
    format-3 store, each table's segment width and its rotation as a bit order.
    """

    path: str
    docs: int
    delta_docs: int
    tables: int
    k: int
    blocks: int | None
    prefix_bits: tuple[int, ...]
    layout: tuple[tuple[int, ...], ...] = field(repr=False)
    table_entries: tuple[int, ...]
    bytes_on_disk: int
    bytes_used: int
    map_size: int
    format_version: int
    readonly: bool
    layout_name: str = ""
    skew: tuple[TableSkew, ...] | None = field(default=None, repr=False)
    degenerate: Degenerate | None = None
    runs: int = 0
    compacting: bool = False
    #: Documents with a verification sketch, the sketch's bytes, and the
    #: store's own similarity threshold (``None``: none).
    sketched_docs: int = 0
    sketch_bytes: int = 0
    min_similarity: float | None = None
    #: Bytes of the pages holding data now (``bytes_used`` is the highest
    #: page ever used, which removals do not lower; the difference is free
    #: pages that later writes reuse).
    bytes_live: int = 0


def match_order(match: Match) -> tuple[int, tuple[int, Key]]:
    """How matches are listed: by distance, then by key."""
    return (match.distance, sort_key(match.key))


@dataclass(frozen=True)
class TableSkew:
    """Occupancy of one table's prefix ranges.

    Attributes:
        prefix_bits: the table's prefix length.
        entries: entries in the table.
        occupied: prefix ranges holding at least one entry.
        largest_range: entries in the fullest range: what the unluckiest
            query walks in this table.
        p99_range: the 99th percentile of the occupied ranges' sizes.
        mean_range: mean size of the occupied ranges.
        expected_range: ``entries / 2**prefix_bits``, the mean over all ranges
            for random fingerprints (the planner's model, per table).
        query_weighted_range: the range size seen by a query equal to a
            stored fingerprint picked at random, ``sum(size**2) / entries``.
            For random fingerprints it is about ``1 + expected_range``; much
            more means queries that resemble the corpus hit crowded ranges.
        hot_prefixes: the ``hot`` fullest ranges as ``(prefix value, size)``,
            fullest first (ties: smaller prefix first).
    """

    prefix_bits: int
    entries: int
    occupied: int
    largest_range: int
    p99_range: int
    mean_range: float
    expected_range: float
    query_weighted_range: float
    hot_prefixes: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Degenerate:
    """Fingerprints that defeat the prefix tables.

    Attributes:
        docs: fingerprints examined.
        distinct: distinct fingerprints among them.
        zeros: documents whose fingerprint is 0 (typical of empty text).
        ones: documents whose fingerprint is 2**64 - 1.
        shared_docs: documents whose fingerprint at least
            ``shared_threshold`` documents share (zeros and ones included).
        shared: the most shared such fingerprints as ``(fingerprint,
            documents)``, most shared first, at most ``top`` of them.
        shared_threshold: the threshold used.
    """

    docs: int
    distinct: int
    zeros: int
    ones: int
    shared_docs: int
    shared: tuple[tuple[int, int], ...]
    shared_threshold: int
