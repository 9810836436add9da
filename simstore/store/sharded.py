"""Several store files answering as one: :class:`ShardedStore`.

A corpus too large for one machine is split into shards by key (see
:mod:`simstore.index.sharding`; ``simstore.dask.build_stores`` writes them). Every
near-duplicate of a query may be in any shard, so a query asks every shard and
merges the answers; a key lives in exactly one shard, so an add or a removal
goes to that shard alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from simstore.engine import closest, reads
from simstore.errors import InvalidTypeError, InvalidValueError, ShardMismatchError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index.permute import U64Array
from simstore.index.sharding import shard_of, shards_of_packed
from simstore.keys import Key, KeyLike
from simstore.results import Match, Record, match_order
from simstore.store import arguments, maintenance, writes
from simstore.store.facade import Store
from simstore.store.opening import open as open_store


class ShardedStore:
    """Query several simstore files as one store.

    ``query`` and ``query_many`` ask every shard and merge the matches into
    one list sorted by ``(distance, key)``: the same answer one store holding
    every document would give. ``add``, ``add_many`` and ``remove`` go to the
    shard :func:`simstore.index.sharding.shard_of` names, so ``paths`` must be in
    shard order (as ``simstore.dask.build_stores`` returns them) for a
    store that will be written to.

    Every shard must have the same ``k`` and the same fingerprinter settings
    (a text query is fingerprinted once, for all of them); otherwise opening
    raises :class:`~simstore.ShardMismatchError`. Shards may have
    different table layouts. Read-only by default, since the usual use is
    serving stores that a batch job built.

    Args:
        paths: the shard files, in shard order.
        readonly: open every shard read-only (the default).
        **options: per-open settings for every shard, see :class:`simstore.Options`.
    """

    def __init__(
        self, paths: Sequence[str | os.PathLike[str]], *, readonly: bool = True, **options: Any
    ) -> None:
        if isinstance(paths, str | bytes | os.PathLike) or not isinstance(paths, Sequence):
            raise InvalidTypeError("paths must be a sequence of store paths, not a single path")
        if not paths:
            raise InvalidValueError("a ShardedStore needs at least one shard")
        self.paths = tuple(os.fspath(path) for path in paths)
        if len(set(map(os.path.realpath, self.paths))) != len(self.paths):
            raise InvalidValueError(f"a shard is listed twice in {list(self.paths)}")
        mode = "r" if readonly else "w"
        shards: list[Store] = []
        try:
            for path in self.paths:
                shards.append(open_store(path, mode, **options))
            _check_alike(shards)
        except BaseException:
            for shard in shards:
                shard.close()
            raise
        self.shards: tuple[Store, ...] = tuple(shards)

    # --------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close every shard. Safe to call more than once."""
        for shard in self.shards:
            shard.close()

    def __enter__(self) -> ShardedStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<simstore.ShardedStore {len(self.shards)} shards k={self.k}>"

    @property
    def k(self) -> int:
        """The largest distance every shard answers."""
        return self.shards[0].k

    @property
    def fingerprinter(self) -> Fingerprinter:
        """The text fingerprinter every shard shares."""
        return self.shards[0].fingerprinter

    @property
    def readonly(self) -> bool:
        return self.shards[0].readonly

    # ------------------------------------------------------------------ reads

    def query(
        self,
        fingerprint: int | None = None,
        *,
        text: str | None = None,
        k: int | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
        limit: int | None = None,
    ) -> list[Match]:
        """Every document in any shard within ``k`` bits, sorted by ``(distance, key)``;
        the arguments are :meth:`simstore.Store.query`'s (with ``limit``,
        each shard stops at its closest ``limit``, and the closest of those are kept)."""
        first = self.shards[0]._engine
        query, sketch = arguments.fingerprint_and_sketch(first, text, fingerprint)
        k = arguments.checked_k(first, k)
        threshold = arguments.query_threshold(first, min_similarity, sketch)
        limit = closest.check_limit(limit)
        matches: list[Match] = []
        for shard in self.shards:
            if limit is None:
                matches.extend(reads.query(shard._engine, query, sketch, k, with_meta, threshold))
            else:
                matches.extend(closest.query(shard._engine, query, sketch, k, with_meta, threshold, limit))
        matches.sort(key=match_order)
        return matches[:limit]

    def query_many(
        self,
        fingerprints: object = None,
        *,
        texts: Iterable[str] | None = None,
        k: int | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
        sketches: Any = None,
        limit: int | None = None,
        bands: bool | None = None,
    ) -> list[list[Match]]:
        """:meth:`query` for a batch: one sorted list per query, each shard
        answering the whole batch from one snapshot of its own (``bands``:
        as :meth:`simstore.Store.query_many`)."""
        first = self.shards[0]._engine
        queries, sketches = arguments.fingerprints_and_sketches(first, texts, fingerprints, 1, sketches)
        k = arguments.checked_k(first, k)
        threshold = arguments.query_threshold(first, min_similarity, sketches)
        limit = closest.check_limit(limit)
        bands = arguments.checked_bands(first, bands, sketches, threshold)
        merged: list[list[Match]] = [[] for _ in range(len(queries))]
        for shard in self.shards:
            engine = shard._engine
            if limit is None:
                answers = reads.query_many(engine, queries, sketches, k, with_meta, threshold, bands)
            else:
                answers = closest.query_many(engine, queries, sketches, k, with_meta, threshold, limit, bands)
            for found, matches in zip(merged, answers, strict=True):
                found.extend(matches)
        for index, found in enumerate(merged):
            found.sort(key=match_order)
            if limit is not None:
                merged[index] = found[:limit]
        return merged

    def shard_for(self, key: KeyLike) -> Store:
        """The shard that holds (or would hold) ``key``."""
        return self.shards[shard_of(key, len(self.shards))]

    def get(self, key: KeyLike, default: Record | None = None) -> Record | None:
        """The record stored under ``key`` in its shard, or ``default``."""
        return self.shard_for(key).get(key, default)

    def __getitem__(self, key: KeyLike) -> Record:
        return self.shard_for(key)[key]

    def __contains__(self, key: object) -> bool:
        try:
            shard = self.shard_for(key)  # type: ignore[arg-type]
        except (InvalidTypeError, InvalidValueError):
            return False
        return key in shard

    def __len__(self) -> int:
        return sum(len(shard) for shard in self.shards)

    def __iter__(self) -> Iterator[Key]:
        for shard in self.shards:
            yield from shard

    # ----------------------------------------------------------------- writes

    def add(
        self,
        key: KeyLike,
        text: str | None = None,
        *,
        fingerprint: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Add (or replace) ``key`` in its shard, as :meth:`simstore.Store.add`
        does; returns the fingerprint."""
        return self.shard_for(key).add(key, text, fingerprint=fingerprint, meta=meta)

    def add_many(
        self,
        keys: Iterable[KeyLike],
        fingerprints: object = None,
        *,
        texts: Iterable[str] | None = None,
        metas: Iterable[Mapping[str, Any] | None] | None = None,
        processes: int | None = 1,
        sketches: Any = None,
    ) -> U64Array:
        """Add many documents, each shard's share in one transaction of that
        shard. Bad input (a key, fingerprint or meta) is refused before any
        shard is written; a failure while writing one shard (a full disk)
        leaves the shards written before it written: shards are separate
        files, with no transaction across them. ``processes`` and
        ``sketches`` are :meth:`Store.add_many`'s."""
        # Checked and packed once, before any shard is written.
        packed_keys, fps, meta_list, checked_sketches = arguments.checked_batch(
            self.shards[0]._engine, keys, fingerprints, texts, metas, processes, sketches
        )
        owners = shards_of_packed(packed_keys.sliced(range(len(packed_keys))), len(self.shards))
        for number in np.unique(owners).tolist():
            rows = np.flatnonzero(owners == number)
            engine = self.shards[number]._engine
            written = writes.add_packed(
                engine,
                packed_keys.subset(rows),
                fps[rows],
                None if meta_list is None else [meta_list[row] for row in rows.tolist()],
                None if checked_sketches is None else checked_sketches[rows],
            )
            if written:
                maintenance.maintain(engine, written, pay_all=True)
        return fps

    def remove(self, key: KeyLike) -> None:
        """Remove ``key`` from its shard; ``KeyNotFoundError`` if it is not there."""
        self.shard_for(key).remove(key)


def _check_alike(shards: Sequence[Store]) -> None:
    """Refuse shards that would answer differently for the same query."""
    first = shards[0]
    for shard in shards[1:]:
        differences: dict[str, tuple[Any, Any]] = {}
        if shard.k != first.k:
            differences["k"] = (first.k, shard.k)
        if shard.fingerprinter != first.fingerprinter:
            differences["fingerprinter"] = (first.fingerprinter, shard.fingerprinter)
        if differences:
            raise ShardMismatchError(shard.path, first.path, differences)
