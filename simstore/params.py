"""Per-open options: how this process uses a store, never stored in the file.

Parameters that shape the stored keys (``k``, ``blocks``, the tables, the
fingerprinter settings) live in :mod:`simstore.format` and in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from simstore.errors import InvalidTypeError, InvalidValueError

# Chosen by benchmarks/bench_store.py --merge-sweep on a 1M store: 50K gave
# about 19% more sustained single-add throughput than 20K for the same merge
# pause (~0.9 s), with no change in query latency; 100K doubled the pause and
# the reopen time for a few percent more. See README "The delta".
DEFAULT_MERGE_THRESHOLD = 50_000


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
            many documents. Larger deltas make single adds cheaper on average
            and queries slightly dearer.
        merge_on_close: merge a non-empty delta when the store is closed.
        map_size: initial LMDB map size in bytes (``None``: 1 GiB or twice the
            file, whichever is larger). The map grows on its own when full.
        max_map_size: never grow the map beyond this many bytes; a write that
            would need more raises ``StoreFullError`` and changes nothing.
    """

    sync: bool = True
    merge_threshold: int = DEFAULT_MERGE_THRESHOLD
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
        if isinstance(self.merge_threshold, bool) or not isinstance(self.merge_threshold, int):
            raise InvalidTypeError(f"merge_threshold must be an int, got {self.merge_threshold!r}")
        if self.merge_threshold < 1:
            raise InvalidValueError(f"merge_threshold must be at least 1, got {self.merge_threshold}")
        for name in ("map_size", "max_map_size"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be an int number of bytes, got {value!r}")
            if value < 1 << 16:
                raise InvalidValueError(f"{name} must be at least 65536 bytes, got {value}")
