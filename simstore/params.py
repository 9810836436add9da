"""Per-open options: how this process uses a store, never stored in the file.

Parameters that shape the stored keys (``k``, ``blocks``, the tables, the
fingerprinter settings) live in :mod:`simstore.format` and in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from simstore.errors import InvalidTypeError, InvalidValueError

# The smallest automatic merge threshold. Chosen by benchmarks/bench_store.py
# --merge-sweep on a 1M store: 50K gave about 19% more sustained single-add
# throughput than 20K for the same merge pause (~0.9 s), with no change in
# query latency; 100K doubled the pause and the reopen time for a few percent
# more. See README "The delta".
DEFAULT_MERGE_THRESHOLD = 50_000

# Above DEFAULT_MERGE_THRESHOLD * MERGE_FRACTION documents in the tables, the
# automatic threshold is that many documents divided by MERGE_FRACTION. A
# merge of m random documents into tables of N rewrites most of their leaf
# pages once m nears N / 100, so its cost grows with N, not with m: at 10M,
# merging 50K cost 4.7-8.9 s (94-177 µs per document) and 1.25M cost
# 11.7-14.8 s (9-12 µs per document), measured. Merging every N / 8 keeps the
# amortised cost per add flat as the store grows, for a delta of at most an
# eighth of the store (about 120 bytes a document in memory).
MERGE_FRACTION = 8


def auto_merge_threshold(tabled_docs: int) -> int:
    """The automatic merge threshold for a store whose tables hold ``tabled_docs``.

    >>> auto_merge_threshold(1_000), auto_merge_threshold(10_000_000)
    (50000, 1250000)
    """
    return max(DEFAULT_MERGE_THRESHOLD, tabled_docs // MERGE_FRACTION)


@dataclass(frozen=True)
class Options:
    """Options for one open store.

    Attributes:
        sync: flush to disk at every commit. ``True`` (the default) keeps every
            acknowledged write across a power loss, at the cost of an fsync per
            transaction. ``False`` still keeps every acknowledged write across a
            process crash (LMDB's pages sit in the OS page cache), but a power
            loss or kernel crash may lose the most recent transactions (never
            corrupting the file).
        merge_threshold: merge the delta into the tables once it holds this
            many documents. ``None`` (the default): 50,000, or an eighth of
            the documents in the tables once that is more, so that merges
            grow rarer as the store grows (see :func:`auto_merge_threshold`).
            Larger deltas make single adds cheaper on average, queries
            slightly dearer, merge pauses longer, and cost about 120 bytes
            of memory per delta document in every process using the store.
        merge_on_close: merge a non-empty delta when the store is closed.
        map_size: initial LMDB map size in bytes (``None``: 1 MiB, or the
            pages in use, and never less than the file). A
            writer's file is allocated to the end of its map. The map grows
            on its own when full.
        max_map_size: never grow the map beyond this many bytes; a write that
            would need more raises ``StoreFullError`` and changes nothing.
    """

    sync: bool = True
    merge_threshold: int | None = None
    merge_on_close: bool = True
    map_size: int | None = None
    max_map_size: int | None = None

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> Options:
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidTypeError(
                f"unknown option(s) {', '.join(map(repr, unknown))}; "
                f"known options are {', '.join(sorted(known))}"
            )
        built = cls(**options)
        built.validate()
        return built

    def validate(self) -> None:
        for name in ("sync", "merge_on_close"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidTypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.merge_threshold is None:
            pass
        elif isinstance(self.merge_threshold, bool) or not isinstance(self.merge_threshold, int):
            raise InvalidTypeError(f"merge_threshold must be an int or None, got {self.merge_threshold!r}")
        elif self.merge_threshold < 1:
            raise InvalidValueError(f"merge_threshold must be at least 1, got {self.merge_threshold}")
        for name in ("map_size", "max_map_size"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be an int number of bytes, got {value!r}")
            if value < 1 << 16:
                raise InvalidValueError(f"{name} must be at least 65536 bytes, got {value}")
