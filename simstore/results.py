"""What a store hands back: matches, records, statistics, and its warnings.

Plain types with no behaviour beyond ordering, so that every module (the
store, the batch helpers, sharded and partitioned stores) can import them
without importing the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from simstore.records import Key, sort_key
from simstore.skew import Degenerate, TableSkew


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
    probe each; ``compacting`` says a compaction is under way.
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
