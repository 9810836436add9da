"""Per-open options: how this process uses a store, never stored in the file.

Parameters that shape the stored keys (``k``, ``blocks``, the tables, the
fingerprinter settings) live in :mod:`simstore.engine.format` and in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from simstore.errors import InvalidTypeError, InvalidValueError

# The delta size at which it is merged into the tables, as a new run of each.
# A merge is one write transaction whose work grows with the delta alone (the
# runs are joined later, a step at a time, by compaction), so the delta stays
# small: 32,768 documents take 0.05-0.1 s to merge into ten tables (on a
# shared 2-core machine at load 5), hold about 4 MiB of memory in every
# process using the store, and take a few milliseconds to replay when the
# store is opened. At 65,536 the longest of 400K single adds into a 4M store
# took 0.16-0.17 s, at 32,768 0.06-0.10 s (two alternating runs each).
DEFAULT_MERGE_THRESHOLD = 1 << 15

# Compaction work every document written to the tables earns, in entry moves
# per table. Size-tiered compaction (see simstore.engine.catalog.plan_compaction)
# moves a document a few times (3.1 times for single adds into 100M,
# simulated); at 8 a step of 65,536 entries is taken about every 800 single
# adds into ten tables.
COMPACTION_CREDIT = 8

# sync="interval": flush at most this many seconds after a commit, or once
# this many commits are unflushed (a crawler's "every 200 ms or 1,000 pages").
DEFAULT_SYNC_INTERVAL = 0.2
DEFAULT_SYNC_EVERY = 1000


@dataclass(frozen=True)
class Options:
    """Options for one open store.

    Attributes:
        sync: flush to disk at every commit. ``True`` (the default) keeps every
            acknowledged write across a power loss, at the cost of one flush of
            the write-ahead log per commit. ``False`` still keeps every
            acknowledged write across a process crash (LMDB's pages sit in the
            OS page cache), but a power loss or kernel crash may lose the most
            recent transactions. ``"interval"`` commits without a flush and
            flushes once ``sync_interval`` seconds have passed since the first
            unflushed commit or ``sync_every`` commits are unflushed,
            whichever comes first, and when the store closes; a power loss
            may lose the writes of that window. In a store a ``sync=True``
            writer has written, ``False`` and ``"interval"`` writers take part
            in its log (a pin, a checkpoint every second), so the file stays
            intact and the ``sync=True`` writers' promise holds; in one only
            ever written without ``sync=True``, LMDB does not promise the file
            survives a power loss intact (see ``docs/durability.md``).
            With ``True``, concurrent single writes from threads share one
            commit and one flush (group commit).
        sync_interval: with ``sync="interval"``, the longest a commit stays
            unflushed, in seconds.
        sync_every: with ``sync="interval"``, the most commits left unflushed.
        merge_threshold: merge the delta into the tables once it holds this
            many documents. ``None`` (the default): 32,768. A merge writes
            the delta as a new run of every table in one transaction, so a
            larger delta makes merges rarer but longer (other writers wait
            for them), and costs about 120 bytes of memory per delta
            document in every process using the store.
        merge_on_close: merge a non-empty delta when the store is closed.
        map_size: initial LMDB map size in bytes (``None``: 1 MiB, or the
            pages in use, and never less than the file). A
            writer's file is allocated to the end of its map. The map grows
            on its own when full.
        max_map_size: never grow the map beyond this many bytes; a write that
            would need more raises ``StoreFullError`` and changes nothing.
        lock: with mode ``"r"`` only, ``False`` opens the store without LMDB's
            lock file: for a store on read-only media, or in a folder this
            user may not write (where the lock file cannot be made). No
            process may write the store while it is open so: without the lock
            file a reader cannot tell writers which pages it reads, and a
            writer could reuse them under it.
    """

    sync: bool | Literal["interval"] = True
    sync_interval: float = DEFAULT_SYNC_INTERVAL
    sync_every: int = DEFAULT_SYNC_EVERY
    merge_threshold: int | None = None
    merge_on_close: bool = True
    map_size: int | None = None
    max_map_size: int | None = None
    lock: bool = True

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

    @property
    def sync_each_commit(self) -> bool:
        """Whether LMDB flushes at every commit (``sync=True``)."""
        return self.sync is True

    def validate(self) -> None:
        if not isinstance(self.sync, bool) and self.sync != "interval":
            raise InvalidTypeError(f"sync must be True, False or 'interval', got {self.sync!r}")
        if not isinstance(self.lock, bool):
            raise InvalidTypeError(f"lock must be True or False, got {self.lock!r}")
        if not isinstance(self.merge_on_close, bool):
            raise InvalidTypeError(f"merge_on_close must be True or False, got {self.merge_on_close!r}")
        interval = self.sync_interval
        if isinstance(interval, bool) or not isinstance(interval, int | float):
            raise InvalidTypeError(f"sync_interval must be a number of seconds, got {interval!r}")
        if not 0 < interval < float("inf"):
            raise InvalidValueError(f"sync_interval must be a positive number of seconds, got {interval!r}")
        every = self.sync_every
        if isinstance(every, bool) or not isinstance(every, int):
            raise InvalidTypeError(f"sync_every must be an int number of commits, got {every!r}")
        if every < 1:
            raise InvalidValueError(f"sync_every must be at least 1, got {every}")
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
