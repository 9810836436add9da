"""The Store facade.

A store is one LMDB file holding a meta record, a key table (user key ->
internal id), document records (internal id -> fingerprint and key),
per-document metadata and sketches, a delta log, and one permutation table
per block combination (see :mod:`simstore.index.permute`). :class:`Store` checks
what callers give it and hands the work to the engine's rooms:

- :mod:`simstore.engine.core`: the open file, its layout, the delta, the lock,
  fork, and the read and write transactions;
- :mod:`simstore.store.arguments`: arguments checked, text fingerprinted;
- :mod:`simstore.store.writes` and :mod:`simstore.commit.group`: adds and removes, the
  group commit, batches and flushing;
- :mod:`simstore.engine.reads`: queries and documents by key;
- :mod:`simstore.store.dedup`: all pairs and clusters;
- :mod:`simstore.store.maintenance`: merges, compaction, re-layouts;
- :mod:`simstore.store.inspect`: stats and check;
- :mod:`simstore.engine.tableset`, :mod:`simstore.engine.runs`, :mod:`simstore.engine.catalog`,
  :mod:`simstore.engine.occupancy`: the table format and its runs.

Nothing below this module imports it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from simstore.columns import as_column
from simstore.commit.batch import Batch
from simstore.commit.group import group_commit
from simstore.engine import closest, reads, settings
from simstore.engine.core import Engine
from simstore.errors import InvalidTypeError, KeyNotFoundError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.fingerprinting.sketch import Sketch, U8Array
from simstore.index.permute import Table, U64Array
from simstore.keys import Key, KeyLike, pack_key, pack_meta
from simstore.results import Match, Record, Stats
from simstore.store import arguments, maintenance, stepped_joins, writes
from simstore.store import dedup as batch
from simstore.store.dedup import Cluster, KeepPolicy, Pair, Progress
from simstore.store.inspect import check_store, file_bytes, store_stats

__all__ = ["Store", "file_bytes"]


class Store:
    """An open simstore store. Use :func:`simstore.open` to make one.

    A ``Store`` may be shared between threads: every operation holds an
    internal lock, so calls are serialised. After ``fork()`` the child may go
    on using the ``Store`` it inherited (the file is reopened at its first
    call), or open the store afresh, which closes the inherited one in the child.
    """

    def __init__(self, engine: Engine) -> None:
        self.path = engine.path
        self._engine = engine

    @property
    def k(self) -> int:
        """The largest distance this store answers."""
        return self._engine.params.k

    @property
    def blocks(self) -> int | None:
        """Blocks of a one-level layout; ``None`` for other layouts."""
        return self._engine.params.blocks

    @property
    def readonly(self) -> bool:
        return self._engine.readonly

    @property
    def closed(self) -> bool:
        return self._engine.closed

    @property
    def tables(self) -> tuple[Table, ...]:
        return self._engine.tables

    @property
    def fingerprinter(self) -> Fingerprinter:
        """The text fingerprinter whose settings are stored in the file."""
        return settings.fingerprinter(self._engine)

    @property
    def sketch(self) -> Sketch | None:
        """The verification sketch this store keeps beside each document
        added as text (``None``: it keeps none, so no similarity is known)."""
        return settings.store_sketch(self._engine)

    @property
    def bands(self) -> int | None:
        """The bands of each width a document keeps in the store's band
        table, which :meth:`query` and :meth:`add_if_new` look a text's bands
        up in (``None``: the store keeps none; see ``simstore.open(bands=)``)."""
        return self._engine.params.bands

    @property
    def min_similarity(self) -> float | None:
        """The similarity threshold calls apply unless they pass their own
        (stored in the file; ``None``: none)."""
        return self._engine.params.min_similarity

    def __reduce__(self) -> Any:
        raise InvalidTypeError(
            "a Store cannot be pickled or copied: it is an open file. Pass the path, and "
            "open the store in the other process (or share this object between threads)"
        )

    def __copy__(self) -> Store:
        return self.__reduce__()  # type: ignore[no-any-return]

    def __deepcopy__(self, memo: object) -> Store:
        return self.__reduce__()  # type: ignore[no-any-return]

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self.readonly else "open")
        return f"<simstore.Store {self.path!r} k={self.k} blocks={self.blocks} {state}>"

    def close(self) -> None:
        """Merge the delta (unless ``merge_on_close=False``) and close the file.

        A large join being prepared in steps (format 3) is dropped, not
        finished: its remaining steps could take many seconds, and a later
        write begins it again. Safe to call more than once.
        """
        engine = self._engine
        with engine.lock:
            if engine.closed:
                return
            try:
                stepped_joins.let_go_of_join(engine)  # (see the docstring)
                if (
                    engine.owns_file()
                    and not engine.readonly
                    and engine.options.merge_on_close
                    and len(engine.delta)
                ):
                    maintenance.merge(engine)
            finally:
                engine.close()

    # ------------------------------------------------------------------ writes

    def add(
        self,
        key: KeyLike,
        text: str | None = None,
        *,
        fingerprint: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store a document under ``key``, replacing any document already there.

        Returns:
            The document's fingerprint.
        Raises:
            InvalidTypeError, InvalidValueError: bad key, fingerprint or meta;
                nothing is written.
            ReadOnlyError: the store is open read-only.
        """
        fp, sketch = arguments.fingerprint_and_sketch(self._engine, text, fingerprint)
        writes.add(self._engine, pack_key(key), fp, pack_meta(meta), sketch)
        return fp

    def add_if_new(
        self,
        key: KeyLike,
        text: str | None = None,
        *,
        fingerprint: int | None = None,
        k: int | None = None,
        meta: Mapping[str, Any] | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
        limit: int | None = None,
    ) -> list[Match]:
        """Store the document under ``key`` only if no *other* stored
        document is within ``k`` bits (and, with ``min_similarity``, at least
        that similar; see :meth:`query`).

        The look-up and the write run in one write transaction, so two
        processes racing with the same near-duplicate never both insert it.

        The document already stored under ``key``, if any, is never a match:
        the question is whether the text duplicates another document. So a
        call repeated after a crash gets the answer the first one got (``[]``
        if it was stored), and a page fetched again after an edit, small or
        large, replaces its old version unless it now duplicates another
        page; then nothing changes, the old version stays, and the other
        pages are returned. (Use ``key in store`` to tell a first store from
        an update.)

        Args:
            limit: return at most this many matches, the closest (``limit=1``:
                whether the document is a near-duplicate, and of which); the
                look-up stops as soon as it has them, as :meth:`query` does.
                ``None``: every match.

        Returns:
            The matches, sorted by ``(distance, key)``, the first ``limit`` of
            them with ``limit``; an empty list means the document was written.
        """
        engine = self._engine
        fp, sketch = arguments.fingerprint_and_sketch(engine, text, fingerprint)
        k = arguments.checked_k(engine, k)
        threshold = arguments.query_threshold(engine, min_similarity, sketch)
        arguments.check_flag("with_meta", with_meta)
        limit = closest.check_limit(limit)
        return writes.add_if_new(
            engine, pack_key(key), fp, pack_meta(meta), sketch, k, with_meta, threshold, limit
        )

    def add_many(
        self,
        keys: Iterable[KeyLike],
        fingerprints: object = None,
        *,
        texts: Iterable[str] | None = None,
        metas: Iterable[Mapping[str, Any] | None] | None = None,
        processes: int | None = 1,
        sketches: U8Array | None = None,
    ) -> U64Array:
        """Store many documents in one transaction: all of them or none.

        A key that appears more than once keeps its last fingerprint (and
        meta). Large batches (together with the delta, at least
        ``merge_threshold`` documents) are written straight into the tables
        in one sorted pass per table. Int keys counting up (``range(n)``, a
        sorted id column) are the cheapest: they need neither the test for
        repeats nor a sort, and are never all held as objects at once.

        Args:
            keys: the documents' keys.
            fingerprints: a uint64 array (or iterable of ints), one per key;
                or give ``texts``.
            metas: optional metadata dicts (or ``None``), one per key.
            processes: with ``texts``, how many processes fingerprint them:
                1 (the default) starts none; see
                :meth:`Fingerprinter.fingerprint_many`.
            sketches: with ``fingerprints`` made elsewhere by this store's
                fingerprinter, their verification sketches (the array
                :meth:`Fingerprinter.fingerprints_and_sketches` returns); a
                row of zeros stands for a document without one. That array
                remembers its sketch settings, and other settings than the
                store's are refused; a plain uint8 array of the right width
                (read back from a file) is taken on trust.

        Returns:
            The fingerprints, as a uint64 array in the order given.
        """
        engine = self._engine
        group_commit(engine).refuse_in_batch("add_many")
        packed_keys, fps, meta_list, checked_sketches = arguments.checked_batch(
            engine, keys, fingerprints, texts, metas, processes, sketches
        )
        written = writes.add_packed(engine, packed_keys, fps, meta_list, checked_sketches)
        del packed_keys, meta_list, checked_sketches  # (not held through a join the batch pays)
        if written:
            maintenance.maintain(engine, written, pay_all=True)
        return fps

    def remove(self, key: KeyLike) -> None:
        """Remove the document stored under ``key``.

        Raises:
            KeyNotFoundError: no document has this key (also a ``KeyError``).
        """
        writes.remove(self._engine, key)

    def remove_many(self, keys: Iterable[KeyLike], *, missing_ok: bool = False) -> int:
        """Remove the documents stored under ``keys`` in one transaction: all
        of them or none. Their table entries are taken out bucket by bucket,
        not one document at a time as ``remove`` (even in a batch) does.

        Args:
            missing_ok: skip keys no document has, instead of refusing.

        Returns:
            How many documents were removed (a key given twice counts once).

        Raises:
            KeyNotFoundError: a key no document has, unless ``missing_ok``
                (nothing is removed).
        """
        engine = self._engine
        group_commit(engine).refuse_in_batch("remove_many")
        return writes.remove_many(engine, keys, arguments.check_flag("missing_ok", missing_ok))

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        """Gather this thread's single writes and commit them together.

        ``with store.batch() as batch: batch.add(...)``: every ``add`` and
        ``remove`` made in the block, through ``batch`` or the store, and
        every ``batch.add_if_new``, is checked at once and written at the end
        of the block, in order, in one transaction and one flush: all of them
        or none. If the block raises, or any of its writes fails (``remove``
        of a missing key), nothing of it is written and the error propagates.
        Other threads' calls are not part of the batch.

        ``batch.add_if_new`` returns a pending outcome: its ``result()``,
        after the block, is the list of near-duplicates that kept the
        document out (empty: inserted). It sees the batch's earlier writes.
        ``store.add_if_new`` inside the block is refused, since it could not
        return its answer, and so are ``add_many``, ``merge``, ``compact``
        and ``relayout``, which commit on their own. The batch object is not
        usable after the block.

        Raises:
            InvalidValueError: a batch is already open in this thread.
        """
        with group_commit(self._engine).gathering(self._engine) as bodies:
            yield Batch(self, bodies, group_commit(self._engine).batching)
        maintenance.maintain(self._engine, len(bodies))

    def flush(self) -> None:
        """Make every write this process committed durable now (one fsync).

        Only needed with ``sync="interval"`` (or ``sync=False``): with
        ``sync=True`` every write is durable when its call returns.
        """
        group_commit(self._engine).flush(self._engine)

    # ----------------------------------------------------------------- queries

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
        """Every stored document within ``k`` bits of the query, sorted by
        ``(distance, key)``.

        A query by ``text`` in a store that keeps verification sketches
        gives each match its estimated Jaccard ``similarity`` (of word
        3-shingles) with the query; otherwise ``similarity`` is ``None``.

        ``limit=n`` returns the first ``n`` of those matches (``limit=1``:
        the closest), and stops searching once it has them: a document
        found at distance 0 settles the answer after one table, and only
        as many sketches are compared as it takes to find ``n`` that pass
        ``min_similarity``. The answer is the same as slicing the
        unlimited one.

        A store with a band table (the default for new stores of k >= 5
        that keep sketches: ``simstore.open(bands=)``) also returns, for a
        query by text, the documents whose sketches share a band with the
        text's and reach the threshold, however far apart the fingerprints:
        a one-word edit that moved a short text's fingerprint past ``k``
        is found. Such a match's ``distance`` is above ``k``, so it comes
        after those within it. :meth:`add_if_new` looks the same way.

        Args:
            fingerprint: the query fingerprint (or give ``text``).
            k: the largest distance returned; defaults to the store's ``k``
                and may not exceed it.
            with_meta: fill each match's ``meta`` with the document's metadata.
            min_similarity: keep only matches whose estimated similarity is
                at least this (0 to 1); needs ``text``. A stored document
                added as a bare fingerprint has no sketch: it is kept, with
                ``similarity`` ``None``, as it cannot be judged.
            limit: at most this many matches, the closest (a positive int;
                ``None``: every match).
        """
        engine = self._engine
        query, sketch = arguments.fingerprint_and_sketch(engine, text, fingerprint)
        k = arguments.checked_k(engine, k)
        with_meta = arguments.check_flag("with_meta", with_meta)
        threshold = arguments.query_threshold(engine, min_similarity, sketch)
        limit = closest.check_limit(limit)
        if limit is not None:
            return closest.query(engine, query, sketch, k, with_meta, threshold, limit)
        return reads.query(engine, query, sketch, k, with_meta, threshold)

    def query_many(
        self,
        fingerprints: object = None,
        *,
        texts: Iterable[str] | None = None,
        k: int | None = None,
        with_meta: bool = False,
        min_similarity: float | None = None,
        sketches: U8Array | None = None,
        limit: int | None = None,
        bands: bool | None = None,
    ) -> list[list[Match]]:
        """:meth:`query` for a batch, against one snapshot: one list per query.

        Nothing is inserted, so this deduplicates a new batch against the
        stored corpus: result ``i`` holds the stored documents near query ``i``.

        Args:
            fingerprints: a uint64 array (or iterable of ints); or give ``texts``.
            k: as for :meth:`query`.
            with_meta: as for :meth:`query`.
            min_similarity: as for :meth:`query`.
            sketches: with ``fingerprints``, their sketches (see :meth:`add_many`).
            limit: as for :meth:`query`, per query: ``limit=1`` gives each
                query's closest match, all that deduplicating against the
                store needs, and is much cheaper where documents share
                boilerplate (hundreds of matches each).
            bands: also match the stored documents whose verification
                sketches share a band with a query's
                (:mod:`simstore.fingerprinting.bands`) and reach the
                threshold, however far apart the fingerprints: a one-word
                edit of a short text, which can move its fingerprint past
                any ``k``, is found. Such a match has a ``distance`` above
                ``k`` and comes after those within it. Needs the queries'
                texts (or ``sketches``) and a threshold (``min_similarity``
                or the store's). ``None`` (the default): where the store
                keeps a band table (``simstore.open(bands=)``), which looks
                the queries' bands up, as :meth:`query` does. A store
                without one reads every stored sketch once per call (about
                4 µs a stored document) for ``bands=True``: ask in large batches.
        """
        engine = self._engine
        queries, sketches = arguments.fingerprints_and_sketches(
            engine, as_column(texts), as_column(fingerprints), 1, sketches
        )
        k = arguments.checked_k(engine, k)
        threshold = arguments.query_threshold(engine, min_similarity, sketches)
        with_meta = arguments.check_flag("with_meta", with_meta)
        limit = closest.check_limit(limit)
        bands = arguments.checked_bands(engine, bands, sketches, threshold)
        if limit is not None:
            return closest.query_many(engine, queries, sketches, k, with_meta, threshold, limit, bands)
        return reads.query_many(engine, queries, sketches, k, with_meta, threshold, bands)

    def near_duplicate_pairs(
        self,
        k: int | None = None,
        *,
        min_similarity: float | None = None,
        progress: Progress | None = None,
        bands: bool = True,
    ) -> Iterator[Pair]:
        """Every pair of stored documents within ``k`` bits, each pair once.

        Manku's batch mode: for each permutation table, the documents sharing
        the table's prefix are compared with each other (vectorised), and a
        pair is reported by the first table whose prefix it shares. The pairs
        stream out table by table, in no particular order; ``key_a`` is the
        document added first. A fingerprint shared by ``m`` documents gives
        all ``m * (m - 1) / 2`` of their pairs.

        The snapshot is taken when iteration starts and held (an LMDB read
        transaction) until the iterator is exhausted or closed; writers are
        not blocked. Writes made during the iteration (removing each pair's
        second document, say) may grow the store's map, which ends every
        transaction of this process; the iteration then reads keys and
        similarities from a newer snapshot, and leaves out pairs with a
        document removed since. Memory: the fingerprints and ids (16 bytes a document)
        plus one table's order (8 bytes a document), never the pairs of more
        than one numpy step.

        Args:
            k: the largest distance reported; the store's ``k`` by default,
                and no larger.
            min_similarity: drop pairs whose estimated similarity is below
                this (0 to 1); a pair with a document that has no sketch
                (added as a bare fingerprint) is kept, unjudged.
            progress: called as ``progress(tables_done, tables_total)``.
            bands: also pair documents whose verification sketches share
                a band (:mod:`simstore.fingerprinting.bands`), however far
                apart their fingerprints, when their estimated similarity
                reaches the threshold: a one-word edit of a short text, which
                can move its fingerprint past any ``k``, is found. On by
                default wherever a threshold (``min_similarity`` or the
                store's) and sketches apply; it reads every sketch (128
                bytes a document) into memory and takes about twice the
                time of the search within ``k``. ``False``: the pairs within
                ``k`` alone.
        """
        return batch.near_duplicate_pairs(
            self._engine,
            k,
            min_similarity,
            arguments.check_progress(progress),
            arguments.check_flag("bands", bands),
        )

    def clusters(
        self,
        k: int | None = None,
        keep: KeepPolicy = "first",
        *,
        linkage: str = "components",
        min_similarity: float | None = None,
        progress: Progress | None = None,
        bands: bool = True,
    ) -> list[Cluster]:
        """Clusters of the near-duplicate pair graph, of one snapshot.

        Other threads' calls on this ``Store`` wait until it returns (a write
        growing the map would end its snapshot); other processes do not.

        With ``linkage="components"`` (the default), two documents are in one
        cluster when a chain of pairs, each within ``k`` bits, joins them: if
        A~B and B~C then A, B and C form one cluster even when A and C are
        further apart than ``k``. With ``linkage="star"``, documents are taken
        in the order ``keep`` prefers (added first, or longest first), and
        each joins the first kept document it is paired with, or is kept
        itself: every member is within ``k`` bits (and ``min_similarity``)
        of its cluster's representative. Without a similarity threshold,
        documents with one fingerprint are always together. With one (a new
        store's default is 0.8), documents of one fingerprint are judged apart
        unless they share their sketch, in both linkages: one less similar
        than the threshold to the others is in their cluster only if a pair
        that passes links it. Documents with no near-duplicate are in no cluster.

        Args:
            k: the largest distance of a pair; the store's ``k`` by default.
            keep: which member represents the cluster: ``"first"`` (added
                first), ``"longest"`` (largest ``meta["length"]``, as the
                command line records it; missing counts as 0, ties go to
                the first added), or (components only) a callable taking
                the members' :class:`~simstore.Record` objects in the order
                added and returning the key of the one to keep (or its record).
            linkage: ``"components"`` or ``"star"``.
            min_similarity: pairs whose estimated similarity is below this
                do not link (see :meth:`near_duplicate_pairs`).
            progress: called as ``progress(tables_done, tables_total)``.
            bands: link documents whose sketches share a band too (see
                :meth:`near_duplicate_pairs`; on by default where it applies);
                a star's members are then each within ``k`` bits of the
                representative or share a band with it.

        Returns:
            The clusters, sorted by ``cluster_id`` (the internal id of the
            member added first, stable from run to run), each with the
            largest distance and least similarity of a member to the
            representative.
        """
        return batch.clusters(
            self._engine,
            k,
            keep,
            linkage,
            min_similarity,
            arguments.check_progress(progress),
            arguments.check_flag("bands", bands),
        )

    # --------------------------------------------------------------- documents

    def get(self, key: KeyLike, default: Record | None = None) -> Record | None:
        """The record stored under ``key``, or ``default`` if there is none."""
        record = reads.record_of(self._engine, key)
        return default if record is None else record

    def __getitem__(self, key: KeyLike) -> Record:
        record = reads.record_of(self._engine, key)
        if record is None:
            raise KeyNotFoundError(f"no document with key {key!r}")
        return record

    def __contains__(self, key: object) -> bool:
        return reads.contains(self._engine, key)

    def __len__(self) -> int:
        return reads.document_count(self._engine)

    def sketch_of(self, key: KeyLike) -> bytes | None:
        """The verification sketch stored for ``key`` (see :attr:`sketch`
        for its geometry), or ``None`` if the document has none (it was added
        as a bare fingerprint, or the store keeps no sketches).

        Raises:
            KeyNotFoundError: no document has this key.
        """
        return reads.sketch_of(self._engine, key)

    def __iter__(self) -> Iterator[Key]:
        """The keys, in the order their documents were first added."""
        return iter(self.keys())

    def keys(self) -> list[Key]:
        """The keys, in the order their documents were first added."""
        return reads.keys(self._engine)

    def items(self) -> Iterator[tuple[Key, int]]:
        """``(key, fingerprint)`` pairs in insertion order, from one snapshot."""
        return iter(reads.items(self._engine))

    def fingerprints(self) -> U64Array:
        """Every stored fingerprint, in insertion order."""
        return reads.fingerprints(self._engine)

    # ----------------------------------------------------------------- upkeep

    def merge(self) -> int:
        """Write the delta into the tables now, as a new run of every table.

        One write transaction: readers see the documents in the delta before
        it and in the tables after it, never half of it. Its work grows with
        the delta, not with the store (a delta of 32,768 documents, the default threshold, takes 0.05-0.1 s;
        0.1 s). Runs are joined later by compaction (see :meth:`compact`).

        Returns:
            The number of documents merged.
        """
        group_commit(self._engine).refuse_in_batch("merge")
        return maintenance.merge(self._engine)

    def compact(self, *, copy_to: str | os.PathLike[str] | None = None) -> int:
        """Join every run of the tables into one, a key range at a time, and
        optionally write a compacted copy of the store.

        Each step is one write transaction of bounded size, so other writers
        and readers are held up for a step at most, never for the whole
        compaction; a compaction cut short by a crash or an exception is
        taken up again by the next write (or the next ``compact()``). Pages
        it frees (and pages removals freed) are reused by later writes; the
        file itself does not shrink, since other processes may have it
        mapped. To get the space back on disk, close the store and call
        :func:`simstore.shrink`, or give ``copy_to``: a new file holding only
        the pages in use.

        Args:
            copy_to: a path that does not exist yet.

        Returns:
            The number of table entries moved.

        Raises:
            InvalidValueError: ``copy_to`` exists (nothing is replaced).
        """
        group_commit(self._engine).refuse_in_batch("compact")
        return maintenance.compact(self._engine, copy_to=copy_to)

    def relayout(
        self,
        layout: Any = None,
        *,
        k: int | None = None,
        blocks: int | None = None,
        expected_docs: int | None = None,
    ) -> None:
        """Rebuild the permutation tables in a new layout.

        Give a :class:`simstore.layout.planner.Layout`, or ``blocks`` for Manku's
        one-level layout, or ``expected_docs`` to let the planner choose; ``k``
        may change too. ``"multi-index"`` converts the store to format 3
        (a few tables searched with many probes: see ``simstore.open``), its
        scheme chosen for ``expected_docs`` (default 10M); with neither a
        layout nor ``blocks``, a store is laid out as a new one with its k
        would be (format 3), and ``blocks`` or a ``Layout`` take
        a format-3 store back to Manku's tables. The new tables are built beside the old ones in one
        write transaction, and that transaction's commit switches the meta
        record over: readers keep answering from the old layout until then
        (and are never blocked), other writers wait, nothing is lost if the
        process dies part-way (the old layout simply stays), and other
        processes pick the new layout up at their next operation. The file
        does not shrink: the old tables' pages are reused by later writes.
        """
        group_commit(self._engine).refuse_in_batch("relayout")
        maintenance.relayout(self._engine, layout, k=k, blocks=blocks, expected_docs=expected_docs)

    def stats(self, *, skew: bool = False) -> Stats:
        """Sizes and layout, from one snapshot.

        Args:
            skew: also measure how evenly each table's prefix ranges fill
                (largest and 99th-percentile range, the hot prefixes) and find
                degenerate fingerprints (all zeros, all ones, or shared by many
                documents). This reads every fingerprint, so it takes time in
                proportion to the store (about a second per million documents).
        """
        return store_stats(self._engine, arguments.check_flag("skew", skew))

    def check(self) -> list[str]:
        """Verify the store's invariants; returns the problems found (empty when sound).

        Reads every record and every table entry, so it takes time in
        proportion to documents times tables.
        """
        return check_store(self._engine)
